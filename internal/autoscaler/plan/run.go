package plan

import (
	"encoding/binary"
	"math"
	"slices"
	"sort"

	resourcev1 "k8s.io/api/resource/v1"

	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

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
	used     []int    // per reservation (reserves.list): the new nodes in it; nil for none yet
	resGen   int      // changes whenever a reservation fills up or gets room again
	// lists are, per mode and type, the pods a new node of them may take, for fill.
	lists map[listKey]*freeList
	// try is open's list of types, kept to be reused.
	try []int
	// roomy are the nodes of the run with free cores (and perhaps some filled since), in the
	// run's order, for placeExisting; nil until it needs them, and again whenever a node is
	// replaced or removed. A full node is full for good: only replace puts it back.
	roomy []*node
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
		for r.evacuate() || r.merge() || r.downsize() || r.swap() || r.relocate() {
		}
		for _, i := range p.order { // limits may have room again
			if r.free(i) && !r.placeExisting(i, false) {
				r.open(i, true)
			}
		}
	}
	return r
}

// addLaunching adds a launching node to the run, with the pods on it and those earlier plans put
// on it that still fit (pods whose claims are allocated first, on their devices, then the bound
// ones, then the planned ones); it counts against the limits even when it cannot take pods.
func (r *run) addLaunching(lo NodeOption) {
	p := r.p
	r.launchN++
	t, ok := p.opts.Catalog.Lookup(lo.InstanceType)
	if !ok {
		return // counts against the limits; cannot take pods
	}
	r.launchD += t.Devices
	ti, ok := p.typeIndex[t.Name]
	if !ok || p.sim.shape(t) == nil || lo.UltraServer != "" {
		return // an UltraServer's nodes take the pods that need one (ultraserver.go)
	}
	mode := lo.Mode
	if mode == "" {
		mode = labels.AllocationModeDevicePlugin
	}
	n := p.newNode(ti, mode)
	n.name, n.launching = lo.Name, true
	earlier := slices.Clone(lo.Pods)
	sort.SliceStable(earlier, func(a, b int) bool { return weight(earlier[a]) > weight(earlier[b]) })
	placeEarlier := func(d PodDemand) {
		if _, _, ok := p.sim.place(n.u, d); !ok {
			delete(p.absorbed, d.id()) // its room was taken: plan it again
		}
	}
	// The devices the scheduler allocated are real whether or not the pod is bound yet: they
	// are taken first, and the allocator places the other pods around them as the scheduler
	// will. A pod placed by the allocator first could take them in the simulation (8 devices
	// of a group on the devices a 4-device claim holds) and push the allocated pod off the node
	// it is bound to.
	for _, d := range lo.Bound {
		if holdsDevices(d) {
			p.sim.place(n.u, d)
		}
	}
	for _, d := range earlier {
		if holdsDevices(d) {
			placeEarlier(d)
		}
	}
	for _, d := range lo.Bound {
		if !holdsDevices(d) {
			p.sim.place(n.u, d) // real: placed before the planned ones (one that does not fit cannot be on it)
		}
	}
	for _, d := range earlier {
		if !holdsDevices(d) {
			placeEarlier(d)
		}
	}
	p.refresh(n)
	r.adopt(n)
}

// holdsDevices reports whether one of the pod's claims is allocated: it holds the devices the
// allocation names.
func holdsDevices(d PodDemand) bool {
	return slices.ContainsFunc(d.Claims, func(c *resourcev1.ResourceClaim) bool { return c.Status.Allocation != nil })
}

// free reports whether pod i has no node yet.
func (r *run) free(i int) bool { return r.at[i] == nil && !r.prior[i] }

// listKey names a freeList: the mode and type of the new nodes it is for.
type listKey struct {
	mode string
	ti   int
}

