package plan

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"

	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// The oracle finds, by exhaustive search, the cheapest fleet of new nodes for a small batch of
// pending pods. It shares no code with the planner: the topology engine alone decides what fits
// on a node. Tests compare Plan with it; benchmarks may report a plan's cost against it.
//
// A fleet puts each pod on at most one new node. Every pod on a node allows the node's type
// (PodDemand.Allows), in Options.Families when that is set, and has the node's mode
// (PodDemand.Mode); the pods fit together on the node: placing their requests one after another,
// in some order, on an empty node of the type finds room for every one, where a device plugin
// request goes where Options.Policy places it (topology.Policy.Place) and a DRA request takes
// whole free devices, any of them (all of them, on an empty node, for "all devices"). A pod that
// asks for both kinds fits no node.
//
// Cheapest is the least (unplaced pods, new nodes of a type without a price, summed price of the
// others), compared in that order: the planner's own ranking. Launching nodes and the node and
// device limits are not modelled: the batch has none.
//
// UltraServer types (trn2u) come only as whole UltraServers: a unit of UltraServerNodes nodes
// that costs that many nodes, whose pods fit on its nodes (each node as above), all of one mode
// (an UltraServer is launched with one allocation mode for all its nodes), and that holds only
// pods no other type in the families serves (the planner's rule: trn2u only for pods that need
// it). Other nodes are of the other types.

// fleet is the oracle's answer.
type fleet struct {
	cost  fleetCost
	nodes []fleetNode
}

// fleetNode is one new node of a fleet: its type and its pods, as indices into the batch.
type fleetNode struct {
	typ  topology.InstanceType
	pods []int
}

// fleetCost ranks fleets, lowest first.
type fleetCost struct {
	unplaced, unknown int
	usd               float64
}

func (c fleetCost) plus(o fleetCost) fleetCost {
	return fleetCost{c.unplaced + o.unplaced, c.unknown + o.unknown, c.usd + o.usd}
}

// compare is negative when c is cheaper than o, 0 when they cost the same (prices within 1e-9).
func (c fleetCost) compare(o fleetCost) int {
	switch {
	case c.unplaced != o.unplaced:
		return c.unplaced - o.unplaced
	case c.unknown != o.unknown:
		return c.unknown - o.unknown
	case c.usd < o.usd-1e-9:
		return -1
	case c.usd > o.usd+1e-9:
		return 1
	}
	return 0
}

func nodeCost(t topology.InstanceType) fleetCost {
	if !t.PriceKnown() {
		return fleetCost{unknown: 1}
	}
	return fleetCost{usd: *t.PriceUSDPerHour}
}

// maxOraclePods bounds the batch: the search takes 3^n steps and tries 2^n sets on every type.
const maxOraclePods = 10

// optimalFleet returns the cheapest fleet for the pods (at most maxOraclePods) under the
// catalog, policy and families of opts, which must set no limit.
func optimalFleet(pending []PodDemand, opts Options) fleet {
	n := len(pending)
	if n > maxOraclePods || opts.MaxNodes > 0 || opts.MaxDevices > 0 {
		panic(fmt.Sprintf("the oracle takes at most %d pods and no limits", maxOraclePods))
	}
	shapes, policy := nodeTypes(opts)
	// node[set]: the cheapest type that takes the pods of the set together; -1 for none.
	node := make([]int, 1<<n)
	for set := 1; set < 1<<n; set++ {
		node[set] = slices.IndexFunc(shapes, func(s *topology.Shape) bool { return fitsTogether(pending, set, s, policy) })
	}
	unit, unitType := ultraServerUnits(pending, node, opts)
	// best[set]: the cheapest fleet for the pods of the set. Its lowest pod is unplaced, or on a
	// node with some of the others.
	best := make([]fleetCost, 1<<n)
	group := make([]int, 1<<n) // the pods on the lowest pod's node; 0 when unplaced
	for set := 1; set < 1<<n; set++ {
		low := set & -set
		best[set] = best[set^low].plus(fleetCost{unplaced: 1})
		for sub := set; sub > 0; sub = (sub - 1) & set {
			if sub&low == 0 {
				continue
			}
			if node[sub] >= 0 {
				if c := best[set^sub].plus(nodeCost(shapes[node[sub]].Type)); c.compare(best[set]) < 0 {
					best[set], group[set] = c, sub
				}
			}
			if unit[sub] {
				if c := best[set^sub].plus(unitCost(unitType)); c.compare(best[set]) < 0 {
					best[set], group[set] = c, -sub
				}
			}
		}
	}
	f := fleet{cost: best[1<<n-1]}
	for set := 1<<n - 1; set != 0; {
		low := set & -set
		sub := group[set]
		if sub == 0 {
			set ^= low
			continue
		}
		var fn fleetNode
		if sub < 0 {
			sub = -sub
			fn.typ = unitType
		} else {
			fn.typ = shapes[node[sub]].Type
		}
		for s := sub; s != 0; s &= s - 1 {
			fn.pods = append(fn.pods, bits.TrailingZeros(uint(s)))
		}
		f.nodes = append(f.nodes, fn)
		set ^= sub
	}
	return f
}

