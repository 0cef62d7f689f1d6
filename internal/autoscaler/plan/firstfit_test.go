package plan

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"

	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// TestFirstFitIsTheAllocators: for the claims firstFit answers, its answer (which devices, or no
// fit) is the allocator's (where enoughDevices lets it run), on random types, devices in use, counts, modes and selectors.
func TestFirstFitIsTheAllocators(t *testing.T) {
	ts := NewDeviceTemplates(nil, nil, nil)
	var types []topology.InstanceType
	for _, it := range topology.DefaultCatalog().Types() {
		if it.UltraServerNodes == 0 {
			types = append(types, it)
		}
	}
	selectors := []string{"", "device.attributes['neuron.aws.com'].deviceId >= 2", "device.attributes['neuron.aws.com'].deviceId % 2 == 0",
		"device.attributes['neuron.aws.com'].instanceType == 'trn1.32xlarge'", "device.capacity['neuron.aws.com'].memory.compareTo(quantity('32Gi')) >= 0"}
	answered := 0
	for seed := range uint64(400) {
		r := rand.New(rand.NewPCG(seed, 41))
		it := types[r.IntN(len(types))]
		var used []int
		for i := range it.Devices {
			if r.IntN(3) == 0 {
				used = append(used, i)
			}
		}
		req := resourcev1.ExactDeviceRequest{DeviceClassName: DeviceClass, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: int64(1 + r.IntN(it.Devices+1))}
		if r.IntN(4) == 0 {
			req.AllocationMode, req.Count = resourcev1.DeviceAllocationModeAll, 0
		}
		if e := selectors[r.IntN(len(selectors))]; e != "" {
			req.Selectors = []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: e}}}
		}
		claims := []*resourcev1.ResourceClaim{{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "r", Exactly: &req}}}}}}
		claims[0].Name = fmt.Sprint("c", seed)
		got, ok, gotErr := ts.firstFit(ctxBG, it, used, claims)
		if !ok {
			continue
		}
		answered++
		// Where the counts are not enough the allocator tries every order of the devices before
		// it says so (enoughDevices answers those, TestEnoughDevices); it runs on the others.
		var want [][]int
		wantErr := error(errNoFit)
		if ts.enoughDevices(ctxBG, it, used, claims) {
			want, wantErr = ts.runAllocator(ctxBG, it, ts.nodeTemplate(it), used, claims)
		}
		if (gotErr == nil) != (wantErr == nil) || !slices.EqualFunc(got, want, slices.Equal) {
			t.Errorf("seed %d: %s, used %v, %s %d %v: firstFit %v (%v), the allocator %v (%v)", seed, it.Name, used, req.AllocationMode, req.Count, req.Selectors, got, gotErr, want, wantErr)
		}
	}
	if answered < 300 {
		t.Errorf("firstFit answered %d of 400 claims of its shape", answered)
	}
}
