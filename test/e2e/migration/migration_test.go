//go:build e2e

package migration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/cli"
	"github.com/kube-neuron/kube-neuron/internal/lab"
	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/topology"
	"github.com/kube-neuron/kube-neuron/test/e2e/framework"
)

const (
	inf2 = "inf2-a" // inf2.48xlarge: 12 devices on a ring, 24 cores
	trn1 = "trn1-a" // trn1.32xlarge: 16 devices on a 4x4 torus, 32 cores

	neuronRes = topology.ResourceNeuron
	coreRes   = topology.ResourceNeuronCore

	// publishedScheduler is a scheduler name nothing in the lab serves: the test binds the
	// published stack's pods itself, as the published extension did.
	publishedScheduler = "published-neuron-scheduler"
)

// staleMaps are usage maps the published extension left on the nodes: garbage, and wrong.
var staleMaps = map[string]string{allocation.DevUsageMap: "true,true,true", allocation.CoreUsageMap: "not,a,usage,map"}

func podSpec(scheduler, node, res string, n int) corev1.PodSpec {
	return corev1.PodSpec{
		SchedulerName: scheduler,
		NodeSelector:  map[string]string{labels.Hostname: node},
		Tolerations:   []corev1.Toleration{{Key: labels.NeuronTaintKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
		Containers: []corev1.Container{{Name: "app", Image: "my-neuron-image", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{corev1.ResourceName(res): resource.MustParse(strconv.Itoa(n))},
		}}},
	}
}

// createPublished creates a pod as the published Neuron stack left it: its ids in
// AWS_NEURON_IDS, NEURON_ALLOC_TIME an hour ago, NEURON_ALLOCATED false and no record of ours,
// bound to node with a Binding.
func createPublished(t *testing.T, ctx context.Context, ns, name, node, res string, n int, ids string, extra map[string]string) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: map[string]string{
			allocation.AWSNeuronIDs: ids,
			allocation.AllocTime:    strconv.FormatInt(time.Now().Add(-time.Hour).UnixNano(), 10),
			allocation.Allocated:    "false",
		}},
		Spec: podSpec(publishedScheduler, node, res, n),
	}
	maps.Copy(pod.Annotations, extra)
	client := framework.L.Client().CoreV1().Pods(ns)
	created, err := client.Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Bind(ctx, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: created.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: node},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// createNew creates a pod that my-scheduler places (with the extender, or as
// neuron-kube-scheduler with KUBE_NEURON_SCHEDULING=plugin), on node.
func createNew(t *testing.T, ctx context.Context, ns, name, node, res string, n int) {
	t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: podSpec(lab.CustomSchedulerName, node, res, n)}
	if _, err := framework.L.Client().CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// served waits until the pod runs and returns the cores the device plugin gave its container
// (NEURON_RT_VISIBLE_CORES, as the simulated kubelet recorded it) and the whole env.
func served(t *testing.T, ctx context.Context, ns, name string) ([]int, map[string]string) {
	t.Helper()
	var cores []int
	var env map[string]string
	framework.WaitFor(t, ctx, 60*time.Second, fmt.Sprintf("pod %s/%s to run with Neuron devices", ns, name), func(ctx context.Context) (bool, string, error) {
		pod, err := framework.L.Client().CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		if pod.Status.Phase == corev1.PodFailed {
			return false, "", fmt.Errorf("the pod failed: %s", framework.DescribePod(ctx, pod))
		}
		var got lab.PodAllocations
		if pod.Status.Phase != corev1.PodRunning || json.Unmarshal([]byte(pod.Annotations[lab.AllocationsAnnotation]), &got) != nil || len(got.Containers) != 1 {
			return false, framework.DescribePod(ctx, pod), nil
		}
		env = got.Containers[0].Env
		cores, err = topology.ParseList(env[allocation.EnvVisibleCores])
		return err == nil, fmt.Sprintf("env %v", env), nil
	})
	return cores, env
}

// holdings tracks which pod holds each core of a node, failing on a core given twice.
type holdings map[string]map[int]string

func (h holdings) add(t *testing.T, node, pod string, cores []int) {
	t.Helper()
	if h[node] == nil {
		h[node] = map[int]string{}
	}
	for _, c := range cores {
		if other, ok := h[node][c]; ok {
			t.Errorf("node %s: core %d is given to %s and to %s", node, c, other, pod)
		}
		h[node][c] = pod
	}
}

