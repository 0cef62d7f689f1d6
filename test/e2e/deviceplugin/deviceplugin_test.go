//go:build e2e

package deviceplugin

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
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
	"github.com/kube-neuron/kube-neuron/internal/deviceplugin"
	"github.com/kube-neuron/kube-neuron/internal/lab"
	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/neuron"
	"github.com/kube-neuron/kube-neuron/internal/topology"
	"github.com/kube-neuron/kube-neuron/test/e2e/framework"
)

const (
	neuronRes = topology.ResourceNeuron
	deviceRes = topology.ResourceNeuronDevice
	coreRes   = topology.ResourceNeuronCore
)

func allocatable(t *testing.T, ctx context.Context, node string) map[string]int64 {
	t.Helper()
	n, err := framework.L.Client().CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, r := range topology.Resources {
		q := n.Status.Allocatable[corev1.ResourceName(r)]
		out[r] = q.Value()
	}
	return out
}

// waitAllocatable waits for the node's allocatable; a change reaches the node's status at its
// next status update (every 10 s, as a kubelet's).
func waitAllocatable(t *testing.T, ctx context.Context, node string, want map[string]int64) {
	t.Helper()
	framework.WaitFor(t, ctx, 30*time.Second, fmt.Sprintf("node %s allocatable %v", node, want), func(ctx context.Context) (bool, string, error) {
		got := allocatable(t, ctx, node)
		for k, v := range want {
			if got[k] != v {
				return false, fmt.Sprint(got), nil
			}
		}
		return true, fmt.Sprint(got), nil
	})
}

// podSpec is a test pod: containers by name with their Neuron requests.
type podSpec struct {
	name, node string
	containers []ctr
	record     *allocation.Record
	allocTime  int64
	hold       bool
}

type ctr struct {
	name     string
	resource string
	count    int
}

