package autoscaler

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
		value: make([]float64, len(pending)), absorbed: map[string]int{},
	}
	for i, n := range launching {
		for _, d := range n.Pods {
			p.absorbed[d.id()] = i
		}
	}
	types := opts.Catalog.Types()
	sortByPrice(types)
	p.byPrice = types
	for i, d := range pending {
		for _, t := range types {
			if !d.Allows(t) || !p.sim.serves(t, d) {
				continue
			}
			if !p.familyAllowed(t) {
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
	w := 0.0
	for _, r := range d.Requests {
		if r.Resource == topology.ResourceNeuronCore {
			w += float64(r.Count) / 2
		} else {
			w += float64(r.Count)
		}
	}
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
	mode      string
	u         *topology.Usage
	pods      []placed // pods of this plan, in placement order
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
}

// run builds a plan: pack packs several pods per new node and improves the result; without it
// every pod that no launching node takes gets a node of its own.
func (p *planner) run(pack bool) *run {
	r := &run{p: p, at: make([]*node, len(p.pending)), prior: make([]bool, len(p.pending)), blocked: make([]string, len(p.pending))}
	for _, lo := range p.launching {
		r.launchN++
		t, ok := p.opts.Catalog.Lookup(lo.InstanceType)
		if !ok {
			continue // counts against the limits; cannot take pods
		}
		r.launchD += t.Devices
		sh := p.sim.shape(t)
		if sh == nil {
			continue
		}
		mode := lo.Mode
		if mode == "" {
			mode = labels.AllocationModeDevicePlugin
		}
		n := &node{name: lo.Name, launching: true, t: t, mode: mode, u: topology.NewUsage(sh)}
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
		r.nodes = append(r.nodes, n)
	}
	r.nodesCap, r.devCap = -1, -1
	if p.opts.MaxNodes > 0 {
		r.nodesCap = max(0, p.opts.MaxNodes-p.opts.Existing.Nodes-r.launchN)
	}
	if p.opts.MaxDevices > 0 {
		r.devCap = max(0, p.opts.MaxDevices-p.opts.Existing.Devices-r.launchD)
	}
	// Pods already planned onto a launching node stay there.
	for i, d := range p.pending {
		_, r.prior[i] = p.absorbed[d.id()]
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

// free reports whether pod i has no node yet.
func (r *run) free(i int) bool { return r.at[i] == nil && !r.prior[i] }

// put records the pods of n as placed there.
func (r *run) put(n *node) {
	for _, pl := range n.pods {
		r.at[pl.pod] = n
		r.blocked[pl.pod] = ""
	}
}

// compatible reports whether pod i may go on node n.
func (r *run) compatible(i int, n *node) bool {
	d := r.p.pending[i]
	if n.mode != d.Mode() || !d.Allows(n.t) {
		return false
	}
	return n.launching || r.p.familyAllowed(n.t)
}

// placeExisting puts pod i on the node of the run (launching ones only, or every one) where it
// fits tightest.
func (r *run) placeExisting(i int, launchingOnly bool) bool {
	best, bestScore := -1, math.Inf(-1)
	for k, n := range r.nodes {
		if (launchingOnly && !n.launching) || !r.compatible(i, n) {
			continue
		}
		c := n.u.Clone()
		if _, score, ok := r.p.sim.place(c, r.p.pending[i]); ok && score > bestScore {
			best, bestScore = k, score
		}
	}
	if best < 0 {
		return false
	}
	n := r.nodes[best]
	hw, _, _ := r.p.sim.place(n.u, r.p.pending[i])
	n.pods = append(n.pods, placed{pod: i, hw: hw})
	r.at[i] = n
	return true
}

func (r *run) newNodes() (count, devices int) {
	for _, n := range r.nodes {
		if !n.launching {
			count++
			devices += n.t.Devices
		}
	}
	return count, devices
}

// withinLimits reports whether the run's new nodes may change by dNodes nodes and dDevices
// devices.
func (r *run) withinLimits(dNodes, dDevices int) bool {
	n, d := r.newNodes()
	return (r.nodesCap < 0 || n+dNodes <= r.nodesCap) && (r.devCap < 0 || d+dDevices <= r.devCap)
}

// open launches a new node for pod i: the type with the lowest price per value of the pods it
// takes (pod i and, with pack, the later unplaced pods that fit beside it). Types with a known
// price come first; unknown-price types only when no priced type serves the pod.
func (r *run) open(i int, pack bool) {
	p := r.p
	cands := p.cands[i]
	if len(cands) == 0 {
		r.blocked[i] = r.noCandidate(i)
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
		r.blocked[i] = r.noCandidate(i)
		return
	}
	r.nodes = append(r.nodes, best)
	r.put(best)
}

// fill simulates a new node of type t with pod i and, with pack, the later unplaced pods that fit.
func (r *run) fill(t topology.InstanceType, i int, pack bool) *node {
	sh := r.p.sim.shape(t)
	if sh == nil {
		return nil
	}
	n := &node{t: t, mode: r.p.pending[i].Mode(), u: topology.NewUsage(sh)}
	hw, _, ok := r.p.sim.place(n.u, r.p.pending[i])
	if !ok {
		return nil
	}
	n.pods = append(n.pods, placed{pod: i, hw: hw})
	if !pack {
		return n
	}
	for _, j := range r.p.order {
		if j == i || !r.free(j) || !r.compatible(j, n) || n.u.FreeCoreCount() == 0 {
			continue
		}
		if hw, _, ok := r.p.sim.place(n.u, r.p.pending[j]); ok {
			n.pods = append(n.pods, placed{pod: j, hw: hw})
		}
	}
	return n
}

// simulate places pods on a fresh node of type t, largest first; nil when they do not all fit.
func (r *run) simulate(t topology.InstanceType, mode string, pods []int) *node {
	sh := r.p.sim.shape(t)
	if sh == nil {
		return nil
	}
	pods = slices.Clone(pods)
	r.p.sortPods(pods)
	n := &node{t: t, mode: mode, u: topology.NewUsage(sh)}
	for _, i := range pods {
		if !r.compatible(i, n) {
			return nil
		}
		hw, _, ok := r.p.sim.place(n.u, r.p.pending[i])
		if !ok {
			return nil
		}
		n.pods = append(n.pods, placed{pod: i, hw: hw})
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
	for k, n := range r.nodes {
		if n.launching {
			continue
		}
		usages := make([]*topology.Usage, len(r.nodes))
		for j, o := range r.nodes {
			usages[j] = o.u.Clone()
		}
		moves := map[int]placed{}
		target := map[int]int{}
		ok := true
		for _, i := range podsOf(n) {
			best, bestScore := -1, math.Inf(-1)
			for j, o := range r.nodes {
				if j == k || !r.compatible(i, o) {
					continue
				}
				if _, score, fits := r.p.sim.place(usages[j].Clone(), r.p.pending[i]); fits && score > bestScore {
					best, bestScore = j, score
				}
			}
			if best < 0 {
				ok = false
				break
			}
			hw, _, _ := r.p.sim.place(usages[best], r.p.pending[i])
			moves[i] = placed{pod: i, hw: hw}
			target[i] = best
		}
		if !ok {
			continue
		}
		for _, i := range podsOf(n) {
			o := r.nodes[target[i]]
			o.pods = append(o.pods, moves[i])
			r.at[i] = o
		}
		for j, o := range r.nodes {
			o.u = usages[j]
		}
		r.nodes = slices.Delete(r.nodes, k, k+1)
		return true
	}
	return false
}

// cheapest returns the cheapest priced type below the price bound (+Inf: any) that takes all the
// pods on one new node, within the limits when it replaces nodes with the given devices.
func (r *run) cheapest(pods []int, mode string, bound float64, replacedNodes, replacedDevices int) *node {
	for _, t := range r.p.byPrice {
		if !t.PriceKnown() || *t.PriceUSDPerHour >= bound-1e-9 {
			break
		}
		if !r.p.familyAllowed(t) || !r.withinLimits(1-replacedNodes, t.Devices-replacedDevices) {
			continue
		}
		if n := r.simulate(t, mode, pods); n != nil {
			return n
		}
	}
	return nil
}

// merge replaces two new nodes by one when a single node that takes both their pods is cheaper
// (or, for unknown prices, when it is of their common type).
func (r *run) merge() bool {
	for a := range r.nodes {
		for b := a + 1; b < len(r.nodes); b++ {
			na, nb := r.nodes[a], r.nodes[b]
			if na.launching || nb.launching || na.mode != nb.mode {
				continue
			}
			pods := append(podsOf(na), podsOf(nb)...)
			var m *node
			if na.t.PriceKnown() && nb.t.PriceKnown() {
				m = r.cheapest(pods, na.mode, *na.t.PriceUSDPerHour+*nb.t.PriceUSDPerHour, 2, na.t.Devices+nb.t.Devices)
			} else if na.t.Name == nb.t.Name {
				m = r.simulate(na.t, na.mode, pods)
			}
			if m == nil {
				continue
			}
			r.nodes[a] = m
			r.nodes = slices.Delete(r.nodes, b, b+1)
			r.put(m)
			return true
		}
	}
	return false
}

// downsize replaces a new node by a cheaper type that takes all its pods.
func (r *run) downsize() bool {
	for k, n := range r.nodes {
		if n.launching {
			continue
		}
		bound := math.Inf(1)
		if n.t.PriceKnown() {
			bound = *n.t.PriceUSDPerHour
		}
		m := r.cheapest(podsOf(n), n.mode, bound, 1, n.t.Devices)
		if m == nil {
			continue
		}
		r.nodes[k] = m
		r.put(m)
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

// noCandidate explains why no type may be launched for pod i, limits aside.
func (r *run) noCandidate(i int) string {
	p := r.p
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
	n, d := r.newNodes()
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
				dec.Message = r.noCandidate(i)
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
