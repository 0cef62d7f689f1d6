package plan

// Planning a batch of thousands of pods tries pods on nodes millions of times, and the topology
// engine (allocation.Plan, topology.Policy.Place) takes microseconds a call. Nearly all of those
// calls repeat one made before: a batch's pods share a few request shapes, many nodes are in the
// same state (an empty node of a type; a node of that type with one pod of a shape on it), and a
// node's state changes only when a pod is put on it. So:
//
//   - Where a pod goes on a node depends only on the node's type, the cores it has in use and the
//     pod's request shape: its requests' resources and counts, and its ResourceClaims' specs as
//     the allocator reads them (not its name or container names). planner.fits caches the
//     placement under that key (node.state, recomputed whenever the node's usage changes) for
//     every node of both runs, and with it the state the placement leads to (fit.then). The key
//     is the whole usage, not a hash of it, so two states never share an entry.
//   - A request shape that needs more cores than the node has free never reaches the cache or the
//     engine, and neither does a merge or downsize to a type that some pod does not allow or whose
//     cores are fewer than the pods take (node.allow, node.need).
//   - A merge of two nodes, or a downsize, that found nothing is not tried again while the nodes
//     are in the same states (node.gen, a number that changes with the usage; planner.failed),
//     and a sequence of request shapes that did not fit a type is not simulated on it again
//     (planner.misfits). merge finds the pairs whose needs fit a cheaper type through the nodes
//     sorted by need (run.mergePairs), not by trying every pair.
//   - evacuate tries a pod only on the nodes of the types and mode it may go on that have free
//     cores enough (run.shelves), placeExisting only on the nodes with free cores (run.roomy),
//     and fill walks only the pods still free that the node may take (run.freeList).
//
// None of this changes a decision: the plan is the one the search without caches finds
// (TestPlanCacheFollowsUsage compares the cached placements with the engine's, and
// TestPlanMergeAndDownsize the pruned steps with what they must find).

