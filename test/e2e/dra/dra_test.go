//go:build e2e

package dra

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kube-neuron/kube-neuron/internal/dra"
	"github.com/kube-neuron/kube-neuron/internal/lab"
	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/neuron"
	"github.com/kube-neuron/kube-neuron/test/e2e/framework"
)

var deviceClassOnce sync.Once

// setup creates the DeviceClass the chart ships (once) and a namespace for the test.
func setup(t *testing.T) (context.Context, string) {
	t.Helper()
	ctx := framework.Context(t)
	deviceClassOnce.Do(func() { framework.EnsureDeviceClass(t, ctx) })
	return ctx, framework.CreateNamespace(t, ctx)
}

// example applies examples/dra/<file> in ns and, when the test ends, deletes its workloads and
// waits until every claim of ns is unprepared on every node (no CDI spec left), so that the
// next test finds the fleet free.
func example(t *testing.T, ctx context.Context, ns, file string) {
	t.Helper()
	framework.Apply(t, ctx, filepath.Join("examples/dra", file), ns)
	t.Cleanup(func() { cleanup(t, ns) })
}

func cleanup(t *testing.T, ns string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := framework.L.Client()
	claims, err := c.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Errorf("listing claims: %v", err)
		return
	}
	_ = c.AppsV1().StatefulSets(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	_ = c.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{})
	framework.WaitFor(t, ctx, 90*time.Second, "the test's pods and claims to be gone and unprepared", func(ctx context.Context) (bool, string, error) {
		pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		if len(pods.Items) > 0 {
			return false, fmt.Sprintf("%d pods left", len(pods.Items)), nil
		}
		left, err := c.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		if len(left.Items) > 0 {
			return false, fmt.Sprintf("%d claims left", len(left.Items)), nil
		}
		for _, cl := range claims.Items {
			if specs := cdiSpecsOf(t, string(cl.UID)); len(specs) > 0 {
				return false, fmt.Sprintf("CDI specs of claim %s left: %v", cl.Name, specs), nil
			}
		}
		return true, "", nil
	})
}

// cdiSpecsOf returns the CDI spec files of a claim on every node.
func cdiSpecsOf(t *testing.T, uid string) []string {
	t.Helper()
	var out []string
	for _, spec := range framework.L.Nodes() {
		n := framework.L.Simulator().Node(spec.Name)
		matches, _ := filepath.Glob(filepath.Join(n.CDIDir(), "*"+uid+"*"))
		out = append(out, matches...)
	}
	return out
}

// running waits for the pod to run and returns it with what the simulated kubelet prepared.
func running(t *testing.T, ctx context.Context, ns, name string) (*corev1.Pod, lab.PodAllocations) {
	t.Helper()
	pod := framework.WaitForPod(t, ctx, ns, name, corev1.PodRunning, 90*time.Second)
	var a lab.PodAllocations
	if err := json.Unmarshal([]byte(pod.Annotations[lab.AllocationsAnnotation]), &a); err != nil {
		t.Fatalf("pod %s: allocations annotation: %v", name, err)
	}
	if len(a.Claims) != 1 {
		t.Fatalf("pod %s: %d prepared claims, want 1: %+v", name, len(a.Claims), a)
	}
	return pod, a
}

// allocated returns the claim of the pod and its allocated devices' names.
func allocated(t *testing.T, ctx context.Context, pod *corev1.Pod) (*resourcev1.ResourceClaim, []string) {
	t.Helper()
	if len(pod.Status.ResourceClaimStatuses) != 1 || pod.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
		t.Fatalf("pod %s: claim statuses %+v", pod.Name, pod.Status.ResourceClaimStatuses)
	}
	claim, err := framework.L.Client().ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, *pod.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != dra.DriverName || r.Pool != pod.Spec.NodeName {
			t.Errorf("result %+v is not from driver %s and pool %s", r, dra.DriverName, pod.Spec.NodeName)
		}
		names = append(names, r.Device)
	}
	slices.Sort(names)
	return claim, names
}

