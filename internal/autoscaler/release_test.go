package autoscaler

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/kube-neuron/kube-neuron/internal/autoscaler/plan"
	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// heldNode is a node the autoscaler launched as it registers: the Neuron taint and the launching
// taint, Ready since readySince, advertising Neuron capacity when serving.
func heldNode(name, instanceType string, readySince time.Time, serving bool) *corev1.Node {
	n := launchedNode(name, instanceType, readySince)
	n.Spec.Taints = []corev1.Taint{plan.NeuronTaint(), LaunchingTaint()}
	if !serving {
		n.Status.Allocatable = nil
	}
	return n
}

// putNode creates or updates a node and waits until the controller's cache has that version.
func (e *env) putNode(c *Controller, node *corev1.Node) {
	e.t.Helper()
	nodes := e.client.CoreV1().Nodes()
	status := node.Status
	var err error
	if _, err = nodes.Get(context.Background(), node.Name, metav1.GetOptions{}); err == nil {
		node, err = nodes.Update(context.Background(), node, metav1.UpdateOptions{})
	} else {
		node, err = nodes.Create(context.Background(), node, metav1.CreateOptions{})
	}
	if err != nil {
		e.t.Fatal(err)
	}
	// The status is a subresource: an update of the node leaves it as it was.
	node.Status = status
	if node, err = nodes.UpdateStatus(context.Background(), node, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	// (The fake clientset sets no resourceVersion: compare what the controller reads.)
	waitFor(e.t, func() bool {
		n, err := c.nodes.Get(node.Name)
		return err == nil && equality.Semantic.DeepEqual(n.Spec, node.Spec) && equality.Semantic.DeepEqual(n.Status, node.Status) &&
			equality.Semantic.DeepEqual(n.Labels, node.Labels)
	})
}

// clearNomination does what the scheduler does when it fails to place a pod: it clears the
// pod's status.nominatedNodeName. It waits until the controller's cache shows it.
func (e *env) clearNomination(c *Controller, pod string) {
	e.t.Helper()
	if _, err := e.client.CoreV1().Pods("default").Patch(context.Background(), pod, "application/merge-patch+json",
		[]byte(`{"status":{"nominatedNodeName":null}}`), metav1.PatchOptions{}, "status"); err != nil {
		e.t.Fatal(err)
	}
	waitFor(e.t, func() bool {
		p, err := c.pods.Pods("default").Get(pod)
		return err == nil && p.Status.NominatedNodeName == ""
	})
}

// clearNominationHandled clears the pod's nomination and waits until the controller has
// handled the clear, including any nomination it writes again.
func (e *env) clearNominationHandled(c *Controller, pod string) {
	e.t.Helper()
	c.renominations.writing.Wait()
	n := c.renominations.handled.Load()
	e.clearNomination(c, pod)
	waitFor(e.t, func() bool { return c.renominations.handled.Load() > n })
	c.renominations.writing.Wait()
}

// taints returns the node's taint keys as the API server has them.
func (e *env) taints(node string) []string {
	e.t.Helper()
	n, err := e.client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, t := range n.Spec.Taints {
		out = append(out, t.Key)
	}
	return out
}

var (
	heldTaints     = []string{labels.NeuronTaintKey, LaunchingTaintKey}
	releasedTaints = []string{labels.NeuronTaintKey}
)

// actionIndex returns the index of the first action that matches, -1 if none does.
func actionIndex(actions []clienttesting.Action, verb, resource, subresource, name string) int {
	return slices.IndexFunc(actions, func(a clienttesting.Action) bool {
		n, ok := a.(interface{ GetName() string })
		return a.GetVerb() == verb && a.GetResource().Resource == resource && a.GetSubresource() == subresource && ok && n.GetName() == name
	})
}

// TestControllerReleasesANodeOnceItsPodsAreNominated: a launched node keeps its launching taint
// while it is not serving Neuron hardware. Once it serves, the controller nominates its pending
// pods again (the scheduler cleared the nomination, as it does when it fails to place a pod whose
// node is not up) and only then removes the taint.
func TestControllerReleasesANodeOnceItsPodsAreNominated(t *testing.T) {
	e := newEnv(t, devicePlugin, pendingPod(testPod("a").Neuron(1)))
	c, _ := e.controller()
	round(t, c)
	node := NodeName("inf1.xlarge", []string{"default/a"})

	// The node registers, Ready, but its device plugin has not advertised anything yet.
	e.putNode(c, heldNode(node, "inf1.xlarge", t0, false))
	e.clearNomination(c, "a")
	round(t, c)
	if got := e.taints(node); !slices.Equal(got, heldTaints) {
		t.Errorf("taints %v of a node that serves no Neuron hardware yet, want %v", got, heldTaints)
	}
	if got := e.nominated("a"); got != node {
		t.Errorf("pod a nominated to %q, want %s", got, node)
	}

	// It serves now; the scheduler cleared the nomination again meanwhile.
	e.putNode(c, heldNode(node, "inf1.xlarge", t0, true))
	e.clearNomination(c, "a")
	e.client.ClearActions()
	round(t, c)
	if got := e.taints(node); !slices.Equal(got, releasedTaints) {
		t.Fatalf("taints %v, want %v: the node serves and its pod is nominated", got, releasedTaints)
	}
	if got := e.nominated("a"); got != node {
		t.Errorf("pod a nominated to %q, want %s", got, node)
	}
	actions := e.client.Actions()
	nominated, released := actionIndex(actions, "patch", "pods", "status", "a"), actionIndex(actions, "patch", "nodes", "", node)
	if nominated < 0 || released < 0 || nominated > released {
		t.Errorf("nomination at action %d, release at %d: the pod must be nominated before the node takes pods", nominated, released)
	}

	// Released, the node still counts as launching with its pod for settleAfterReady, so that
	// the scheduler has time to place the pod before it is planned again.
	e.provider.setLaunching(node, false)
	e.putNode(c, func() *corev1.Node {
		n := heldNode(node, "inf1.xlarge", t0, true)
		n.Spec.Taints = n.Spec.Taints[:1]
		return n
	}())
	e.clock.Add(settleAfterReady - time.Second)
	round(t, c)
	if c.fleet.get(node).phase != phaseLaunching || len(e.provider.launched()) != 1 {
		t.Errorf("the node settled %s after its release (launches %d), want it launching for %s", settleAfterReady-time.Second, len(e.provider.launched()), settleAfterReady)
	}
	e.clock.Add(time.Second)
	round(t, c)
	if c.fleet.get(node).phase == phaseLaunching {
		t.Errorf("the node still launching %s after its release", settleAfterReady)
	}
}

// TestControllerHoldsANodeUntilItAdvertisesWhatItsPodsAskFor: the device plugin registers its
// resources one after the other, and the kubelet posts each when its status next goes out (10 s
// apart at worst). A node that advertises whole devices but not yet the cores its pod asks for is
// held: released then, the scheduler would turn the pod away and place it elsewhere.
func TestControllerHoldsANodeUntilItAdvertisesWhatItsPodsAskFor(t *testing.T) {
	e := newEnv(t, devicePlugin, pendingPod(testPod("a").NeuronCores(2)))
	c, _ := e.controller()
	round(t, c)
	node := NodeName("inf1.xlarge", []string{"default/a"})

	devicesOnly := heldNode(node, "inf1.xlarge", t0, true)
	e.putNode(c, devicesOnly)
	round(t, c)
	if got := e.taints(node); !slices.Equal(got, heldTaints) {
		t.Fatalf("taints %v of a node that advertises %v, want %v: its pod asks for %s", got, devicesOnly.Status.Allocatable, heldTaints, topology.ResourceNeuronCore)
	}

	withCores := devicesOnly.DeepCopy()
	withCores.Status.Allocatable[corev1.ResourceName(topology.ResourceNeuronCore)] = qty(4)
	e.putNode(c, withCores)
	round(t, c)
	if got := e.taints(node); !slices.Equal(got, releasedTaints) {
		t.Errorf("taints %v of a node that advertises its pod's cores, want %v", got, releasedTaints)
	}
}

// twoLaunchingNodes launches an inf1.xlarge for pod a and an inf2.xlarge for pod b, and returns
// their names.
func twoLaunchingNodes(t *testing.T) (e *env, c *Controller, a, b string) {
	t.Helper()
	e = newEnv(t, devicePlugin,
		pendingPod(testPod("a").Neuron(1).Selector(labels.InstanceType, "inf1.xlarge")),
		pendingPod(testPod("b").Neuron(1).Selector(labels.InstanceType, "inf2.xlarge")))
	c, _ = e.controller()
	round(t, c)
	return e, c, NodeName("inf1.xlarge", []string{"default/a"}), NodeName("inf2.xlarge", []string{"default/b"})
}

// TestControllerReleasesLaunchingNodesTogether: a node that serves waits for the other launching
// nodes that hold pods planned onto them, so that a pod whose node is still booting cannot take
// room planned for another pod; it waits releaseWait at most.
func TestControllerReleasesLaunchingNodesTogether(t *testing.T) {
	e, c, a, b := twoLaunchingNodes(t)
	if got := e.provider.launched(); len(got) != 2 {
		t.Fatalf("launches %+v, want %s and %s", got, a, b)
	}

	e.putNode(c, heldNode(a, "inf1.xlarge", t0, true))
	round(t, c)
	if got := e.taints(a); !slices.Equal(got, heldTaints) {
		t.Errorf("taints %v of %s while %s is still booting, want %v", got, a, b, heldTaints)
	}
	e.clock.Add(releaseWait - time.Second)
	round(t, c)
	if got := e.taints(a); !slices.Equal(got, heldTaints) {
		t.Errorf("taints %v of %s %s after it served, want %v", got, a, releaseWait-time.Second, heldTaints)
	}
	e.clock.Add(time.Second)
	round(t, c)
	if got := e.taints(a); !slices.Equal(got, releasedTaints) {
		t.Errorf("taints %v of %s %s after it served, want %v: it waits no longer", got, a, releaseWait, releasedTaints)
	}

	// b comes up: nothing else holds pods, it goes at once.
	e.putNode(c, heldNode(b, "inf2.xlarge", e.clock.Now(), true))
	round(t, c)
	if got := e.taints(b); !slices.Equal(got, releasedTaints) {
		t.Errorf("taints %v of %s, want %v", got, b, releasedTaints)
	}
}

// TestControllerReleasesServingNodesInOneRound: nodes that all serve with their pods nominated
// are released in the same round.
func TestControllerReleasesServingNodesInOneRound(t *testing.T) {
	e, c, a, b := twoLaunchingNodes(t)
	e.putNode(c, heldNode(a, "inf1.xlarge", t0, true))
	e.putNode(c, heldNode(b, "inf2.xlarge", t0, false))
	round(t, c)
	e.putNode(c, heldNode(b, "inf2.xlarge", t0, true))
	round(t, c)
	for _, n := range []string{a, b} {
		if got := e.taints(n); !slices.Equal(got, releasedTaints) {
			t.Errorf("taints %v of %s, want %v", got, n, releasedTaints)
		}
	}
}

// TestControllerReleasesANodeWhosePodsAreGone: deleted planned pods hold nothing.
func TestControllerReleasesANodeWhosePodsAreGone(t *testing.T) {
	e, c, a, _ := twoLaunchingNodes(t)
	e.putNode(c, heldNode(a, "inf1.xlarge", t0, true))
	// b's node never comes up, and b is deleted: a's node waits for nothing.
	if err := e.client.CoreV1().Pods("default").Delete(context.Background(), "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { _, err := c.pods.Pods("default").Get("b"); return err != nil })
	round(t, c)
	if got := e.taints(a); !slices.Equal(got, releasedTaints) {
		t.Errorf("taints %v of %s, want %v: the pod planned onto the other node is gone", got, a, releasedTaints)
	}

	// a is deleted before its node serves: the node is released as soon as it serves.
	e2 := newEnv(t, devicePlugin, pendingPod(testPod("a").Neuron(1)))
	c2, _ := e2.controller()
	round(t, c2)
	node := NodeName("inf1.xlarge", []string{"default/a"})
	if err := e2.client.CoreV1().Pods("default").Delete(context.Background(), "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { _, err := c2.pods.Pods("default").Get("a"); return err != nil })
	e2.putNode(c2, heldNode(node, "inf1.xlarge", t0, true))
	round(t, c2)
	if got := e2.taints(node); !slices.Equal(got, releasedTaints) {
		t.Errorf("taints %v of a node whose pod was deleted, want %v", got, releasedTaints)
	}
}

// TestControllerRestartedReleasesAHeldNode: a restarted controller knows the node's pods from
// its planned-pods annotation, nominates them and releases the node.
func TestControllerRestartedReleasesAHeldNode(t *testing.T) {
	e := newEnv(t, devicePlugin, pendingPod(testPod("a").Neuron(1)))
	c, _ := e.controller()
	round(t, c)
	node := NodeName("inf1.xlarge", []string{"default/a"})
	restarted, _ := e.controller()
	e.putNode(restarted, heldNode(node, "inf1.xlarge", t0, true))
	e.clearNomination(restarted, "a")
	round(t, restarted)
	if got := e.taints(node); !slices.Equal(got, releasedTaints) {
		t.Errorf("taints %v, want %v", got, releasedTaints)
	}
	if got := e.nominated("a"); got != node {
		t.Errorf("pod a nominated to %q, want %s", got, node)
	}
}

// TestControllerReleasesDespiteFailedNominations: a node whose pods cannot be nominated is held
// for releaseWait, then released.
func TestControllerReleasesDespiteFailedNominations(t *testing.T) {
	e := newEnv(t, devicePlugin, pendingPod(testPod("a").Neuron(1)))
	c, _ := e.controller()
	round(t, c)
	node := NodeName("inf1.xlarge", []string{"default/a"})
	e.putNode(c, heldNode(node, "inf1.xlarge", t0, true))
	e.clearNomination(c, "a")
	e.client.PrependReactor("patch", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("the API server is unavailable")
	})
	round(t, c)
	if got := e.taints(node); !slices.Equal(got, heldTaints) {
		t.Errorf("taints %v while the pod is not nominated, want %v", got, heldTaints)
	}
	e.clock.Add(releaseWait)
	round(t, c)
	if got := e.taints(node); !slices.Equal(got, releasedTaints) {
		t.Errorf("taints %v %s after the node served, want %v", got, releaseWait, releasedTaints)
	}
}

// TestControllerLeavesOtherNodesAlone: a node the autoscaler did not launch keeps the launching
// taint, whatever it serves and however long.
func TestControllerLeavesOtherNodesAlone(t *testing.T) {
	other := heldNode("karpenter-node", "inf1.xlarge", t0.Add(-time.Hour), true)
	delete(other.Labels, LaunchedByLabel)
	e := newEnv(t, devicePlugin, other)
	c, _ := e.controller()
	round(t, c)
	e.clock.Add(DefaultRegisterTimeout + releaseWait)
	round(t, c)
	if got := e.taints(other.Name); !slices.Equal(got, heldTaints) {
		t.Errorf("taints %v of a node the autoscaler did not launch, want them untouched: %v", got, heldTaints)
	}
	if i := actionIndex(e.client.Actions(), "patch", "nodes", "", other.Name); i >= 0 {
		t.Errorf("the node was patched: %v", e.client.Actions()[i])
	}
}

// TestControllerHoldsADRANodeUntilItsDevicesArePublished: a DRA node serves once the Neuron DRA
// driver published its devices.
func TestControllerHoldsADRANodeUntilItsDevicesArePublished(t *testing.T) {
	node := heldNode("neuron-dra-abc", "inf1.xlarge", t0, false)
	node.Labels[labels.AllocationMode] = labels.AllocationModeDRA
	e := newEnv(t, node)
	c, _ := e.controller()
	round(t, c)
	if got := e.taints(node.Name); !slices.Equal(got, heldTaints) {
		t.Errorf("taints %v of a DRA node without ResourceSlices, want %v", got, heldTaints)
	}
	slice := &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node.Name + "-neuron"},
		Spec: resourcev1.ResourceSliceSpec{
			Driver: plan.DeviceClass, NodeName: ptr.To(node.Name), Pool: resourcev1.ResourcePool{Name: node.Name, ResourceSliceCount: 1},
			Devices: []resourcev1.Device{{Name: "neuron0"}},
		},
	}
	if _, err := e.client.ResourceV1().ResourceSlices().Create(context.Background(), slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { _, err := c.rslices.Get(slice.Name); return err == nil })
	round(t, c)
	if got := e.taints(node.Name); !slices.Equal(got, releasedTaints) {
		t.Errorf("taints %v of a DRA node that published its devices, want %v", got, releasedTaints)
	}
}

