//go:build e2e

package realnode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/lab"
	"github.com/kube-neuron/kube-neuron/internal/topology"
	"github.com/kube-neuron/kube-neuron/test/e2e/framework"
)

// The chart's my-scheduler and extender pods, and the Lease my-scheduler's replicas elect their
// leader on (the same in both modes).
const (
	mySchedulerPods = "app.kubernetes.io/name=my-scheduler,app.kubernetes.io/instance=" + lab.ChartRelease
	extenderPods    = "app.kubernetes.io/name=neuron-scheduler-extender,app.kubernetes.io/instance=" + lab.ChartRelease
	mySchedulerNS   = "kube-system"
	mySchedulerLock = "my-scheduler"
)

// The container my-scheduler runs in each mode (the chart's names; the images have the same).
const (
	extenderModeContainer = "kube-scheduler"
	pluginModeContainer   = "neuron-kube-scheduler"
)

// TestChartSwitchesToPluginOnRealNodes upgrades the lab's release from my-scheduler's extender
// mode (the stock kube-scheduler calling the extender, as the lab installs it) to its plugin mode
// (neuron-kube-scheduler from its image, pulled by the system node's containerd) with `helm
// upgrade`, as a user migrates, and back: the pod the extender placed keeps its container and
// devices, the extender's pods go, the plugin refuses seven devices on the trn1.32xlarge with the
// seeds' message and places new pods on the real nodes around the running pod's devices, served
// by the device plugin; back in the extender mode, the pods the plugin placed keep theirs, and
// the extender gives a new pod the devices nobody holds.
func TestChartSwitchesToPluginOnRealNodes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	ctx = klog.NewContext(ctx, klog.Background().WithValues("test", t.Name()))
	c := framework.L.Client()

	before := mySchedulerRuns(t, ctx, extenderModeContainer)
	ns := newNamespace(t, ctx)
	framework.Apply(t, ctx, "examples/extender/trn1-four-devices.yaml", ns)
	four := runningPod(t, ctx, ns, "trn1-four-devices")

	reverted := false
	t.Cleanup(func() {
		if reverted {
			return
		}
		// Back to the mode the other tests of the tier expect.
		ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
		defer cancel()
		upgradeChart(t, ctx)
		mySchedulerRuns(t, ctx, extenderModeContainer)
	})
	begin := time.Now()
	upgradeChart(t, ctx, "scheduler.customScheduler.mode=plugin")
	plugin := mySchedulerRuns(t, ctx, pluginModeContainer)
	if plugin.Name == before.Name {
		t.Errorf("my-scheduler's pod %s was not replaced by the upgrade", plugin.Name)
	}
	framework.WaitFor(t, ctx, 90*time.Second, "the extender's pods to be gone", func(ctx context.Context) (bool, string, error) {
		pods, err := c.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: extenderPods})
		if err != nil {
			return false, err.Error(), nil
		}
		return len(pods.Items) == 0, fmt.Sprintf("%d extender pods", len(pods.Items)), nil
	})
	t.Logf("my-scheduler runs the plugin (pod %s) %v after helm upgrade started", plugin.Name, time.Since(begin).Round(100*time.Millisecond))
	four.check(t, ctx, "the upgrade to the plugin mode")

	// Seven devices: trn1-a has twelve free, so the scheduler's own fit check passes the node to
	// the plugin, which refuses the count with the seeds' message.
	framework.Apply(t, ctx, "examples/extender/trn1-seven-devices.yaml", ns)
	waitPodEvent(t, ctx, ns, "trn1-seven-devices", "Instance type trn1.32xlarge does not support requests for device: 7. Please request a different number of devices.")
	if p, err := c.CoreV1().Pods(ns).Get(ctx, "trn1-seven-devices", metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" {
		t.Errorf("trn1-seven-devices was bound (%v): %+v", err, p)
	}
	deletePod(t, ctx, ns, "trn1-seven-devices")

	// New pods: placed by the plugin (the extender is gone) around the first pod's devices.
	for _, f := range []string{"trn1-eight-devices", "inf2-three-devices"} {
		framework.Apply(t, ctx, filepath.Join("examples", "extender", f+".yaml"), ns)
	}
	eight := runningPod(t, ctx, ns, "trn1-eight-devices")
	inf2 := runningPod(t, ctx, ns, "inf2-three-devices")
	if eight.rec.Node != trn1Node || inf2.rec.Node != inf2Node {
		t.Errorf("the plugin placed trn1-eight-devices on %s and inf2-three-devices on %s; want %s and %s", eight.rec.Node, inf2.rec.Node, trn1Node, inf2Node)
	}
	if d := eight.rec.Containers[0].Devices; len(d) != 8 || !validDeviceSet(t, "trn1.32xlarge", d) {
		t.Errorf("eight devices %v are not an aligned block", d)
	}
	if d := inf2.rec.Containers[0].Devices; len(d) != 3 || !validDeviceSet(t, "inf2.48xlarge", d) {
		t.Errorf("three devices %v on the inf2.48xlarge ring are not contiguous", d)
	}
	if shared := sharedDevices(four.rec, eight.rec); len(shared) > 0 {
		t.Errorf("devices %v went to trn1-four-devices (placed by the extender) and trn1-eight-devices (by the plugin)", shared)
	}
	// my-scheduler did all this without a restart.
	if now := mySchedulerRuns(t, ctx, pluginModeContainer); now.Name != plugin.Name {
		t.Errorf("my-scheduler's pod changed from %s to %s while the plugin scheduled", plugin.Name, now.Name)
	}

	// Back to the extender mode: every running pod keeps its devices, and the extender, started
	// afresh, gives a new pod the four devices of trn1-a that nobody holds.
	begin = time.Now()
	upgradeChart(t, ctx)
	mySchedulerRuns(t, ctx, extenderModeContainer)
	reverted = true
	t.Logf("back to the extender mode in %v", time.Since(begin).Round(100*time.Millisecond))
	for _, p := range []*placed{four, eight, inf2} {
		p.check(t, ctx, "the upgrade back to the extender mode")
	}
	applyRenamed(t, ctx, "examples/extender/trn1-four-devices.yaml", ns, "trn1-four-devices", "trn1-four-more")
	more := runningPod(t, ctx, ns, "trn1-four-more")
	if more.rec.Node != trn1Node {
		t.Errorf("the extender placed trn1-four-more on %s, want %s", more.rec.Node, trn1Node)
	}
	for _, p := range []*placed{four, eight} {
		if shared := sharedDevices(p.rec, more.rec); len(shared) > 0 {
			t.Errorf("devices %v went to %s and trn1-four-more", shared, p.name)
		}
	}
}