func createPod(t *testing.T, ctx context.Context, ns string, s podSpec) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: ns, Annotations: map[string]string{}},
		Spec: corev1.PodSpec{
			Tolerations: []corev1.Toleration{{Key: labels.NeuronTaintKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
		},
	}
	for _, c := range s.containers {
		pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: c.name, Image: "my-neuron-image", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{corev1.ResourceName(c.resource): resource.MustParse(strconv.Itoa(c.count))},
		}})
	}
	if s.record != nil {
		// What the scheduler extender writes at bind, then binds the pod.
		for k, v := range s.record.Annotations() {
			pod.Annotations[k] = v
		}
		pod.Annotations[allocation.AllocTime] = strconv.FormatInt(s.allocTime, 10)
		pod.Spec.NodeName = s.node
	} else if s.node != "" {
		pod.Spec.NodeSelector = map[string]string{labels.Hostname: s.node}
	}
	if s.hold {
		pod.Annotations[lab.HoldAdmissionAnnotation] = "true"
	}
	if _, err := framework.L.Client().CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func release(t *testing.T, ctx context.Context, ns, name string) {
	t.Helper()
	patch := allocation.MergePatch(map[string]*string{lab.HoldAdmissionAnnotation: nil})
	if _, err := framework.L.Client().CoreV1().Pods(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

func allocations(t *testing.T, pod *corev1.Pod) lab.PodAllocations {
	t.Helper()
	var a lab.PodAllocations
	if err := json.Unmarshal([]byte(pod.Annotations[lab.AllocationsAnnotation]), &a); err != nil {
		t.Fatalf("pod %s: the simulated kubelet recorded no allocation: %v", pod.Name, err)
	}
	return a
}

// running returns, per container, the devices and cores the container runs with, from the env
// and device specs the plugin gave it, as the simulated kubelet recorded them.
func running(t *testing.T, pod *corev1.Pod) map[string][2][]int {
	t.Helper()
	out := map[string][2][]int{}
	for _, c := range allocations(t, pod).Containers {
		cores, err := topology.ParseList(c.Env[allocation.EnvVisibleCores])
		if err != nil {
			t.Fatalf("pod %s container %s: %s=%q: %v", pod.Name, c.Name, allocation.EnvVisibleCores, c.Env[allocation.EnvVisibleCores], err)
		}
		var devices []int
		for _, r := range c.Resources {
			for _, d := range r.Devices {
				n, err := strconv.Atoi(strings.TrimPrefix(d, "/dev/neuron"))
				if err != nil {
					t.Fatalf("device spec %s", d)
				}
				devices = append(devices, n)
			}
		}
		slices.Sort(devices)
		out[c.Name] = [2][]int{devices, cores}
	}
	return out
}

func shapeOf(t *testing.T, node string) *topology.Shape {
	t.Helper()
	spec := framework.L.Simulator().Node(node).Spec
	s, err := topology.NewShape(spec.InstanceType, spec.LNC)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestAdvertisedResources checks what seed 000's custom-columns commands show.
func TestAdvertisedResources(t *testing.T) {
	ctx := framework.Context(t)
	for node, want := range map[string]map[string]int64{
		"inf2-a": {neuronRes: 12, deviceRes: 12, coreRes: 24},
		"trn1-a": {neuronRes: 16, deviceRes: 16, coreRes: 32},
		"trn2-a": {neuronRes: 16, deviceRes: 16, coreRes: 64},
	} {
		waitAllocatable(t, ctx, node, want)
	}
}

// TestSeedWorkloads applies the seed 000 workloads and the two-container pod from examples/.
func TestSeedWorkloads(t *testing.T) {
	ctx := framework.Context(t)
	ns := framework.CreateNamespace(t, ctx)
	files, _ := filepath.Glob(filepath.Join(repo(t), "examples", "device-plugin", "*.yaml"))
	if len(files) < 4 {
		t.Fatalf("examples/device-plugin has %d files", len(files))
	}
	for _, f := range files {
		framework.Apply(t, ctx, f, ns)
	}
	want := map[string]map[string]ctr{
		"one-device":     {"neuron-workload": {resource: neuronRes, count: 1}},
		"two-cores":      {"neuron-workload": {resource: coreRes, count: 2}},
		"eight-cores":    {"neuron-workload": {resource: coreRes, count: 8}},
		"two-containers": {"server": {resource: neuronRes, count: 1}, "sidecar": {resource: neuronRes, count: 1}},
	}
	for name, containers := range want {
		pod := framework.WaitForPod(t, ctx, ns, name, corev1.PodRunning, 60*time.Second)
		shape := shapeOf(t, pod.Spec.NodeName)
		got := running(t, pod)
		var all []int
		for cname, c := range containers {
			r, ok := got[cname]
			if !ok {
				t.Fatalf("%s: container %s got nothing (%v)", name, cname, got)
			}
			devices, cores := r[0], r[1]
			if c.resource == coreRes && len(cores) != c.count || c.resource == neuronRes && len(devices) != c.count {
				t.Errorf("%s/%s on %s: devices %v cores %v for %d %s", name, cname, pod.Spec.NodeName, devices, cores, c.count, c.resource)
			}
			if !shape.IsValidDeviceSet(devices) {
				t.Errorf("%s/%s: devices %v are not a valid connected set on %s", name, cname, devices, shape.Type.Name)
			}
			for _, core := range cores {
				if !slices.Contains(devices, shape.DeviceOf(core)) {
					t.Errorf("%s/%s: core %d is not on its devices %v", name, cname, core, devices)
				}
			}
			if c.resource == neuronRes && allocations(t, pod).Containers[0].Env[allocation.EnvVisibleDevices] == "" {
				t.Errorf("%s: no %s for a device request", name, allocation.EnvVisibleDevices)
			}
			all = append(all, cores...)
		}
		if len(slices.Compact(slices.Sorted(slices.Values(all)))) != len(all) {
			t.Errorf("%s: containers share cores: %v", name, got)
		}
		// Served from the kubelet's ids, the pod gets a record too, so the extender counts it.
		framework.WaitFor(t, ctx, 10*time.Second, "pod "+name+" to carry a record of what it runs", func(ctx context.Context) (bool, string, error) {
			p, err := framework.L.Client().CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, "", err
			}
			r, err := allocation.RecordOf(p)
			if err != nil || r == nil {
				return false, fmt.Sprintf("record: %v", err), nil
			}
			for _, c := range r.Containers {
				if !c.Served || !slices.Equal(c.Cores, got[c.Name][1]) || r.Node != p.Spec.NodeName {
					return false, fmt.Sprintf("record %+v, running %v", r, got), nil
				}
			}
			return len(r.Containers) == len(containers) && p.Annotations[allocation.Allocated] == "true", p.Annotations[allocation.Annotation], nil
		})
	}
}

func repo(t *testing.T) string {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// TestThreePools checks that hardware taken through one resource is withdrawn from the other two
// and given back when the pod goes.
func TestThreePools(t *testing.T) {
	ctx := framework.Context(t)
	ns := framework.CreateNamespace(t, ctx)
	full := map[string]int64{neuronRes: 16, deviceRes: 16, coreRes: 32}
	waitAllocatable(t, ctx, "trn1-b", full)
	createPod(t, ctx, ns, podSpec{name: "device", node: "trn1-b", containers: []ctr{{"app", neuronRes, 1}}})
	framework.WaitForPod(t, ctx, ns, "device", corev1.PodRunning, 30*time.Second)
	// The kubelet counts its own pool's allocation; the plugin withdraws the device from the others.
	waitAllocatable(t, ctx, "trn1-b", map[string]int64{neuronRes: 16, deviceRes: 15, coreRes: 30})
	createPod(t, ctx, ns, podSpec{name: "core", node: "trn1-b", containers: []ctr{{"app", coreRes, 1}}})
	framework.WaitForPod(t, ctx, ns, "core", corev1.PodRunning, 30*time.Second)
	// A device with a core in use can no longer be given whole.
	waitAllocatable(t, ctx, "trn1-b", map[string]int64{neuronRes: 15, deviceRes: 14, coreRes: 30})
	for _, name := range []string{"device", "core"} {
		if err := framework.L.Client().CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitAllocatable(t, ctx, "trn1-b", full)
}

// TestDeviceHealth injects an uncorrectable error and a disappearing device.
func TestDeviceHealth(t *testing.T) {
	ctx := framework.Context(t)
	hw := framework.L.Simulator().Node("trn1-b").Hardware()
	full := map[string]int64{neuronRes: 16, deviceRes: 16, coreRes: 32}
	less := map[string]int64{neuronRes: 15, deviceRes: 15, coreRes: 30}
	waitAllocatable(t, ctx, "trn1-b", full)
	if err := hw.InjectError(5, neuron.MemECC, 2); err != nil {
		t.Fatal(err)
	}
	waitAllocatable(t, ctx, "trn1-b", less)
	waitEvent(t, ctx, "trn1-b", "NeuronDeviceUnhealthy", "Neuron device 5 (/dev/neuron5) is unhealthy: its uncorrectable error count rose from 0 to 2")
	if err := hw.ClearErrors(5); err != nil {
		t.Fatal(err)
	}
	waitAllocatable(t, ctx, "trn1-b", full)
	waitEvent(t, ctx, "trn1-b", "NeuronDeviceHealthy", "Neuron device 5 (/dev/neuron5) is healthy again")
	if err := hw.RemoveDevice(9); err != nil {
		t.Fatal(err)
	}
	waitAllocatable(t, ctx, "trn1-b", less)
	waitEvent(t, ctx, "trn1-b", "NeuronDeviceUnhealthy", "Neuron device 9 (/dev/neuron9) is unhealthy: it is no longer reported by the Neuron driver")
	if err := hw.RestoreDevice(9); err != nil {
		t.Fatal(err)
	}
	waitAllocatable(t, ctx, "trn1-b", full)
}

func waitEvent(t *testing.T, ctx context.Context, node, reason, message string) {
	t.Helper()
	framework.WaitFor(t, ctx, 10*time.Second, fmt.Sprintf("event %s on node %s", reason, node), func(ctx context.Context) (bool, string, error) {
		events, err := framework.L.Client().CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + node})
		if err != nil {
			return false, "", err
		}
		var seen []string
		for _, e := range events.Items {
			if e.Reason == reason && strings.Contains(e.Message, message) {
				return true, "", nil
			}
			seen = append(seen, e.Reason+": "+e.Message)
		}
		return false, strings.Join(seen, " | "), nil
	})
}

// TestKubeletRestart recreates the kubelet's socket: the plugin registers again and serves.
func TestKubeletRestart(t *testing.T) {
	ctx := framework.Context(t)
	node := framework.L.Simulator().Node("inf2-a")
	if err := node.RestartKubelet(ctx); err != nil {
		t.Fatal(err)
	}
	framework.WaitFor(t, ctx, 15*time.Second, "the plugin to register its three resources again", func(context.Context) (bool, string, error) {
		var missing []string
		for _, r := range topology.Resources {
			if !node.Registered(r) {
				missing = append(missing, r)
			}
		}
		return len(missing) == 0, fmt.Sprint("not registered: ", missing), nil
	})
	ns := framework.CreateNamespace(t, ctx)
	createPod(t, ctx, ns, podSpec{name: "after-restart", node: "inf2-a", containers: []ctr{{"app", neuronRes, 2}}})
	pod := framework.WaitForPod(t, ctx, ns, "after-restart", corev1.PodRunning, 30*time.Second)
	if got := running(t, pod)["app"]; len(got[0]) != 2 {
		t.Errorf("after the restart the pod got %v", got)
	}
}

func record(node string, containers ...allocation.Container) *allocation.Record {
	return &allocation.Record{Node: node, Containers: containers}
}

func devices(shape *topology.Shape, name string, ids ...int) allocation.Container {
	a, _ := shape.DeviceAllocation(ids)
	return allocation.Container{Name: name, Resource: neuronRes, Devices: a.Devices, Cores: a.Cores}
}

func podRecord(t *testing.T, ctx context.Context, ns, name string) (*corev1.Pod, *allocation.Record) {
	t.Helper()
	pod, err := framework.L.Client().CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := allocation.Parse(pod.Annotations[allocation.Annotation])
	if err != nil {
		t.Fatal(err)
	}
	return pod, r
}

// TestExtenderRecords serves pods bound with the scheduler extender's allocation record: the
// record's devices reach the containers, the containers are marked served, and two same-size
// pods admitted in the reverse order end with records that say what runs.
func TestExtenderRecords(t *testing.T) {
	ctx := framework.Context(t)
	ns := framework.CreateNamespace(t, ctx)
	shape := shapeOf(t, "trn1-c")

	// A pod with two Neuron containers.
	createPod(t, ctx, ns, podSpec{name: "multi", node: "trn1-c", allocTime: 50,
		containers: []ctr{{"a", neuronRes, 4}, {"b", neuronRes, 1}},
		record:     record("trn1-c", devices(shape, "a", 12, 13, 14, 15), devices(shape, "b", 11))})
	pod := framework.WaitForPod(t, ctx, ns, "multi", corev1.PodRunning, 30*time.Second)
	got := running(t, pod)
	if !slices.Equal(got["a"][0], []int{12, 13, 14, 15}) || !slices.Equal(got["b"][0], []int{11}) {
		t.Errorf("multi runs with %v, its record says a: 12-15, b: 11", got)
	}
	framework.WaitFor(t, ctx, 10*time.Second, "pod multi marked allocated", func(ctx context.Context) (bool, string, error) {
		p, r := podRecord(t, ctx, ns, "multi")
		return r.AllServed() && p.Annotations[allocation.Allocated] == "true", p.Annotations[allocation.Annotation] + " " + p.Annotations[allocation.Allocated], nil
	})

	// Two pods of the same size, admitted in the reverse order of their allocation times.
	createPod(t, ctx, ns, podSpec{name: "first", node: "trn1-c", allocTime: 100, hold: true,
		containers: []ctr{{"app", neuronRes, 4}}, record: record("trn1-c", devices(shape, "app", 0, 1, 2, 3))})
	createPod(t, ctx, ns, podSpec{name: "second", node: "trn1-c", allocTime: 200, hold: true,
		containers: []ctr{{"app", neuronRes, 4}}, record: record("trn1-c", devices(shape, "app", 4, 5, 6, 7))})
	time.Sleep(time.Second) // the plugin's informer sees both pods
	release(t, ctx, ns, "second")
	framework.WaitForPod(t, ctx, ns, "second", corev1.PodRunning, 30*time.Second)
	release(t, ctx, ns, "first")
	framework.WaitForPod(t, ctx, ns, "first", corev1.PodRunning, 30*time.Second)
	var runs [][]int
	framework.WaitFor(t, ctx, 15*time.Second, "the records of first and second to say what they run", func(ctx context.Context) (bool, string, error) {
		runs = nil
		var status []string
		ok := true
		for _, name := range []string{"first", "second"} {
			p, r := podRecord(t, ctx, ns, name)
			run := running(t, p)["app"][0]
			runs = append(runs, run)
			status = append(status, fmt.Sprintf("%s runs %v, record %v served=%v, %s=%s", name, run, r.Containers[0].Devices, r.Containers[0].Served, allocation.Allocated, p.Annotations[allocation.Allocated]))
			if !slices.Equal(run, r.Containers[0].Devices) || !r.Containers[0].Served || p.Annotations[allocation.Allocated] != "true" ||
				p.Annotations[allocation.AWSNeuronIDs] != topology.JoinIDs(run) {
				ok = false
			}
		}
		return ok, strings.Join(status, "; "), nil
	})
	for _, d := range runs[0] {
		if slices.Contains(runs[1], d) {
			t.Fatalf("first %v and second %v share device %d", runs[0], runs[1], d)
		}
	}

	// A record that names devices another pod runs on is refused, never served twice.
	createPod(t, ctx, ns, podSpec{name: "intruder", node: "trn1-c", allocTime: 300,
		containers: []ctr{{"app", neuronRes, 1}}, record: record("trn1-c", devices(shape, "app", 11))})
	failed := framework.WaitForPod(t, ctx, ns, "intruder", corev1.PodFailed, 30*time.Second)
	for _, want := range []string{"pod " + ns + "/intruder container app: devices 11 (cores 22,23) are already in use by pod " + ns + "/multi (container b", "refusing to hand them out twice"} {
		if !strings.Contains(failed.Status.Message, want) {
			t.Errorf("intruder: %s\ndoes not contain %q", failed.Status.Message, want)
		}
	}
}

// TestUnsupportedCountWithoutExtender: under the default scheduler, 7 devices on a trn1 are
// refused by Allocate with the Neuron message, and the pod fails instead of running.
func TestUnsupportedCountWithoutExtender(t *testing.T) {
	ctx := framework.Context(t)
	ns := framework.CreateNamespace(t, ctx)
	createPod(t, ctx, ns, podSpec{name: "seven", node: "trn1-b", containers: []ctr{{"app", neuronRes, 7}}})
	pod := framework.WaitForPod(t, ctx, ns, "seven", corev1.PodFailed, 30*time.Second)
	for _, want := range []string{"UnexpectedAdmissionError", "Instance type trn1.32xlarge does not support requests for device: 7. Please request a different number of devices.", ns + "/seven", "schedulerName: my-scheduler"} {
		if !strings.Contains(pod.Status.Reason+" "+pod.Status.Message, want) {
			t.Errorf("status %s: %s\ndoes not contain %q", pod.Status.Reason, pod.Status.Message, want)
		}
	}
}

// TestBurstAcrossPools creates device and core pods on one node in a burst, under the default
// scheduler: whatever the kubelet's three pools believe at each moment, no two running pods may
// share a core, and a refused pod says why.
func TestBurstAcrossPools(t *testing.T) {
	ctx := framework.Context(t)
	ns := framework.CreateNamespace(t, ctx)
	const node = "inf2-a"
	var names []string
	for i := range 10 {
		name := fmt.Sprintf("burst-%02d", i)
		names = append(names, name)
		if i%2 == 0 {
			createPod(t, ctx, ns, podSpec{name: name, node: node, containers: []ctr{{"a", neuronRes, 1}, {"b", neuronRes, 1}}})
		} else {
			createPod(t, ctx, ns, podSpec{name: name, node: node, containers: []ctr{{"app", coreRes, 2}}})
		}
	}
	owner := map[int]string{}
	for _, name := range names {
		var pod *corev1.Pod
		framework.WaitFor(t, ctx, 60*time.Second, "pod "+name+" to run or fail", func(ctx context.Context) (bool, string, error) {
			p, err := framework.L.Client().CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error(), nil
			}
			pod = p
			return p.Status.Phase == corev1.PodRunning || p.Status.Phase == corev1.PodFailed, string(p.Status.Phase), nil
		})
		if pod.Status.Phase == corev1.PodFailed {
			if !strings.Contains(pod.Status.Message, "refusing to hand them out twice") && !strings.Contains(pod.Status.Message, "Requested:") {
				t.Errorf("%s failed: %s", name, pod.Status.Message)
			}
			continue
		}
		for c, r := range running(t, pod) {
			for _, core := range r[1] {
				if other, ok := owner[core]; ok {
					t.Errorf("core %d is used by %s and %s/%s", core, other, name, c)
				}
				owner[core] = name + "/" + c
			}
		}
	}
	t.Logf("%d cores in use after the burst", len(owner))
}

// TestPluginRestartKeepsItsAnswers stops neuron-device-plugin while a pod runs and starts it
// again: the new process reads the answers of the old one from its checkpoint (--state-dir, a
// directory the kubelet does not empty), the running pod's record is untouched, a new pod is
// served, and the answer of a pod that went leaves the checkpoint.
func TestPluginRestartKeepsItsAnswers(t *testing.T) {
	ctx := framework.Context(t)
	ns := framework.CreateNamespace(t, ctx)
	const node = "trn1-a"
	shape := shapeOf(t, node)
	waitAllocatable(t, ctx, node, map[string]int64{neuronRes: 16, deviceRes: 16, coreRes: 32})
	createPod(t, ctx, ns, podSpec{name: "kept", node: node, allocTime: 100,
		containers: []ctr{{"app", neuronRes, 4}}, record: record(node, devices(shape, "app", 4, 5, 6, 7))})
	framework.WaitForPod(t, ctx, ns, "kept", corev1.PodRunning, 30*time.Second)

	// The checkpoint as the plugin writes it (docs/device-plugin.md), read by its field names.
	sim := framework.L.Simulator().Node(node)
	path := filepath.Join(sim.DevicePluginStateDir(), deviceplugin.CheckpointFile)
	answers := func() (map[string][]int, string) {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var c struct {
			Node    string `json:"node"`
			Answers []struct {
				Pod     string `json:"pod"`
				Devices []int  `json:"devices"`
			} `json:"answers"`
		}
		if err := json.Unmarshal(data, &c); err != nil {
			t.Fatalf("%s: %v\n%s", path, err, data)
		}
		if c.Node != node {
			t.Fatalf("%s names node %q, want %s", path, c.Node, node)
		}
		out := map[string][]int{}
		for _, a := range c.Answers {
			out[a.Pod] = a.Devices
		}
		return out, string(data)
	}
	if got, data := answers(); !slices.Equal(got[ns+"/kept"], []int{4, 5, 6, 7}) {
		t.Fatalf("the checkpoint does not hold kept's answer (devices 4-7):\n%s", data)
	}

	procs := framework.L.Component(node)
	if len(procs) != 1 {
		t.Fatalf("node %s runs %d components", node, len(procs))
	}
	if err := framework.L.StopComponent(node, procs[0]); err != nil {
		t.Fatal(err)
	}
	p, err := framework.L.StartDevicePlugin(ctx, node)
	if err != nil {
		t.Fatal(err)
	}
	framework.WaitFor(t, ctx, 15*time.Second, "the plugin to load its checkpoint and register its three resources", func(context.Context) (bool, string, error) {
		data, err := os.ReadFile(p.LogPath())
		if err != nil {
			return false, "", err
		}
		if !strings.Contains(string(data), "Loaded the answers of the previous run from the checkpoint") || !strings.Contains(string(data), "answers=1") {
			return false, "no line saying it loaded 1 answer", nil
		}
		for _, r := range topology.Resources {
			if !sim.Registered(r) {
				return false, r + " not registered", nil
			}
		}
		return true, "", nil
	})

	createPod(t, ctx, ns, podSpec{name: "after", node: node, allocTime: 200,
		containers: []ctr{{"app", neuronRes, 4}}, record: record(node, devices(shape, "app", 8, 9, 10, 11))})
	pod := framework.WaitForPod(t, ctx, ns, "after", corev1.PodRunning, 30*time.Second)
	if got := running(t, pod)["app"][0]; !slices.Equal(got, []int{8, 9, 10, 11}) {
		t.Errorf("after the restart, pod after runs on %v, its record says 8-11", got)
	}
	kept, r := podRecord(t, ctx, ns, "kept")
	if got := running(t, kept)["app"][0]; !slices.Equal(r.Containers[0].Devices, []int{4, 5, 6, 7}) || !slices.Equal(got, []int{4, 5, 6, 7}) || !r.Containers[0].Served {
		t.Errorf("after the restart kept runs on %v with record %+v, want devices 4-7 served", got, r.Containers[0])
	}

	if err := framework.L.Client().CoreV1().Pods(ns).Delete(ctx, "kept", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.WaitFor(t, ctx, 15*time.Second, "kept's answer to leave the checkpoint", func(context.Context) (bool, string, error) {
		got, data := answers()
		_, still := got[ns+"/kept"]
		return !still && slices.Equal(got[ns+"/after"], []int{8, 9, 10, 11}), data, nil
	})
}
