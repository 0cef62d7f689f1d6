package autoscaler

import (
	"slices"
	"sync"
	"time"
)

// phase is what the controller counts a node it knows as.
//
// A node this controller launches is Launching from its launch (a restarted controller: from
// the first round that lists it launching) until it has settled (registration.go: Ready,
// released and serving for settleAfterReady); it is Registered from then on, even NotReady,
// while the provider lists it. It is Deleted once this controller deleted it: because it did
// not register within the register timeout (registration.go) or because it stayed empty
// (scaledown.go). On the way the node passes conditions that the round's steps time: Serving
// (up, but still holding pods off with LaunchingTaint), Released (the taint removed), Empty,
// Cordoned.
type phase int

const (
	// phaseNone: the controller only times a condition of the node (a Node with
	// LaunchedByLabel that no listing of the provider made Launching or Registered).
	phaseNone phase = iota
	// phaseLaunching: launched, not settled. It is offered to the planner as a launching
	// node, with the pods planned onto it; it is deleted if it is not Ready within the register
	// timeout.
	phaseLaunching
	// phaseRegistered: settled. It takes pods like any node and is never launching again.
	phaseRegistered
	// phaseDeleted: deleted by this controller. The provider's listing of it is ignored (EC2
	// lists terminated instances for a while) and its name is not requested again.
	phaseDeleted
)

func (p phase) String() string {
	return [...]string{"None", "Launching", "Registered", "Deleted"}[p]
}

// nodeRecord is one node the autoscaler launched, as this controller knows it: its phase,
// what it needs while it is Launching, and its conditions.
type nodeRecord struct {
	phase phase

	// While Launching:
	since time.Time // launched, or first seen launching
	// launched is what this controller launched: it counts even while the provider does not
	// list it yet (EC2's eventual consistency).
	launched *Instance
	// added are the pods later rounds planned onto it. They count on it even when recording
	// them through the provider failed, until this controller stops.
	added []string
	// listed are the planned pods the provider listed for it this round (its annotation);
	// written is the list this controller last recorded with SetPlannedPods.
	listed, written []string

	// Conditions, each dropped when the Node is gone (zero: not so):
	// servingSince: it holds pods off with LaunchingTaint and serves Neuron hardware, since
	// when this controller has seen it so (a restarted controller waits releaseWait again).
	servingSince time.Time
	// releasedAt: when this controller removed its LaunchingTaint; it settles
	// settleAfterReady after that.
	releasedAt time.Time
	// emptySince: Ready and empty (scaledown.go), since when.
	emptySince time.Time
	// cordoned: this controller cordoned it to remove it and has neither removed nor
	// uncordoned it yet (an uncordon that failed is retried at the next round).
	cordoned bool
}

// startLaunching makes the node Launching since now; launched is the Instance this controller
// launched, nil for a node the provider lists launching.
func (r *nodeRecord) startLaunching(now time.Time, launched *Instance) {
	r.phase = phaseLaunching
	r.since, r.launched, r.added, r.listed, r.written = now, launched, nil, nil, nil
}

// to moves the node to phase p, dropping what it needed while Launching.
func (r *nodeRecord) to(p phase) {
	r.phase = p
	r.since, r.launched, r.added, r.listed, r.written = time.Time{}, nil, nil, nil, nil
}

// addPlanned adds pods planned onto a Launching node.
func (r *nodeRecord) addPlanned(pods []string) {
	for _, p := range pods {
		if !slices.Contains(r.added, p) {
			r.added = append(r.added, p)
		}
	}
}

// idle reports whether the record holds nothing: no phase and no condition.
func (r *nodeRecord) idle() bool {
	return r.phase == phaseNone && r.launched == nil && len(r.added) == 0 && r.servingSince.IsZero() && r.releasedAt.IsZero() &&
		r.emptySince.IsZero() && !r.cordoned
}

// fleet holds the record of every node this controller knows, by node name, under one lock.
// Records are made on first use and dropped once idle.
type fleet struct {
	mu    sync.Mutex
	nodes map[string]*nodeRecord
}

func newFleet() *fleet { return &fleet{nodes: map[string]*nodeRecord{}} }

// get returns a copy of the node's record (the zero record for a node it does not know).
func (f *fleet) get(name string) nodeRecord {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r := f.nodes[name]; r != nil {
		return *r
	}
	return nodeRecord{}
}

// update changes the node's record with fn, under the lock; fn must not call the fleet.
func (f *fleet) update(name string, fn func(r *nodeRecord)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.nodes[name]
	if r == nil {
		r = &nodeRecord{}
	}
	fn(r)
	if r.idle() {
		delete(f.nodes, name)
	} else {
		f.nodes[name] = r
	}
}

// each calls fn on every record, under the lock; fn must not call the fleet.
func (f *fleet) each(fn func(name string, r *nodeRecord)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for name, r := range f.nodes {
		fn(name, r)
		if r.idle() {
			delete(f.nodes, name)
		}
	}
}

// in returns the names of the nodes in phase p, sorted.
func (f *fleet) in(p phase) []string {
	var out []string
	f.each(func(name string, r *nodeRecord) {
		if r.phase == p {
			out = append(out, name)
		}
	})
	slices.Sort(out)
	return out
}

// cordoned returns the names of the nodes this controller cordoned and has neither removed nor
// uncordoned yet, sorted.
func (f *fleet) cordoned() []string {
	var out []string
	f.each(func(name string, r *nodeRecord) {
		if r.cordoned {
			out = append(out, name)
		}
	})
	slices.Sort(out)
	return out
}

// rename moves a Launching node's record to the name the provider lists it under now, with
// the pods planned onto either name. The record under the new name, if any, gives way.
func (f *fleet) rename(from, to string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.nodes[from]
	if r == nil || r.phase != phaseLaunching || r.launched == nil {
		return
	}
	if other := f.nodes[to]; other != nil && other.phase == phaseLaunching {
		r.addPlanned(other.added)
	}
	moved := *r
	launched := *r.launched
	launched.Name = to
	moved.launched = &launched
	r.to(phaseNone)
	if r.idle() {
		delete(f.nodes, from)
	}
	target := f.nodes[to]
	if target == nil {
		target = &nodeRecord{}
		f.nodes[to] = target
	}
	target.phase, target.since, target.launched, target.added, target.listed, target.written =
		moved.phase, moved.since, moved.launched, moved.added, moved.listed, moved.written
}

// forgetGone drops the conditions of the nodes that are not in present (every Node, this round).
func (f *fleet) forgetGone(present map[string]bool, drop func(r *nodeRecord)) {
	f.each(func(name string, r *nodeRecord) {
		if !present[name] {
			drop(r)
		}
	})
}
