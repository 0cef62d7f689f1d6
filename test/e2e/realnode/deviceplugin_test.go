//go:build e2e

package realnode

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/neuron"
	"github.com/kube-neuron/kube-neuron/test/e2e/framework"
)

const (
	neuronRes = corev1.ResourceName("aws.amazon.com/neuron")
	coreRes   = corev1.ResourceName("aws.amazon.com/neuroncore")
)

// TestExtenderSeedsOnRealNodes applies seeds 001/004's extender pods (examples/extender) on the
// real trn1.32xlarge and inf2.48xlarge: my-scheduler and the extender (pods on the system node)
// place them, the device plugin (a pod on the node) serves the extender's record, and what each
// container prints is its record; seven devices on a torus stay Pending with the seeds' message.
func TestExtenderSeedsOnRealNodes(t *testing.T) {
	ctx := framework.Context(t)
	ns := newNamespace(t, ctx)
	for _, f := range []string{"inf2-three-devices", "trn1-four-devices", "trn1-eight-devices"} {
		framework.Apply(t, ctx, filepath.Join("examples", "extender", f+".yaml"), ns)
	}
	inf2 := checkRecordRuns(t, ctx, ns, "inf2-three-devices")
	four := checkRecordRuns(t, ctx, ns, "trn1-four-devices")
	eight := checkRecordRuns(t, ctx, ns, "trn1-eight-devices")
	if inf2.Node != inf2Node || four.Node != trn1Node || eight.Node != trn1Node {
		t.Errorf("placed on %s, %s, %s; want %s, %s, %s", inf2.Node, four.Node, eight.Node, inf2Node, trn1Node, trn1Node)
	}
	if d := four.Containers[0].Devices; len(d) != 4 || d[0]%4 != 0 || d[3]-d[0] != 3 {
		t.Errorf("four devices %v are not an aligned block", d)
	}
	if d := eight.Containers[0].Devices; len(d) != 8 || d[0]%8 != 0 || d[7]-d[0] != 7 {
		t.Errorf("eight devices %v are not an aligned block", d)
	}
	for _, d := range four.Containers[0].Devices {
		if slices.Contains(eight.Containers[0].Devices, d) {
			t.Errorf("device %d went to both pods", d)
		}
	}
	deletePod(t, ctx, ns, "trn1-four-devices")
	deletePod(t, ctx, ns, "trn1-eight-devices")
	// On the empty node the kube-scheduler's fit check passes seven devices to the extender,
	// which refuses them with the seeds' message.
	framework.Apply(t, ctx, "examples/extender/trn1-seven-devices.yaml", ns)
	waitPodEvent(t, ctx, ns, "trn1-seven-devices", "Instance type trn1.32xlarge does not support requests for device: 7. Please request a different number of devices.")
	deletePod(t, ctx, ns, "trn1-seven-devices")
	framework.Apply(t, ctx, "examples/extender/trn1-sixteen-devices.yaml", ns)
	if r := checkRecordRuns(t, ctx, ns, "trn1-sixteen-devices"); len(r.Containers[0].Devices) != 16 {
		t.Errorf("sixteen devices: %v", r.Containers[0].Devices)
	}
}

// TestDevicePluginExamplesOnRealNodes applies examples/device-plugin without the extender: the
// real kubelet's device manager picks the ids (steered by GetPreferredAllocation) and calls
// Allocate per container; every container, of the two-container pod too, prints what the plugin
// recorded for it.
func TestDevicePluginExamplesOnRealNodes(t *testing.T) {
	ctx := framework.Context(t)
	ns := newNamespace(t, ctx)
	files, _ := filepath.Glob(filepath.Join(repoRoot(t), "examples", "device-plugin", "*.yaml"))
	if len(files) < 4 {
		t.Fatalf("examples/device-plugin has %d files", len(files))
	}
	for _, f := range files {
		framework.Apply(t, ctx, f, ns)
	}
	for name, containers := range map[string]int{"one-device": 1, "two-cores": 1, "eight-cores": 1, "two-containers": 2} {
		r := checkRecordRuns(t, ctx, ns, name)
		if len(r.Containers) != containers {
			t.Errorf("pod %s: record of %d containers, want %d: %+v", name, len(r.Containers), containers, r)
		}
		if r.Node != inf2Node && r.Node != trn1Node {
			t.Errorf("pod %s on %s, not a real device-plugin node", name, r.Node)
		}
	}
}