// sliceDevices returns the devices the driver publishes for a node, by name.
func sliceDevices(t *testing.T, ctx context.Context, node string) map[string]resourcev1.Device {
	t.Helper()
	list, err := framework.L.Client().ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node + ",spec.driver=" + dra.DriverName})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]resourcev1.Device{}
	for _, s := range list.Items {
		for _, d := range s.Spec.Devices {
			out[d.Name] = d
		}
	}
	return out
}

func strAttr(d resourcev1.Device, name resourcev1.QualifiedName) string {
	if a, ok := d.Attributes[name]; ok && a.StringValue != nil {
		return *a.StringValue
	}
	return ""
}

// checkGroup checks that the devices share one devicegroupN_id of the node's slice and that the
// pod got them through CDI.
func checkGroup(t *testing.T, ctx context.Context, ns, podName string, size int) {
	t.Helper()
	pod, a := running(t, ctx, ns, podName)
	_, names := allocated(t, ctx, pod)
	if len(names) != size {
		t.Fatalf("pod %s got %d devices %v, want %d", podName, len(names), names, size)
	}
	devs := sliceDevices(t, ctx, pod.Spec.NodeName)
	key := resourcev1.QualifiedName(fmt.Sprintf("resource.aws.com/devicegroup%d_id", size))
	group := strAttr(devs[names[0]], key)
	if group == "" {
		t.Fatalf("device %s has no %s", names[0], key)
	}
	var ids []int
	for _, n := range names {
		if g := strAttr(devs[n], key); g != group {
			t.Errorf("pod %s: %s has %s %s, %s has %s", podName, n, key, g, names[0], group)
		}
		i, _ := dra.ParseDeviceName(n)
		ids = append(ids, i)
	}
	slices.Sort(ids)
	if ids[len(ids)-1]-ids[0] != size-1 || ids[0]%size != 0 {
		t.Errorf("pod %s: devices %v are not an aligned block of %d", podName, ids, size)
	}
	checkPrepared(t, pod, a, ids, 4)
}

// checkPrepared checks what the container gets through the claim's CDI devices: the device
// nodes and the visible cores at coresPerDevice.
func checkPrepared(t *testing.T, pod *corev1.Pod, a lab.PodAllocations, ids []int, coresPerDevice int) {
	t.Helper()
	cr := a.Claims[0]
	if len(cr.CDIDevices) != len(cr.Devices) {
		t.Errorf("pod %s: %d CDI devices for %d devices", pod.Name, len(cr.CDIDevices), len(cr.Devices))
	}
	var nodes, cores []string
	for _, i := range ids {
		nodes = append(nodes, fmt.Sprintf("/dev/neuron%d", i))
		for c := range coresPerDevice {
			cores = append(cores, fmt.Sprint(i*coresPerDevice+c))
		}
	}
	slices.Sort(nodes)
	got := slices.Clone(cr.DeviceNodes)
	slices.Sort(got)
	if !slices.Equal(got, nodes) {
		t.Errorf("pod %s: device nodes %v, want %v", pod.Name, got, nodes)
	}
	if cr.Env[dra.EnvVisibleCores] != strings.Join(cores, ",") {
		t.Errorf("pod %s: %s=%q, want %q", pod.Name, dra.EnvVisibleCores, cr.Env[dra.EnvVisibleCores], strings.Join(cores, ","))
	}
	for _, id := range cr.CDIDevices {
		if !strings.HasPrefix(id, "k8s.neuron.aws.com/neuron=") {
			t.Errorf("pod %s: CDI device %s is not of kind k8s.neuron.aws.com/neuron", pod.Name, id)
		}
	}
	claimUID := strings.TrimSuffix(strings.TrimPrefix(cr.CDIDevices[0], "k8s.neuron.aws.com/neuron="), "-"+cr.Devices[0])
	if specs := cdiSpecsOf(t, claimUID); len(specs) != 1 {
		t.Errorf("pod %s: CDI spec files of its claim: %v, want one", pod.Name, specs)
	}
}