// unitCost is what an UltraServer of type t costs: all its nodes.
func unitCost(t topology.InstanceType) fleetCost {
	c := nodeCost(t)
	return fleetCost{unknown: c.unknown * t.UltraServerNodes, usd: c.usd * float64(t.UltraServerNodes)}
}

// ultraServerUnits returns, per set of pods, whether one UltraServer of the cheapest UltraServer
// type in the families holds them: each pod needs one (no other type serves it, node[1<<i] < 0),
// all have one mode, and the set splits into at most UltraServerNodes sets that each fit on one
// of its nodes.
func ultraServerUnits(pending []PodDemand, node []int, opts Options) ([]bool, topology.InstanceType) {
	n := len(pending)
	unit := make([]bool, 1<<n)
	types := ultraServerTypes(Options{Catalog: cmp.Or(opts.Catalog, topology.DefaultCatalog()), Families: opts.Families})
	if len(types) == 0 {
		return unit, topology.InstanceType{}
	}
	t := types[0]
	shape, err := topology.NewShape(t, 0)
	if err != nil {
		return unit, t
	}
	policy := cmp.Or(opts.Policy, topology.BestFit)
	need := 0
	for i := range n {
		if node[1<<i] < 0 {
			need |= 1 << i
		}
	}
	if need == 0 {
		return unit, t
	}
	// nodes[set]: the fewest UltraServer nodes that hold the pods of set (none: more than any
	// UltraServer has).
	none := t.UltraServerNodes + 1
	nodes := make([]int, 1<<n)
	for set := 1; set < 1<<n; set++ {
		nodes[set] = none
		if set&^need != 0 {
			continue
		}
		low := set & -set
		for sub := set; sub > 0; sub = (sub - 1) & set {
			if sub&low != 0 && nodes[set^sub] < none && nodes[set^sub]+1 < nodes[set] && fitsTogether(pending, sub, shape, policy) {
				nodes[set] = nodes[set^sub] + 1
			}
		}
		unit[set] = nodes[set] <= t.UltraServerNodes && oneMode(pending, set)
	}
	return unit, t
}

// oneMode reports whether the pods of set all have one mode.
func oneMode(pending []PodDemand, set int) bool {
	mode := pending[bits.TrailingZeros(uint(set))].Mode()
	for s := set; s != 0; s &= s - 1 {
		if pending[bits.TrailingZeros(uint(s))].Mode() != mode {
			return false
		}
	}
	return true
}

// nodeTypes returns the shapes of the types a new node may have under opts, cheapest first
// (priced ones by price, then those without a price), and the placement policy.
func nodeTypes(opts Options) ([]*topology.Shape, topology.Policy) {
	cat := opts.Catalog
	if cat == nil {
		cat = topology.DefaultCatalog()
	}
	var shapes []*topology.Shape
	for _, t := range cat.Types() {
		if shape, err := topology.NewShape(t, 0); err == nil && t.UltraServerNodes == 0 && (len(opts.Families) == 0 || slices.Contains(opts.Families, t.Family)) {
			shapes = append(shapes, shape)
		}
	}
	slices.SortStableFunc(shapes, func(a, b *topology.Shape) int { return nodeCost(a.Type).compare(nodeCost(b.Type)) })
	return shapes, cmp.Or(opts.Policy, topology.BestFit)
}

