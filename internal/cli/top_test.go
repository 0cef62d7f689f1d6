package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
)

var updateTop = flag.Bool("update-top", false, "rewrite testdata/top/*.golden with what top prints")

// fakeFetcher answers each agent pod (by name) with a testdata file's contents or an error.
type fakeFetcher struct {
	mu      sync.Mutex
	answers map[string]string // pod name -> testdata/top file, or "" for err
	errs    map[string]error
	asked   []string
}

func (f *fakeFetcher) fetchMetrics(ctx context.Context, a agentPod) ([]byte, error) {
	f.mu.Lock()
	f.asked = append(f.asked, a.Name)
	f.mu.Unlock()
	if err := f.errs[a.Name]; err != nil {
		return nil, err
	}
	if f.answers[a.Name] == "block" {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return os.ReadFile(filepath.Join("testdata", "top", f.answers[a.Name]))
}

func agent(ns, name, node, app string, phase corev1.PodPhase) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{agentNameLabel: app}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "agent", Ports: []corev1.ContainerPort{
			{Name: "healthz", ContainerPort: 51515}, {Name: agentPortName, ContainerPort: 9464}}}}},
		Status: corev1.PodStatus{Phase: phase, PodIP: "10.0.0.1"},
	}
}

// topCluster: a device-plugin agent (inf2-a), two DRA driver agents (trn1-dra with a shared
// claim, trn2-a at LNC 2 with a gone device), a pending agent and a pod that is not an agent.
func topCluster() ([]runtime.Object, *fakeFetcher) {
	pending := agent("neuron-dra-driver", "dra-pending", "trn2-b", "neuron-dra-driver", corev1.PodPending)
	pending.Status.PodIP = ""
	return []runtime.Object{
			agent("kube-system", "dp-inf2", "inf2-a", "neuron-device-plugin", corev1.PodRunning),
			agent("neuron-dra-driver", "dra-trn1", "trn1-dra", "neuron-dra-driver", corev1.PodRunning),
			agent("neuron-dra-driver", "dra-trn2", "trn2-a", "neuron-dra-driver", corev1.PodRunning),
			pending,
			agent("kube-system", "extender", "sys", "neuron-scheduler-extender", corev1.PodRunning),
		}, &fakeFetcher{answers: map[string]string{
			"dp-inf2":  "device-plugin-inf2.prom",
			"dra-trn1": "dra-shared-trn1.prom",
			"dra-trn2": "dra-lnc2-trn2.prom",
		}}
}

func runTopOn(t *testing.T, objects []runtime.Object, f metricsFetcher, to topOptions) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err = runTop(context.Background(), fake.NewClientset(objects...), f, &to, &out, &errOut)
	return out.String(), errOut.String(), err
}

func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "top", name)
	if *updateTop {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -run TestTopGolden -update-top writes it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs:\ngot:\n%s\nwant:\n%s", name, got, want)
	}
}

func TestTopGolden(t *testing.T) {
	for _, tc := range []struct {
		golden string
		opts   topOptions
	}{
		{"pods-all.golden", topOptions{what: topPods}},
		{"pods-all.json.golden", topOptions{what: topPods, output: "json"}},
		{"pods-ml.golden", topOptions{what: topPods, namespace: "ml"}},
		{"nodes.golden", topOptions{what: topNodes}},
		{"nodes.json.golden", topOptions{what: topNodes, output: "json"}},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			objs, f := topCluster()
			stdout, stderr, err := runTopOn(t, objs, f, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if want := "warning: node agent neuron-dra-driver/dra-pending (node trn2-b) is Pending: its node is not shown (kubectl describe pod -n neuron-dra-driver dra-pending)\n"; stderr != want {
				t.Errorf("stderr %q, want %q", stderr, want)
			}
			checkGolden(t, tc.golden, stdout)
		})
	}
}

