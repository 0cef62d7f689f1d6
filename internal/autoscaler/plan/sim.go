package plan

import (
	"context"

	resourcev1 "k8s.io/api/resource/v1"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// sim simulates nodes: device plugin pods with the topology engine, DRA pods with the
// kube-scheduler's allocator over the ResourceSlices of a new node (DeviceTemplates).
type sim struct {
	cat    *topology.Catalog
	policy topology.Policy
	dra    *DeviceTemplates
	shapes map[string]*topology.Shape
	served map[servedKey]bool // serves' answers: they depend on the type and the request shape only
}

// servedKey is what serves' answer depends on: the instance type and the pod's requestShape.
type servedKey struct {
	typ, shape string
}

// newSim returns a sim; dra nil means templates learned from no node (NewDeviceTemplates).
func newSim(cat *topology.Catalog, policy topology.Policy, dra *DeviceTemplates) *sim {
	if dra == nil {
		dra = NewDeviceTemplates(cat, nil, nil)
	}
	return &sim{cat: cat, policy: policy, dra: dra, shapes: map[string]*topology.Shape{}, served: map[servedKey]bool{}}
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
	if len(d.DRA) > 0 || len(d.Claims) > 0 {
		if len(d.Requests) > 0 {
			return nil, 0, false
		}
		hw, err := s.allocate(u, d)
		if err != nil {
			return nil, 0, false
		}
		return hw, 100 * (1 - float64(u.FreeCoreCount())/float64(u.Shape().Cores())), true
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

// allocate places the pod's claims on the node whose usage is u, as the kube-scheduler would:
// a claim already allocated keeps its devices (which must be free on u), the others get what
// the structured allocator finds among u's free devices, all of them together. It marks those
// devices in use, or changes nothing and returns the reason they do not fit (errNoFit, or the
// allocator's error).
func (s *sim) allocate(u *topology.Usage, d PodDemand) ([]topology.Allocation, error) {
	var hw []topology.Allocation
	take := func(devs []int) error {
		if len(devs) == 0 {
			return nil
		}
		a, err := u.Shape().DeviceAllocation(devs)
		if err == nil {
			err = u.Allocate(a)
		}
		if err != nil {
			return errNoFit
		}
		hw = append(hw, a)
		return nil
	}
	var open []*resourcev1.ResourceClaim
	for _, c := range claimsOf(d) {
		if c.Status.Allocation != nil {
			if err := take(deviceIndices(c.Status.Allocation.Devices.Results, u.Shape().Devices())); err != nil {
				release(u, hw)
				return nil, err
			}
			continue
		}
		if c := s.dra.forTemplate(context.Background(), c, u.Shape().Type); c != nil {
			open = append(open, c)
		}
	}
	if len(open) == 0 {
		return hw, nil
	}
	got, err := s.dra.allocate(context.Background(), u.Shape().Type, u.UsedDevices(), open)
	for _, devs := range got {
		if err == nil {
			err = take(devs)
		}
	}
	if err != nil {
		release(u, hw)
		return nil, err
	}
	return hw, nil
}

func release(u *topology.Usage, hw []topology.Allocation) {
	for _, a := range hw {
		_ = u.Release(a)
	}
}

// serves reports whether an empty node of type t can take the pod (whatever its selector).
// shape is the pod's requestShape: the answer is kept under it, as the placement on a node in one
// state depends on nothing else of the pod (servingProblem asks it of every type, for every pod
// no type serves, and a DRA pod's answer comes from the allocator).
func (s *sim) serves(t topology.InstanceType, d PodDemand, shape string) bool {
	key := servedKey{t.Name, shape}
	if ok, seen := s.served[key]; seen {
		return ok
	}
	ok := false
	if sh := s.shape(t); sh != nil && coresNeeded(d, sh) <= sh.Cores() { // else it cannot fit
		_, _, ok = s.place(topology.NewUsage(sh), d)
	}
	s.served[key] = ok
	return ok
}