// TestControllerNominatesAgainWhenTheSchedulerClears: after the release, a nomination the
// scheduler clears is written again at once, without waiting for a round, and once only; a pod
// whose node is still held is not nominated again between rounds (the scheduler would clear it
// at each attempt).
func TestControllerNominatesAgainWhenTheSchedulerClears(t *testing.T) {
	e := newEnv(t, devicePlugin, pendingPod(testPod("a").Neuron(1)))
	c, _ := e.controller()
	round(t, c)
	node := NodeName("inf1.xlarge", []string{"default/a"})
	e.putNode(c, heldNode(node, "inf1.xlarge", t0, false))
	e.clearNominationHandled(c, "a")
	if got := e.nominated("a"); got != "" {
		t.Errorf("pod a nominated to %q between rounds while its node is held, want no nomination until the next round", got)
	}

	e.putNode(c, heldNode(node, "inf1.xlarge", t0, true))
	round(t, c)
	if got := e.taints(node); !slices.Equal(got, releasedTaints) {
		t.Fatalf("taints %v, want %v", got, releasedTaints)
	}
	// (The cache may never show the cleared nomination: it is written again at once.)
	if _, err := e.client.CoreV1().Pods("default").Patch(context.Background(), "a", "application/merge-patch+json",
		[]byte(`{"status":{"nominatedNodeName":null}}`), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return e.nominated("a") == node })
	waitFor(t, func() bool {
		p, err := c.pods.Pods("default").Get("a")
		return err == nil && p.Status.NominatedNodeName == node
	})

	// Once: the pod failed on its own node again.
	e.clearNominationHandled(c, "a")
	if got := e.nominated("a"); got != "" {
		t.Errorf("pod a nominated to %q again, want it left to the next round's plan", got)
	}
}