func nodesReport(t *testing.T) map[string]cli.NodeReport {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := cli.Main([]string{"nodes", "--kubeconfig", framework.L.Kubeconfig(), "-o", "json"}, &out, &errOut); code != 0 {
		t.Fatalf("kubectl-neuron nodes: exit %d: %s", code, errOut.String())
	}
	var reports []cli.NodeReport
	if err := json.Unmarshal(out.Bytes(), &reports); err != nil {
		t.Fatal(err)
	}
	byName := map[string]cli.NodeReport{}
	for _, r := range reports {
		byName[r.Name] = r
	}
	return byName
}

// waitUnschedulable waits until the scheduler reported the pod unschedulable and checks that it
// is still not bound.
func waitUnschedulable(t *testing.T, ctx context.Context, ns, name string) {
	t.Helper()
	framework.WaitFor(t, ctx, 60*time.Second, fmt.Sprintf("pod %s/%s to be refused for lack of room", ns, name), func(ctx context.Context) (bool, string, error) {
		pod, err := framework.L.Client().CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		if pod.Spec.NodeName != "" {
			return false, "", fmt.Errorf("the pod was bound to %s although its node is full: %s", pod.Spec.NodeName, framework.DescribePod(ctx, pod))
		}
		desc := framework.DescribePod(ctx, pod)
		return strings.Contains(desc, "FailedScheduling"), desc, nil
	})
}