import (
	"encoding/binary"
	"fmt"
	"strings"

	resourcev1 "k8s.io/api/resource/v1"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// typeSet is a set of instance types, by their index in planner.byPrice.
type typeSet []uint64

func newTypeSet(n int) typeSet { return make(typeSet, (n+63)/64) }

func (s typeSet) has(i int) bool { return s[i/64]&(1<<(i%64)) != 0 }

func (s typeSet) add(i int) { s[i/64] |= 1 << (i % 64) }

// key is the set as a map key.
func (s typeSet) key() string {
	b := make([]byte, 0, 8*len(s))
	for _, w := range s {
		b = binary.LittleEndian.AppendUint64(b, w)
	}
	return string(b)
}

func (s typeSet) intersect(o typeSet) {
	for w := range s {
		s[w] &= o[w]
	}
}

// fit is where a request shape goes on a node in one state: what sim.place returns, and once a
// pod of the shape was put on a node in that state, the state that made (then).
type fit struct {
	hw    []topology.Allocation
	score float64
	ok    bool
	then  *nodeState
}

// nodeState is a node's usage and what planner.refresh keeps of it. The usage is never changed:
// a node takes its own copy.
type nodeState struct {
	u     *topology.Usage
	state string
	free  int
}

// fitKey identifies a placement: the node's state (stateKey) and the request shape.
type fitKey struct {
	state string
	req   int
}

// pairKey identifies a merge (two node states) or a downsize (one, and 0), and what the limits'
// verdicts depend on (run.limitState).
type pairKey struct {
	a, b uint64
	lim  [3]int
}

// index fills what the caches need: the type indices, each pod's mode, allowed types and request
// shape, and what each request shape takes of each type.
func (p *planner) index(pending []PodDemand) {
	types := p.byPrice
	p.typeIndex = make(map[string]int, len(types))
	p.famOK = make([]bool, len(types))
	p.cores = make([]int, len(types))
	p.empty = make([]string, len(types))
	for ti, t := range types {
		p.typeIndex[t.Name] = ti
		// UltraServer types are launched as whole UltraServers only (ultraserver.go).
		p.famOK[ti] = p.familyAllowed(t) && t.UltraServerNodes == 0
		if sh := p.sim.shape(t); sh != nil {
			p.cores[ti] = sh.Cores()
			p.empty[ti] = stateKey(ti, topology.NewUsage(sh))
		}
	}
	p.mode = make([]string, len(pending))
	p.allow = make([]typeSet, len(pending))
	p.req = make([]int, len(pending))
	shapes := map[string]int{}
	nodeLabels := map[string][]map[string]string{} // per mode, per type: NewNodeLabels, built once
	for i, d := range pending {
		p.mode[i] = d.Mode()
		lbls, ok := nodeLabels[p.mode[i]]
		if !ok {
			lbls = make([]map[string]string, len(types))
			for ti, t := range types {
				lbls[ti] = NewNodeLabels(t, p.mode[i])
			}
			nodeLabels[p.mode[i]] = lbls
		}
		p.allow[i] = newTypeSet(len(types))
		for ti, t := range types {
			if d.allows(t, lbls[ti]) {
				p.allow[i].add(ti)
			}
		}
		key := requestShape(d)
		q, ok := shapes[key]
		if !ok {
			q = len(p.reqs)
			shapes[key] = q
			p.reqs = append(p.reqs, d)
			need := make([]int, len(types))
			for ti, t := range types {
				if sh := p.sim.shape(t); sh != nil {
					need[ti] = coresNeeded(d, sh)
				}
			}
			p.need = append(p.need, need)
		}
		p.req[i] = q
	}
	p.fits = map[fitKey]fit{}
	p.failed = map[pairKey]bool{}
	p.misfits = map[string]bool{}
}

// requestShape is what sim.place reads of a pod, as a key.
func requestShape(d PodDemand) string {
	var b strings.Builder
	for _, r := range d.Requests {
		fmt.Fprintf(&b, "%s=%d;", r.Resource, r.Count)
	}
	b.WriteByte('|')
	if len(d.Claims) > 0 {
		b.WriteString(claimsKey(d))
		return b.String()
	}
	for _, r := range d.DRA {
		if r.All {
			b.WriteString("all;")
		} else {
			fmt.Fprintf(&b, "%d;", r.Count)
		}
		b.WriteString(strings.Join(r.Selectors, "&&"))
		b.WriteByte(';')
	}
	return b.String()
}

// coresNeeded is the number of cores the pod's requests take on a node of the shape, when they
// fit, at least: a core request its count, a device request all cores of its devices, a DRA All
// request the whole node, a request with alternatives the fewest cores any alternative takes
// (firstAvailableNeed).
func coresNeeded(d PodDemand, sh *topology.Shape) int {
	n := allocation.CoresNeeded(sh, d.Requests)
	for _, r := range d.DRA {
		switch {
		case r.FirstAvailable:
		case r.All:
			n += sh.Cores()
		default:
			n += sh.CoresNeeded(topology.Request{Unit: topology.UnitDevice, Count: r.Count})
		}
	}
	return n + firstAvailableNeed(d, sh)
}

// firstAvailableNeed is the number of cores the firstAvailable requests of the pod's claims take
// at least: for each, the fewest of its alternatives' ExactCount devices, as cores (none when an
// alternative asks for all devices, or for another DeviceClass: it may take no Neuron core).
// Claims already allocated count none (requestShape reads their devices, not their specs).
func firstAvailableNeed(d PodDemand, sh *topology.Shape) int {
	n := 0
	for _, c := range d.Claims {
		if c.Status.Allocation != nil {
			continue
		}
		for _, r := range c.Spec.Devices.Requests {
			if r.Exactly != nil || len(r.FirstAvailable) == 0 {
				continue
			}
			least := -1
			for _, s := range r.FirstAvailable {
				devs := 0
				if s.DeviceClassName == DeviceClass && s.AllocationMode == resourcev1.DeviceAllocationModeExactCount {
					devs = int(s.Count)
				}
				if least < 0 || devs < least {
					least = devs
				}
			}
			n += sh.CoresNeeded(topology.Request{Unit: topology.UnitDevice, Count: least})
		}
	}
	return n
}

// stateKey is the key of a node's state in planner.fits: its type, then a bit per core of the
// type, set when the core is in use.
func stateKey(ti int, u *topology.Usage) string {
	b := binary.AppendUvarint(nil, uint64(ti))
	head := len(b)
	b = append(b, make([]byte, (u.Shape().Cores()+7)/8)...)
	for _, c := range u.UsedCores() {
		b[head+c/8] |= 1 << (c % 8)
	}
	return string(b)
}

// serves reports whether an empty node of type ti takes request shape q. A shape that needs
// more cores than the type has never reaches the engine.
func (p *planner) serves(ti, q int) bool {
	if p.cores[ti] == 0 || p.need[q][ti] > p.cores[ti] {
		return false
	}
	return p.fitState(p.empty[ti], ti, 0, nil, q).ok
}

// newNode returns an empty new node of type ti (which must have a shape).
func (p *planner) newNode(ti int, mode string) *node {
	t := p.byPrice[ti]
	n := &node{t: t, ti: ti, mode: mode, u: topology.NewUsage(p.sim.shape(t)), need: make([]int, len(p.byPrice))}
	n.allow = newTypeSet(len(p.byPrice))
	for tj, ok := range p.famOK {
		if ok {
			n.allow.add(tj)
		}
	}
	p.refresh(n)
	return n
}

// copyNode returns a copy of n to try placements on: same state, own usage.
func (p *planner) copyNode(n *node) *node {
	c := *n
	c.u = n.u.Clone()
	c.pods = nil
	c.allow = append(typeSet(nil), n.allow...)
	c.need = append([]int(nil), n.need...)
	return &c
}

// refresh gives n a new state number after its usage changed.
func (p *planner) refresh(n *node) {
	p.gen++
	n.gen = p.gen
	n.state = stateKey(n.ti, n.u)
	n.free = n.u.FreeCoreCount()
}

// fitOn reports whether request shape q fits on n as it is now, and how tightly.
func (p *planner) fitOn(n *node, q int) fit {
	return p.fitState(n.state, n.ti, n.free, n.u, q)
}

// fitState is the placement of request shape q on a node of type ti in state (stateKey) with
// usage u and free cores free. u is read only when the cache does not know the answer; it may
// be nil for an empty node.
func (p *planner) fitState(state string, ti, free int, u *topology.Usage, q int) fit {
	if u != nil && p.need[q][ti] > free {
		return fit{}
	}
	key := fitKey{state, q}
	if f, ok := p.fits[key]; ok {
		return f
	}
	if u == nil {
		u = topology.NewUsage(p.sim.shape(p.byPrice[ti]))
	} else {
		u = u.Clone()
	}
	hw, score, ok := p.sim.place(u, p.reqs[q])
	f := fit{hw: hw, score: score, ok: ok}
	p.fits[key] = f
	return f
}

// add puts pod i on n, where it must fit (fitOn), as the placement cache says. The state the
// placement leads to is cached with it: a pod of the same shape put on a node in the same state
// leads to the same one, so the usage is checked and its key built once per placement, not once
// per node.
func (p *planner) add(n *node, i int) {
	q := p.req[i]
	f := p.fitState(n.state, n.ti, n.free, n.u, q)
	if !f.ok {
		panic(fmt.Sprintf("autoscaler planner: pod %s was put on a %s node where it does not fit. This is a bug in the autoscaler: please report it", p.pending[i].Key(), n.t.Name))
	}
	if f.then == nil {
		u := n.u.Clone()
		for _, a := range f.hw {
			if err := u.Allocate(a); err != nil {
				panic(fmt.Sprintf("autoscaler planner: the cached placement of pod %s on a %s node does not fit its usage (%v). This is a bug in the autoscaler: please report it", p.pending[i].Key(), n.t.Name, err))
			}
		}
		f.then = &nodeState{u: u, state: stateKey(n.ti, u), free: u.FreeCoreCount()}
		p.fits[fitKey{n.state, q}] = f
	}
	// The cached allocations are shared by every node in this state, and copied into the plan
	// (planner.result).
	n.pods = append(n.pods, placed{pod: i, hw: f.hw})
	n.allow.intersect(p.allow[i])
	for ti, c := range p.need[q] {
		n.need[ti] += c
	}
	n.u = f.then.u.Clone()
	p.gen++
	n.gen = p.gen
	n.state, n.free = f.then.state, f.then.free
}
