package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kube-neuron/kube-neuron/internal/autoscaler/plan"
)

const checkManifest = `apiVersion: apps/v1
kind: Deployment
metadata: {name: train, namespace: ml}
spec:
  selector: {matchLabels: {app: train}}
  template:
    metadata: {labels: {app: train}}
    spec:
      nodeSelector: {node.kubernetes.io/instance-type: trn2.48xlarge}
      tolerations: [{key: aws.amazon.com/neuron, operator: Exists, effect: NoSchedule}]
      containers:
      - name: main
        image: x
        resources: {limits: {aws.amazon.com/neuroncore: 128}, requests: {aws.amazon.com/neuroncore: 128}}
---
apiVersion: batch/v1
kind: Job
metadata: {name: four}
spec:
  template:
    spec:
      restartPolicy: Never
      tolerations: [{key: aws.amazon.com/neuron, operator: Exists, effect: NoSchedule}]
      containers:
      - name: main
        image: x
        resources: {limits: {aws.amazon.com/neuron: 4}}
---
apiVersion: v1
kind: Pod
metadata: {name: ok}
spec:
  schedulerName: my-scheduler
  tolerations: [{key: aws.amazon.com/neuron, operator: Exists, effect: NoSchedule}]
  containers:
  - name: main
    image: x
    resources: {limits: {aws.amazon.com/neuron: 4}}
---
apiVersion: v1
kind: Service
metadata: {name: ignored}
spec: {ports: [{port: 80}]}
---
apiVersion: v1
kind: Pod
metadata: {name: plain}
spec:
  containers: [{name: main, image: x}]
`

const draManifest = `apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: seventeen}
spec:
  spec:
    devices:
      requests:
      - name: n
        exactly: {deviceClassName: neuron.aws.com, count: 17, selectors: [{cel: {expression: "device.attributes['neuron.aws.com'].instanceType == 'trn1.32xlarge'"}}]}
---
apiVersion: v1
kind: Pod
metadata: {name: dra}
spec:
  tolerations: [{key: aws.amazon.com/neuron, operator: Exists, effect: NoSchedule}]
  resourceClaims: [{name: n, resourceClaimTemplateName: seventeen}]
  containers: [{name: main, image: x, resources: {claims: [{name: n}]}}]
`