// placed is a running Neuron pod: its record, checked against what its containers see, and its
// first container's ID.
type placed struct {
	ns, name, id string
	rec          *allocation.Record
}

func runningPod(t *testing.T, ctx context.Context, ns, name string) *placed {
	t.Helper()
	rec := checkRecordRuns(t, ctx, ns, name)
	return &placed{ns: ns, name: name, id: containerID(t, ctx, ns, name), rec: rec}
}

// check says whether the pod still runs the same container, never restarted, with the same
// record, which its containers still see.
func (p *placed) check(t *testing.T, ctx context.Context, after string) {
	t.Helper()
	if got := containerID(t, ctx, p.ns, p.name); got != p.id {
		t.Errorf("%s replaced the container of %s: %s, then %s", after, p.name, p.id, got)
	}
	if again := checkRecordRuns(t, ctx, p.ns, p.name); !reflect.DeepEqual(again, p.rec) {
		t.Errorf("%s changed the record of %s: %+v, then %+v", after, p.name, p.rec, again)
	}
}

// applyRenamed applies an example with every occurrence of name (the pod's and its container's)
// replaced by rename.
func applyRenamed(t *testing.T, ctx context.Context, example, ns, name, rename string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), example))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), rename+".yaml")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(string(raw), name, rename)), 0o644); err != nil {
		t.Fatal(err)
	}
	framework.Apply(t, ctx, path, ns)
}

