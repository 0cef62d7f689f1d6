package extender

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
	"k8s.io/utils/ptr"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/testkit"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// nominated creates a pending pod nominated to node (status.nominatedNodeName, as the
// autoscaler or a preemption sets it) and waits until the extender's informer shows it.
func nominated(t *testing.T, ctx context.Context, e *Extender, client *fake.Clientset, b *testkit.PodWrapper, node string) *corev1.Pod {
	t.Helper()
	pod := b.Obj()
	pod.Status.NominatedNodeName = node
	created := createPod(t, ctx, client, pod)
	waitFor(t, 5*time.Second, "the informer to show "+pod.Name, func() bool {
		_, ok, _ := e.pods.GetStore().GetByKey(pod.Namespace + "/" + pod.Name)
		return ok
	})
	return created
}

// TestNominatedPodsKeepTheirRoom: the autoscaler launches a node for a pod and nominates the pod
// to it; another pod the scheduler tries first must not take that room (in the lab's 20-pod
// test a pod took a planned inf2.24xlarge's room and its own cheaper node stayed empty). The
// kube-scheduler sets the room aside for its own resources only, per resource name.
func TestNominatedPodsKeepTheirRoom(t *testing.T) {
	e, client, ctx := startExtender(t, cluster()...)
	nominated(t, ctx, e, client, testkit.MakePod().Name("big").Neuron(16), "trn-empty")

	small := testkit.MakePod().Name("small").Neuron(1).Obj()
	passed, failed, _ := e.Filter(ctx, small, []string{"trn-empty", "trn-partly"})
	if len(passed) != 1 || passed[0] != "trn-partly" {
		t.Fatalf("passed %v, want only trn-partly: trn-empty's 16 devices are held for default/big", passed)
	}
	if msg := failed["trn-empty"]; !strings.Contains(msg, "held for the pods nominated to it (default/big)") {
		t.Errorf("trn-empty's reason %q does not name the nominated pod", msg)
	}
	// The nominated pod itself is not held off by its own nomination.
	if passed, _, _ := e.Filter(ctx, testkit.MakePod().Name("big").Neuron(16).Obj(), []string{"trn-empty"}); len(passed) != 1 {
		t.Errorf("the nominated pod does not pass its own node: %v", passed)
	}
	// A pod of higher priority is not held off: the kube-scheduler would preempt for it.
	urgent := testkit.MakePod().Name("urgent").Neuron(1).Obj()
	urgent.Spec.Priority = ptr.To[int32](1000)
	if passed, _, _ := e.Filter(ctx, urgent, []string{"trn-empty"}); len(passed) != 1 {
		t.Errorf("a pod of higher priority is held off by a nomination: %v", passed)
	}
	// Bind chooses beside the room too: a bind the scheduler already decided on fails rather
	// than take it.
	p := createPod(t, ctx, client, testkit.MakePod().Name("small").Neuron(1).Obj())
	if err := e.Bind(ctx, p.Namespace, p.Name, p.UID, "trn-empty"); err == nil || !strings.Contains(err.Error(), "beside the pods nominated to it (default/big)") {
		t.Errorf("bind of another pod into the held room: %v", err)
	}
}

// TestNominatedPodsShareTheNode: room is held for what the nominated pods take, chosen as their
// bind would choose it; the rest of the node stays open, and a pod bound beside them leaves
// their sets whole.
func TestNominatedPodsShareTheNode(t *testing.T) {
	e, client, ctx := startExtender(t, cluster()...)
	nominated(t, ctx, e, client, testkit.MakePod().Name("eight").Neuron(8), "trn-empty")
	four := createPod(t, ctx, client, testkit.MakePod().Name("four").Neuron(4).Obj())
	if passed, failed, _ := e.Filter(ctx, four, []string{"trn-empty"}); len(passed) != 1 {
		t.Fatalf("4 devices beside 8 held on 16: failed %v", failed)
	}
	if err := e.Bind(ctx, four.Namespace, four.Name, four.UID, "trn-empty"); err != nil {
		t.Fatal(err)
	}
	// The nominated pod still gets its 8.
	eight := getPod(t, ctx, client, "default", "eight")
	if err := e.Bind(ctx, eight.Namespace, eight.Name, eight.UID, "trn-empty"); err != nil {
		t.Fatalf("the nominated pod lost its room: %v", err)
	}
	// Now 4 are left: a nomination that no longer fits holds nothing.
	nominated(t, ctx, e, client, testkit.MakePod().Name("sixteen").Neuron(16), "trn-empty")
	if passed, failed, _ := e.Filter(ctx, testkit.MakePod().Name("last").Neuron(4).Obj(), []string{"trn-empty"}); len(passed) != 1 {
		t.Errorf("a nomination that cannot fit held the last 4 devices: %v", failed)
	}
}

// TestNominatedPodWithARecordCountsOnce: a nominated pod whose bind is under way already has its
// record; its room is counted from the record, not held a second time.
func TestNominatedPodWithARecordCountsOnce(t *testing.T) {
	e, client, ctx := startExtender(t, cluster()...)
	b := testkit.MakePod().Name("binding").Neuron(8).Record(recordOn("trn-empty", 0, 1, 2, 3, 4, 5, 6, 7)).AllocTime(1)
	b.Node("") // the record is written, the binding not seen yet
	nominated(t, ctx, e, client, b, "trn-empty")
	if passed, failed, _ := e.Filter(ctx, testkit.MakePod().Name("p").Neuron(8).Obj(), []string{"trn-empty"}); len(passed) != 1 {
		t.Errorf("8 devices are free beside the recorded 8: failed %v", failed)
	}
}