func writeManifest(t *testing.T, name, data string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestCheck(t *testing.T) {
	file := writeManifest(t, "workloads.yaml", checkManifest)
	out, errOut, code := run(t, "check", "-f", file, "-o", "json")
	if code != ExitRefused || errOut != "error: 1 Neuron problem would not get a node: see the errors above\n" {
		t.Fatalf("exit %d, stderr %q, want 1 for the Deployment's error", code, errOut)
	}
	var got []Finding
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	want := []struct{ object, severity, reason, message string }{
		{"Deployment ml/train", SeverityError, plan.ReasonNotTriggerScaleUp,
			"instance type trn2.48xlarge accepts aws.amazon.com/neuroncore requests of 1 to 4, 16, 32 or 64 cores, not 128"},
		{"Deployment ml/train", SeverityWarning, plan.ReasonKarpenterNeuronCoreMismatch,
			"container main requests aws.amazon.com/neuroncore: 128. Karpenter advertises 128 neuroncores on trn2.48xlarge"},
		{"Job four", SeverityWarning, plan.ReasonTopologyChecksSkipped,
			"container main requests aws.amazon.com/neuron: 4 (4 devices) but the pod's schedulerName is default-scheduler, not my-scheduler"},
	}
	if len(got) != len(want) {
		t.Fatalf("findings %+v, want %d", got, len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.Object != w.object || g.File != file || g.Severity != w.severity || g.Reason != w.reason || !strings.HasPrefix(g.Message, w.message) {
			t.Errorf("finding %d: %+v\nwant %s %s %s %q...", i, g, w.object, w.severity, w.reason, w.message)
		}
	}

	// The extender on the default scheduler: the Job is fine, the pod naming my-scheduler is not.
	out, _, code = run(t, "check", "-f", file, "--scheduler-name", "default-scheduler")
	if code != ExitRefused {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	if !strings.Contains(out, "Pod ok ("+file+"): warning TopologyChecksSkipped: container main requests aws.amazon.com/neuron: 4 (4 devices) but the pod's schedulerName is my-scheduler, not default-scheduler") ||
		strings.Contains(out, "Job four") || !strings.HasSuffix(out, "3 Neuron pods checked: 1 error, 2 warnings\n") {
		t.Errorf("table output:\n%s", out)
	}
}

func TestCheckErrors(t *testing.T) {
	dra := writeManifest(t, "dra.yaml", draManifest)
	noToleration := writeManifest(t, "pod.json", `{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"containers":[{"name":"c","image":"x","resources":{"limits":{"aws.amazon.com/neuron":"1"}}}]}}]}`)
	out, errOut, code := run(t, "check", "-f", dra, "-f", noToleration)
	if code != ExitRefused {
		t.Fatalf("exit %d, want %d\n%s%s", code, ExitRefused, out, errOut)
	}
	for _, want := range []string{
		"Pod dra (" + dra + "): error NotTriggerScaleUp: instance type trn1.32xlarge has 16 Neuron devices, too few for the pod's claims (17 devices)",
		"Pod p (" + noToleration + "): error NotTriggerScaleUp: the pod does not tolerate the taint aws.amazon.com/neuron=true:NoSchedule",
		"2 Neuron pods checked: 2 errors, 0 warnings",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if errOut != "error: 2 Neuron problems would not get a node: see the errors above\n" {
		t.Errorf("stderr %q", errOut)
	}
}

func TestCheckUsage(t *testing.T) {
	bad := writeManifest(t, "bad.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: 3}\n")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"check"}, "name the manifests to check with -f FILE"},
		{[]string{"check", "-f", "/nonexistent.yaml"}, "/nonexistent.yaml"},
		{[]string{"check", "-f", bad}, "bad.yaml: Pod p:"},
		{[]string{"check", "-f", bad, "-o", "xml"}, `output format "xml" is not supported`},
	} {
		_, errOut, code := run(t, tc.args...)
		if code != ExitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d %q, want %d with %q", tc.args, code, errOut, ExitUsage, tc.want)
		}
	}
}

// TestCheckDRAExamples: the seeds' DRA examples, checked offline with the DRA driver's own
// validation of their opaque configs: seed 003's LNC claim on trn1.2xlarge gets the driver's
// message (the node would be launched for nothing: its prepare fails), the others no problem.
func TestCheckDRAExamples(t *testing.T) {
	dir := filepath.Join("..", "..", "examples", "dra")
	lnc := filepath.Join(dir, "lnc-1-trn1.yaml")
	out, errOut, code := run(t, "check", "-f", lnc)
	want := "Pod pod-lnc-1-trn1 (" + lnc + "): error NotTriggerScaleUp: the DRA driver of a new node would refuse the opaque configs of the pod's ResourceClaim: " +
		"LNC value is not configurable for instance type trn1.2xlarge; instance types whose driver accepts them: "
	if code != ExitRefused || !strings.Contains(out, want) || !strings.HasSuffix(out, "1 Neuron pod checked: 1 error, 0 warnings\n") {
		t.Errorf("exit %d, stdout:\n%s\nstderr: %s\nwant exit %d with %q", code, out, errOut, ExitRefused, want)
	}
	for _, f := range []string{"all-neurons-lnc-1.yaml", "lnc-neurons.yaml", "us-4-node-config.yaml"} {
		out, errOut, code := run(t, "check", "-f", filepath.Join(dir, f))
		if code != 0 || !strings.HasSuffix(out, "Neuron pod checked: 0 errors, 0 warnings\n") {
			t.Errorf("%s: exit %d, stdout:\n%s\nstderr: %s\nwant no problem", f, code, out, errOut)
		}
	}
}