// TestKubeletRestartKeepsDevices restarts the real kubelet of trn1-a: the running pod keeps its
// container and devices, the device plugin registers again (the kubelet empties its socket
// directory), and a new pod gets other devices.
func TestKubeletRestartKeepsDevices(t *testing.T) {
	ctx := framework.Context(t)
	ns := newNamespace(t, ctx)
	framework.Apply(t, ctx, "examples/extender/trn1-four-devices.yaml", ns)
	before := checkRecordRuns(t, ctx, ns, "trn1-four-devices")
	id := containerID(t, ctx, ns, "trn1-four-devices")

	node := framework.L.RealNode(trn1Node)
	old, err := node.KubeletPID()
	if err != nil {
		t.Fatal(err)
	}
	if err := node.RestartKubelet(); err != nil {
		t.Fatal(err)
	}
	framework.WaitFor(t, ctx, 30*time.Second, "a new kubelet process on "+trn1Node, func(context.Context) (bool, string, error) {
		pid, err := node.KubeletPID()
		return err == nil && pid != old, fmt.Sprintf("pid %d, %v", pid, err), nil
	})
	waitAllocatable(t, ctx, trn1Node, neuronRes, 16, 60*time.Second)
	waitNodeReady(t, ctx, trn1Node)

	if got := containerID(t, ctx, ns, "trn1-four-devices"); got != id {
		t.Errorf("the kubelet restart replaced the container: %s, then %s", id, got)
	}
	after := checkRecordRuns(t, ctx, ns, "trn1-four-devices")
	if !slices.Equal(after.Containers[0].Devices, before.Containers[0].Devices) {
		t.Errorf("devices %v before the restart, %v after", before.Containers[0].Devices, after.Containers[0].Devices)
	}
	eightBeside(t, ctx, ns, before)
}

// TestDevicePluginPodRestart deletes the device plugin's pod on trn1-a: the DaemonSet starts
// another, which registers again from its checkpoint; the running pod keeps its devices and a
// new pod gets other ones.
func TestDevicePluginPodRestart(t *testing.T) {
	ctx := framework.Context(t)
	ns := newNamespace(t, ctx)
	framework.Apply(t, ctx, "examples/extender/trn1-four-devices.yaml", ns)
	before := checkRecordRuns(t, ctx, ns, "trn1-four-devices")
	id := containerID(t, ctx, ns, "trn1-four-devices")

	old := componentPod(t, ctx, "kube-system", devicePluginPods, trn1Node)
	if err := framework.L.Client().CoreV1().Pods("kube-system").Delete(ctx, old.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, ctx, "kube-system", old.Name, 60*time.Second)
	fresh := componentPod(t, ctx, "kube-system", devicePluginPods, trn1Node)
	if fresh.UID == old.UID {
		t.Fatal("the device plugin pod was not replaced")
	}
	// Until the new plugin has registered and sent its devices, the kubelet refuses new pods
	// (UnexpectedAdmissionError: no healthy devices present), and the Node's allocatable says so
	// only at the kubelet's next status update: ask the kubelet itself.
	waitKubeletDevices(t, ctx, trn1Node, 16)
	if got := containerID(t, ctx, ns, "trn1-four-devices"); got != id {
		t.Errorf("the plugin's restart replaced the workload's container: %s, then %s", id, got)
	}
	eightBeside(t, ctx, ns, before)
}