// TestControllerOffersAMovedPodOnItsNewNodeOnly: the scheduler put a pod planned elsewhere on a
// launching node, and the pods planned onto that node go on a new one. The first node still lists
// them; offered on both, they would be planned again, and a node launched for them, every round.
func TestControllerOffersAMovedPodOnItsNewNodeOnly(t *testing.T) {
	trn1Pod := func(name string, devices int) *corev1.Pod {
		return pendingPod(testPod(name).Neuron(int64(devices)).Selector(labels.InstanceFamily, "trn1"))
	}
	e := newEnv(t, devicePlugin, trn1Pod("a", 8), trn1Pod("b", 8))
	c, _ := e.controller()
	round(t, c)
	first := e.provider.launched()
	if len(first) != 1 {
		t.Fatalf("launches %+v, want one node for a and b", first)
	}
	x := first[0].Name
	e.putNode(c, heldNode(x, "trn1.32xlarge", t0, false))
	// The scheduler put c, 16 devices, on x: a and b no longer fit there.
	e.createPod(c, boundPod(testPod("c").Neuron(16).Selector(labels.InstanceFamily, "trn1"), x))
	round(t, c)
	if got := e.provider.launched(); len(got) != 2 {
		t.Fatalf("launches %+v, want a second node for a and b", got)
	}
	y := e.provider.launched()[1].Name
	for range 3 {
		round(t, c)
	}
	if got := e.provider.launched(); len(got) != 2 {
		t.Errorf("%d launches, want 2: a and b stay on %s, the node they were moved to", len(got), y)
	}
	for _, p := range []string{"a", "b"} {
		if got := e.nominated(p); got != y {
			t.Errorf("pod %s nominated to %q, want %s", p, got, y)
		}
	}
}

