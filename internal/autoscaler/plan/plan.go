package plan

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// Options configure Plan.
type Options struct {
	// Catalog is the instance catalog; nil means topology.DefaultCatalog().
	Catalog *topology.Catalog
	// Policy places requests in the simulation, as the scheduler extender does; "" is best-fit.
	Policy topology.Policy
	// Families the autoscaler may launch; empty allows every family of the catalog.
	Families []string
	// MaxNodes caps the Neuron nodes in the cluster: Existing, launching and new together.
	// 0 means no limit.
	MaxNodes int
	// MaxDevices caps the Neuron devices in the cluster, counted the same way. 0 means no limit.
	MaxDevices int
	// Existing is what the cluster's Neuron nodes that are not launching hold.
	Existing Capacity
}

// Capacity counts Neuron nodes and their devices.
type Capacity struct {
	Nodes, Devices int
}

// NodeOption is a node that is already launching, and the pods already planned onto it. Its
// free capacity is used before any new node.
type NodeOption struct {
	Name         string
	InstanceType string
	// Mode is the node's allocation mode; "" is labels.AllocationModeDevicePlugin.
	Mode string
	Pods []PodDemand
	// Bound are the pods the scheduler already put on the node (it may have come up and taken
	// pods planned elsewhere): they occupy it first. A planned pod that no longer fits beside
	// them is planned again.
	Bound []PodDemand
}

// ScaleUp is what Plan decided to launch.
type ScaleUp struct {
	// Nodes are the launching nodes that take pending pods and the new nodes to launch, in
	// that order.
	Nodes []NodePlan
	// CostUSDPerHour is the sum of the known prices of the new nodes.
	CostUSDPerHour float64
	// UnknownPriceNodes counts the new nodes whose type has no price in the catalog.
	UnknownPriceNodes int
}

// New returns the nodes to launch.
func (s ScaleUp) New() []NodePlan {
	var out []NodePlan
	for _, n := range s.Nodes {
		if !n.Launching {
			out = append(out, n)
		}
	}
	return out
}

// NodePlan is one node and the pending pods planned onto it.
type NodePlan struct {
	// Name is the launching node's name; empty for a new node.
	Name         string
	Launching    bool
	InstanceType topology.InstanceType
	// Mode is labels.AllocationModeDevicePlugin or labels.AllocationModeDRA.
	Mode string
	// Pods are the pods of this plan, in the order they were simulated. For a launching node,
	// only the pods added now.
	Pods []Placement
}

// Labels are the labels the node carries (NewNodeLabels).
func (n NodePlan) Labels() map[string]string { return NewNodeLabels(n.InstanceType, n.Mode) }

// Placement is a pod and the devices and cores the simulation gave it. The scheduler chooses the
// real ones; the simulation proves that they exist.
type Placement struct {
	Pod      string // namespace/name
	UID      types.UID
	Hardware []topology.Allocation
}

// Decision is the outcome for one pending pod: an event on the pod.
type Decision struct {
	Pod     string // namespace/name
	UID     types.UID
	Reason  string // ReasonTriggeredScaleUp or ReasonNotTriggerScaleUp
	Message string
	// Node is the index in ScaleUp.Nodes of the node that takes the pod; -1 when the pod is
	// refused, or was planned onto a launching node by an earlier plan (Launching is then true
	// and the message names the node).
	Node int
	// Launching: the node was already launching, nothing new is launched for the pod.
	Launching bool
}

// Warning reports whether the decision is a Warning event.
func (d Decision) Warning() bool { return d.Reason == ReasonNotTriggerScaleUp }

// Plan chooses the nodes to launch for pending pods that passed Check. Pods fill the launching
// nodes first; the others go on new nodes, packed several to a node where that is cheaper, so
// that the total hourly price is the lowest the search finds (when every pod is placed, never
// above one node of the cheapest fitting type per pod). Every pod gets a Decision, in the order
// of pending.
func Plan(pending []PodDemand, launching []NodeOption, opts Options) (ScaleUp, []Decision) {
	p := newPlanner(pending, launching, opts)
	packed := p.run(true)
	naive := p.run(false)
	best := packed
	if naive.worse(packed) < 0 {
		best = naive
	}
	return p.result(best)
}