func TestResourceSlices(t *testing.T) {
	ctx, _ := setup(t)
	for _, spec := range framework.L.Nodes() {
		t.Run(spec.Name, func(t *testing.T) {
			devs := sliceDevices(t, ctx, spec.Name)
			hw := framework.L.Simulator().Node(spec.Name).Hardware()
			node, err := (&neuron.Sysfs{Root: hw.Root()}).Discover(ctx)
			if err != nil {
				t.Fatal(err)
			}
			want := spec.InstanceType.Devices
			if spec.UltraServer != nil {
				want++
			}
			if len(devs) != want {
				t.Fatalf("%d devices published, want %d", len(devs), want)
			}
			d0 := devs["neurondevice0"]
			if strAttr(d0, "instanceType") != spec.InstanceType.Name || strAttr(d0, "neuronDriverVersion") != spec.DriverVersion || strAttr(d0, "resourceType") != "neuron_device" {
				t.Errorf("neurondevice0 attributes %v", d0.Attributes)
			}
			if strAttr(d0, "networkNodeLayer3") == "" {
				t.Errorf("no networkNodeLayer3 though the node has the EKS label")
			}
			if want := node.Devices[0].EFAAddress; strAttr(d0, "resource.aws.com/devicegroup1_id") != want {
				t.Errorf("devicegroup1_id %q, want the EFA address %q", strAttr(d0, "resource.aws.com/devicegroup1_id"), want)
			}
			if spec.InstanceType.Devices == 16 {
				var efa []string
				for _, d := range node.Devices[:4] {
					efa = append(efa, d.EFAAddress)
				}
				if got := strAttr(devs["neurondevice2"], "resource.aws.com/devicegroup4_id"); got != dra.GroupHash(efa) {
					t.Errorf("devicegroup4_id of device 2 %q, want %q", got, dra.GroupHash(efa))
				}
			}
			n, err := framework.L.Client().CoreV1().Nodes().Get(ctx, spec.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if n.Labels[labels.AllocationMode] != labels.AllocationModeDRA {
				t.Errorf("node label %s=%q", labels.AllocationMode, n.Labels[labels.AllocationMode])
			}
			if spec.UltraServer != nil {
				nd, ok := devs[dra.NodeDeviceName]
				if !ok || strAttr(nd, "resourceType") != "neuron_node" || strAttr(nd, "ultraserverId") != spec.UltraServer.ServerID4 {
					t.Errorf("node device %+v", nd)
				}
				if n.Labels[labels.UltraServerServerID4] != spec.UltraServer.ServerID4 {
					t.Errorf("node label %s=%q, want %s", labels.UltraServerServerID4, n.Labels[labels.UltraServerServerID4], spec.UltraServer.ServerID4)
				}
			}
		})
	}
}

func TestConnectedDevices(t *testing.T) {
	for _, tc := range []struct {
		file, pod string
		size      int
	}{
		{"1x4-connected-neurons.yaml", "pod-1x4-connected", 4},
		{"l-trn2.yaml", "pod-l-trn2", 8},
		{"xl-trn2.yaml", "pod-xl-trn2", 16},
	} {
		t.Run(tc.pod, func(t *testing.T) {
			ctx, ns := setup(t)
			example(t, ctx, ns, tc.file)
			checkGroup(t, ctx, ns, tc.pod, tc.size)
		})
	}
}

func TestDriverVersion(t *testing.T) {
	t.Run("2.24.7.0 on trn2", func(t *testing.T) {
		ctx, ns := setup(t)
		example(t, ctx, ns, "2.26-driver-trn2.yaml")
		pod, _ := running(t, ctx, ns, "pod-2-26-driver-trn2")
		if pod.Spec.NodeName != "trn2-b" {
			t.Errorf("pod on %s, want trn2-b, the only node with driver 2.24.7.0", pod.Spec.NodeName)
		}
		checkGroup(t, ctx, ns, "pod-2-26-driver-trn2", 8)
	})
	t.Run("2.26.5.0 on trn1", func(t *testing.T) {
		ctx, ns := setup(t)
		example(t, ctx, ns, "driver-version-trn1.yaml")
		pod, a := running(t, ctx, ns, "pod-driver-version-trn1")
		if pod.Spec.NodeName != "trn1-s" {
			t.Errorf("pod on %s, want trn1-s", pod.Spec.NodeName)
		}
		checkPrepared(t, pod, a, []int{0}, 2)
	})
	t.Run("a version no node has stays pending", func(t *testing.T) {
		ctx, ns := setup(t)
		example(t, ctx, ns, "driver-version-missing.yaml")
		framework.WaitFor(t, ctx, 60*time.Second, "the scheduler's FailedScheduling event", func(ctx context.Context) (bool, string, error) {
			pod, err := framework.L.Client().CoreV1().Pods(ns).Get(ctx, "pod-driver-version-missing", metav1.GetOptions{})
			if err != nil {
				return false, err.Error(), nil
			}
			if pod.Spec.NodeName != "" {
				return false, "", fmt.Errorf("pod was scheduled to %s", pod.Spec.NodeName)
			}
			s := framework.DescribePod(ctx, pod)
			return strings.Contains(s, "FailedScheduling") && strings.Contains(s, "cannot allocate all claims"), s, nil
		})
	})
}

func TestLNC(t *testing.T) {
	for _, tc := range []struct{ file, pod string }{
		{"all-neurons-lnc-1.yaml", "pod-all-neurons-lnc-1"},
		{"lnc-neurons.yaml", "pod-lnc-neurons"},
	} {
		t.Run(tc.pod, func(t *testing.T) {
			ctx, ns := setup(t)
			example(t, ctx, ns, tc.file)
			pod, a := running(t, ctx, ns, tc.pod)
			_, names := allocated(t, ctx, pod)
			if len(names) != 16 {
				t.Fatalf("allocationMode All gave %d devices", len(names))
			}
			ids := make([]int, 16)
			for i := range ids {
				ids[i] = i
			}
			// LNC 1 on trn2: 8 logical cores per device, 128 in all.
			checkPrepared(t, pod, a, ids, 8)
			if a.Claims[0].Env[dra.EnvLNC] != "1" {
				t.Errorf("%s=%q, want 1", dra.EnvLNC, a.Claims[0].Env[dra.EnvLNC])
			}
		})
	}
	t.Run("LNC on trn1.2xlarge fails with the seed's message", func(t *testing.T) {
		ctx, ns := setup(t)
		example(t, ctx, ns, "lnc-1-trn1.yaml")
		framework.WaitFor(t, ctx, 60*time.Second, "FailedPrepareDynamicResources with the seed's message", func(ctx context.Context) (bool, string, error) {
			pod, err := framework.L.Client().CoreV1().Pods(ns).Get(ctx, "pod-lnc-1-trn1", metav1.GetOptions{})
			if err != nil {
				return false, err.Error(), nil
			}
			if pod.Status.Phase == corev1.PodRunning {
				return false, "", fmt.Errorf("pod runs")
			}
			s := framework.DescribePod(ctx, pod)
			return strings.Contains(s, "FailedPrepareDynamicResources") && strings.Contains(s, "error applying config: LNC value is not configurable for instance type trn1.2xlarge"), s, nil
		})
	})
}

func TestSingleDevice(t *testing.T) {
	ctx, ns := setup(t)
	example(t, ctx, ns, "single-neuron-device.yaml")
	pod, a := running(t, ctx, ns, "neuron-dra-test-pod")
	if pod.Spec.NodeName != "trn1-s" {
		t.Errorf("pod on %s, want trn1-s (trn1.2xlarge)", pod.Spec.NodeName)
	}
	checkPrepared(t, pod, a, []int{0}, 2)
}

func TestUltraServer(t *testing.T) {
	ctx, ns := setup(t)
	example(t, ctx, ns, "us-4-node-config.yaml")
	server := ""
	nodes := map[string]bool{}
	for i := range 4 {
		pod, a := running(t, ctx, ns, fmt.Sprintf("vllm-%d", i))
		_, names := allocated(t, ctx, pod)
		if !slices.Equal(names, []string{dra.NodeDeviceName}) {
			t.Errorf("pod %s got %v, want the node device", pod.Name, names)
		}
		n, err := framework.L.Client().CoreV1().Nodes().Get(ctx, pod.Spec.NodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		id := n.Labels[labels.UltraServerServerID4]
		if server == "" {
			server = id
		}
		if id == "" || id != server {
			t.Errorf("pod %s on node %s of UltraServer %q; the others are on %q", pod.Name, n.Name, id, server)
		}
		nodes[n.Name] = true
		env := a.Claims[0].Env
		if env[dra.EnvUltraServerMode] != "1" || env[dra.EnvUltraServerServerID] != id || env[dra.EnvUltraServerNodeID] != n.Labels[labels.UltraServerNodeID4] {
			t.Errorf("pod %s: UltraServer env %v", pod.Name, env)
		}
		ids := make([]int, 16)
		for i := range ids {
			ids[i] = i
		}
		checkPrepared(t, pod, a, ids, 4)
	}
	if len(nodes) != 4 {
		t.Errorf("pods on %d nodes, want 4", len(nodes))
	}

	// The node device and the node's own devices exclude each other (the shared counter): a
	// claim for one device of a node whose node device is taken cannot be allocated there.
	var taken string
	for n := range nodes {
		taken = n
	}
	claimFor := func(name, node string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.PodSpec{
				NodeSelector:   map[string]string{"kubernetes.io/hostname": node},
				Tolerations:    []corev1.Toleration{{Key: labels.NeuronTaintKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
				Containers:     []corev1.Container{{Name: "c", Image: "public.ecr.aws/ubuntu/ubuntu:22.04", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "one"}}}}},
				ResourceClaims: []corev1.PodResourceClaim{{Name: "one", ResourceClaimTemplateName: ptr.To("one-device")}},
			},
		}
	}
	tmpl := &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "one-device", Namespace: ns},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
			Name: "n", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: dra.DriverName, Count: 1,
				Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: `device.attributes['neuron.aws.com'].resourceType == 'neuron_device'`}}}},
		}}}}},
	}
	c := framework.L.Client()
	if _, err := c.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().Pods(ns).Create(ctx, claimFor("on-taken-node", taken), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.WaitFor(t, ctx, 60*time.Second, "a device claim on a node whose node device is allocated to stay unschedulable", func(ctx context.Context) (bool, string, error) {
		pod, err := c.CoreV1().Pods(ns).Get(ctx, "on-taken-node", metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		if pod.Spec.NodeName != "" {
			return false, "", fmt.Errorf("scheduled to %s, whose node device is allocated", pod.Spec.NodeName)
		}
		s := framework.DescribePod(ctx, pod)
		return strings.Contains(s, "cannot allocate all claims"), s, nil
	})
	// On a free UltraServer node the same claim runs.
	free := ""
	for _, spec := range framework.L.Nodes() {
		if spec.UltraServer != nil && !nodes[spec.Name] {
			free = spec.Name
			break
		}
	}
	if _, err := c.CoreV1().Pods(ns).Create(ctx, claimFor("on-free-node", free), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	running(t, ctx, ns, "on-free-node")
}

func TestDriverRestartKeepsPreparedClaims(t *testing.T) {
	ctx, ns := setup(t)
	example(t, ctx, ns, "single-neuron-device.yaml")
	pod, _ := running(t, ctx, ns, "neuron-dra-test-pod")
	node := pod.Spec.NodeName
	procs := framework.L.Component(node)
	if len(procs) != 1 {
		t.Fatalf("node %s runs %d components", node, len(procs))
	}
	if err := framework.L.StopComponent(node, procs[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := framework.L.StartDRADriver(ctx, node); err != nil {
		t.Fatal(err)
	}
	// The restarted driver keeps the claim in its checkpoint, and deleting the pod unprepares the
	// claim through it (cleanup checks that the CDI spec is gone).
	data, err := os.ReadFile(filepath.Join(framework.L.Simulator().Node(node).PluginsDir(), dra.DriverName, dra.CheckpointFile))
	if err != nil {
		t.Fatal(err)
	}
	cp, err := dra.DecodeCheckpoint(data)
	if err != nil {
		t.Fatal(err)
	}
	claim, _ := allocated(t, ctx, pod)
	if _, ok := cp.Claims[string(claim.UID)]; !ok {
		t.Errorf("checkpoint after restart lacks claim %s: %s", claim.Name, data)
	}
}
