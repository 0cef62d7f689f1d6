package plan

import (
	"math"
	"slices"
)

// evacuate removes one new node whose pods all fit on the other nodes.
func (r *run) evacuate() bool {
	shelves := r.shelves()
	moved := map[int]*node{}
	for k, n := range r.nodes {
		if n.launching {
			continue
		}
		target, ok := r.rehouse(k, podsOf(n), shelves, moved)
		if !ok {
			continue
		}
		r.moveTo(podsOf(n), target)
		r.remove(k)
		return true
	}
	return false
}

// rehouse finds room for the pods (of the node at k) on the run's other nodes: the pods go, one
// after the other, where they fit tightest (the first node in order among the tightest), tried on
// copies of the nodes they go on (moved, cleared first) until all have found room. It returns
// each pod's node (an index into r.nodes) and whether all found one; the run does not change.
func (r *run) rehouse(k int, pods []int, shelves []*shelf, moved map[int]*node) ([]int, bool) {
	p := r.p
	clear(moved)
	target := make([]int, len(pods))
	for x, i := range pods {
		q := p.req[i]
		best, bestScore := -1, math.Inf(-1)
		for _, s := range shelves {
			if s.mode != p.mode[i] || !p.allow[i].has(s.ti) || !(s.launching || p.famOK[s.ti]) || !p.capacityOK(i, s.ti, s.res, s.launching) {
				continue
			}
			need := p.need[q][s.ti]
			for _, j := range s.nodes {
				o := r.nodes[j]
				if o.free < need {
					break // and so do the nodes after it; copies only have less room
				}
				if j == k {
					continue
				}
				if c, ok := moved[j]; ok {
					o = c
				}
				if f := p.fitOn(o, q); f.ok && (f.score > bestScore || f.score == bestScore && j < best) {
					best, bestScore = j, f.score
				}
			}
		}
		if best < 0 {
			return nil, false
		}
		c, copied := moved[best]
		if !copied {
			c = p.copyNode(r.nodes[best])
			moved[best] = c
		}
		p.add(c, i)
		target[x] = best
	}
	return target, true
}

// moveTo puts the pods on the nodes rehouse found for them, as on its copies: the same placement
// on the same state.
func (r *run) moveTo(pods, target []int) {
	for x, i := range pods {
		o := r.nodes[target[x]]
		r.p.add(o, i)
		r.assign(i, o)
	}
}

// shelf is the run's nodes of one mode and type, launching or new, most free cores first (then in
// the run's order): a pod is tried only on shelves it may go on, and on a shelf only until the
// nodes have fewer free cores than it takes.
type shelf struct {
	mode      string
	ti        int
	launching bool
	res       int   // node.res
	nodes     []int // indices into run.nodes
}

func (r *run) shelves() []*shelf {
	type key struct {
		mode      string
		ti        int
		launching bool
		res       int
	}
	var out []*shelf
	at := map[key]*shelf{}
	for j, n := range r.nodes {
		k := key{n.mode, n.ti, n.launching, n.res}
		s, ok := at[k]
		if !ok {
			s = &shelf{mode: n.mode, ti: n.ti, launching: n.launching, res: n.res}
			at[k] = s
			out = append(out, s)
		}
		s.nodes = append(s.nodes, j)
	}
	for _, s := range out {
		slices.SortStableFunc(s.nodes, func(a, b int) int { return r.nodes[b].free - r.nodes[a].free })
	}
	return out
}

