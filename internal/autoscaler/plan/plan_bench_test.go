package plan

import (
	"fmt"
	"math/rand/v2"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"

	"github.com/kube-neuron/kube-neuron/internal/testkit"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// draMix are the claim specs BenchmarkPlanDRA draws pods from, each as likely as the others: the
// seeds' templates (connected-device constraints, whole trn2 nodes, one device, all devices with
// an opaque LNC config), plain count claims that select other types, a firstAvailable claim,
// and a claim no type can serve (more devices than a trn1.32xlarge has).
func draMix(b *testing.B) []resourcev1.ResourceClaimSpec {
	out := []resourcev1.ResourceClaimSpec{
		seedTemplate(b, "1x4-connected-neurons.yaml"),
		seedTemplate(b, "l-trn2.yaml"),
		seedTemplate(b, "xl-trn2.yaml"),
		seedTemplate(b, "single-neuron-device.yaml"),
		seedTemplate(b, "all-neurons-lnc-1.yaml"),
	}
	for _, c := range []struct {
		typ    string
		counts []int64
	}{
		{"inf2.48xlarge", []int64{1, 2, 4, 6, 12}},
		{"trn1.32xlarge", []int64{1, 2, 4, 8, 16}},
		{"inf2.xlarge", []int64{1}},
		{"trn1.32xlarge", []int64{20}},
	} {
		for _, n := range c.counts {
			out = append(out, countSpec(n, instanceTypeIs(c.typ)))
		}
	}
	fa := resourcev1.DeviceRequest{Name: "neurons", FirstAvailable: []resourcev1.DeviceSubRequest{
		{Name: "whole", DeviceClassName: DeviceClass, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 16, Selectors: instanceTypeIs("trn1.32xlarge")},
		{Name: "quarter", DeviceClassName: DeviceClass, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 4, Selectors: instanceTypeIs("trn1.32xlarge")},
	}}
	return append(out, resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{fa}}})
}

func instanceTypeIs(typ string) []resourcev1.DeviceSelector {
	return []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
		Expression: fmt.Sprintf("device.attributes['%s'].instanceType == '%s'", DeviceClass, typ)}}}
}

// countSpec is a claim for n devices of the driver's class with the selectors.
func countSpec(n int64, sel []resourcev1.DeviceSelector) resourcev1.ResourceClaimSpec {
	return resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "neurons", Exactly: &resourcev1.ExactDeviceRequest{
		DeviceClassName: DeviceClass, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: n, Selectors: sel}}}}}
}

// BenchmarkPlanDRA plans a batch of pending DRA pods drawn from draMix, as the controller gives
// them to the planner (their ResourceClaims from the templates, their requests resolved by the
// same DeviceTemplates the planner places them with), and reports what BenchmarkPlan does.
func BenchmarkPlanDRA(b *testing.B) {
	specs := draMix(b)
	for _, n := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("pods=%d", n), func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, 2))
			ts := NewDeviceTemplates(nil, nil, nil)
			var pending []PodDemand
			for i := range n {
				spec := specs[r.IntN(len(specs))]
				pod := testkit.MakePod().Name(fmt.Sprintf("p%d", i)).TolerateNeuron().Obj()
				d := NewPodDemand(pod, ts.Resolve(ctxBG, DRARequestsOf(spec)))
				d.Claims = []*resourcev1.ResourceClaim{ClaimFromTemplate(pod.Namespace, pod.Name, "neurons", spec)}
				pending = append(pending, d)
			}
			opts := Options{Catalog: topology.DefaultCatalog(), Devices: ts}
			var plan ScaleUp
			var decisions []Decision
			for b.Loop() {
				plan, decisions = Plan(pending, nil, opts)
			}
			// Every pod is planned but the ones that ask for more devices than any type has.
			for i, d := range decisions {
				if hopeless := pending[i].DRA[0].Count > 16; d.Warning() != hopeless {
					b.Fatalf("pod %s (%d devices) refused: %v (%s)", d.Pod, pending[i].DRA[0].Count, d.Warning(), d.Message)
				}
			}
			b.ReportMetric(float64(len(pending))*float64(b.N)/b.Elapsed().Seconds(), "pods/s")
			if lb := lowerBound(plan, pending, topology.DefaultCatalog().Types()); lb > 0 {
				b.ReportMetric(plan.CostUSDPerHour/lb, "cost/lower-bound")
			}
		})
	}
}
