package plan

import (
	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

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