// freeList is the pods a new node of one mode and type may take (run.compatible), in the
// planner's order, and how to walk those still free without walking the placed ones: skip[k] is
// k while the pod at position k is not known to be placed, else a position at or before the
// next one that may be free (len(pods) when none). A placed pod is never free again.
type freeList struct {
	pods []int
	skip []int
}

// freeList returns the pods a new node of the mode and type may take, built on first use.
func (r *run) freeList(mode string, ti int) *freeList {
	key := listKey{mode, ti}
	if l, ok := r.lists[key]; ok {
		return l
	}
	p := r.p
	l := &freeList{}
	for _, i := range p.order {
		if p.mode[i] == mode && p.allow[i].has(ti) {
			l.pods = append(l.pods, i)
		}
	}
	l.skip = make([]int, len(l.pods)+1)
	for k := range l.skip {
		l.skip[k] = k
	}
	if r.lists == nil {
		r.lists = map[listKey]*freeList{}
	}
	r.lists[key] = l
	return l
}

// nextFree returns the position in l of the first free pod at or after position k, len(l.pods)
// when there is none.
func (r *run) nextFree(l *freeList, k int) int {
	root := k
	for {
		for l.skip[root] != root {
			root = l.skip[root]
		}
		if root == len(l.pods) || r.free(l.pods[root]) {
			break
		}
		l.skip[root] = root + 1
	}
	for k != root { // point the walked positions at the free one, so the next walk is short
		next := l.skip[k]
		l.skip[k] = root
		k = next
	}
	return root
}

// assign records pod i as placed on n.
func (r *run) assign(i int, n *node) {
	r.at[i] = n
	r.blocked[i] = ""
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
	if r.roomy != nil && n.free > 0 {
		r.roomy = append(r.roomy, n)
	}
	if !n.launching {
		r.newN++
		r.newD += n.t.Devices
		r.reserve(n, 1)
	}
}

// replace puts m in the place of the new node at k.
func (r *run) replace(k int, m *node) {
	r.newD += m.t.Devices - r.nodes[k].t.Devices
	r.reserve(r.nodes[k], -1)
	r.reserve(m, 1)
	r.nodes[k] = m
	r.roomy = nil
	r.put(m)
}

// remove deletes the new node at k.
func (r *run) remove(k int) {
	r.newN--
	r.newD -= r.nodes[k].t.Devices
	r.reserve(r.nodes[k], -1)
	r.nodes = slices.Delete(r.nodes, k, k+1)
	r.roomy = nil
}

// compatible reports whether pod i may go on node n.
func (r *run) compatible(i int, n *node) bool {
	p := r.p
	return n.mode == p.mode[i] && p.allow[i].has(n.ti) && (n.launching || p.famOK[n.ti]) && p.capacityOK(i, n.ti, n.res, n.launching)
}

