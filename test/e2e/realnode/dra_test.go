//go:build e2e

package realnode

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	apiv1 "github.com/kube-neuron/kube-neuron/api/neuron.aws.com/v1"
	"github.com/kube-neuron/kube-neuron/internal/dra"
	"github.com/kube-neuron/kube-neuron/internal/lab"
	"github.com/kube-neuron/kube-neuron/internal/topology"
	"github.com/kube-neuron/kube-neuron/test/e2e/framework"
)

// claimDevices waits until the pod runs and returns the device ids of its one claim.
func claimDevices(t *testing.T, ctx context.Context, ns, name string) (*corev1.Pod, []int) {
	t.Helper()
	pod := framework.WaitForPod(t, ctx, ns, name, corev1.PodRunning, 90*time.Second)
	if len(pod.Status.ResourceClaimStatuses) != 1 || pod.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
		t.Fatalf("pod %s: claim statuses %+v", name, pod.Status.ResourceClaimStatuses)
	}
	claim, err := framework.L.Client().ResourceV1().ResourceClaims(ns).Get(ctx, *pod.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []int
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != dra.DriverName || r.Pool != pod.Spec.NodeName {
			t.Errorf("result %+v is not from driver %s and pool %s", r, dra.DriverName, pod.Spec.NodeName)
		}
		i, ok := apiv1.ParseDeviceName(r.Device)
		if !ok {
			t.Fatalf("device %s is not one of the driver's", r.Device)
		}
		ids = append(ids, i)
	}
	slices.Sort(ids)
	return pod, ids
}

// checkClaimRuns checks what the container of a claim's pod on a real node prints: the device
// nodes of the claim's devices (containerd put them there from the driver's CDI spec) and the
// driver's environment, the cores of those devices at lnc.
func checkClaimRuns(t *testing.T, ctx context.Context, ns, name, container string, lnc int) []int {
	t.Helper()
	pod, ids := claimDevices(t, ctx, ns, name)
	if framework.L.RealNode(pod.Spec.NodeName) == nil {
		t.Fatalf("pod %s runs on %s, not a real node", name, pod.Spec.NodeName)
	}
	it, err := topology.DefaultCatalog().Get("trn2.48xlarge")
	if err != nil {
		t.Fatal(err)
	}
	shape, err := topology.NewShape(it, lnc)
	if err != nil {
		t.Fatal(err)
	}
	var cores []int
	for _, d := range ids {
		cores = append(cores, shape.CoresOf(d)...)
	}
	got := logsOf(t, ctx, pod, container)
	if want := deviceNodes(ids); !slices.Equal(got.devices, want) {
		t.Errorf("pod %s sees %v, its claim has %v", name, got.devices, want)
	}
	if got.env[dra.EnvVisibleCores] != list(cores) || got.env[dra.EnvVisibleDevices] != list(ids) {
		t.Errorf("pod %s: %s=%q %s=%q, want %s and %s", name, dra.EnvVisibleCores, got.env[dra.EnvVisibleCores],
			dra.EnvVisibleDevices, got.env[dra.EnvVisibleDevices], list(cores), list(ids))
	}
	return ids
}

// TestDRAExamplesOnRealNodes applies the DRA examples of trn2.48xlarge on the real trn2-a: the
// real scheduler allocates from the ResourceSlices the driver's pod published, the real kubelet
// prepares through the driver's socket, and containerd gives the container the devices of the
// driver's CDI spec. The trn1.2xlarge example runs on the simulated node beside it.
func TestDRAExamplesOnRealNodes(t *testing.T) {
	ctx := framework.Context(t)
	ns := newNamespace(t, ctx)
	framework.EnsureDeviceClass(t, ctx)
	framework.Apply(t, ctx, "examples/dra/1x4-connected-neurons.yaml", ns)
	ids := checkClaimRuns(t, ctx, ns, "pod-1x4-connected", "ctr0", 2)
	if len(ids) != 4 || ids[0]%4 != 0 || ids[3]-ids[0] != 3 {
		t.Errorf("1x4-connected got %v, want an aligned block of 4", ids)
	}
	framework.Apply(t, ctx, "examples/dra/single-neuron-device.yaml", ns)
	pod := framework.WaitForPod(t, ctx, ns, "neuron-dra-test-pod", corev1.PodRunning, 90*time.Second)
	if pod.Spec.NodeName != simNode || pod.Annotations[lab.AllocationsAnnotation] == "" {
		t.Errorf("the trn1.2xlarge claim runs on %s (annotation %q), want the simulated %s", pod.Spec.NodeName, pod.Annotations[lab.AllocationsAnnotation], simNode)
	}
	deletePod(t, ctx, ns, "pod-1x4-connected")

	framework.Apply(t, ctx, "examples/dra/all-neurons-lnc-1.yaml", ns)
	ids = checkClaimRuns(t, ctx, ns, "pod-all-neurons-lnc-1", "ctr0", 1)
	if len(ids) != 16 {
		t.Errorf("all-neurons-lnc-1 got %v, want all 16 devices", ids)
	}
	p := framework.WaitForPod(t, ctx, ns, "pod-all-neurons-lnc-1", corev1.PodRunning, time.Minute)
	if got := logsOf(t, ctx, p, "ctr0"); got.env[dra.EnvLNC] != "1" {
		t.Errorf("%s=%q, want 1", dra.EnvLNC, got.env[dra.EnvLNC])
	}
}

