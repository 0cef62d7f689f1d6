package cli

import (
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	"sigs.k8s.io/yaml"

	"github.com/kube-neuron/kube-neuron/internal/topology"
)

func TestTopologyOutput(t *testing.T) {
	stdout, stderr, code := run(t, "topology", "--instance-type", "trn1.32xlarge", "--in-use-devices", "0-3", "--in-use-cores", "9", "-o", "json")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var r TopologyReport
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatal(err)
	}
	if r.InstanceType != "trn1.32xlarge" || r.Topology != "torus" || r.LNC != 1 || r.CoresPerDevice != 2 ||
		!reflect.DeepEqual(r.Devices, IDUsage{Total: 16, Used: []int{0, 1, 2, 3, 4}, Free: ids(5, 15)}) ||
		r.Cores.Total != 32 || len(r.Cores.Used) != 9 || !reflect.DeepEqual(r.Links[0], []int{1, 3, 4, 12}) && !reflect.DeepEqual(r.Links[0], []int{12, 3, 4, 1}) {
		t.Errorf("report %+v", r)
	}
	stdout, _, _ = run(t, "topology", "--instance-type", "inf2.48xlarge", "-o", "yaml")
	var y TopologyReport
	if err := yaml.UnmarshalStrict([]byte(stdout), &y); err != nil || y.Topology != "ring" || len(y.Links) != 12 || len(y.Devices.Used) != 0 {
		t.Errorf("-o yaml: %v %+v", err, y)
	}
	stdout, _, _ = run(t, "topology", "--instance-type", "inf1.6xlarge", "-o", "jsonpath={.links[3]}")
	if stdout != "[2]" {
		t.Errorf("-o jsonpath: %q (device 3 ends the chain: linked to 2 only)", stdout)
	}
	// Table output is unchanged.
	stdout, _, _ = run(t, "topology", "--instance-type", "inf1.6xlarge", "-o", "table")
	if !strings.Contains(stdout, " 0[....]-- 1[....]-- 2[....]-- 3[....]\n") {
		t.Errorf("table:\n%s", stdout)
	}
}

func TestDataFormatsOfOtherCommands(t *testing.T) {
	stdout, _, code := run(t, "plan", "--instance-type", "trn1.32xlarge", "--request", "aws.amazon.com/neuron=4", "-o", "jsonpath={.devices}")
	if code != ExitOK || stdout != "[0,1,2,3]" {
		t.Errorf("plan -o jsonpath: exit %d, %q", code, stdout)
	}
	stdout, _, _ = run(t, "plan", "--instance-type", "trn1.32xlarge", "--request", "aws.amazon.com/neuron=4", "-o", "yaml")
	var p PlanResult
	if err := yaml.UnmarshalStrict([]byte(stdout), &p); err != nil || !reflect.DeepEqual(p.Devices, []int{0, 1, 2, 3}) {
		t.Errorf("plan -o yaml: %v\n%s", err, stdout)
	}
	stdout, _, _ = run(t, "catalog", "-o", "jsonpath={[0].name}")
	if stdout == "" {
		t.Error("catalog -o jsonpath printed nothing")
	}
	stdout, _, code = run(t, "check", "-f", "testdata/check/six-in-a-group-of-four.yaml", "-o", "jsonpath={[*].reason}")
	if code != ExitRefused || stdout != ReasonUnsatisfiableConstraint+" NotTriggerScaleUp" {
		t.Errorf("check -o jsonpath: exit %d, %q", code, stdout)
	}
}

func FuzzParseOutput(f *testing.F) {
	for _, s := range []string{"table", "json", "jsonpath={.a}", "jsonpath={range [*]}{.name}{end}", "jsonpath={", "jsonpath=", "x=y", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		format, err := parseOutput(s, commandFormats["nodes"]...)
		if err != nil {
			if exitCode(err) != ExitUsage {
				t.Fatalf("-o %q: %v is not a usage error", s, err)
			}
			return
		}
		if format.data() {
			var sb strings.Builder
			_ = writeData(&sb, format, []NodeReport{{Name: "n", Holders: []NodeHolder{}}}, false)
		}
	})
}

// FuzzCheckManifest feeds check's manifest reader, the v1beta1 claim conversion and the
// constraint check with arbitrary documents: errors are fine, panics are not.
func FuzzCheckManifest(f *testing.F) {
	for _, file := range []string{"testdata/check/seed-002-v1beta1.yaml", "testdata/check/six-in-a-group-of-four.yaml", "testdata/check/tree/c.json"} {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(checkManifest))
	f.Add([]byte(draManifest))
	f.Add([]byte("apiVersion: resource.k8s.io/v1beta1\nkind: ResourceClaim\nspec: {devices: {requests: [{name: a, firstAvailable: []}, 3]}}\n"))
	f.Add([]byte("apiVersion: resource.k8s.io/v1beta1\nkind: ResourceClaimTemplate\nspec: 7\n"))
	f.Add([]byte(`{"kind":"List","items":[{"kind":"ResourceClaim","apiVersion":"resource.k8s.io/v1","spec":{"devices":{"requests":[{"name":"n","exactly":{"deviceClassName":"neuron.aws.com","count":5}}],"constraints":[{"distinctAttribute":"x/y"}]}}}]}`))
	models := newDeviceModels(topology.DefaultCatalog())
	f.Fuzz(func(t *testing.T, data []byte) {
		specs := claimSpecs{claims: map[string]resourcev1.ResourceClaimSpec{}, templates: map[string]resourcev1.ResourceClaimSpec{}}
		pods, err := decodeManifest("fuzz.yaml", data, &specs)
		if err != nil {
			return
		}
		for _, o := range specs.objects {
			models.constraintProblems(o.spec)
		}
		for _, p := range pods {
			specs.draRequests(p.pod)
		}
	})
}
