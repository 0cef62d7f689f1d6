package plan

import (
	"cmp"
	"math"
	"math/bits"
	"slices"

	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// exactCost finds the cost of the cheapest fleet for batches the oracle (3^n) cannot take, up to
// 63 pods, by the oracle's definition and ranking (see oracle_test.go), sharing no code with the
// planner: the topology engine alone decides what fits (fitsTogether).
//
// It lists every set of pods one node of some type takes (a set is tried only when it is a
// smaller set plus one pod and the smaller set fits: a pod taken away never stops the others
// fitting; pods of one demand are alike, so a set takes the first ones of each), with the
// cheapest type that takes it. Then it branches on the node of the first pod left (pods only an
// unknown-price type takes first, then biggest first), memoised on the pods left, and prunes
// with a lower bound: the optimal duals of the linear program that covers the pods with these
// sets, scaled to be feasible, so that any set of pods left costs at least the sum of their
// duals. UltraServer pods (no other type serves them) are packed onto UltraServer nodes the same
// way, fewest nodes first, each mode's pods on UltraServers of their own (an UltraServer has one
// allocation mode), and pay for whole UltraServers.
//
// work bounds the search's steps; exact is false when it ran out and cost is then the cheapest
// fleet found, not known to be the optimum.
func exactCost(pending []PodDemand, opts Options, work int) (cost fleetCost, exact bool) {
	if len(pending) > 63 || opts.MaxNodes > 0 || opts.MaxDevices > 0 {
		panic("exactCost takes at most 63 pods and no limits")
	}
	shapes, policy := nodeTypes(opts)
	var regular, unitPods []PodDemand
	for i := range pending {
		switch {
		case slices.ContainsFunc(shapes, func(s *topology.Shape) bool { return fitsTogether(pending[i:i+1], 1, s, policy) }):
			regular = append(regular, pending[i])
		default:
			unitPods = append(unitPods, pending[i])
		}
	}
	priced := make([]fleetCost, len(shapes))
	for k, s := range shapes {
		priced[k] = nodeCost(s.Type)
	}
	s := newSetSearch(regular, shapes, priced, policy, work)
	cost, exact = s.run()
	if len(unitPods) == 0 {
		return cost, exact
	}
	// UltraServer pods: the fewest UltraServer nodes, in whole UltraServers.
	types := ultraServerTypes(Options{Catalog: cmp.Or(opts.Catalog, topology.DefaultCatalog()), Families: opts.Families})
	var unitShape *topology.Shape
	if len(types) > 0 {
		unitShape, _ = topology.NewShape(types[0], 0)
	}
	// Each mode's pods fill UltraServers of their own: an UltraServer has one allocation mode.
	var modes []string
	served := map[string][]PodDemand{}
	for i := range unitPods {
		if unitShape != nil && fitsTogether(unitPods[i:i+1], 1, unitShape, policy) {
			m := unitPods[i].Mode()
			if _, ok := served[m]; !ok {
				modes = append(modes, m)
			}
			served[m] = append(served[m], unitPods[i])
		} else {
			cost.unplaced++
		}
	}
	for _, m := range modes {
		uc := unitCost(types[0])
		u := newSetSearch(served[m], []*topology.Shape{unitShape}, []fleetCost{{usd: 1}}, policy, work)
		nodes, uexact := u.run()
		units := (int(math.Round(nodes.usd)) + types[0].UltraServerNodes - 1) / types[0].UltraServerNodes
		cost = cost.plus(fleetCost{unknown: uc.unknown * units, usd: uc.usd * float64(units)})
		exact = exact && uexact
	}
	return cost, exact
}

// setSearch is the search over the pods of one kind (regular or UltraServer).
type setSearch struct {
	pods     []PodDemand // biggest first
	shapes   []*topology.Shape
	prices   []fleetCost
	policy   topology.Policy
	typesOf  []int       // per pod: the sets it is the lowest pod of are tried on shapes[:typesOf]
	class    []int       // per pod: pods of one class are alike to every type
	members  []uint64    // per class: its pods
	sets     [][]nodeSet // by lowest pod
	dual     []float64   // per pod: a lower bound of its share of any node's price
	exact    map[uint64]fleetCost
	atLeast  map[uint64]fleetCost
	work     int
	overflow bool
}

// nodeSet is a set of pods (bits) one node takes, and the cost of the cheapest type that does.
type nodeSet struct {
	pods uint64
	cost fleetCost
}

var infinite = fleetCost{unplaced: math.MaxInt32}

func newSetSearch(pods []PodDemand, shapes []*topology.Shape, prices []fleetCost, policy topology.Policy, work int) *setSearch {
	pods = slices.Clone(pods)
	size := func(d PodDemand) int {
		n := 0
		for _, r := range d.Requests {
			unit, _ := topology.UnitOf(r.Resource)
			if unit == topology.UnitCore {
				n += r.Count
			} else {
				n += 8 * r.Count
			}
		}
		for _, r := range d.DRA {
			if r.All {
				n += 8 * 16
			}
			n += 8 * r.Count
		}
		return n
	}
	types := make([]boundType, len(shapes))
	for k, sh := range shapes {
		types[k].shape = sh
	}
	keys := map[string]int{}
	for _, d := range pods {
		if _, ok := keys[demandKey(d, types)]; !ok {
			keys[demandKey(d, types)] = len(keys)
		}
	}
	// Pods that only a type without a price takes come first: a node of such a type is worth
	// listing only with one of them on it (else one priced node per pod has fewer unknown-price
	// nodes), so the sets of the other pods are tried on priced types only.
	pricedShapes := 0
	for pricedShapes < len(shapes) && prices[pricedShapes].unknown == 0 {
		pricedShapes++
	}
	needsUnknown := map[*PodDemand]bool{}
	for i := range pods {
		needsUnknown[&pods[i]] = !slices.ContainsFunc(shapes[:pricedShapes], func(sh *topology.Shape) bool { return fitsTogether(pods[i:i+1], 1, sh, policy) })
	}
	rank := make([]int, len(pods))
	for i := range pods {
		rank[i] = i
	}
	slices.SortStableFunc(rank, func(x, y int) int {
		a, b := pods[x], pods[y]
		return cmp.Or(-cmp.Compare(btoi(needsUnknown[&pods[x]]), btoi(needsUnknown[&pods[y]])),
			cmp.Compare(size(b), size(a)), cmp.Compare(keys[demandKey(a, types)], keys[demandKey(b, types)]))
	})
	sorted := make([]PodDemand, len(pods))
	s0 := make([]bool, len(pods))
	for k, i := range rank {
		sorted[k], s0[k] = pods[i], needsUnknown[&pods[i]]
	}
	pods = sorted
	s := &setSearch{pods: pods, shapes: shapes, prices: prices, policy: policy, work: work,
		exact: map[uint64]fleetCost{}, atLeast: map[uint64]fleetCost{}, sets: make([][]nodeSet, len(pods)),
		members: make([]uint64, len(keys))}
	s.typesOf = make([]int, len(pods))
	for i, d := range pods {
		s.typesOf[i] = len(shapes)
		if !s0[i] {
			s.typesOf[i] = pricedShapes
		}
		c := keys[demandKey(d, types)]
		s.class = append(s.class, c)
		s.members[c] |= 1 << i
	}
	for i := range pods {
		s.grow(i, 1<<i, 0, i)
		// Bigger sets first: they find a cheap fleet sooner.
		slices.SortStableFunc(s.sets[i], func(a, b nodeSet) int {
			return cmp.Or(bits.OnesCount64(b.pods)-bits.OnesCount64(a.pods), a.cost.compare(b.cost))
		})
	}
	s.duals()
	return s
}

// grow lists set (whose lowest pod is low and highest last) and the sets it grows into, when
// some type from the from-th on takes it.
func (s *setSearch) grow(low int, set uint64, from, last int) {
	if s.overflow {
		return
	}
	k := from
	for ; k < s.typesOf[low]; k++ {
		if fitsTogether(s.pods, int(set), s.shapes[k], s.policy) {
			break
		}
	}
	if k == s.typesOf[low] {
		return
	}
	s.sets[low] = append(s.sets[low], nodeSet{set, s.prices[k]})
	if s.work--; s.work < 0 {
		s.overflow = true
		return
	}
	for j := last + 1; j < len(s.pods); j++ {
		// Pods of a class join in order: a set holds the first ones from low on.
		between := s.members[s.class[j]] & (1<<j - 1) &^ (1<<low - 1)
		if between&^set == 0 {
			s.grow(low, set|1<<j, k, j)
		}
	}
}

// duals solves the linear program that covers each pod with sets at the least price (prices in
// USD; a set on a type without a price costs nothing, so its pods get no dual) and keeps its
// duals, scaled so that no set's pods sum to more than its price.
func (s *setSearch) duals() {
	n := len(s.pods)
	s.dual = make([]float64, n)
	free := uint64(0) // pods some set without a price takes
	for _, sets := range s.sets {
		for _, ns := range sets {
			if ns.cost.unknown > 0 || ns.cost.usd == 0 {
				free |= ns.pods
			}
		}
	}
	var rows []int
	for i := range n {
		if free&(1<<i) == 0 {
			rows = append(rows, i)
		}
	}
	if len(rows) == 0 || s.overflow {
		return
	}
	row := make([]int, n)
	for r, i := range rows {
		row[i] = r
	}
	m := &master{groups: make([]boundGroup, len(rows)), inv: make([][]float64, len(rows)), x: make([]float64, len(rows))}
	for r, i := range rows {
		m.groups[r].n = 1
		single := s.sets[i][len(s.sets[i])-1] // the singleton: fewest pods, sorted last
		a := make([]float64, len(rows))
		a[r] = 1
		m.cols = append(m.cols, column{cost: single.cost.usd, a: a})
		m.inv[r] = make([]float64, len(rows))
		m.inv[r][r] = 1
		m.x[r] = 1
	}
	for _, sets := range s.sets {
		for _, ns := range sets {
			if ns.pods&free != 0 {
				continue
			}
			a := make([]float64, len(rows))
			for b := ns.pods; b != 0; b &= b - 1 {
				a[row[bits.TrailingZeros64(b)]] = 1
			}
			m.pool = append(m.pool, column{cost: ns.cost.usd, a: a})
		}
	}
	m.pivotPool()
	y := m.duals()
	theta := 1.0
	for _, sets := range s.sets {
		for _, ns := range sets {
			sum := 0.0
			for b := ns.pods; b != 0; b &= b - 1 {
				if i := bits.TrailingZeros64(b); free&(1<<i) == 0 {
					sum += max(0, y[row[i]])
				}
			}
			if ns.cost.usd > 0 {
				theta = max(theta, sum/ns.cost.usd)
			}
		}
	}
	for r, i := range rows {
		s.dual[i] = max(0, y[r]) / theta * (1 - 1e-9)
	}
	// The sets listed hold the first pods of each class: a pod's dual is its class's least, so
	// that the pods of any set, listed or alike to one listed, sum to no more than its price.
	for i := range n {
		for b := s.members[s.class[i]]; b != 0; b &= b - 1 {
			s.dual[i] = min(s.dual[i], s.dual[bits.TrailingZeros64(b)])
		}
	}
}

// bound is a lower bound of the cost of the pods left.
func (s *setSearch) bound(left uint64) fleetCost {
	sum := 0.0
	for b := left; b != 0; b &= b - 1 {
		sum += s.dual[bits.TrailingZeros64(b)]
	}
	return fleetCost{usd: sum}
}

// within returns the pods of left alike to set's: of each class as many, its first ones in left.
func (s *setSearch) within(set, left uint64) (uint64, bool) {
	if set&^left == 0 {
		return set, true
	}
	var out uint64
	for b := set; b != 0; {
		c := s.class[bits.TrailingZeros64(b)]
		need := bits.OnesCount64(set & s.members[c])
		have := left & s.members[c]
		for range need {
			if have == 0 {
				return 0, false
			}
			out |= have & -have
			have &= have - 1
		}
		b &^= s.members[c]
	}
	return out, true
}

func (c fleetCost) minus(o fleetCost) fleetCost {
	return fleetCost{c.unplaced - o.unplaced, c.unknown - o.unknown, c.usd - o.usd}
}

func (s *setSearch) run() (fleetCost, bool) {
	if len(s.pods) == 0 {
		return fleetCost{}, true
	}
	if s.overflow {
		return infinite, false
	}
	c := s.solve(1<<len(s.pods)-1, infinite)
	return c, !s.overflow
}

// solve returns the cheapest cost of the pods left when it is below budget, else a lower bound
// of it that is not (or, once the work ran out, the cheapest found).
func (s *setSearch) solve(left uint64, budget fleetCost) fleetCost {
	if left == 0 {
		return fleetCost{}
	}
	if c, ok := s.exact[left]; ok {
		return c
	}
	lb := s.bound(left)
	if c, ok := s.atLeast[left]; ok && c.compare(lb) > 0 {
		lb = c
	}
	if lb.compare(budget) >= 0 {
		return lb
	}
	if s.work--; s.work < 0 {
		s.overflow = true
	}
	low := bits.TrailingZeros64(left)
	if s.overflow { // out of work: the first set that fits, and on
		for _, ns := range s.sets[low] {
			if pods, ok := s.within(ns.pods, left); ok {
				return ns.cost.plus(s.solve(left&^pods, infinite))
			}
		}
	}
	best := infinite
	for _, ns := range s.sets[low] {
		pods, ok := s.within(ns.pods, left)
		if !ok {
			continue
		}
		ns.pods = pods
		limit := budget
		if best.compare(limit) < 0 {
			limit = best
		}
		rest := left &^ ns.pods
		if ns.cost.plus(s.bound(rest)).compare(limit) >= 0 {
			continue
		}
		if c := ns.cost.plus(s.solve(rest, limit.minus(ns.cost))); c.compare(best) < 0 {
			best = c
		}
	}
	if best.compare(budget) < 0 {
		s.exact[left] = best
		return best
	}
	s.atLeast[left] = budget
	return budget
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