// TestPodWaitsForTheNodeLaunchedForIt: a pod neuron-autoscaler launched a node for
// (kube-neuron.io/planned-node) stays off every other node while that node holds pods off with
// kube-neuron.io/launching, and is free again once the node is released or gone.
func TestPodWaitsForTheNodeLaunchedForIt(t *testing.T) {
	launching := testkit.MakeNode().Name("trn-launching").InstanceType(trn1).Obj()
	launching.Spec.Taints = []corev1.Taint{{Key: labels.LaunchingTaintKey, Value: "true", Effect: corev1.TaintEffectNoSchedule}}
	e, client, ctx := startExtender(t, append(cluster(), launching)...)
	pod := testkit.MakePod().Name("planned").Neuron(1).Obj()
	pod.Annotations[labels.PlannedNodeAnnotation] = "trn-launching"
	passed, failed, _ := e.Filter(ctx, pod, []string{"trn-empty", "trn-launching"})
	if !slices.Equal(passed, []string{"trn-launching"}) {
		t.Fatalf("passed %v, want only the node launched for the pod", passed)
	}
	if msg := failed["trn-empty"]; !strings.Contains(msg, "waits for node trn-launching, which neuron-autoscaler launched for it") {
		t.Errorf("trn-empty's reason %q", msg)
	}
	// A node held far longer than the autoscaler ever holds one (the autoscaler stopped) holds
	// nothing.
	stale := launching.DeepCopy()
	stale.Name = "trn-stale"
	stale.CreationTimestamp = metav1.NewTime(time.Now().Add(-time.Hour))
	if _, err := client.CoreV1().Nodes().Create(ctx, stale, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the informer to show trn-stale", func() bool { _, err := e.nodes.Get("trn-stale"); return err == nil })
	old := testkit.MakePod().Name("old-plan").Neuron(1).Obj()
	old.Annotations[labels.PlannedNodeAnnotation] = "trn-stale"
	if passed, _, _ := e.Filter(ctx, old, []string{"trn-empty"}); len(passed) != 1 {
		t.Errorf("a node launched an hour ago and never released kept the pod off trn-empty: %v", passed)
	}
	// Released: the taint is gone, the pod may go anywhere.
	launching.Spec.Taints = nil
	if _, err := client.CoreV1().Nodes().Update(ctx, launching, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the released node to pass with the others", func() bool {
		passed, _, _ := e.Filter(ctx, pod, []string{"trn-empty", "trn-launching"})
		return len(passed) == 2
	})
	// A planned node that does not exist (deleted, or not registered yet) holds nothing.
	pod.Annotations[labels.PlannedNodeAnnotation] = "trn-gone"
	if passed, _, _ := e.Filter(ctx, pod, []string{"trn-empty"}); len(passed) != 1 {
		t.Errorf("a planned node that does not exist kept the pod off trn-empty: %v", passed)
	}
}

// TestPrioritizeRanksThePlannedNodeFirst: once the node launched for a pod is released, the
// scheduler may try the pod on every node (it cleared the nomination while the node was held);
// the planned node ranks first, so that the pod does not take tighter room planned for another.
func TestPrioritizeRanksThePlannedNodeFirst(t *testing.T) {
	e, _, ctx := startExtender(t, cluster()...)
	pod := testkit.MakePod().Name("planned").Neuron(4).Obj()
	names := []string{"trn-partly", "trn-empty"}
	scores := e.Prioritize(ctx, pod, names)
	if scores[0] <= scores[1] {
		t.Fatalf("scores %v: best fit should rank trn-partly (4 devices used) above trn-empty", scores)
	}
	pod.Annotations[labels.PlannedNodeAnnotation] = "trn-empty"
	scores = e.Prioritize(ctx, pod, names)
	if scores[1] != extenderv1.MaxExtenderPriority || scores[0] >= scores[1] {
		t.Errorf("scores %v: the planned trn-empty must rank first", scores)
	}
}

// TestNominatedPodJustBoundCountsOnce: this replica has bound a nominated pod, and the informer
// still shows it unbound and nominated. Its decision counts in the node's usage; it must not hold
// room a second time (the lab's 20-pod test: the second pod planned onto an inf1.xlarge was
// refused its own node, filtered 8 ms after the first one's bind).
func TestNominatedPodJustBoundCountsOnce(t *testing.T) {
	e, client, ctx := startExtender(t, cluster()...)
	eight := nominated(t, ctx, e, client, testkit.MakePod().Name("eight").Neuron(8), "trn-empty")
	e.scores.usage.remember("trn-empty", eight.UID, "default/eight", &allocation.Record{Node: "trn-empty", Containers: []allocation.Container{{
		Name: "main", Resource: topology.ResourceNeuron, Devices: seqInts(0, 8), Cores: seqInts(0, 16),
	}}})
	if passed, failed, _ := e.Filter(ctx, testkit.MakePod().Name("p").Neuron(8).Obj(), []string{"trn-empty"}); len(passed) != 1 {
		t.Errorf("8 devices are free beside the decided 8: failed %v", failed)
	}
}