// TestControllerCountsAPodBoundMidRoundOnce: the scheduler binds a planned pod while a round
// runs, after the round listed it pending. The launching node offers it once, as the planned pod
// it was, not also as a bound one: counted twice, it has no room beside itself and gets a node of
// its own.
func TestControllerCountsAPodBoundMidRoundOnce(t *testing.T) {
	pending := pendingPod(testPod("a").Neuron(4).Selector(labels.InstanceFamily, "trn1"))
	e := newEnv(t, devicePlugin, pending)
	c, _ := e.controller()
	round(t, c)
	node := NodeName("trn1.32xlarge", []string{"default/a"})
	e.putNode(c, heldNode(node, "trn1.32xlarge", t0, true))
	listed := map[string]plan.PodDemand{"default/a": plan.NewPodDemand(pending, nil)} // as the round listed it
	bound := boundPod(testPod("a").Neuron(4).Selector(labels.InstanceFamily, "trn1"), node)
	if _, err := e.client.CoreV1().Pods("default").Update(context.Background(), bound, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return len(c.podsOn(node)) == 1 })
	insts, err := c.instances(context.Background(), e.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	nodes := map[string]*corev1.Node{}
	if n, err := c.nodes.Get(node); err == nil {
		nodes[node] = n
	}
	opts, _ := c.launching(context.Background(), insts, nodes, listed, e.clock.Now())
	if len(opts) != 1 {
		t.Fatalf("launching nodes %+v, want %s", opts, node)
	}
	if len(opts[0].Pods) != 1 || len(opts[0].Bound) != 0 {
		t.Errorf("node %s offers planned %d and bound %d pods, want pod a once, as planned", node, len(opts[0].Pods), len(opts[0].Bound))
	}
}