// eightBeside runs the seeds' eight-device pod beside the pod of record before, on trn1-a, and
// checks that no device goes to both.
func eightBeside(t *testing.T, ctx context.Context, ns string, before *allocation.Record) {
	t.Helper()
	framework.Apply(t, ctx, "examples/extender/trn1-eight-devices.yaml", ns)
	eight := checkRecordRuns(t, ctx, ns, "trn1-eight-devices")
	for _, d := range eight.Containers[0].Devices {
		if slices.Contains(before.Containers[0].Devices, d) {
			t.Errorf("device %d given twice: %v and %v", d, before.Containers[0].Devices, eight.Containers[0].Devices)
		}
	}
}

// TestInjectedDeviceErrorOnRealNode: an uncorrectable error written into the node's simulated
// sysfs reaches the device plugin pod through the node's /sys, and the real kubelet's
// allocatable drops by the device and its cores; cleared, it recovers. A removed device does
// the same.
func TestInjectedDeviceErrorOnRealNode(t *testing.T) {
	ctx := framework.Context(t)
	hw := framework.L.RealNode(inf2Node).Hardware()
	waitAllocatable(t, ctx, inf2Node, neuronRes, 12, 60*time.Second)
	if err := hw.InjectError(3, neuron.MemECC, 1); err != nil {
		t.Fatal(err)
	}
	waitAllocatable(t, ctx, inf2Node, neuronRes, 11, 30*time.Second)
	waitAllocatable(t, ctx, inf2Node, coreRes, 22, 30*time.Second)
	if err := hw.ClearErrors(3); err != nil {
		t.Fatal(err)
	}
	waitAllocatable(t, ctx, inf2Node, neuronRes, 12, 30*time.Second)
	if err := hw.RemoveDevice(7); err != nil {
		t.Fatal(err)
	}
	waitAllocatable(t, ctx, inf2Node, neuronRes, 11, 30*time.Second)
	if err := hw.RestoreDevice(7); err != nil {
		t.Fatal(err)
	}
	waitAllocatable(t, ctx, inf2Node, neuronRes, 12, 30*time.Second)
	waitAllocatable(t, ctx, inf2Node, coreRes, 24, 30*time.Second)
}

// waitKubeletDevices waits until the node's kubelet has want healthy aws.amazon.com/neuron
// devices from its device plugin (RealNode.KubeletDevices).
func waitKubeletDevices(t *testing.T, ctx context.Context, node string, want int) {
	t.Helper()
	n := framework.L.RealNode(node)
	framework.WaitFor(t, ctx, 60*time.Second, fmt.Sprintf("the kubelet of %s to hold %d healthy %s", node, want, neuronRes), func(ctx context.Context) (bool, string, error) {
		got, err := n.KubeletDevices(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		return got[string(neuronRes)] == want, fmt.Sprint(got), nil
	})
}

func containerID(t *testing.T, ctx context.Context, ns, name string) string {
	t.Helper()
	p, err := framework.L.Client().CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].ContainerID == "" {
		t.Fatalf("pod %s has no container: %s", name, framework.DescribePod(ctx, p))
	}
	cs := p.Status.ContainerStatuses[0]
	if cs.RestartCount != 0 {
		t.Errorf("pod %s: container restarted %d times", name, cs.RestartCount)
	}
	return cs.ContainerID
}

func waitNodeReady(t *testing.T, ctx context.Context, node string) {
	t.Helper()
	framework.WaitFor(t, ctx, 60*time.Second, "node "+node+" Ready", func(ctx context.Context) (bool, string, error) {
		n, err := framework.L.Client().CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionTrue, c.Message, nil
			}
		}
		return false, "no Ready condition", nil
	})
}

// waitPodEvent waits for an event of the pod whose message contains message.
func waitPodEvent(t *testing.T, ctx context.Context, ns, pod, message string) {
	t.Helper()
	framework.WaitFor(t, ctx, 60*time.Second, "an event of pod "+pod+" saying "+message, func(ctx context.Context) (bool, string, error) {
		events, err := framework.L.Client().CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod})
		if err != nil {
			return false, err.Error(), nil
		}
		var seen []string
		for _, e := range events.Items {
			if strings.Contains(e.Message, message) {
				return true, "", nil
			}
			seen = append(seen, e.Reason+": "+e.Message)
		}
		return false, strings.Join(seen, " | "), nil
	})
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}