// cheapest returns the cheapest priced type below the price bound (+Inf: any) that takes all the
// pods on one new node, within the limits when it replaces nodes with the given devices. allow
// and need are what the pods allow and take together (node.allow, node.need): a type they rule
// out is not simulated.
func (r *run) cheapest(pods []int, allow typeSet, need []int, mode string, bound float64, replacedNodes, replacedDevices int) *node {
	p := r.p
	for ti, t := range p.byPrice {
		if !t.PriceKnown() || *t.PriceUSDPerHour >= bound-1e-9 {
			break
		}
		if !p.famOK[ti] || !allow.has(ti) || need[ti] > p.cores[ti] || !r.withinLimits(1-replacedNodes, t.Devices-replacedDevices) ||
			p.rv != nil && !p.onDemandOK(pods, ti) {
			continue
		}
		if n := r.simulate(t, mode, pods); n != nil {
			return n
		}
	}
	return nil
}

// mayMerge reports whether a priced type below the bound may take the pods of a and b together:
// one that every pod allows, with cores enough for them all. cheapest finds nothing otherwise.
func (p *planner) mayMerge(a, b *node, bound float64) bool {
	for ti, t := range p.byPrice {
		if !t.PriceKnown() || *t.PriceUSDPerHour >= bound-1e-9 {
			return false
		}
		if a.allow.has(ti) && b.allow.has(ti) && a.need[ti]+b.need[ti] <= p.cores[ti] {
			return true
		}
	}
	return false
}

// merge replaces two new nodes by one when a single node that takes both their pods is cheaper
// (or, for unknown prices, when it is of their common type).
func (r *run) merge() bool {
	p := r.p
	lim := r.limitState()
	for _, ab := range r.mergePairs() {
		a, b := ab[0], ab[1]
		na, nb := r.nodes[a], r.nodes[b]
		if na.launching || nb.launching || na.mode != nb.mode {
			continue
		}
		priced := r.priced(na) && r.priced(nb)
		if !priced && (na.t.Name != nb.t.Name || na.need[na.ti]+nb.need[na.ti] > p.cores[na.ti]) {
			continue // a node of their type cannot take both nodes' pods (mayMerge)
		}
		bound := math.Inf(1)
		if priced {
			bound = r.price(na) + r.price(nb)
			if !p.mayMerge(na, nb, bound) && !r.mayReserve(na, nb, bound) {
				continue
			}
		}
		// A merge that found nothing finds nothing again while both nodes (and, with
		// limits, the run's new nodes) are as they were.
		key := pairKey{na.gen, nb.gen, lim}
		if p.failed[key] {
			continue
		}
		pods := append(podsOf(na), podsOf(nb)...)
		var m *node
		if priced {
			allow := slices.Clone(na.allow)
			allow.intersect(nb.allow)
			need := slices.Clone(na.need)
			for ti := range need {
				need[ti] += nb.need[ti]
			}
			if m = r.reserved(pods, allow, need, na.mode, bound, na, nb); m == nil {
				m = r.cheapest(pods, allow, need, na.mode, bound, 2, na.t.Devices+nb.t.Devices)
			}
		} else {
			m = r.simulate(na.t, na.mode, pods)
		}
		if m == nil {
			p.failed[key] = true
			continue
		}
		r.remove(b)
		r.replace(a, m)
		return true
	}
	return false
}

// downsize replaces a new node by a cheaper type that takes all its pods.
func (r *run) downsize() bool {
	p := r.p
	lim := r.limitState()
	for k, n := range r.nodes {
		if n.launching {
			continue
		}
		key := pairKey{n.gen, 0, lim}
		if p.failed[key] {
			continue
		}
		bound := math.Inf(1)
		if r.priced(n) {
			bound = r.price(n)
		}
		m := r.cheapest(podsOf(n), n.allow, n.need, n.mode, bound, 1, n.t.Devices)
		if m == nil {
			p.failed[key] = true
			continue
		}
		r.replace(k, m)
		return true
	}
	return false
}

