package plan

import (
	"context"

	resourcev1 "k8s.io/api/resource/v1"

	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// firstFit answers, without running the allocator, claims of the simplest shape: a single claim
// with a single ExactCount or All request of the driver's devices, no constraint, on a type whose
// node has no UltraServer node device (no shared counters). The allocator's answer for such a
// claim is known: it walks the node's devices in their order and takes, for an ExactCount
// request, the first free ones that match, and for All every matching one, which must all be
// free. A round plans thousands of pods whose claims are mostly of this shape, and the allocator
// takes about fifty microseconds to work that out each time. ok is false for any other claim,
// or where the allocator itself would say why (a selector that fails, a DeviceClass that does
// not exist, an All request that matches nothing): allocate then runs the allocator.
// TestFirstFitIsTheAllocators compares the two.
func (ts *DeviceTemplates) firstFit(ctx context.Context, t topology.InstanceType, used []int, claims []*resourcev1.ResourceClaim) (devs [][]int, ok bool, err error) {
	if t.UltraServerNodes > 0 || len(claims) != 1 {
		return nil, false, nil
	}
	spec := claims[0].Spec.Devices
	if len(spec.Requests) != 1 || len(spec.Constraints) > 0 || spec.Requests[0].Exactly == nil {
		return nil, false, nil
	}
	r := spec.Requests[0].Exactly
	if r.AdminAccess != nil && *r.AdminAccess || r.Capacity != nil || len(r.Tolerations) > 0 {
		return nil, false, nil
	}
	if _, err := ts.classes.Get(r.DeviceClassName); err != nil {
		return nil, false, nil
	}
	m, err := ts.requestMask(ctx, t, r.DeviceClassName, r.Selectors)
	if err != nil || len(m) != t.Devices {
		return nil, false, nil
	}
	free := make([]bool, t.Devices)
	for i := range free {
		free[i] = true
	}
	for _, i := range used {
		free[i] = false
	}
	var got []int
	switch r.AllocationMode {
	case resourcev1.DeviceAllocationModeExactCount:
		for i := 0; i < t.Devices && int64(len(got)) < r.Count; i++ {
			if m[i] && free[i] {
				got = append(got, i)
			}
		}
		if int64(len(got)) < r.Count {
			return nil, true, errNoFit
		}
	case resourcev1.DeviceAllocationModeAll:
		for i := range t.Devices {
			if !m[i] {
				continue
			}
			if !free[i] {
				return nil, true, errNoFit
			}
			got = append(got, i)
		}
		if len(got) == 0 {
			return nil, false, nil
		}
	default:
		return nil, false, nil
	}
	return [][]int{got}, true, nil
}
