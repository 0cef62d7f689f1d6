package plan

import (
	"context"
	"strings"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// claimSpec is a claim of one request of DeviceClass neuron.aws.com per selector expression
// (named n0, n1, ...; "" for none), with allocationMode All, and one opaque config per params
// (for all requests).
func claimSpec(exprs []string, params ...string) resourcev1.ResourceClaimSpec {
	var spec resourcev1.ResourceClaimSpec
	for i, e := range exprs {
		req := resourcev1.DeviceRequest{Name: "n" + itoa(i), Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: DeviceClass, AllocationMode: resourcev1.DeviceAllocationModeAll}}
		if e != "" {
			req.Exactly.Selectors = []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: e}}}
		}
		spec.Devices.Requests = append(spec.Devices.Requests, req)
	}
	for _, p := range params {
		spec.Devices.Config = append(spec.Devices.Config, resourcev1.DeviceClaimConfiguration{DeviceConfiguration: resourcev1.DeviceConfiguration{
			Opaque: &resourcev1.OpaqueDeviceConfiguration{Driver: DeviceClass, Parameters: runtime.RawExtension{Raw: []byte(p)}},
		}})
	}
	return spec
}

// perRequest makes config i of the claim apply to request i alone, each request one device.
func perRequest(spec resourcev1.ResourceClaimSpec) resourcev1.ResourceClaimSpec {
	for i := range spec.Devices.Config {
		spec.Devices.Config[i].Requests = []string{spec.Devices.Requests[i].Name}
		spec.Devices.Requests[i].Exactly.AllocationMode = resourcev1.DeviceAllocationModeExactCount
		spec.Devices.Requests[i].Exactly.Count = 1
	}
	return spec
}

// TestOpaqueConfigs: a claim's opaque configs are checked with the DRA driver's own code (package
// dra/opaque) against a new node of each type: a type whose driver would refuse them is no
// candidate, and with none left the pod is refused in the driver's words and nothing launches.
func TestOpaqueConfigs(t *testing.T) {
	const (
		typeIs     = "device.attributes['neuron.aws.com'].instanceType == "
		nodeDevice = "device.attributes['neuron.aws.com'].resourceType == 'neuron_node'"
		lnc1       = `{"apiVersion":"neuron.aws.com/v1","kind":"NeuronConfig","logicalNeuronCore":1}`
		lnc2       = `{"apiVersion":"neuron.aws.com/v1","kind":"NeuronConfig","logicalNeuronCore":2}`
		us4        = `{"apiVersion":"neuron.aws.com/v1alphav1","kind":"UltraServerConfig","ultraserverMode":4}`
		us3        = `{"apiVersion":"neuron.aws.com/v1","kind":"UltraServerConfig","ultraserverMode":3}`
	)
	for _, tc := range []struct {
		name string
		spec resourcev1.ResourceClaimSpec
		want string // the type launched; "" for none
		msg  string // in the refusal when want is ""
	}{
		{name: "seed 003: LNC on trn1.2xlarge, whose LNC is fixed",
			spec: claimSpec([]string{typeIs + "'trn1.2xlarge'"}, lnc1),
			msg: "the DRA driver of a new node would refuse the opaque configs of the pod's ResourceClaim: LNC value is not configurable for instance type trn1.2xlarge; " +
				"instance types whose driver accepts them: trn2.3xlarge, trn2.48xlarge, trn2u.48xlarge, trn3.48xlarge. Change the claim's selectors to one of them, or remove the config"},
		{name: "LNC on trn2.48xlarge",
			spec: claimSpec([]string{typeIs + "'trn2.48xlarge'"}, lnc1), want: "trn2.48xlarge"},
		{name: "LNC without a type: only the LNC-configurable types are candidates",
			spec: claimSpec([]string{""}, lnc1), want: "trn2.3xlarge"},
		{name: "two LNC values in one claim: the driver's message",
			spec: perRequest(claimSpec([]string{typeIs + "'trn2.48xlarge'", typeIs + "'trn2.48xlarge'"}, lnc1, lnc2)),
			msg: "the DRA driver would refuse the opaque configs of the pod's ResourceClaim on any node: the claim's configs ask for logicalNeuronCore 1 and 2: " +
				"every device of one claim runs at one LNC, so split the requests into two claims. Change the claim's config"},
		{name: "an invalid ultraserverMode",
			spec: claimSpec([]string{nodeDevice}, us3),
			msg: "the DRA driver would refuse the opaque configs of the pod's ResourceClaim on any node: " +
				"opaque config 0 (from the claim): ultraserverMode 3 is not allowed in UltraServerConfig: use 1, 2 or 4. Change the claim's config"},
		{name: "UltraServerConfig outside an UltraServer",
			spec: claimSpec([]string{typeIs + "'trn2.48xlarge'"}, us4),
			msg: "the DRA driver of a new node would refuse the opaque configs of the pod's ResourceClaim: UltraServerConfig needs a node of a Trn2 UltraServer (trn2u.48xlarge), " +
				"but a new node is a trn2.48xlarge outside any UltraServer: select devices with resourceType == 'neuron_node'; instance types whose driver accepts them: trn2u.48xlarge"},
		{name: "UltraServerConfig on the UltraServer node device",
			spec: claimSpec([]string{nodeDevice}, us4), want: "trn2u.48xlarge"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dra := NewDeviceTemplates(nil, nil, nil).Resolve(context.Background(), DRARequestsOf(tc.spec))
			d := demand(testPod("p"), dra...)
			problems := messages(Check(d, allDaemonSets))
			plan, decisions := Plan([]PodDemand{d}, nil, Options{})
			nodes := plan.New()
			if tc.want != "" {
				if len(problems) > 0 {
					t.Fatalf("Check: %q, want none", problems)
				}
				want := 1 // an UltraServer type comes as a whole UltraServer
				if it, _ := defaultCatalog.Lookup(tc.want); it.UltraServerNodes > 0 {
					want = it.UltraServerNodes
				}
				if len(nodes) != want || nodes[0].InstanceType.Name != tc.want {
					t.Fatalf("plan %+v, decisions %+v: want %d %s", nodes, decisions, want, tc.want)
				}
				return
			}
			if len(problems) != 1 || !strings.Contains(problems[0], tc.msg) {
				t.Errorf("Check: %q, want one problem with %q", problems, tc.msg)
			}
			if len(nodes) != 0 {
				t.Errorf("plan launches %+v, want nothing", nodes)
			}
			if len(decisions) != 1 || decisions[0].Reason != ReasonNotTriggerScaleUp || !strings.Contains(decisions[0].Message, tc.msg) {
				t.Errorf("decisions %+v: want NotTriggerScaleUp with %q", decisions, tc.msg)
			}
		})
	}
}