func TestTopPodsJSON(t *testing.T) {
	objs, f := topCluster()
	stdout, _, err := runTopOn(t, objs, f, topOptions{what: topPods, output: "json"})
	if err != nil {
		t.Fatal(err)
	}
	var raw []map[string]any
	if err := json.Unmarshal([]byte(stdout), &raw); err != nil {
		t.Fatal(err)
	}
	fields := []string{"container", "cores", "devices", "memoryUsedBytes", "namespace", "node", "pod", "utilization"}
	for _, e := range raw {
		var keys []string
		for k := range e {
			keys = append(keys, k)
		}
		if len(keys) != len(fields) {
			t.Errorf("element %v: fields %v, want exactly %v", e, keys, fields)
		}
		for _, k := range fields {
			if _, ok := e[k]; !ok {
				t.Errorf("element %v has no %q", e, k)
			}
		}
	}
	var got []TopPod
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatal(err)
	}
	want := []TopPod{
		{Namespace: "default", Pod: "train", Container: "main", Node: "inf2-a", Devices: []int{0, 1}, Cores: ids(0, 3), MemoryUsedBytes: 8 << 30, Utilization: 0.65},
		{Namespace: "ml", Pod: "infer", Container: "a", Node: "inf2-a", Devices: []int{2}, Cores: []int{4, 5}, MemoryUsedBytes: 1 << 30, Utilization: 0.5},
		{Namespace: "ml", Pod: "infer", Container: "b", Node: "inf2-a", Devices: []int{3}, Cores: []int{6, 7}, MemoryUsedBytes: 4 << 30, Utilization: 0.5},
		// The claim's device repeats once per pod sharing it; no utilisation sample yet: 0.
		{Namespace: "ml", Pod: "shared-a", Container: "main", Node: "trn1-dra", Devices: []int{0}, Cores: []int{0, 1}, MemoryUsedBytes: 2 << 30},
		{Namespace: "ml", Pod: "shared-b", Container: "main", Node: "trn1-dra", Devices: []int{0}, Cores: []int{0, 1}, MemoryUsedBytes: 2 << 30},
		// LNC 2: four NeuronCores per device, node-wide ids.
		{Namespace: "team", Pod: "llm", Container: "server", Node: "trn2-a", Devices: []int{4, 5}, Cores: ids(16, 23), MemoryUsedBytes: 32 << 30, Utilization: 0.8},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d rows, want %d:\n%s", len(got), len(want), stdout)
	}
	for i := range want {
		g, w := got[i], want[i]
		if math.Abs(g.Utilization-w.Utilization) > 1e-9 {
			t.Errorf("row %d utilization %v, want %v", i, g.Utilization, w.Utilization)
		}
		g.Utilization = w.Utilization
		if !reflect.DeepEqual(g, w) {
			t.Errorf("row %d:\n got %+v\nwant %+v", i, g, w)
		}
	}
}

func TestTopNodesJSON(t *testing.T) {
	objs, f := topCluster()
	stdout, _, err := runTopOn(t, objs, f, topOptions{what: topNodes, output: "json"})
	if err != nil {
		t.Fatal(err)
	}
	var got []TopNode
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("%d nodes:\n%s", len(got), stdout)
	}
	inf2, trn1, trn2 := got[0], got[1], got[2]
	if inf2.Node != "inf2-a" || inf2.InstanceType != "inf2.24xlarge" || inf2.DevicesUsed != 4 || inf2.DevicesFree != 1 || inf2.DevicesUnhealthy != 1 ||
		inf2.CoresUsed != 8 || inf2.Cores != 12 || inf2.MemoryUsedBytes != 13<<30 ||
		!reflect.DeepEqual(inf2.Unhealthy, []TopUnhealthy{{Device: 5, Reason: "ecc-uncorrected"}}) {
		t.Errorf("inf2-a: %+v", inf2)
	}
	if trn1.Node != "trn1-dra" || trn1.DevicesUsed != 1 || trn1.CoresUsed != 2 || trn1.MemoryUsedBytes != 2<<30 || trn1.Utilization != 0 || len(trn1.Unhealthy) != 0 || trn1.Unhealthy == nil {
		t.Errorf("trn1-dra (a shared device counts once): %+v", trn1)
	}
	if trn2.Node != "trn2-a" || trn2.DevicesUsed != 2 || trn2.DevicesFree != 13 || trn2.DevicesUnhealthy != 1 || trn2.CoresUsed != 8 || trn2.Cores != 60 ||
		math.Abs(trn2.Utilization-0.8) > 1e-9 || !reflect.DeepEqual(trn2.Unhealthy, []TopUnhealthy{{Device: 9, Reason: "gone"}}) {
		t.Errorf("trn2-a: %+v", trn2)
	}
}

// Without neuron_node_devices (an agent that does not export it) the device counts come from the
// device series.
func TestTopNodesCountsWithoutNodeDevices(t *testing.T) {
	data, err := os.ReadFile("testdata/top/device-plugin-inf2.prom")
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.Contains(line, "neuron_node_devices") {
			kept = append(kept, line)
		}
	}
	m := newTopMetrics()
	if _, _, err := m.add([]byte(strings.Join(kept, "\n"))); err != nil {
		t.Fatal(err)
	}
	n := m.nodeRows()
	if len(n) != 1 || n[0].DevicesUsed != 4 || n[0].DevicesFree != 1 || n[0].DevicesUnhealthy != 1 {
		t.Errorf("%+v", n)
	}
}