// mergePairs returns, in the run's order, the pairs of new nodes (positions a < b) that merge
// may join: of one mode, and priced (run.priced) with a type that mayMerge accepts below the sum
// of their prices to the run (run.price: $0 in a reservation) or a reservation that mayReserve
// accepts, or of one unknown-price type with cores enough for both. A run of thousands of full
// nodes has few such pairs: they are found through the nodes of each mode, type and reservation
// sorted by the cores they take on each type (their need), not by trying every pair.
func (r *run) mergePairs() [][2]int {
	p := r.p
	type group struct {
		mode string
		ti   int
		res  int // node.res: a group's nodes are priced, and cost the run, alike
	}
	var groups []group
	members := map[group][]int{} // positions of the new nodes of each group
	for k, n := range r.nodes {
		if n.launching {
			continue
		}
		g := group{n.mode, n.ti, n.res}
		if _, ok := members[g]; !ok {
			groups = append(groups, g)
		}
		members[g] = append(members[g], k)
	}
	type byNeed struct {
		g      group
		ti     int
		priced bool
	}
	sorted := map[byNeed][]int{} // a group's nodes that allow ti (any, for unknown prices), by need on ti
	list := func(g group, ti int, priced bool) []int {
		key := byNeed{g, ti, priced}
		if l, ok := sorted[key]; ok {
			return l
		}
		var l []int
		for _, k := range members[g] {
			if n := r.nodes[k]; (!priced || n.allow.has(ti)) && n.need[ti] <= p.cores[ti] {
				l = append(l, k)
			}
		}
		slices.SortFunc(l, func(a, b int) int { return r.nodes[a].need[ti] - r.nodes[b].need[ti] })
		sorted[key] = l
		return l
	}
	var out [][2]int
	// pairs adds the pairs of a node of la and one of lb whose needs on ti add up to its cores
	// at most.
	pairs := func(la, lb []int, ti int) {
		for _, a := range la {
			room := p.cores[ti] - r.nodes[a].need[ti]
			if len(lb) == 0 || r.nodes[lb[0]].need[ti] > room {
				return // and so for the later nodes of la, which need as much or more
			}
			for _, b := range lb {
				if r.nodes[b].need[ti] > room {
					break
				}
				if a != b {
					out = append(out, [2]int{min(a, b), max(a, b)})
				}
			}
		}
	}
	// priced and price are run.priced and run.price of a group's nodes.
	priced := func(g group) bool { return g.res > 0 || p.byPrice[g.ti].PriceKnown() }
	price := func(g group) float64 {
		if g.res > 0 || !p.byPrice[g.ti].PriceKnown() {
			return 0
		}
		return *p.byPrice[g.ti].PriceUSDPerHour
	}
	done := newTypeSet(len(p.byPrice)) // the types whose pairs of two groups are added
	for x, ga := range groups {
		for _, gb := range groups[x:] {
			if ga.mode != gb.mode {
				continue
			}
			if !priced(ga) || !priced(gb) {
				if ga.ti == gb.ti {
					pairs(list(ga, ga.ti, false), list(gb, gb.ti, false), ga.ti)
				}
				continue
			}
			bound := price(ga) + price(gb)
			clear(done)
			for ti, t := range p.byPrice { // mayMerge
				if !t.PriceKnown() || *t.PriceUSDPerHour >= bound-1e-9 {
					break
				}
				done.add(ti)
				pairs(list(ga, ti, true), list(gb, ti, true), ti)
			}
			if p.rv == nil || bound <= 1e-9 && (ga.res == 0 || gb.res == 0) {
				continue
			}
			for k, ti := range p.rv.ti { // mayReserve: room, counting the slots the two give back
				freed := 0
				for _, g := range [2]group{ga, gb} {
					if g.res == k+1 {
						freed++
					}
				}
				if done.has(ti) || r.room(k)+freed <= 0 {
					continue
				}
				done.add(ti)
				pairs(list(ga, ti, true), list(gb, ti, true), ti)
			}
		}
	}
	slices.SortFunc(out, func(x, y [2]int) int {
		if x[0] != y[0] {
			return x[0] - y[0]
		}
		return x[1] - y[1]
	})
	return slices.Compact(out)
}