// placeExisting puts pod i on the node of the run (launching ones only, or every one) where it
// fits tightest (the first in the run's order among the tightest). Only nodes with free cores
// are tried (a full node takes no pod, as fill assumes too): at thousands of pods nearly every
// node of the run is full.
func (r *run) placeExisting(i int, launchingOnly bool) bool {
	p := r.p
	q := p.req[i]
	if r.roomy == nil {
		r.roomy = make([]*node, 0, len(r.nodes))
		for _, n := range r.nodes {
			if n.free > 0 {
				r.roomy = append(r.roomy, n)
			}
		}
	}
	var best *node
	bestScore := math.Inf(-1)
	kept := r.roomy[:0] // the walk drops the nodes filled since
	for _, n := range r.roomy {
		if n.free == 0 {
			continue
		}
		kept = append(kept, n)
		if (launchingOnly && !n.launching) || !r.compatible(i, n) {
			continue
		}
		if f := p.fitOn(n, q); f.ok && f.score > bestScore {
			best, bestScore = n, f.score
		}
	}
	r.roomy = kept
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

// limitState is what the limits' verdicts depend on: nothing without limits; and which
// reservations have room (resGen).
func (r *run) limitState() [3]int {
	if r.nodesCap < 0 && r.devCap < 0 {
		return [3]int{0, 0, r.resGen}
	}
	return [3]int{r.newN, r.newD, r.resGen}
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
	if r.openReserved(i, pack) { // reserve.go: already paid for
		return
	}
	if !r.onDemandAllowed(i) {
		r.blocked[i] = r.reservationMessage(i)
		return
	}
	// The types to try, as positions in cands: those within the limits (and the pod's
	// capacity labels) with a known price, else those without one, smallest first.
	usable := func(t topology.InstanceType) bool {
		return r.withinLimits(1, t.Devices) && (p.rv == nil || p.capacityOK(i, p.typeIndex[t.Name], 0, false))
	}
	within, priced := false, false
	for _, t := range cands {
		if usable(t) {
			within, priced = true, priced || t.PriceKnown()
		}
	}
	if !within {
		r.blocked[i] = r.limitMessage(i)
		return
	}
	try := r.try[:0]
	for k, t := range cands {
		if usable(t) && t.PriceKnown() == priced {
			try = append(try, k)
		}
	}
	if !priced {
		sort.SliceStable(try, func(a, b int) bool { return cands[try[a]].Devices < cands[try[b]].Devices })
	}
	r.try = try
	var best *node
	bestRatio := math.Inf(1)
	for _, k := range try {
		t := cands[k]
		n := r.fill(t, i, pack, 0)
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
		if !pack {
			// A node of its own: the pod's value is the same on every type, so the ratio
			// grows with the price, and try is cheapest first (unknown prices: smallest
			// first, and the first is taken). No later type can do better.
			break
		}
	}
	if best == nil {
		r.blocked[i] = p.noCandidate(i)
		return
	}
	r.adopt(best)
	r.put(best)
}

// fill simulates a new node of type t, in reservation res-1 (0: on demand), with pod i and, with
// pack, the later unplaced pods that fit.
func (r *run) fill(t topology.InstanceType, i int, pack bool, res int) *node {
	p := r.p
	ti, ok := p.typeIndex[t.Name]
	if !ok || p.sim.shape(t) == nil {
		return nil
	}
	n := p.newNode(ti, p.mode[i])
	n.res = res
	if !p.fitOn(n, p.req[i]).ok {
		return nil
	}
	p.add(n, i)
	if !pack {
		return n
	}
	// Every free pod the node may take, in order, is tried once on the node as it is then. The
	// node's state changes only when one is put on it, so the placement cache answers all but the
	// first pod of each request shape between two puts.
	l := r.freeList(n.mode, ti)
	for k := r.nextFree(l, 0); k < len(l.pods) && n.free > 0; k = r.nextFree(l, k+1) {
		j := l.pods[k]
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
	// Whether the pods fit one after the other depends on their request shapes in that order
	// only: a sequence that did not fit on the type is not simulated again (improve tries many
	// pairs of nodes that hold pods of the same shapes).
	key := binary.AppendUvarint(nil, uint64(ti))
	for _, i := range pods {
		if p.mode[i] != mode || !p.allow[i].has(ti) || !p.famOK[ti] { // run.compatible with a new node
			return nil
		}
		key = binary.AppendUvarint(key, uint64(p.req[i]))
	}
	if p.misfits[string(key)] {
		return nil
	}
	n := p.newNode(ti, mode)
	for _, i := range pods {
		if !p.fitOn(n, p.req[i]).ok {
			p.misfits[string(key)] = true
			return nil
		}
		p.add(n, i)
	}
	return n
}

// cost is the run's rank: unplaced pods, then unknown-price nodes, then known price (a reserved
// node costs nothing).
func (r *run) cost() (unplaced, unknown int, usd float64) {
	for i := range r.at {
		if r.free(i) {
			unplaced++
		}
	}
	for _, n := range r.nodes {
		if n.launching || n.res > 0 {
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
	return r.slots() - o.slots() // as cheap: fewer reserved nodes leave room for later pods
}