// TestControllerReleasesThroughTheReleaseClient: the release goes through ReleaseClient, whose
// rate limiter the round's nominations and events have not drained.
func TestControllerReleasesThroughTheReleaseClient(t *testing.T) {
	node := heldNode("neuron-inf1-xlarge-abc", "inf1.xlarge", t0, true)
	e := newEnv(t, devicePlugin, node)
	releaser := fake.NewClientset(node.DeepCopy())
	c, _ := e.controller(func(o *ControllerOptions) { o.ReleaseClient = releaser })
	round(t, c)
	if got := e.taints(node.Name); !slices.Equal(got, heldTaints) {
		t.Errorf("taints %v through Client, want them untouched: %v", got, heldTaints)
	}
	n, err := releaser.CoreV1().Nodes().Get(context.Background(), node.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(n.Spec.Taints) != 1 || n.Spec.Taints[0] != plan.NeuronTaint() {
		t.Errorf("taints %v through ReleaseClient, want the Neuron taint only", n.Spec.Taints)
	}
}

// TestControllerReleasesTheFirstPodsNodeFirst: the node of the pod the scheduler will try first
// (highest priority, then the oldest) is released before the others, alone, so that this pod
// finds its node released and does not take room planned for another.
func TestControllerReleasesTheFirstPodsNodeFirst(t *testing.T) {
	for _, tc := range []struct {
		name         string
		prioA, prioB int32
		createdB     time.Time
		first        string
	}{
		{name: "the oldest", createdB: t0.Add(-time.Hour), first: "b"},
		{name: "the highest priority", prioA: 100, createdB: t0.Add(-time.Hour), first: "a"},
		{name: "same second, by name", createdB: t0, first: "a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := pendingPod(testPod("a").Neuron(1).Selector(labels.InstanceType, "inf1.xlarge"))
			a.CreationTimestamp, a.Spec.Priority = metav1.NewTime(t0), ptr.To(tc.prioA)
			b := pendingPod(testPod("b").Neuron(1).Selector(labels.InstanceType, "inf2.xlarge"))
			b.CreationTimestamp, b.Spec.Priority = metav1.NewTime(tc.createdB), ptr.To(tc.prioB)
			e := newEnv(t, devicePlugin, a, b)
			c, _ := e.controller()
			round(t, c)
			nodes := map[string]string{"a": NodeName("inf1.xlarge", []string{"default/a"}), "b": NodeName("inf2.xlarge", []string{"default/b"})}
			e.putNode(c, heldNode(nodes["a"], "inf1.xlarge", t0, true))
			e.putNode(c, heldNode(nodes["b"], "inf2.xlarge", t0, true))
			e.client.ClearActions()
			round(t, c)
			actions := e.client.Actions()
			ia, ib := actionIndex(actions, "patch", "nodes", "", nodes["a"]), actionIndex(actions, "patch", "nodes", "", nodes["b"])
			if ia < 0 || ib < 0 {
				t.Fatalf("releases at actions %d and %d, want both", ia, ib)
			}
			if got := map[bool]string{true: "a", false: "b"}[ia < ib]; got != tc.first {
				t.Errorf("the node of pod %s was released first, want pod %s's", got, tc.first)
			}
		})
	}
}