// sim simulates nodes with the topology engine.
type sim struct {
	cat    *topology.Catalog
	policy topology.Policy
	shapes map[string]*topology.Shape
}

func newSim(cat *topology.Catalog, policy topology.Policy) *sim {
	return &sim{cat: cat, policy: policy, shapes: map[string]*topology.Shape{}}
}

// shape returns the shape of a new node of type t (default LNC); nil when t is not valid.
func (s *sim) shape(t topology.InstanceType) *topology.Shape {
	if sh, ok := s.shapes[t.Name]; ok {
		return sh
	}
	sh, err := topology.NewShape(t, 0)
	if err != nil {
		sh = nil
	}
	s.shapes[t.Name] = sh
	return sh
}

// place puts the pod on the node whose usage is u, as the extender (device plugin pods) or a
// whole-device DRA allocation would, and marks its hardware in use. It changes nothing and
// returns false when the pod does not fit. The score is higher for a tighter fit.
func (s *sim) place(u *topology.Usage, d PodDemand) ([]topology.Allocation, float64, bool) {
	var hw []topology.Allocation
	var score float64
	if len(d.DRA) > 0 {
		if len(d.Requests) > 0 {
			return nil, 0, false
		}
		for _, r := range d.DRA {
			free := u.FreeDevices()
			n := r.Count
			if r.All {
				if len(free) != u.Shape().Devices() {
					release(u, hw)
					return nil, 0, false
				}
				n = len(free)
			}
			if n < 1 || n > len(free) {
				release(u, hw)
				return nil, 0, false
			}
			a, err := u.Shape().DeviceAllocation(free[:n])
			if err == nil {
				err = u.Allocate(a)
			}
			if err != nil {
				release(u, hw)
				return nil, 0, false
			}
			hw = append(hw, a)
		}
		score = 100 * (1 - float64(u.FreeCoreCount())/float64(u.Shape().Cores()))
		return hw, score, true
	}
	if len(d.Requests) == 0 {
		return nil, 0, false
	}
	containers, score, err := allocation.Plan(u, d.Requests, s.policy)
	if err != nil {
		return nil, 0, false
	}
	for _, c := range containers {
		a, err := c.Hardware(u.Shape())
		if err == nil {
			err = u.Allocate(a)
		}
		if err != nil { // allocation.Plan's entries fit together; this is a bug, not a misfit
			release(u, hw)
			return nil, 0, false
		}
		hw = append(hw, a)
	}
	return hw, score, true
}

func release(u *topology.Usage, hw []topology.Allocation) {
	for _, a := range hw {
		_ = u.Release(a)
	}
}

// serves reports whether an empty node of type t can take the pod (whatever its selector).
func (s *sim) serves(t topology.InstanceType, d PodDemand) bool {
	sh := s.shape(t)
	if sh == nil {
		return false
	}
	_, _, ok := s.place(topology.NewUsage(sh), d)
	return ok
}

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
}