// The agents' own metrics (neuron_device_plugin_*, ...) are not node metrics: ignored without a
// warning; a node metric series with an unreadable id is left out and counted.
func TestTopSkippedSeries(t *testing.T) {
	m := newTopMetrics()
	nodes, skipped, err := m.add([]byte(`neuron_device_plugin_allocations_total 3
neuron_dra_driver_prepared_claims{node="n"} 1
neuron_core_memory_used_bytes{node="n",neuron_device="0",neuron_core="c"} 5
neuron_core_memory_used_bytes{neuron_device="0",neuron_core="1"} 5
neuron_device_healthy{node="n",neuron_device="0",reason=""} 1
`))
	if err != nil || skipped != 2 || !reflect.DeepEqual(nodes, []string{"n"}) {
		t.Errorf("nodes %v, skipped %d, err %v", nodes, skipped, err)
	}
}

func TestTopAgentWarnings(t *testing.T) {
	objs, f := topCluster()
	f.errs = map[string]error{"dp-inf2": apierrors.NewForbidden(schema.GroupResource{Resource: "pods/proxy"}, "dp-inf2", fmt.Errorf("RBAC: access denied"))}
	f.answers["dra-trn1"] = "block"
	f.answers["dra-trn2"] = "../check/six-in-a-group-of-four.yaml" // not the text format
	objs = append(objs, agent("kube-system", "dp-inf2-b", "inf2-b", "neuron-device-plugin", corev1.PodRunning))
	f.answers["dp-inf2-b"] = "device-plugin-inf2.prom"
	stdout, stderr, err := runTopOn(t, objs, f, topOptions{what: topNodes, agentTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"warning: cannot read the metrics of node agent kube-system/dp-inf2 (node inf2-a): ",
		"your user needs get on pods/proxy in namespace kube-system",
		"warning: cannot read the metrics of node agent neuron-dra-driver/dra-trn1 (node trn1-dra): context deadline exceeded: the API server could not reach the pod's port 9464: a NetworkPolicy",
		"warning: node agent neuron-dra-driver/dra-trn2 (node trn2-a): not the Prometheus text format",
		// dp-inf2-b answers with inf2-a's metrics: it is read, but names another node.
		"warning: node agent kube-system/dp-inf2-b (node inf2-b) reports node inf2-a, not its own: check its NODE_NAME",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if !strings.HasPrefix(stdout, "NODE ") || !strings.Contains(stdout, "\ninf2-a ") || strings.Contains(stdout, "trn2-a") {
		t.Errorf("stdout:\n%s", stdout)
	}

	// None readable: an error, exit 4.
	objs, f = topCluster()
	f.errs = map[string]error{}
	for _, name := range []string{"dp-inf2", "dra-trn1", "dra-trn2"} {
		f.errs[name] = apierrors.NewServiceUnavailable("dial tcp 10.0.0.1:9464: i/o timeout")
	}
	stdout, stderr, err = runTopOn(t, objs, f, topOptions{what: topPods, output: "json"})
	if exitCode(err) != ExitCluster || stdout != "" || strings.Count(stderr, "NetworkPolicy") != 3 {
		t.Errorf("exit %d (%v), stdout %q, stderr %q", exitCode(err), err, stdout, stderr)
	}
}

func TestTopNoAgents(t *testing.T) {
	objs, f := topCluster()
	_, _, err := runTopOn(t, objs[4:], f, topOptions{what: topPods})
	if exitCode(err) != ExitNoNodes || !strings.Contains(err.Error(), "no running kube-neuron node agent found in any namespace") {
		t.Errorf("exit %d: %v", exitCode(err), err)
	}
	// --agent-namespace lists only there.
	stdout, _, err := runTopOn(t, objs, f, topOptions{what: topNodes, agentNamespaces: []string{"kube-system"}, output: "jsonpath={[*].node}"})
	if err != nil || stdout != "inf2-a" || !reflect.DeepEqual(f.asked, []string{"dp-inf2"}) {
		t.Errorf("--agent-namespace kube-system: %q, %v, asked %v", stdout, err, f.asked)
	}
}

func TestTopPodsEmptyNamespace(t *testing.T) {
	objs, f := topCluster()
	stdout, stderr, err := runTopOn(t, objs, f, topOptions{what: topPods, namespace: "nobody"})
	if err != nil || stdout != "" || !strings.Contains(stderr, "No pod holds Neuron devices or cores in namespace nobody.\n") {
		t.Errorf("%v, stdout %q, stderr %q", err, stdout, stderr)
	}
	stdout, _, err = runTopOn(t, objs, f, topOptions{what: topPods, namespace: "nobody", output: "json"})
	if err != nil || stdout != "[]\n" {
		t.Errorf("-o json: %v, %q", err, stdout)
	}
}

func TestTopCommandFlags(t *testing.T) {
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none"))
	for _, tc := range []struct {
		name     string
		args     []string
		wantCode int
		want     string
	}{
		{"nothing to show", []string{"top"}, ExitUsage, "say what to show: kubectl-neuron top pods, or kubectl-neuron top nodes"},
		{"unknown resource", []string{"top", "claims"}, ExitUsage, `top shows pods or nodes, not "claims"`},
		{"two resources", []string{"top", "pods", "nodes"}, ExitUsage, `top takes one argument, pods or nodes, not "pods nodes"`},
		{"unknown format", []string{"top", "pods", "-o", "wide"}, ExitUsage, `output format "wide" is not supported: use one of [table json yaml jsonpath=TEMPLATE]`},
		{"jsonpath without template", []string{"top", "nodes", "-o", "jsonpath"}, ExitUsage, "-o jsonpath needs a template"},
		{"nodes with -A", []string{"top", "nodes", "-A"}, ExitUsage, "-n and -A choose the pods of top pods"},
		{"nodes with -n", []string{"top", "no", "-n", "x"}, ExitUsage, "-n and -A choose the pods of top pods"},
		{"bad timeout", []string{"top", "po", "--agent-timeout", "0s"}, ExitUsage, "--agent-timeout 0s: give a positive duration"},
		{"no kubeconfig", []string{"top", "pods", "--kubeconfig", filepath.Join(t.TempDir(), "nope")}, ExitUsage, "--kubeconfig: stat"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := run(t, tc.args...)
			if code != tc.wantCode || !strings.Contains(stderr, tc.want) || stdout != "" {
				t.Errorf("exit %d (want %d), stdout %q, stderr %q (want %q)", code, tc.wantCode, stdout, stderr, tc.want)
			}
		})
	}
}

func TestHumanBytes(t *testing.T) {
	for b, want := range map[uint64]string{0: "0", 512: "512B", 1536: "1.5KiB", 8 << 30: "8GiB", 13<<30 + 300<<20: "13.3GiB", math.MaxUint64: "16EiB"} {
		if got := humanBytes(b); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", b, got, want)
		}
	}
}

