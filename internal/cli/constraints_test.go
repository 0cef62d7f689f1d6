package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	"sigs.k8s.io/yaml"

	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// TestCheckConstraintNoGroupIsThatLarge is the user's case: count 6 with a devicegroup4_id
// matchAttribute passed; no node has 6 devices sharing a devicegroup4_id. The template gets the
// constraint's explanation; its pod gets what the autoscaler would tell it (no node for it).
func TestCheckConstraintNoGroupIsThatLarge(t *testing.T) {
	stdout, stderr, code := run(t, "check", "-f", "testdata/check/six-in-a-group-of-four.yaml", "-o", "json")
	if code != ExitRefused {
		t.Fatalf("exit %d, want %d\n%s%s", code, ExitRefused, stdout, stderr)
	}
	var got []Finding
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Object != "ResourceClaimTemplate six-connected-neurons" || got[0].Reason != ReasonUnsatisfiableConstraint || got[0].Severity != SeverityError {
		t.Fatalf("findings %+v", got)
	}
	if got[1].Object != "Pod pod0" || got[1].Reason != "NotTriggerScaleUp" || !strings.Contains(got[1].Message, "no set of them satisfies the pod's claims (6 devices) together with their selectors and constraints") {
		t.Errorf("the pod's finding %+v, want the autoscaler's refusal", got[1])
	}
	for _, want := range []string{
		"constraints[0].matchAttribute resource.aws.com/devicegroup4_id",
		"the 6 devices of request neurons",
		"no device group is that large: at most 4 devices",
		"Request at most 4 devices, or match on resource.aws.com/devicegroup8_id (groups of 8 devices)",
	} {
		if !strings.Contains(got[0].Message, want) {
			t.Errorf("message lacks %q:\n%s", want, got[0].Message)
		}
	}
}

// claimSpec builds a v1 claim spec of one Neuron request with one constraint.
func claimSpec(t *testing.T, request, constraint string) resourcev1.ResourceClaimSpec {
	t.Helper()
	doc := fmt.Sprintf("devices:\n  requests:\n  - name: neurons\n    exactly: {deviceClassName: neuron.aws.com, %s}\n  constraints: [{requests: [neurons], %s}]\n", request, constraint)
	var spec resourcev1.ResourceClaimSpec
	if err := yaml.UnmarshalStrict([]byte(doc), &spec); err != nil {
		t.Fatalf("%v\n%s", err, doc)
	}
	return spec
}

func TestConstraintProblems(t *testing.T) {
	trn1 := `selectors: [{cel: {expression: "device.attributes['neuron.aws.com'].instanceType == 'trn1.32xlarge'"}}]`
	inf2 := `selectors: [{cel: {expression: "device.attributes['neuron.aws.com'].instanceType == 'inf2.48xlarge'"}}]`
	m := newDeviceModels(topology.DefaultCatalog())
	for _, tc := range []struct {
		name, request, constraint string
		want                      string // "" for no problem
	}{
		{"4 in a group of 4", "count: 4", "matchAttribute: resource.aws.com/devicegroup4_id", ""},
		{"8 in a group of 8", "count: 8", "matchAttribute: resource.aws.com/devicegroup8_id", ""},
		{"16 in a group of 16", "count: 16", "matchAttribute: resource.aws.com/devicegroup16_id", ""},
		{"6 in a group of 4", "count: 6", "matchAttribute: resource.aws.com/devicegroup4_id", "no device group is that large: at most 4 devices"},
		{"9 in a group of 8", "count: 9, " + trn1, "matchAttribute: resource.aws.com/devicegroup8_id", "or match on resource.aws.com/devicegroup16_id (groups of 16 devices)"},
		{"5 in a topology4 block", "count: 5, " + trn1, "matchAttribute: neuron.aws.com/topology4_id", "or match on neuron.aws.com/topology8_id"},
		{"a whole node shares its instance type", "count: 16", "matchAttribute: neuron.aws.com/instanceType", ""},
		{"the wrong domain", "count: 4", "matchAttribute: neuron.aws.com/devicegroup4_id", "no Neuron device publishes the attribute neuron.aws.com/devicegroup4_id (on the instance types the requests allow), so no set of devices meets the constraint. Did you mean resource.aws.com/devicegroup4_id?"},
		{"no domain", "count: 4", "matchAttribute: devicegroup4_id", "the name has no domain, and the API server refuses it"},
		{"all of a trn1 in a group of 4", "allocationMode: All, " + trn1, "matchAttribute: resource.aws.com/devicegroup4_id", "the devices of request neurons (allocationMode All)"},
		{"torus ids on a ring type", "count: 2, " + inf2, "matchAttribute: neuron.aws.com/topology4_id", "no Neuron device publishes the attribute"},
		{"distinct device ids", "count: 16", "distinctAttribute: neuron.aws.com/deviceId", ""},
		{"distinct blocks", "count: 5, " + trn1, "distinctAttribute: neuron.aws.com/topology4_id", "a node has at most 4 different values"},
		{"a node's own attribute", "count: 16", "matchAttribute: neuron.aws.com/networkNodeLayer1", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := m.constraintProblems(claimSpec(t, tc.request, tc.constraint))
			switch {
			case tc.want == "" && len(got) > 0:
				t.Errorf("problems %q, want none", got)
			case tc.want != "" && (len(got) != 1 || !strings.Contains(got[0], tc.want)):
				t.Errorf("problems %q, want one with %q", got, tc.want)
			}
		})
	}
}

// TestCheckExamplesHaveNoFalseErrors: the DRA examples, which the lab applies, raise no
// apiVersion or constraint error.
func TestCheckExamplesHaveNoFalseErrors(t *testing.T) {
	stdout, stderr, _ := run(t, "check", "-f", "../../examples", "-R")
	if strings.Contains(stdout, ReasonAPIVersionNotServed) || strings.Contains(stdout, ReasonUnsatisfiableConstraint) || stderr == "" {
		t.Errorf("stdout:\n%s\nstderr: %s", stdout, stderr)
	}
}
