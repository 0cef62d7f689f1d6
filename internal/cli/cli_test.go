package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kube-neuron/kube-neuron/internal/fleet"
)

func run(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = Main(args, &out, &errOut)
	return out.String(), errOut.String(), code
}

func ids(lo, hi int) []int {
	out := []int{}
	for i := lo; i <= hi; i++ {
		out = append(out, i)
	}
	return out
}

// TestPlanJSON runs the rules of DESIGN section 3 through `plan -o json`.
func TestPlanJSON(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want PlanResult
	}{
		{"trn1 4 devices", []string{"--instance-type", "trn1.32xlarge", "--request", "aws.amazon.com/neuron=4"},
			PlanResult{"trn1.32xlarge", "aws.amazon.com/neuron", 4, ids(0, 3), ids(0, 7)}},
		{"trn1 8 devices next to used", []string{"--instance-type", "trn1.32xlarge", "--request", "aws.amazon.com/neuron=8", "--in-use-devices", "3"},
			PlanResult{"trn1.32xlarge", "aws.amazon.com/neuron", 8, ids(8, 15), ids(16, 31)}},
		{"neurondevice alias", []string{"--instance-type", "trn1.32xlarge", "--request", "aws.amazon.com/neurondevice=1", "--in-use-devices", "0-2"},
			PlanResult{"trn1.32xlarge", "aws.amazon.com/neurondevice", 1, []int{3}, []int{6, 7}}},
		{"seed 9 cores", []string{"--instance-type", "inf1.6xlarge", "--request", "aws.amazon.com/neuroncore=9"},
			PlanResult{"inf1.6xlarge", "aws.amazon.com/neuroncore", 9, ids(0, 2), ids(0, 8)}},
		{"3 cores on one device", []string{"--instance-type", "inf1.6xlarge", "--request", "aws.amazon.com/neuroncore=3", "--in-use-cores", "0-1"},
			PlanResult{"inf1.6xlarge", "aws.amazon.com/neuroncore", 3, []int{1}, []int{4, 5, 6}}},
		{"ring wraps", []string{"--instance-type", "inf2.48xlarge", "--request", "aws.amazon.com/neuron=3", "--in-use-devices", "2-9"},
			PlanResult{"inf2.48xlarge", "aws.amazon.com/neuron", 3, []int{0, 1, 11}, []int{0, 1, 2, 3, 22, 23}}},
		{"first-fit", []string{"--instance-type", "inf2.48xlarge", "--request", "aws.amazon.com/neuron=2", "--in-use-devices", "3,6-11", "--policy", "first-fit"},
			PlanResult{"inf2.48xlarge", "aws.amazon.com/neuron", 2, []int{0, 1}, ids(0, 3)}},
		{"best-fit smallest segment", []string{"--instance-type", "inf2.48xlarge", "--request", "aws.amazon.com/neuron=2", "--in-use-devices", "3,6-11"},
			PlanResult{"inf2.48xlarge", "aws.amazon.com/neuron", 2, []int{4, 5}, ids(8, 11)}},
		{"trn2 lnc default", []string{"--instance-type", "trn2.48xlarge", "--request", "aws.amazon.com/neuroncore=4"},
			PlanResult{"trn2.48xlarge", "aws.amazon.com/neuroncore", 4, []int{0}, ids(0, 3)}},
		{"trn2 lnc 1", []string{"--instance-type", "trn2.48xlarge", "--request", "aws.amazon.com/neuroncore=8", "--lnc", "1"},
			PlanResult{"trn2.48xlarge", "aws.amazon.com/neuroncore", 8, []int{0}, ids(0, 7)}},
		{"trn3 any count", []string{"--instance-type", "trn3.48xlarge", "--request", "aws.amazon.com/neuron=5", "--in-use-devices", "1"},
			PlanResult{"trn3.48xlarge", "aws.amazon.com/neuron", 5, []int{0, 2, 3, 4, 5}, append(ids(0, 3), ids(8, 23)...)}},
		{"all cores", []string{"--instance-type", "trn1.2xlarge", "--request", "aws.amazon.com/neuroncore=2"},
			PlanResult{"trn1.2xlarge", "aws.amazon.com/neuroncore", 2, []int{0}, []int{0, 1}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := run(t, append([]string{"plan", "-o", "json"}, tc.args...)...)
			if code != 0 || stderr != "" {
				t.Fatalf("exit %d, stderr %q", code, stderr)
			}
			var raw map[string]any
			if err := json.Unmarshal([]byte(stdout), &raw); err != nil {
				t.Fatalf("stdout is not one JSON object: %v\n%s", err, stdout)
			}
			keys := []string{}
			for k := range raw {
				keys = append(keys, k)
			}
			if len(keys) != 5 {
				t.Errorf("keys %v, want instanceType, resource, count, devices, cores", keys)
			}
			dec := json.NewDecoder(strings.NewReader(stdout))
			var got PlanResult
			if err := dec.Decode(&got); err != nil {
				t.Fatal(err)
			}
			if dec.More() {
				t.Error("more than one JSON value on stdout")
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestPlanEmptyListsAreNotNull(t *testing.T) {
	// No allocation has empty lists, but the JSON contract says never null: check the encoding.
	b, _ := json.Marshal(PlanResult{Devices: []int{}, Cores: []int{}})
	if strings.Contains(string(b), "null") {
		t.Errorf("%s", b)
	}
}

func TestPlanRefusals(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStderr string
	}{
		{"seed device message", []string{"--instance-type", "trn1.32xlarge", "--request", "aws.amazon.com/neuron=7"}, ExitRefused,
			"Instance type trn1.32xlarge does not support requests for device: 7. Please request a different number of devices.\n"},
		{"seed core message", []string{"--instance-type", "trn1.32xlarge", "--request", "aws.amazon.com/neuroncore=6"}, ExitRefused,
			"Instance type trn1.32xlarge does not support requests for core: 6. Please request a different number of cores.\n"},
		{"more than the node", []string{"--instance-type", "inf2.48xlarge", "--request", "aws.amazon.com/neuron=13"}, ExitRefused,
			"Instance type inf2.48xlarge does not support requests for device: 13."},
		{"does not fit now", []string{"--instance-type", "trn1.32xlarge", "--request", "aws.amazon.com/neuron=4", "--in-use-devices", "0,4,8,12"}, ExitRefused,
			"free devices: 1-3,5-7,9-11,13-15"},
		{"chain does not wrap", []string{"--instance-type", "inf1.6xlarge", "--request", "aws.amazon.com/neuron=2", "--in-use-devices", "1-2"}, ExitRefused,
			"free devices: 0,3"},
		{"lnc not configurable", []string{"--instance-type", "trn1.2xlarge", "--request", "aws.amazon.com/neuron=1", "--lnc", "2"}, ExitUsage,
			"LNC value is not configurable for instance type trn1.2xlarge"},
		{"unknown type", []string{"--instance-type", "p5.48xlarge", "--request", "aws.amazon.com/neuron=1"}, ExitUsage, "is not in the catalog"},
		{"missing type", []string{"--request", "aws.amazon.com/neuron=1"}, ExitUsage, "--instance-type is required"},
		{"bad resource", []string{"--instance-type", "trn1.32xlarge", "--request", "nvidia.com/gpu=1"}, ExitUsage, "is not a Neuron resource"},
		{"bad request", []string{"--instance-type", "trn1.32xlarge", "--request", "aws.amazon.com/neuron"}, ExitUsage, "write RESOURCE=N"},
		{"zero", []string{"--instance-type", "trn1.32xlarge", "--request", "aws.amazon.com/neuron=0"}, ExitUsage, "at least 1"},
		{"bad list", []string{"--instance-type", "trn1.32xlarge", "--request", "aws.amazon.com/neuron=1", "--in-use-devices", "3-1"}, ExitUsage, "--in-use-devices"},
		{"device out of range", []string{"--instance-type", "trn1.32xlarge", "--request", "aws.amazon.com/neuron=1", "--in-use-devices", "16"}, ExitUsage, "does not exist"},
		{"overlap", []string{"--instance-type", "trn1.32xlarge", "--request", "aws.amazon.com/neuron=1", "--in-use-devices", "0", "--in-use-cores", "1"}, ExitUsage, "already in use"},
		{"bad policy", []string{"--instance-type", "trn1.32xlarge", "--request", "aws.amazon.com/neuron=1", "--policy", "worst-fit"}, ExitUsage, "unknown placement policy"},
		{"bad output", []string{"--instance-type", "trn1.32xlarge", "--request", "aws.amazon.com/neuron=1", "-o", "xml"}, ExitUsage, "output format"},
		{"unknown flag", []string{"--instance", "trn1.32xlarge"}, ExitUsage, "unknown flag"},
	}
	for _, tc := range tests {
		for _, output := range []string{"json", "table"} {
			t.Run(tc.name+"/"+output, func(t *testing.T) {
				args := append([]string{"plan"}, tc.args...)
				if tc.name != "bad output" {
					args = append(args, "-o", output)
				}
				stdout, stderr, code := run(t, args...)
				if stdout != "" {
					t.Errorf("stdout %q, want nothing", stdout)
				}
				if code != tc.wantCode {
					t.Errorf("exit %d, want %d (stderr %q)", code, tc.wantCode, stderr)
				}
				if !strings.Contains(stderr, tc.wantStderr) {
					t.Errorf("stderr %q does not contain %q", stderr, tc.wantStderr)
				}
			})
		}
	}
}

func TestPlanTable(t *testing.T) {
	stdout, _, code := run(t, "plan", "--instance-type", "trn1.32xlarge", "--request", "aws.amazon.com/neuron=4", "--in-use-devices", "1")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"DEVICES        4,5,6,7", "CORES          8,9,10,11,12,13,14,15", " 4[**]-- 5[**]-- 6[**]-- 7[**]", " 1[##]"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("table does not contain %q:\n%s", want, stdout)
		}
	}
}

func TestTopology(t *testing.T) {
	stdout, _, code := run(t, "topology", "--instance-type", "trn1.32xlarge", "--in-use-devices", "0-3", "--in-use-cores", "9")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"4x4 2D torus", " 0[##]-- 1[##]-- 2[##]-- 3[##]--(row wraps)", " 4[.#]", "free devices: 5-15; free cores: 23 of 32"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("map does not contain %q:\n%s", want, stdout)
		}
	}
	stdout, _, _ = run(t, "topology", "--instance-type", "inf1.6xlarge")
	if !strings.Contains(stdout, " 0[....]-- 1[....]-- 2[....]-- 3[....]\n") || strings.Contains(stdout, "back to") {
		t.Errorf("chain map:\n%s", stdout)
	}
	stdout, _, _ = run(t, "topology", "--instance-type", "inf2.24xlarge")
	if !strings.Contains(stdout, "5[..]--(back to 0)") {
		t.Errorf("ring map:\n%s", stdout)
	}
	for _, line := range strings.Split(stdout, "\n") {
		if strings.HasSuffix(line, " ") {
			t.Errorf("trailing space in %q", line)
		}
	}
}