// upgradeChart runs `helm upgrade` of the lab's release with the lab's values and sets, and
// waits until its pods are ready.
func upgradeChart(t *testing.T, ctx context.Context, sets ...string) {
	t.Helper()
	helm, err := framework.HelmPath()
	if err != nil {
		t.Fatal(err)
	}
	o := lab.ChartOptions{Helm: helm, Chart: filepath.Join(repoRoot(t), framework.Chart), Set: sets, Wait: 4 * time.Minute}
	if err := framework.L.InstallChart(ctx, o); err != nil {
		t.Fatal(err)
	}
}

// mySchedulerRuns waits until my-scheduler is one pod on the system node, running the container
// of the mode (its image of the same name) ready and never restarted, and holding the Lease: the
// scheduler that places my-scheduler's pods. It returns the pod.
func mySchedulerRuns(t *testing.T, ctx context.Context, container string) *corev1.Pod {
	t.Helper()
	c := framework.L.Client()
	var pod *corev1.Pod
	framework.WaitFor(t, ctx, 3*time.Minute, "my-scheduler to run "+container+" and lead", func(ctx context.Context) (bool, string, error) {
		pods, err := c.CoreV1().Pods(mySchedulerNS).List(ctx, metav1.ListOptions{LabelSelector: mySchedulerPods})
		if err != nil {
			return false, err.Error(), nil
		}
		if len(pods.Items) != 1 {
			var states []string
			for i := range pods.Items {
				p := &pods.Items[i]
				states = append(states, p.Name+": "+framework.DescribePod(ctx, p))
			}
			return false, fmt.Sprintf("%d pods: %s", len(pods.Items), strings.Join(states, "; ")), nil
		}
		p := &pods.Items[0]
		status := p.Name + ": " + framework.DescribePod(ctx, p)
		if len(p.Spec.Containers) != 1 || p.Spec.Containers[0].Name != container || !strings.Contains(p.Spec.Containers[0].Image, container) {
			return false, fmt.Sprintf("%s runs %v", p.Name, containerImages(p)), nil
		}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.RestartCount != 0 {
				return false, "", fmt.Errorf("my-scheduler's pod %s: container %s restarted %d times: %s", p.Name, cs.Name, cs.RestartCount, status)
			}
			if !strings.Contains(cs.Image, container) || cs.ImageID == "" {
				return false, fmt.Sprintf("%s: container status of image %q (%q)", p.Name, cs.Image, cs.ImageID), nil
			}
		}
		if p.DeletionTimestamp != nil || p.Spec.NodeName != lab.SystemNodeName || p.Status.Phase != corev1.PodRunning || !ready(p) {
			return false, status, nil
		}
		lease, err := c.CoordinationV1().Leases(mySchedulerNS).Get(ctx, mySchedulerLock, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		holder := ""
		if lease.Spec.HolderIdentity != nil {
			holder = *lease.Spec.HolderIdentity
		}
		// kube-scheduler's identity is its host name (the pod's name), "_" and a UUID.
		if !strings.HasPrefix(holder, p.Name+"_") {
			return false, fmt.Sprintf("Lease %s held by %q, not %s", mySchedulerLock, holder, p.Name), nil
		}
		pod = p
		return true, "", nil
	})
	return pod
}

func containerImages(p *corev1.Pod) []string {
	var out []string
	for _, c := range p.Spec.Containers {
		out = append(out, c.Name+"="+c.Image)
	}
	return out
}

// sharedDevices lists the devices two records on the same node both hold.
func sharedDevices(a, b *allocation.Record) []int {
	if a.Node != b.Node {
		return nil
	}
	var held, shared []int
	for _, c := range a.Containers {
		held = append(held, c.Devices...)
	}
	for _, c := range b.Containers {
		for _, d := range c.Devices {
			if slices.Contains(held, d) {
				shared = append(shared, d)
			}
		}
	}
	return shared
}

// validDeviceSet says whether the topology rules of the instance type let one container hold
// the devices (an aligned block on trn1, neighbours on inf2's ring).
func validDeviceSet(t *testing.T, instanceType string, devices []int) bool {
	t.Helper()
	it, err := topology.DefaultCatalog().Get(instanceType)
	if err != nil {
		t.Fatalf("instance type %q: %v", instanceType, err)
	}
	shape, err := topology.NewShape(it, 0)
	if err != nil {
		t.Fatal(err)
	}
	return shape.IsValidDeviceSet(devices)
}