// TestControllerUntaintsANodeWhoseTaintsMoved: the launching taint is removed by its index, if it
// is still there; when the node's taints changed since the round read it (the node lifecycle
// controller removed node.kubernetes.io/not-ready before it), the API server refuses the patch
// and the controller tries again with the cache's newer copy, in the same round.
func TestControllerUntaintsANodeWhoseTaintsMoved(t *testing.T) {
	e := newEnv(t)
	c, _ := e.controller()
	node := heldNode("moved", "inf1.xlarge", t0, true)
	e.putNode(c, node)

	stale := node.DeepCopy()
	stale.ResourceVersion = "1" // the round's copy: not-ready was still first
	stale.Spec.Taints = append([]corev1.Taint{{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule}}, stale.Spec.Taints...)
	refused := 0
	e.client.PrependReactor("patch", "nodes", func(action clienttesting.Action) (bool, runtime.Object, error) {
		patch := string(action.(clienttesting.PatchAction).GetPatch())
		if strings.Contains(patch, `"/spec/taints/2"`) { // the stale index: the API server's test op fails
			refused++
			return true, nil, apierrors.NewInvalid(schema.GroupKind{Kind: "Node"}, "moved", nil)
		}
		return false, nil, nil
	})
	if err := c.untaint(context.Background(), stale, capacityMeta{}); err != nil {
		t.Fatalf("untaint: %v", err)
	}
	if refused != 1 {
		t.Errorf("%d patches refused, want the stale one", refused)
	}
	if got := e.taints("moved"); !slices.Equal(got, releasedTaints) {
		t.Errorf("taints %v, want %v", got, releasedTaints)
	}
}