// perPodCost is the cost of a node of the cheapest type for each pod alone (an UltraServer for a
// pod only one serves): what Plan promises not to exceed when every pod has a priced type. It
// takes batches of any size.
func perPodCost(pending []PodDemand, opts Options) fleetCost {
	shapes, policy := nodeTypes(opts)
	var c fleetCost
	for i := range pending {
		k := slices.IndexFunc(shapes, func(s *topology.Shape) bool { return fitsTogether(pending[i:i+1], 1, s, policy) })
		if k >= 0 {
			c = c.plus(nodeCost(shapes[k].Type))
			continue
		}
		if unit, unitType := ultraServerUnits(pending[i:i+1], []int{-1, k}, opts); unit[1] {
			c = c.plus(unitCost(unitType))
		} else {
			c.unplaced++
		}
	}
	return c
}

// oracleRequest is one request of a pod: devices or cores for the device plugin, whole devices
// (unit 0) for DRA.
type oracleRequest struct {
	unit  topology.Unit
	count int
}

// fitsTogether reports whether the pods of set (bits of indices into pending) may share a new
// node of the shape: see the definition above.
func fitsTogether(pending []PodDemand, set int, shape *topology.Shape, policy topology.Policy) bool {
	var reqs []oracleRequest
	mode := ""
	for s := set; s != 0; s &= s - 1 {
		d := pending[bits.TrailingZeros(uint(s))]
		if !d.Allows(shape.Type) || mode != "" && d.Mode() != mode || len(d.DRA) > 0 && len(d.Requests) > 0 || !d.Neuron() {
			return false
		}
		mode = d.Mode()
		for _, r := range d.Requests {
			unit, err := topology.UnitOf(r.Resource)
			if err != nil {
				return false
			}
			reqs = append(reqs, oracleRequest{unit, r.Count})
		}
		for _, r := range d.DRA {
			if r.All { // every device of the node: they must all be free
				r.Count = shape.Devices()
			}
			reqs = append(reqs, oracleRequest{0, r.Count})
		}
	}
	cores := 0 // every request takes cores of its own: a quick no
	for _, r := range reqs {
		cores += shape.CoresNeeded(topology.Request{Unit: cmp.Or(r.unit, topology.UnitDevice), Count: r.count})
	}
	return cores <= shape.Cores() && placeInSomeOrder(topology.NewUsage(shape), reqs, 1<<len(reqs)-1, policy, map[string]bool{})
}

// placeInSomeOrder reports whether the requests of left (bits of indices into reqs) can be placed
// on u one after another in some order. failed holds the states (requests left, cores in use)
// known to fail.
func placeInSomeOrder(u *topology.Usage, reqs []oracleRequest, left int, policy topology.Policy, failed map[string]bool) bool {
	if left == 0 {
		return true
	}
	key := fmt.Sprint(left, u.UsedCores())
	if failed[key] {
		return false
	}
	var tried []oracleRequest
	for l := left; l != 0; l &= l - 1 {
		k := bits.TrailingZeros(uint(l))
		if r := reqs[k]; !slices.Contains(tried, r) { // an equal request would go where r goes
			tried = append(tried, r)
			if next, ok := oraclePlace(u, r, policy); ok && placeInSomeOrder(next, reqs, left&^(1<<k), policy, failed) {
				return true
			}
		}
	}
	failed[key] = true
	return false
}

// oraclePlace returns u with r placed, if it fits: a device plugin request where the policy places
// it, a DRA request on the lowest free devices (they are all alike to DRA).
func oraclePlace(u *topology.Usage, r oracleRequest, policy topology.Policy) (*topology.Usage, bool) {
	var a topology.Allocation
	if r.unit != 0 {
		fit, err := policy.Place(u, topology.Request{Unit: r.unit, Count: r.count})
		if err != nil {
			return nil, false
		}
		a = fit.Allocation
	} else {
		free := u.FreeDevices()
		if r.count < 1 || r.count > len(free) {
			return nil, false
		}
		var err error
		if a, err = u.Shape().DeviceAllocation(free[:r.count]); err != nil {
			return nil, false
		}
	}
	next := u.Clone()
	if err := next.Allocate(a); err != nil {
		panic(fmt.Sprintf("the topology engine placed %v where it does not fit: %v", r, err))
	}
	return next, true
}
