package plan

// This file keeps the planner as it was before plans were cached and pruned (quadratic, and slow
// beyond a few hundred pods), unchanged but for its names and for counting the improvements it
// makes (refImproved). Tests compare Plan with it: the fast planner must return the very same
// plan, so any cache or pruning that changes a decision shows.

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// Plan chooses the nodes to launch for pending pods that passed Check. Pods fill the launching
// nodes first; the others go on new nodes, packed several to a node where that is cheaper, so
// that the total hourly price is the lowest the search finds (when every pod is placed, never
// above one node of the cheapest fitting type per pod). Every pod gets a Decision, in the order
// of pending.
func refPlan(pending []PodDemand, launching []NodeOption, opts Options) (ScaleUp, []Decision, refImproved) {
	p := newRefPlanner(pending, launching, opts)
	packed := p.run(true)
	naive := p.run(false)
	best := packed
	if naive.worse(packed) < 0 {
		best = naive
	}
	plan, decisions := p.result(best)
	return plan, decisions, p.improved
}

// planner holds what every run of the search shares.
type refPlanner struct {
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
	improved  refImproved
}

// refImproved counts the improvements the packed run made: nodes evacuated, pairs merged, nodes
// downsized. Tests use it to check that their pods make the planner take every path.
type refImproved struct{ evacuated, merged, downsized int }

