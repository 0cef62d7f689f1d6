package plan

import (
	"slices"
	"sort"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// planner holds what every run of the search shares.
type planner struct {
	sim       *sim
	opts      Options
	pending   []PodDemand
	order     []int                     // indices into pending, the order pods are placed in
	rank      []int                     // per pod: its position in order
	cands     [][]topology.InstanceType // per pod: types it allows, in the allowed families, that serve it
	outside   [][]topology.InstanceType // per pod: such types outside the allowed families
	value     []float64                 // per pod: price of its cheapest priced candidate; 0 when none
	launching []NodeOption
	absorbed  map[string]int          // pod id -> launching node index, for pods already planned there
	byPrice   []topology.InstanceType // the catalog, cheapest first, unknown prices last
	why       map[int]string          // per pod: noCandidate's reason, once worked out
	rv        *reserves               // the reservations new nodes may launch into (reserve.go); nil for none

	// What lets the search skip the topology engine (plan_cache.go). A type is known by its index
	// in byPrice.
	typeIndex map[string]int
	famOK     []bool           // per type: in the allowed families
	cores     []int            // per type: cores of a node (0 when the type has no valid shape)
	mode      []string         // per pod: PodDemand.Mode
	allow     []typeSet        // per pod: the types PodDemand.Allows
	req       []int            // per pod: its request shape, an index into reqs
	reqs      []PodDemand      // per request shape: a pod with it
	need      [][]int          // per request shape, per type: cores it takes on a node of the type
	fits      map[fitKey]fit   // placements by node state and request shape
	empty     []string         // per type: the state of an empty node
	gen       uint64           // the last node state number handed out
	failed    map[pairKey]bool // merges and downsizes that found nothing, by node states
	misfits   map[string]bool  // run.simulate's sequences of request shapes that do not fit a type
}

func newPlanner(pending []PodDemand, launching []NodeOption, opts Options) *planner {
	if opts.Catalog == nil {
		opts.Catalog = topology.DefaultCatalog()
	}
	if opts.Policy == "" {
		opts.Policy = topology.BestFit
	}
	p := &planner{
		sim: newSim(opts.Catalog, opts.Policy, opts.Devices), opts: opts, pending: pending, launching: launching,
		cands: make([][]topology.InstanceType, len(pending)), outside: make([][]topology.InstanceType, len(pending)),
		value: make([]float64, len(pending)), absorbed: map[string]int{}, why: map[int]string{},
	}
	for i, n := range launching {
		for _, d := range n.Pods {
			p.absorbed[d.id()] = i
		}
	}
	types := opts.Catalog.Types()
	sortByPrice(types)
	p.byPrice = types
	p.index(pending)
	// A pod's candidates depend on its request shape and the types it allows only: pods alike in
	// both share them (they are only read).
	type candKey struct {
		req   int
		allow string
	}
	seen := map[candKey]int{} // the first pod with the key
	for i := range pending {
		key := candKey{p.req[i], p.allow[i].key()}
		if j, ok := seen[key]; ok {
			p.cands[i], p.outside[i], p.value[i] = p.cands[j], p.outside[j], p.value[j]
			continue
		}
		seen[key] = i
		for ti, t := range types {
			// UltraServer types are launched as whole UltraServers only (ultraserver.go).
			if t.UltraServerNodes > 0 || !p.allow[i].has(ti) || !p.serves(ti, p.req[i]) {
				continue
			}
			if !p.famOK[ti] {
				p.outside[i] = append(p.outside[i], t)
				continue
			}
			p.cands[i] = append(p.cands[i], t)
			if t.PriceKnown() && p.value[i] == 0 {
				p.value[i] = *t.PriceUSDPerHour
			}
		}
	}
	// Pods that only unknown-price types serve first (their nodes are launched anyway and may
	// take others), then largest first, then oldest, then by name.
	p.order = make([]int, len(pending))
	for i := range p.order {
		p.order[i] = i
	}
	// The keys are worked out once per pod, not once per comparison.
	type sortKey struct {
		unknownOnly bool
		weight      float64
		key         string
	}
	keys := make([]sortKey, len(pending))
	for i, d := range pending {
		keys[i] = sortKey{p.unknownOnly(i), weight(d), d.Key()}
	}
	sort.SliceStable(p.order, func(a, b int) bool {
		i, j := p.order[a], p.order[b]
		ki, kj := &keys[i], &keys[j]
		if ki.unknownOnly != kj.unknownOnly {
			return ki.unknownOnly
		}
		if ki.weight != kj.weight {
			return ki.weight > kj.weight
		}
		ti, tj := pending[i].Pod.CreationTimestamp, pending[j].Pod.CreationTimestamp
		if !ti.Equal(&tj) {
			return ti.Before(&tj)
		}
		return ki.key < kj.key
	})
	p.rank = make([]int, len(pending))
	for k, i := range p.order {
		p.rank[i] = k
	}
	p.rv = p.reserves()
	return p
}

func (p *planner) familyAllowed(t topology.InstanceType) bool {
	return len(p.opts.Families) == 0 || slices.Contains(p.opts.Families, t.Family)
}

func (p *planner) unknownOnly(i int) bool {
	return len(p.cands[i]) > 0 && p.value[i] == 0 && !p.cands[i][0].PriceKnown()
}

// weight orders pods for packing, largest first: devices, a core as half a device, a DRA All
// request above everything.
func weight(d PodDemand) float64 {
	w := allocation.PackingWeight(d.Requests)
	for _, r := range d.DRA {
		if r.All {
			w += 1000
		}
		w += float64(r.Count)
	}
	return w
}

// node is one node of a run: launching or new.
type node struct {
	name      string
	launching bool
	t         topology.InstanceType
	ti        int // t's index in planner.byPrice
	mode      string
	u         *topology.Usage
	pods      []placed // pods of this plan, in placement order
	res       int      // a new node's reservation: 1 + its index in reserves.list; 0 on demand

	// The node's state for the caches (plan_cache.go), kept by planner.refresh and planner.add.
	gen   uint64  // state number, new whenever u changes; unique within the planner
	state string  // u as a key of planner.fits
	free  int     // free cores
	allow typeSet // the allowed-family types every pod on the node allows
	need  []int   // per type: the cores its pods take on a node of that type
}

type placed struct {
	pod int // index into pending
	hw  []topology.Allocation
}

// sortPods puts pods in the planner's order.
func (p *planner) sortPods(pods []int) {
	sort.Slice(pods, func(a, b int) bool { return p.rank[pods[a]] < p.rank[pods[b]] })
}

func podsOf(n *node) []int {
	out := make([]int, len(n.pods))
	for k, pl := range n.pods {
		out[k] = pl.pod
	}
	return out
}
