package dra

import (
	"fmt"
	"strconv"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kube-neuron/kube-neuron/internal/neuron"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// claimBuilder builds allocated ResourceClaims: testClaim("c").Device("neurons", "node-a",
// "neurondevice0").Config(...).Obj().
type claimBuilder struct{ c *resourceapi.ResourceClaim }

func testClaim(name string) *claimBuilder {
	return &claimBuilder{c: &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name, UID: types.UID("uid-" + name)},
		Status:     resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{}},
	}}
}

func (b *claimBuilder) Device(request, pool string, devices ...string) *claimBuilder {
	for _, d := range devices {
		b.c.Status.Allocation.Devices.Results = append(b.c.Status.Allocation.Devices.Results, resourceapi.DeviceRequestAllocationResult{
			Request: request, Driver: DriverName, Pool: pool, Device: d,
		})
	}
	return b
}

// Config adds an opaque config of our driver for requests (all when none), from the claim.
func (b *claimBuilder) Config(params string, requests ...string) *claimBuilder {
	return b.config(DriverName, resourceapi.AllocationConfigSourceClaim, params, requests...)
}

func (b *claimBuilder) config(driver string, src resourceapi.AllocationConfigSource, params string, requests ...string) *claimBuilder {
	b.c.Status.Allocation.Devices.Config = append(b.c.Status.Allocation.Devices.Config, resourceapi.DeviceAllocationConfiguration{
		Source: src, Requests: requests,
		DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
			Driver: driver, Parameters: runtime.RawExtension{Raw: []byte(params)},
		}},
	})
	return b
}

func (b *claimBuilder) Obj() *resourceapi.ResourceClaim { return b.c }

// testNode simulates a node of the type and discovers it with the production sysfs reader.
func testNode(t testing.TB, name, typ string, lnc int, us *neuron.UltraServer) NodeInfo {
	t.Helper()
	it, err := topology.DefaultCatalog().Get(typ)
	if err != nil {
		t.Fatal(err)
	}
	sim, err := neuron.Simulate(neuron.SimOptions{Root: t.TempDir(), InstanceType: it, LNC: lnc, UltraServer: us, EFA: true})
	if err != nil {
		t.Fatal(err)
	}
	hw, err := (&neuron.Sysfs{Root: sim.Root()}).Discover(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	shape, err := hw.Shape(topology.DefaultCatalog())
	if err != nil {
		t.Fatal(err)
	}
	return NodeInfo{Name: name, Shape: shape, Hardware: hw, DriverVersion: Version}
}

func fmtSscanf(r string, lo, hi *int) (int, error) { return fmt.Sscanf(r, "%d-%d", lo, hi) }

func itoa(i int) string { return strconv.Itoa(i) }