func newPlanner(pending []PodDemand, launching []NodeOption, opts Options) *planner {
	if opts.Catalog == nil {
		opts.Catalog = topology.DefaultCatalog()
	}
	if opts.Policy == "" {
		opts.Policy = topology.BestFit
	}
	p := &planner{
		sim: newSim(opts.Catalog, opts.Policy), opts: opts, pending: pending, launching: launching,
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
	for i := range pending {
		for ti, t := range types {
			if !p.allow[i].has(ti) || !p.serves(ti, p.req[i]) {
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
	sort.SliceStable(p.order, func(a, b int) bool {
		i, j := p.order[a], p.order[b]
		ui, uj := p.unknownOnly(i), p.unknownOnly(j)
		if ui != uj {
			return ui
		}
		if wi, wj := weight(pending[i]), weight(pending[j]); wi != wj {
			return wi > wj
		}
		ti, tj := pending[i].Pod.CreationTimestamp, pending[j].Pod.CreationTimestamp
		if !ti.Equal(&tj) {
			return ti.Before(&tj)
		}
		return pending[i].Key() < pending[j].Key()
	})
	p.rank = make([]int, len(pending))
	for k, i := range p.order {
		p.rank[i] = k
	}
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

// run is one search's state.
type run struct {
	p        *planner
	nodes    []*node  // launching nodes first, then new ones
	at       []*node  // per pod: the node of the run that takes it; nil for none
	prior    []bool   // per pod: already planned onto a launching node before this plan
	blocked  []string // per pod without a node: why
	nodesCap int      // new nodes the limits allow; -1 no limit
	devCap   int      // new devices the limits allow; -1 no limit
	launchN  int      // launching nodes (counted against the limits)
	launchD  int      // their devices
	newN     int      // new nodes in nodes
	newD     int      // their devices
	// next finds the free pods in order without walking the placed ones: next[k] is k when the
	// pod at position k of the order is free, else a position at or before the next free one
	// (len(order) when none).
	next []int
}

// run builds a plan: pack packs several pods per new node and improves the result; without it
// every pod that no launching node takes gets a node of its own.
func (p *planner) run(pack bool) *run {
	r := &run{p: p, at: make([]*node, len(p.pending)), prior: make([]bool, len(p.pending)), blocked: make([]string, len(p.pending))}
	for _, lo := range p.launching {
		r.addLaunching(lo)
	}
	r.nodesCap, r.devCap = -1, -1
	if p.opts.MaxNodes > 0 {
		r.nodesCap = max(0, p.opts.MaxNodes-p.opts.Existing.Nodes-r.launchN)
	}
	if p.opts.MaxDevices > 0 {
		r.devCap = max(0, p.opts.MaxDevices-p.opts.Existing.Devices-r.launchD)
	}
	// Pods already planned onto a launching node stay there.
	r.next = make([]int, len(p.pending)+1)
	for k := range r.next {
		r.next[k] = k
	}
	for i, d := range p.pending {
		if _, r.prior[i] = p.absorbed[d.id()]; r.prior[i] {
			r.taken(i)
		}
	}
	// Launching nodes first: they cost nothing more.
	for _, i := range p.order {
		if r.free(i) {
			r.placeExisting(i, true)
		}
	}
	for _, i := range p.order {
		if !r.free(i) {
			continue
		}
		if pack && r.placeExisting(i, false) {
			continue
		}
		r.open(i, pack)
	}
	if pack {
		for r.evacuate() || r.merge() || r.downsize() {
		}
		for _, i := range p.order { // limits may have room again
			if r.free(i) && !r.placeExisting(i, false) {
				r.open(i, true)
			}
		}
	}
	return r
}

// addLaunching adds a launching node to the run, with the pods on it (bound first) and those
// earlier plans put on it that still fit; it counts against the limits even when it cannot take
// pods.
func (r *run) addLaunching(lo NodeOption) {
	p := r.p
	r.launchN++
	t, ok := p.opts.Catalog.Lookup(lo.InstanceType)
	if !ok {
		return // counts against the limits; cannot take pods
	}
	r.launchD += t.Devices
	ti, ok := p.typeIndex[t.Name]
	if !ok || p.sim.shape(t) == nil {
		return
	}
	mode := lo.Mode
	if mode == "" {
		mode = labels.AllocationModeDevicePlugin
	}
	n := p.newNode(ti, mode)
	n.name, n.launching = lo.Name, true
	for _, d := range lo.Bound {
		p.sim.place(n.u, d) // real: placed first (one that does not fit cannot be on it)
	}
	earlier := slices.Clone(lo.Pods)
	sort.SliceStable(earlier, func(a, b int) bool { return weight(earlier[a]) > weight(earlier[b]) })
	for _, d := range earlier {
		if _, _, ok := p.sim.place(n.u, d); !ok {
			delete(p.absorbed, d.id()) // its room was taken: plan it again
		}
	}
	p.refresh(n)
	r.adopt(n)
}

// free reports whether pod i has no node yet.
func (r *run) free(i int) bool { return r.at[i] == nil && !r.prior[i] }

// taken records that pod i is no longer free: the walk over free pods skips it from now on.
func (r *run) taken(i int) {
	k := r.p.rank[i]
	r.next[k] = k + 1
}

// nextFree returns the position in the order of the first free pod at or after position k,
// len(order) when there is none.
func (r *run) nextFree(k int) int {
	root := k
	for r.next[root] != root {
		root = r.next[root]
	}
	for k != root { // point the walked positions at the free one, so the next walk is short
		next := r.next[k]
		r.next[k] = root
		k = next
	}
	return root
}

// assign records pod i as placed on n.
func (r *run) assign(i int, n *node) {
	r.at[i] = n
	r.blocked[i] = ""
	r.taken(i)
}

// put records the pods of n as placed there.
func (r *run) put(n *node) {
	for _, pl := range n.pods {
		r.assign(pl.pod, n)
	}
}

// adopt adds n to the run's nodes.
func (r *run) adopt(n *node) {
	r.nodes = append(r.nodes, n)
	if !n.launching {
		r.newN++
		r.newD += n.t.Devices
	}
}

// replace puts m in the place of the new node at k.
func (r *run) replace(k int, m *node) {
	r.newD += m.t.Devices - r.nodes[k].t.Devices
	r.nodes[k] = m
	r.put(m)
}

// remove deletes the new node at k.
func (r *run) remove(k int) {
	r.newN--
	r.newD -= r.nodes[k].t.Devices
	r.nodes = slices.Delete(r.nodes, k, k+1)
}

// compatible reports whether pod i may go on node n.
func (r *run) compatible(i int, n *node) bool {
	p := r.p
	return n.mode == p.mode[i] && p.allow[i].has(n.ti) && (n.launching || p.famOK[n.ti])
}

// placeExisting puts pod i on the node of the run (launching ones only, or every one) where it
// fits tightest.
func (r *run) placeExisting(i int, launchingOnly bool) bool {
	p := r.p
	q := p.req[i]
	var best *node
	bestScore := math.Inf(-1)
	for _, n := range r.nodes {
		if (launchingOnly && !n.launching) || !r.compatible(i, n) {
			continue
		}
		if f := p.fitOn(n, q); f.ok && f.score > bestScore {
			best, bestScore = n, f.score
		}
	}
	if best == nil {
		return false
	}
	p.add(best, i)
	r.assign(i, best)
	return true
}

// withinLimits reports whether the run's new nodes may change by dNodes nodes and dDevices
// devices.
func (r *run) withinLimits(dNodes, dDevices int) bool {
	return (r.nodesCap < 0 || r.newN+dNodes <= r.nodesCap) && (r.devCap < 0 || r.newD+dDevices <= r.devCap)
}

// limitState is what the limits' verdicts depend on: nothing without limits.
func (r *run) limitState() [2]int {
	if r.nodesCap < 0 && r.devCap < 0 {
		return [2]int{}
	}
	return [2]int{r.newN, r.newD}
}

// open launches a new node for pod i: the type with the lowest price per value of the pods it
// takes (pod i and, with pack, the later unplaced pods that fit beside it). Types with a known
// price come first; unknown-price types only when no priced type serves the pod.
func (r *run) open(i int, pack bool) {
	p := r.p
	cands := p.cands[i]
	if len(cands) == 0 {
		r.blocked[i] = p.noCandidate(i)
		return
	}
	var within []topology.InstanceType
	for _, t := range cands {
		if r.withinLimits(1, t.Devices) {
			within = append(within, t)
		}
	}
	if len(within) == 0 {
		r.blocked[i] = r.limitMessage(i)
		return
	}
	var priced, unknown []topology.InstanceType
	for _, t := range within {
		if t.PriceKnown() {
			priced = append(priced, t)
		} else {
			unknown = append(unknown, t)
		}
	}
	try := priced
	if len(try) == 0 {
		try = unknown
		sort.SliceStable(try, func(a, b int) bool { return try[a].Devices < try[b].Devices })
	}
	var best *node
	bestRatio := math.Inf(1)
	for _, t := range try {
		n := r.fill(t, i, pack)
		if n == nil {
			continue
		}
		ratio := 0.0
		if t.PriceKnown() {
			v := 0.0
			for _, pl := range n.pods {
				v += p.value[pl.pod]
			}
			if *t.PriceUSDPerHour > 0 {
				ratio = math.Inf(1)
				if v > 0 {
					ratio = *t.PriceUSDPerHour / v
				}
			}
		} else if best == nil {
			ratio = 0 // the smallest unknown-price type that serves the pod
		} else {
			continue
		}
		if best == nil || ratio < bestRatio-1e-12 {
			best, bestRatio = n, ratio
		}
	}
	if best == nil {
		r.blocked[i] = p.noCandidate(i)
		return
	}
	r.adopt(best)
	r.put(best)
}

// fill simulates a new node of type t with pod i and, with pack, the later unplaced pods that fit.
func (r *run) fill(t topology.InstanceType, i int, pack bool) *node {
	p := r.p
	ti, ok := p.typeIndex[t.Name]
	if !ok || p.sim.shape(t) == nil {
		return nil
	}
	n := p.newNode(ti, p.mode[i])
	if !p.fitOn(n, p.req[i]).ok {
		return nil
	}
	p.add(n, i)
	if !pack {
		return n
	}
	// Every free pod, in order, is tried once on the node as it is then. The node's state changes
	// only when one is put on it, so the placement cache answers all but the first pod of each
	// request shape between two puts.
	order := p.order
	for k := r.nextFree(0); k < len(order) && n.free > 0; k = r.nextFree(k + 1) {
		j := order[k]
		if j == i || !r.compatible(j, n) {
			continue
		}
		if p.fitOn(n, p.req[j]).ok {
			p.add(n, j)
		}
	}
	return n
}

// simulate places pods on a fresh node of type t, largest first; nil when they do not all fit.
func (r *run) simulate(t topology.InstanceType, mode string, pods []int) *node {
	p := r.p
	ti, ok := p.typeIndex[t.Name]
	if !ok || p.sim.shape(t) == nil {
		return nil
	}
	pods = slices.Clone(pods)
	p.sortPods(pods)
	n := p.newNode(ti, mode)
	for _, i := range pods {
		if !r.compatible(i, n) {
			return nil
		}
		if !p.fitOn(n, p.req[i]).ok {
			return nil
		}
		p.add(n, i)
	}
	return n
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

// evacuate removes one new node whose pods all fit on the other nodes.
func (r *run) evacuate() bool {
	p := r.p
	shelves := r.shelves()
	moved := map[int]*node{}
	for k, n := range r.nodes {
		if n.launching {
			continue
		}
		// The pods go, one after the other, where they fit tightest (the first node in order
		// among the tightest), tried on copies of the nodes they go on (moved) until all have
		// found room: the run changes only if the node empties.
		clear(moved)
		target := make([]int, len(n.pods))
		ok := true
		for x, pl := range n.pods {
			i := pl.pod
			q := p.req[i]
			best, bestScore := -1, math.Inf(-1)
			for _, s := range shelves {
				if s.mode != p.mode[i] || !p.allow[i].has(s.ti) || !(s.launching || p.famOK[s.ti]) {
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
				ok = false
				break
			}
			c, copied := moved[best]
			if !copied {
				c = p.copyNode(r.nodes[best])
				moved[best] = c
			}
			p.add(c, i)
			target[x] = best
		}
		if !ok {
			continue
		}
		for x, pl := range n.pods {
			o := r.nodes[target[x]]
			p.add(o, pl.pod) // as on its copy: the same placement on the same state
			r.assign(pl.pod, o)
		}
		r.remove(k)
		return true
	}
	return false
}

// shelf is the run's nodes of one mode and type, launching or new, most free cores first (then in
// the run's order): a pod is tried only on shelves it may go on, and on a shelf only until the
// nodes have fewer free cores than it takes.
type shelf struct {
	mode      string
	ti        int
	launching bool
	nodes     []int // indices into run.nodes
}

func (r *run) shelves() []*shelf {
	type key struct {
		mode      string
		ti        int
		launching bool
	}
	var out []*shelf
	at := map[key]*shelf{}
	for j, n := range r.nodes {
		k := key{n.mode, n.ti, n.launching}
		s, ok := at[k]
		if !ok {
			s = &shelf{mode: n.mode, ti: n.ti, launching: n.launching}
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
		if !p.famOK[ti] || !allow.has(ti) || need[ti] > p.cores[ti] || !r.withinLimits(1-replacedNodes, t.Devices-replacedDevices) {
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
	for a := range r.nodes {
		for b := a + 1; b < len(r.nodes); b++ {
			na, nb := r.nodes[a], r.nodes[b]
			if na.launching || nb.launching || na.mode != nb.mode {
				continue
			}
			priced := na.t.PriceKnown() && nb.t.PriceKnown()
			if !priced && na.t.Name != nb.t.Name {
				continue
			}
			bound := math.Inf(1)
			if priced {
				bound = *na.t.PriceUSDPerHour + *nb.t.PriceUSDPerHour
				if !p.mayMerge(na, nb, bound) {
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
				m = r.cheapest(pods, allow, need, na.mode, bound, 2, na.t.Devices+nb.t.Devices)
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
		if n.t.PriceKnown() {
			bound = *n.t.PriceUSDPerHour
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

// cost is the run's rank: unplaced pods, then unknown-price nodes, then known price.
func (r *run) cost() (unplaced, unknown int, usd float64) {
	for i := range r.at {
		if r.free(i) {
			unplaced++
		}
	}
	for _, n := range r.nodes {
		if n.launching {
			continue
		}
		if n.t.PriceKnown() {
			usd += *n.t.PriceUSDPerHour
		} else {
			unknown++
		}
	}
	return unplaced, unknown, usd
}

// worse compares two runs: negative when r is better than o.
func (r *run) worse(o *run) int {
	ru, rk, rc := r.cost()
	ou, ok, oc := o.cost()
	switch {
	case ru != ou:
		return ru - ou
	case rk != ok:
		return rk - ok
	case rc < oc-1e-9:
		return -1
	case rc > oc+1e-9:
		return 1
	}
	return 0
}

// noCandidate explains why no type may be launched for pod i, limits aside. Each pod's reason is
// worked out once: it depends on the pod alone, and a batch may hold thousands of pods that no
// type serves, each refused by both runs.
func (p *planner) noCandidate(i int) string {
	if why, ok := p.why[i]; ok {
		return why
	}
	why := p.explain(i)
	p.why[i] = why
	return why
}

// explain works out noCandidate's reason.
func (p *planner) explain(i int) string {
	d := p.pending[i]
	if !d.Neuron() {
		return "the pod asks for no Neuron devices or cores"
	}
	if out := p.outside[i]; len(out) > 0 {
		var names []string
		for _, t := range out {
			names = append(names, fmt.Sprintf("%s (family %s)", t.Name, t.Family))
		}
		return fmt.Sprintf("the instance types that can serve the pod are %s, but the autoscaler may launch only the families %s. "+
			"Allow one of these families in the autoscaler's configuration, or change the pod's %s",
			strings.Join(names, ", "), strings.Join(p.opts.Families, ", "), constraintNames(d))
	}
	if pr := selectorProblems(d, p.opts.Catalog); len(pr) > 0 {
		return pr[0].Message
	}
	if pr := servingProblem(d, p.sim); pr != nil {
		return pr.Message
	}
	return "no instance type the pod allows can serve it"
}

// limitMessage says which limit keeps a node for pod i from launching.
func (r *run) limitMessage(i int) string {
	n, d := r.newN, r.newD
	o := r.p.opts
	if r.nodesCap >= 0 && n+1 > r.nodesCap {
		return fmt.Sprintf("the limit of %s is reached: %d in the cluster, %d launching, %d planned for other pending pods. "+
			"Raise the autoscaler's max nodes, or wait for nodes to free up", plural(o.MaxNodes, "Neuron node"), o.Existing.Nodes, r.launchN, n)
	}
	smallest := r.p.cands[i][0]
	for _, t := range r.p.cands[i] {
		if t.Devices < smallest.Devices {
			smallest = t
		}
	}
	return fmt.Sprintf("the limit of %s is reached: the smallest type that can serve the pod, %s, has %s, and %d are in the cluster, "+
		"%d launching and %d planned for other pending pods. Raise the autoscaler's max devices, or wait for nodes to free up",
		plural(o.MaxDevices, "Neuron device"), smallest.Name, plural(smallest.Devices, "device"), o.Existing.Devices, r.launchD, d)
}

// result turns the chosen run into the plan and the decisions.
func (p *planner) result(r *run) (ScaleUp, []Decision) {
	var out ScaleUp
	index := map[*node]int{}
	for _, n := range r.nodes {
		if n.launching && len(n.pods) == 0 {
			continue
		}
		np := NodePlan{Name: n.name, Launching: n.launching, InstanceType: n.t, Mode: n.mode}
		for _, pl := range n.pods {
			d := p.pending[pl.pod]
			np.Pods = append(np.Pods, Placement{Pod: d.Key(), UID: d.Pod.UID, Hardware: pl.hw})
		}
		index[n] = len(out.Nodes)
		out.Nodes = append(out.Nodes, np)
		if !n.launching {
			if n.t.PriceKnown() {
				out.CostUSDPerHour += *n.t.PriceUSDPerHour
			} else {
				out.UnknownPriceNodes++
			}
		}
	}
	decisions := make([]Decision, len(p.pending))
	for i, d := range p.pending {
		dec := Decision{Pod: d.Key(), UID: d.Pod.UID, Node: -1}
		switch n := r.at[i]; {
		case r.prior[i]:
			lo := p.launching[p.absorbed[d.id()]]
			dec.Reason, dec.Launching = ReasonTriggeredScaleUp, true
			dec.Message = fmt.Sprintf("node %s (%s), already launching, will take the pod: no new node", lo.Name, lo.InstanceType)
		case n != nil:
			if k, ok := index[n]; ok {
				dec.Node = k
			}
			dec.Reason = ReasonTriggeredScaleUp
			dec.Launching = n.launching
			dec.Message = p.placedMessage(i, n)
		default:
			dec.Reason = ReasonNotTriggerScaleUp
			dec.Message = r.blocked[i]
			if dec.Message == "" {
				dec.Message = r.p.noCandidate(i)
			}
		}
		decisions[i] = dec
	}
	return out, decisions
}

func (p *planner) placedMessage(i int, n *node) string {
	if n.launching {
		return fmt.Sprintf("node %s (%s), already launching, will take the pod: no new node", n.name, n.t.Name)
	}
	others := len(n.pods) - 1
	with := ""
	switch {
	case others == 1:
		with = ", together with 1 other pending pod"
	case others > 1:
		with = fmt.Sprintf(", together with %d other pending pods", others)
	}
	if n.t.PriceKnown() {
		return fmt.Sprintf("pod triggered scale-up: a new %s node (%s)%s", n.t.Name, priceString(n.t), with)
	}
	if p.value[i] == 0 {
		return fmt.Sprintf("pod triggered scale-up: a new %s node%s; its price is unknown: the instance catalog has no price for %s "+
			"and no type with a known price can serve the pod. Set priceUSDPerHour for %s in a catalog file", n.t.Name, with, n.t.Name, n.t.Name)
	}
	return fmt.Sprintf("pod triggered scale-up: the pod goes on a new %s node launched for other pending pods%s; its price is unknown: "+
		"the instance catalog has no price for %s. Set priceUSDPerHour for %s in a catalog file", n.t.Name, with, n.t.Name, n.t.Name)
}