// TestTakeOver: nodes that the published stack served, with its pods running on them (one
// bound but not admitted yet) and its stale usage maps, are taken over by my-scheduler and the
// device plugin: the published pods run on their AWS_NEURON_IDS, new pods never get their
// devices or cores, kubectl-neuron nodes shows both, and the nodes fill exactly up to what is
// free.
func TestTakeOver(t *testing.T) {
	ctx := framework.Context(t)
	ns := framework.CreateNamespace(t, ctx)
	nodes := framework.L.Client().CoreV1().Nodes()
	for _, n := range []string{inf2, trn1} {
		patch := allocation.MergePatch(allocation.StringPtrs(staleMaps))
		if _, err := nodes.Patch(ctx, n, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// The published stack's pods: 2 devices on the inf2 (HAMi's NEURON_RESOURCE_TYPE too), 4
	// cores on the trn1, and one device of the trn1 for a pod the kubelet has not admitted yet.
	begin := time.Now()
	createPublished(t, ctx, ns, "legacy-inf2", inf2, neuronRes, 2, "4,5", map[string]string{allocation.ResourceType: neuronRes})
	createPublished(t, ctx, ns, "legacy-trn1", trn1, coreRes, 4, "0,1,2,3", nil)
	createPublished(t, ctx, ns, "legacy-held", trn1, neuronRes, 1, "15", map[string]string{lab.HoldAdmissionAnnotation: "true"})
	held := holdings{}
	for _, p := range []struct {
		name, node, devices string
		cores               []int
	}{
		{"legacy-inf2", inf2, "4,5", []int{8, 9, 10, 11}},
		{"legacy-trn1", trn1, "", []int{0, 1, 2, 3}},
	} {
		cores, env := served(t, ctx, ns, p.name)
		if !slices.Equal(cores, p.cores) || env[allocation.EnvVisibleDevices] != p.devices {
			t.Errorf("%s runs on cores %v, devices %q; want its AWS_NEURON_IDS: cores %v, devices %q", p.name, cores, env[allocation.EnvVisibleDevices], p.cores, p.devices)
		}
		held.add(t, p.node, p.name, cores)
	}
	held.add(t, trn1, "legacy-held", []int{30, 31}) // device 15, promised
	t.Logf("the published pods run on their devices after %v", time.Since(begin).Round(time.Millisecond))

	// New pods through my-scheduler fill both nodes: on the trn1, devices 2-14
	// (the 4-blocks 4-7 and 8-11, and 2, 3, 12, 13, 14); on the inf2, devices 0-3 and 6-11.
	begin = time.Now()
	news := []struct {
		name, node, res string
		n               int
	}{
		{"t-4a", trn1, neuronRes, 4}, {"t-4b", trn1, neuronRes, 4}, {"t-c2", trn1, coreRes, 2},
		{"t-1a", trn1, neuronRes, 1}, {"t-1b", trn1, neuronRes, 1}, {"t-1c", trn1, neuronRes, 1}, {"t-1d", trn1, neuronRes, 1},
		{"i-4a", inf2, neuronRes, 4}, {"i-4b", inf2, neuronRes, 4}, {"i-2", inf2, neuronRes, 2},
	}
	for _, p := range news {
		createNew(t, ctx, ns, p.name, p.node, p.res, p.n)
		cores, _ := served(t, ctx, ns, p.name)
		held.add(t, p.node, p.name, cores)
	}
	t.Logf("%d new pods placed around the published pods in %v", len(news), time.Since(begin).Round(time.Millisecond))
	for node, total := range map[string]int{trn1: 32, inf2: 24} {
		if len(held[node]) != total {
			t.Errorf("node %s: %d of %d cores held: %v", node, len(held[node]), total, held[node])
		}
	}

	// Full: one more pod on each node stays Pending.
	createNew(t, ctx, ns, "t-extra", trn1, neuronRes, 1)
	createNew(t, ctx, ns, "i-extra", inf2, coreRes, 1)
	waitUnschedulable(t, ctx, ns, "t-extra")
	waitUnschedulable(t, ctx, ns, "i-extra")

	// kubectl-neuron nodes shows the published pods and the new ones, every device used.
	reports := nodesReport(t)
	for node, devices := range map[string]int{trn1: 16, inf2: 12} {
		r := reports[node]
		if len(r.Devices.Used) != devices || len(r.Devices.Free) != 0 {
			t.Errorf("kubectl-neuron nodes: %s uses devices %v, free %v; want all %d used", node, r.Devices.Used, r.Devices.Free, devices)
		}
		holders := map[string]bool{}
		for _, h := range r.Holders {
			holders[h.Pod] = true
		}
		for c, pod := range held[node] {
			if !holders[pod] {
				t.Errorf("kubectl-neuron nodes: %s does not list %s (core %d)", node, pod, c)
			}
		}
	}

	// The pod the kubelet held back is admitted now: it gets its device 15.
	if _, err := framework.L.Client().CoreV1().Pods(ns).Patch(ctx, "legacy-held", types.MergePatchType,
		allocation.MergePatch(map[string]*string{lab.HoldAdmissionAnnotation: nil}), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if cores, env := served(t, ctx, ns, "legacy-held"); !slices.Equal(cores, []int{30, 31}) || env[allocation.EnvVisibleDevices] != "15" {
		t.Errorf("legacy-held runs on cores %v, devices %q; want device 15", cores, env[allocation.EnvVisibleDevices])
	}

	// A device freed on the trn1 goes to the pod that waited for it, and only that one.
	var freed []int
	for c, pod := range held[trn1] {
		if pod == "t-1a" {
			freed = append(freed, c)
		}
	}
	slices.Sort(freed)
	if err := framework.L.Client().CoreV1().Pods(ns).Delete(ctx, "t-1a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if cores, _ := served(t, ctx, ns, "t-extra"); !slices.Equal(cores, freed) {
		t.Errorf("t-extra runs on cores %v, want the freed %v", cores, freed)
	}
	if pod, err := framework.L.Client().CoreV1().Pods(ns).Get(ctx, "i-extra", metav1.GetOptions{}); err != nil || pod.Spec.NodeName != "" {
		t.Errorf("i-extra: %v, bound to %q; the inf2 is still full", err, pod.Spec.NodeName)
	}

	// The published pods keep their annotations; serving them gave them a record of ours with
	// the same ids. The stale maps are still on the nodes, unread.
	for name, ids := range map[string]string{"legacy-inf2": "4,5", "legacy-trn1": "0,1,2,3", "legacy-held": "15"} {
		pod, err := framework.L.Client().CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rec, err := allocation.RecordOf(pod)
		if pod.Annotations[allocation.AWSNeuronIDs] != ids || err != nil || rec == nil || rec.NeuronIDs() != ids || !rec.AllServed() {
			t.Errorf("%s: AWS_NEURON_IDS %q, record %+v (%v); want %s, served", name, pod.Annotations[allocation.AWSNeuronIDs], rec, err, ids)
		}
	}
	for _, n := range []string{inf2, trn1} {
		node, err := nodes.Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range staleMaps {
			if node.Annotations[k] != v {
				t.Errorf("node %s: %s = %q, want the published extension's %q untouched", n, k, node.Annotations[k], v)
			}
		}
	}
}