// TestDRADriverPodRestart deletes the DRA driver's pod on trn2-a while a claim's pod runs: the
// DaemonSet starts another, which publishes the node's devices again; the running pod keeps its
// container and a new claim is prepared by the new pod.
func TestDRADriverPodRestart(t *testing.T) {
	ctx := framework.Context(t)
	ns := newNamespace(t, ctx)
	framework.EnsureDeviceClass(t, ctx)
	framework.Apply(t, ctx, "examples/dra/1x4-connected-neurons.yaml", ns)
	before := checkClaimRuns(t, ctx, ns, "pod-1x4-connected", "ctr0", 2)
	id := containerID(t, ctx, ns, "pod-1x4-connected")

	old := componentPod(t, ctx, draNamespace, draDriverPods, trn2Node)
	if err := framework.L.Client().CoreV1().Pods(draNamespace).Delete(ctx, old.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, ctx, draNamespace, old.Name, 60*time.Second)
	fresh := componentPod(t, ctx, draNamespace, draDriverPods, trn2Node)
	if fresh.UID == old.UID {
		t.Fatal("the DRA driver pod was not replaced")
	}
	if err := framework.L.WaitForResourceSliceDevices(ctx, trn2Node, dra.DriverName, 16, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	if got := containerID(t, ctx, ns, "pod-1x4-connected"); got != id {
		t.Errorf("the driver's restart replaced the workload's container: %s, then %s", id, got)
	}
	second := secondClaimPod(t, ctx, ns)
	ids := checkClaimRuns(t, ctx, ns, second, "ctr0", 2)
	for _, d := range ids {
		if slices.Contains(before, d) {
			t.Errorf("device %d allocated twice: %v and %v", d, before, ids)
		}
	}
}

// TestClaimPodDeletedWhileDriverRestarts deletes a claim's pod while the driver's pod is gone:
// the real kubelet cannot unprepare the claim without the driver, so the pod stays Terminating
// (`DRA driver neuron.aws.com is not registered`) until the DaemonSet's new driver pod
// registers, and then it goes, and its devices are free again.
func TestClaimPodDeletedWhileDriverRestarts(t *testing.T) {
	ctx := framework.Context(t)
	ns := newNamespace(t, ctx)
	framework.EnsureDeviceClass(t, ctx)
	framework.Apply(t, ctx, "examples/dra/1x4-connected-neurons.yaml", ns)
	checkClaimRuns(t, ctx, ns, "pod-1x4-connected", "ctr0", 2)

	old := componentPod(t, ctx, draNamespace, draDriverPods, trn2Node)
	zero := int64(0)
	if err := framework.L.Client().CoreV1().Pods(draNamespace).Delete(ctx, old.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	if err := framework.L.Client().CoreV1().Pods(ns).Delete(ctx, "pod-1x4-connected", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	componentPod(t, ctx, draNamespace, draDriverPods, trn2Node)
	waitGone(t, ctx, ns, "pod-1x4-connected", 120*time.Second)
	// With its devices free, the whole node can be claimed.
	framework.Apply(t, ctx, "examples/dra/xl-trn2.yaml", ns)
	if ids := checkClaimRuns(t, ctx, ns, "pod-xl-trn2", "ctr0", 2); len(ids) != 16 {
		t.Errorf("xl-trn2 got %v, want 16 devices", ids)
	}
}

// secondClaimPod creates another pod with a claim of the 1x4-connected-neurons template.
func secondClaimPod(t *testing.T, ctx context.Context, ns string) string {
	t.Helper()
	pod, err := framework.L.Client().CoreV1().Pods(ns).Get(ctx, "pod-1x4-connected", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pod-1x4-second-" + strconv.Itoa(int(time.Now().UnixNano()%1000))}, Spec: *pod.Spec.DeepCopy()}
	p.Spec.NodeName = ""
	p.Spec.Containers[0].Resources.Claims = pod.Spec.Containers[0].Resources.Claims
	if _, err := framework.L.Client().CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(fmt.Errorf("creating a second claim pod: %w", err))
	}
	return p.Name
}