func TestCatalogCommand(t *testing.T) {
	stdout, _, code := run(t, "catalog", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	var types []map[string]any
	if err := json.Unmarshal([]byte(stdout), &types); err != nil || len(types) != 15 {
		t.Fatalf("%d types, %v", len(types), err)
	}
	for _, it := range types {
		if it["name"] == "trn2.48xlarge" {
			if _, ok := it["priceUSDPerHour"]; ok {
				t.Errorf("trn2.48xlarge has a price in JSON: %v", it["priceUSDPerHour"])
			}
		}
	}
	stdout, _, _ = run(t, "catalog")
	if !strings.Contains(stdout, "trn2.48xlarge") || !strings.Contains(stdout, "unknown") {
		t.Errorf("table:\n%s", stdout)
	}
	// A user catalog file adds a price.
	p := filepath.Join(t.TempDir(), "prices.yaml")
	_ = os.WriteFile(p, []byte("apiVersion: kube-neuron.io/v1\nkind: InstanceCatalog\ninstanceTypes:\n- {name: trn2.48xlarge, priceUSDPerHour: 44.7}\n"), 0o644)
	stdout, _, code = run(t, "catalog", "--catalog", p, "-o", "json")
	if code != 0 || !strings.Contains(stdout, "44.7") {
		t.Errorf("exit %d; catalog file not applied:\n%s", code, stdout)
	}
	_, stderr, code := run(t, "catalog", "--catalog", filepath.Join(t.TempDir(), "none.yaml"))
	if code != ExitUsage || !strings.Contains(stderr, "reading catalog file") {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
}

func TestSimulateCommand(t *testing.T) {
	stdout, stderr, code := run(t, "simulate", "--policy", "first-fit", "--seed", "2", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var raw map[string]any
	if err := json.Unmarshal([]byte(stdout), &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"policy", "seed", "requests", "placed", "fragmentationFailures", "allocationRatioAtFirstFailure", "meanFragmentationRatio"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("key %s missing in %s", k, stdout)
		}
	}
	var got fleet.Result
	_ = json.Unmarshal([]byte(stdout), &got)
	want, _ := fleet.Run(fleet.Defaults("first-fit", 2))
	if !reflect.DeepEqual(got, want) {
		t.Errorf("CLI %+v, engine %+v", got, want)
	}
	stdout, _, code = run(t, "simulate", "--compare", "--seeds", "1")
	if code != 0 || !strings.Contains(stdout, "FRAGMENTATION FAILURES") || !strings.Contains(stdout, "of first-fit's fragmentation failures") {
		t.Errorf("compare table:\n%s", stdout)
	}
	if _, stderr, code := run(t, "simulate", "--policy", "random"); code != ExitUsage || !strings.Contains(stderr, "unknown placement policy") {
		t.Errorf("exit %d stderr %q", code, stderr)
	}
}