func newRefPlanner(pending []PodDemand, launching []NodeOption, opts Options) *refPlanner {
	if opts.Catalog == nil {
		opts.Catalog = topology.DefaultCatalog()
	}
	if opts.Policy == "" {
		opts.Policy = topology.BestFit
	}
	p := &refPlanner{
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

func (p *refPlanner) familyAllowed(t topology.InstanceType) bool {
	return len(p.opts.Families) == 0 || slices.Contains(p.opts.Families, t.Family)
}

func (p *refPlanner) unknownOnly(i int) bool {
	return len(p.cands[i]) > 0 && p.value[i] == 0 && !p.cands[i][0].PriceKnown()
}

// node is one node of a run: launching or new.
type refNode struct {
	name      string
	launching bool
	t         topology.InstanceType
	mode      string
	u         *topology.Usage
	pods      []refPlaced // pods of this plan, in placement order
}

type refPlaced struct {
	pod int // index into pending
	hw  []topology.Allocation
}

// run is one search's state.
type refRun struct {
	p        *refPlanner
	nodes    []*refNode // launching nodes first, then new ones
	at       []*refNode // per pod: the node of the run that takes it; nil for none
	prior    []bool     // per pod: already planned onto a launching node before this plan
	blocked  []string   // per pod without a node: why
	nodesCap int        // new nodes the limits allow; -1 no limit
	devCap   int        // new devices the limits allow; -1 no limit
	launchN  int        // launching nodes (counted against the limits)
	launchD  int        // their devices
}

// run builds a plan: pack packs several pods per new node and improves the result; without it
// every pod that no launching node takes gets a node of its own.
func (p *refPlanner) run(pack bool) *refRun {
	r := &refRun{p: p, at: make([]*refNode, len(p.pending)), prior: make([]bool, len(p.pending)), blocked: make([]string, len(p.pending))}
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
		n := &refNode{name: lo.Name, launching: true, t: t, mode: mode, u: topology.NewUsage(sh)}
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
		for { // r.evacuate() || r.merge() || r.downsize(), counting what each did
			if r.evacuate() {
				p.improved.evacuated++
			} else if r.merge() {
				p.improved.merged++
			} else if r.downsize() {
				p.improved.downsized++
			} else {
				break
			}
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
func (r *refRun) free(i int) bool { return r.at[i] == nil && !r.prior[i] }

// put records the pods of n as placed there.
func (r *refRun) put(n *refNode) {
	for _, pl := range n.pods {
		r.at[pl.pod] = n
		r.blocked[pl.pod] = ""
	}
}

// compatible reports whether pod i may go on node n.
func (r *refRun) compatible(i int, n *refNode) bool {
	d := r.p.pending[i]
	if n.mode != d.Mode() || !d.Allows(n.t) {
		return false
	}
	return n.launching || r.p.familyAllowed(n.t)
}

// placeExisting puts pod i on the node of the run (launching ones only, or every one) where it
// fits tightest.
func (r *refRun) placeExisting(i int, launchingOnly bool) bool {
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
	n.pods = append(n.pods, refPlaced{pod: i, hw: hw})
	r.at[i] = n
	return true
}

func (r *refRun) newNodes() (count, devices int) {
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
func (r *refRun) withinLimits(dNodes, dDevices int) bool {
	n, d := r.newNodes()
	return (r.nodesCap < 0 || n+dNodes <= r.nodesCap) && (r.devCap < 0 || d+dDevices <= r.devCap)
}

// open launches a new node for pod i: the type with the lowest price per value of the pods it
// takes (pod i and, with pack, the later unplaced pods that fit beside it). Types with a known
// price come first; unknown-price types only when no priced type serves the pod.
func (r *refRun) open(i int, pack bool) {
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
	var best *refNode
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
func (r *refRun) fill(t topology.InstanceType, i int, pack bool) *refNode {
	sh := r.p.sim.shape(t)
	if sh == nil {
		return nil
	}
	n := &refNode{t: t, mode: r.p.pending[i].Mode(), u: topology.NewUsage(sh)}
	hw, _, ok := r.p.sim.place(n.u, r.p.pending[i])
	if !ok {
		return nil
	}
	n.pods = append(n.pods, refPlaced{pod: i, hw: hw})
	if !pack {
		return n
	}
	for _, j := range r.p.order {
		if j == i || !r.free(j) || !r.compatible(j, n) || n.u.FreeCoreCount() == 0 {
			continue
		}
		if hw, _, ok := r.p.sim.place(n.u, r.p.pending[j]); ok {
			n.pods = append(n.pods, refPlaced{pod: j, hw: hw})
		}
	}
	return n
}

// simulate places pods on a fresh node of type t, largest first; nil when they do not all fit.
func (r *refRun) simulate(t topology.InstanceType, mode string, pods []int) *refNode {
	sh := r.p.sim.shape(t)
	if sh == nil {
		return nil
	}
	pods = slices.Clone(pods)
	r.p.sortPods(pods)
	n := &refNode{t: t, mode: mode, u: topology.NewUsage(sh)}
	for _, i := range pods {
		if !r.compatible(i, n) {
			return nil
		}
		hw, _, ok := r.p.sim.place(n.u, r.p.pending[i])
		if !ok {
			return nil
		}
		n.pods = append(n.pods, refPlaced{pod: i, hw: hw})
	}
	return n
}

// sortPods puts pods in the planner's order.
func (p *refPlanner) sortPods(pods []int) {
	sort.Slice(pods, func(a, b int) bool { return p.rank[pods[a]] < p.rank[pods[b]] })
}

func refPodsOf(n *refNode) []int {
	out := make([]int, len(n.pods))
	for k, pl := range n.pods {
		out[k] = pl.pod
	}
	return out
}

// evacuate removes one new node whose pods all fit on the other nodes.
func (r *refRun) evacuate() bool {
	for k, n := range r.nodes {
		if n.launching {
			continue
		}
		usages := make([]*topology.Usage, len(r.nodes))
		for j, o := range r.nodes {
			usages[j] = o.u.Clone()
		}
		moves := map[int]refPlaced{}
		target := map[int]int{}
		ok := true
		for _, i := range refPodsOf(n) {
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
			moves[i] = refPlaced{pod: i, hw: hw}
			target[i] = best
		}
		if !ok {
			continue
		}
		for _, i := range refPodsOf(n) {
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
func (r *refRun) cheapest(pods []int, mode string, bound float64, replacedNodes, replacedDevices int) *refNode {
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
func (r *refRun) merge() bool {
	for a := range r.nodes {
		for b := a + 1; b < len(r.nodes); b++ {
			na, nb := r.nodes[a], r.nodes[b]
			if na.launching || nb.launching || na.mode != nb.mode {
				continue
			}
			pods := append(refPodsOf(na), refPodsOf(nb)...)
			var m *refNode
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
func (r *refRun) downsize() bool {
	for k, n := range r.nodes {
		if n.launching {
			continue
		}
		bound := math.Inf(1)
		if n.t.PriceKnown() {
			bound = *n.t.PriceUSDPerHour
		}
		m := r.cheapest(refPodsOf(n), n.mode, bound, 1, n.t.Devices)
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
func (r *refRun) cost() (unplaced, unknown int, usd float64) {
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
func (r *refRun) worse(o *refRun) int {
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
func (r *refRun) noCandidate(i int) string {
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
func (r *refRun) limitMessage(i int) string {
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
func (p *refPlanner) result(r *refRun) (ScaleUp, []Decision) {
	var out ScaleUp
	index := map[*refNode]int{}
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

func (p *refPlanner) placedMessage(i int, n *refNode) string {
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
