package extender

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

// nominated creates a pending pod nominated to node (status.nominatedNodeName, as the
// autoscaler or a preemption sets it) and waits until the extender's informer shows it.
func nominated(t *testing.T, ctx context.Context, e *Extender, client *fake.Clientset, b *podBuilder, node string) *corev1.Pod {
	t.Helper()
	pod := b.obj()
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
	nominated(t, ctx, e, client, testPod("big").neuron(16), "trn-empty")

	small := testPod("small").neuron(1).obj()
	passed, failed, _ := e.Filter(ctx, small, []string{"trn-empty", "trn-partly"})
	if len(passed) != 1 || passed[0] != "trn-partly" {
		t.Fatalf("passed %v, want only trn-partly: trn-empty's 16 devices are held for default/big", passed)
	}
	if msg := failed["trn-empty"]; !strings.Contains(msg, "held for the pods nominated to it (default/big)") {
		t.Errorf("trn-empty's reason %q does not name the nominated pod", msg)
	}
	// The nominated pod itself is not held off by its own nomination.
	if passed, _, _ := e.Filter(ctx, testPod("big").neuron(16).obj(), []string{"trn-empty"}); len(passed) != 1 {
		t.Errorf("the nominated pod does not pass its own node: %v", passed)
	}
	// A pod of higher priority is not held off: the kube-scheduler would preempt for it.
	urgent := testPod("urgent").neuron(1).obj()
	urgent.Spec.Priority = ptr.To[int32](1000)
	if passed, _, _ := e.Filter(ctx, urgent, []string{"trn-empty"}); len(passed) != 1 {
		t.Errorf("a pod of higher priority is held off by a nomination: %v", passed)
	}
	// Bind chooses beside the room too: a bind the scheduler already decided on fails rather
	// than take it.
	p := createPod(t, ctx, client, testPod("small").neuron(1).obj())
	if err := e.Bind(ctx, p.Namespace, p.Name, p.UID, "trn-empty"); err == nil || !strings.Contains(err.Error(), "beside the pods nominated to it (default/big)") {
		t.Errorf("bind of another pod into the held room: %v", err)
	}
}

// TestNominatedPodsShareTheNode: room is held for what the nominated pods take, chosen as their
// bind would choose it; the rest of the node stays open, and a pod bound beside them leaves
// their sets whole.
func TestNominatedPodsShareTheNode(t *testing.T) {
	e, client, ctx := startExtender(t, cluster()...)
	nominated(t, ctx, e, client, testPod("eight").neuron(8), "trn-empty")
	four := createPod(t, ctx, client, testPod("four").neuron(4).obj())
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
	nominated(t, ctx, e, client, testPod("sixteen").neuron(16), "trn-empty")
	if passed, failed, _ := e.Filter(ctx, testPod("last").neuron(4).obj(), []string{"trn-empty"}); len(passed) != 1 {
		t.Errorf("a nomination that cannot fit held the last 4 devices: %v", failed)
	}
}

// TestNominatedPodWithARecordCountsOnce: a nominated pod whose bind is under way already has its
// record; its room is counted from the record, not held a second time.
func TestNominatedPodWithARecordCountsOnce(t *testing.T) {
	e, client, ctx := startExtender(t, cluster()...)
	b := testPod("binding").neuron(8).record("trn-empty", 0, 1, 2, 3, 4, 5, 6, 7)
	b.p.Spec.NodeName = "" // the record is written, the binding not seen yet
	nominated(t, ctx, e, client, b, "trn-empty")
	if passed, failed, _ := e.Filter(ctx, testPod("p").neuron(8).obj(), []string{"trn-empty"}); len(passed) != 1 {
		t.Errorf("8 devices are free beside the recorded 8: failed %v", failed)
	}
}
