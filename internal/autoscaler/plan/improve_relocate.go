package plan

// relocateSets bounds the sets of pods relocate tries per node: each of the first pods alone, and
// the first two, three, ... together (the planner's order: largest first).
const relocateSets = 8

// relocate moves some pods of an on-demand priced new node into free room on the run's other
// nodes (as evacuate moves all of them) when the pods that stay then fit a cheaper type, or a
// reservation with room, and puts that node in its place: the fleet's price drops by the
// difference. It tries each of the node's largest pods alone, then the largest together, and
// takes the first move it finds. It reports whether it made one.
func (r *run) relocate() bool {
	p := r.p
	var shelves []*shelf // built on first use
	moved := map[int]*node{}
	for k, n := range r.nodes {
		if n.launching || len(n.pods) < 2 || r.price(n) <= 1e-9 {
			continue
		}
		bound := r.price(n)
		if !r.mayTake(n.allow, make([]int, len(p.byPrice)), bound) {
			continue // no cheaper node takes even one pod
		}
		pods := podsOf(n)
		p.sortPods(pods)
		for _, out := range moveSets(len(pods)) {
			move := make([]int, 0, len(out))
			stay := make([]int, 0, len(pods))
			for x, i := range pods {
				if out[x] {
					move = append(move, i)
				} else {
					stay = append(stay, i)
				}
			}
			allow, need := p.together(stay)
			if !r.mayTake(allow, need, bound) {
				continue
			}
			if shelves == nil {
				shelves = r.shelves()
			}
			target, ok := r.rehouse(k, move, shelves, moved)
			if !ok {
				continue
			}
			m := r.reserved(stay, allow, need, n.mode, bound, n)
			if m == nil {
				m = r.cheapest(stay, allow, need, n.mode, bound, 1, n.t.Devices)
			}
			if m == nil {
				continue
			}
			r.moveTo(move, target)
			r.replace(k, m)
			return true
		}
	}
	return false
}

// moveSets returns the sets of positions (of a node's pods, largest first) relocate moves: each
// of the first relocateSets alone, then the first 2, 3, ... up to relocateSets together; never all
// of them (evacuate does that).
func moveSets(n int) [][]bool {
	var out [][]bool
	for x := 0; x < min(n, relocateSets); x++ {
		s := make([]bool, n)
		s[x] = true
		out = append(out, s)
	}
	for size := 2; size < n && size <= relocateSets; size++ {
		s := make([]bool, n)
		for x := range size {
			s[x] = true
		}
		out = append(out, s)
	}
	return out
}

// together returns what the pods allow and take together, as node.allow and node.need.
func (p *planner) together(pods []int) (typeSet, []int) {
	allow := newTypeSet(len(p.byPrice))
	for ti, ok := range p.famOK {
		if ok {
			allow.add(ti)
		}
	}
	need := make([]int, len(p.byPrice))
	for _, i := range pods {
		allow.intersect(p.allow[i])
		for ti, c := range p.need[p.req[i]] {
			need[ti] += c
		}
	}
	return allow, need
}

// mayTake reports whether a node that costs less than bound may take pods that allow and need
// so much: a priced type below the bound, or a reservation with room, that they allow, with cores
// enough. cheapest and reserved find nothing otherwise.
func (r *run) mayTake(allow typeSet, need []int, bound float64) bool {
	p := r.p
	for ti, t := range p.byPrice {
		if !t.PriceKnown() || *t.PriceUSDPerHour >= bound-1e-9 {
			break
		}
		if allow.has(ti) && need[ti] <= p.cores[ti] {
			return true
		}
	}
	if p.rv == nil || bound <= 1e-9 {
		return false
	}
	for k, ti := range p.rv.ti {
		if r.room(k) > 0 && allow.has(ti) && need[ti] <= p.cores[ti] {
			return true
		}
	}
	return false
}