// FuzzTopAgentMetrics feeds arbitrary agent answers to the parser and the aggregation: errors
// are fine; no panic, and what it prints keeps its promises (ids ascending and never null,
// utilisation 0 to 1, JSON that encodes).
func FuzzTopAgentMetrics(f *testing.F) {
	for _, name := range []string{"device-plugin-inf2.prom", "dra-shared-trn1.prom"} {
		data, err := os.ReadFile(filepath.Join("testdata", "top", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(`neuron_core_utilization_ratio{node="n",neuron_device="0",neuron_core="1",pod="p",namespace="ns",container="c"} NaN` + "\n"))
	f.Add([]byte(`neuron_core_memory_used_bytes{node="n",neuron_device="-1",neuron_core="99999999999",pod="p"} 1e300` + "\n"))
	f.Add([]byte(`neuron_node_devices{node="n",state="used"} +Inf` + "\n" + `neuron_device_healthy{node="n",neuron_device="3",reason="gone"} 0` + "\n"))
	f.Add([]byte(`neuron_core_executions_total{node="n",neuron_device="x",neuron_core="1"} 1` + "\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m := newTopMetrics()
		if _, _, err := m.add(data); err != nil {
			return
		}
		pods := m.pods("")
		for _, p := range pods {
			if p.Devices == nil || p.Cores == nil || !ascending(p.Devices) || !ascending(p.Cores) || !(p.Utilization >= 0 && p.Utilization <= 1) {
				t.Fatalf("row %+v", p)
			}
		}
		nodes := m.nodeRows()
		for _, n := range nodes {
			if n.Unhealthy == nil || !(n.Utilization >= 0 && n.Utilization <= 1) || n.CoresUsed > n.Cores {
				t.Fatalf("node %+v", n)
			}
		}
		if _, err := json.Marshal(pods); err != nil {
			t.Fatal(err)
		}
		if _, err := json.Marshal(nodes); err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		writeTopPods(&buf, pods, true)
		writeTopNodes(&buf, nodes)
	})
}

func ascending(ids []int) bool {
	for i := 1; i < len(ids); i++ {
		if ids[i] <= ids[i-1] {
			return false
		}
	}
	return true
}
