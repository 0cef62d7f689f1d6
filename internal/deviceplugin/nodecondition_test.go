package deviceplugin

import (
	"context"
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
)

func TestHealthCondition(t *testing.T) {
	for _, tc := range []struct {
		reasons         []string
		status          corev1.ConditionStatus
		reason, message string
	}{
		{[]string{"", ""}, corev1.ConditionTrue, ConditionReasonHealthy, "All 2 Neuron devices are healthy"},
		{[]string{"ecc-uncorrected", ""}, corev1.ConditionTrue, ConditionReasonHealthy, "1 of 2 Neuron devices are healthy; unhealthy: neuron0: ecc-uncorrected"},
		{[]string{"ecc-uncorrected", "gone"}, corev1.ConditionFalse, ConditionReasonUnhealthy, "All Neuron devices are unhealthy: neuron0: ecc-uncorrected, neuron1: gone"},
		{nil, corev1.ConditionTrue, ConditionReasonHealthy, "All 0 Neuron devices are healthy"},
	} {
		s, r, m := healthCondition(tc.reasons)
		if s != tc.status || r != tc.reason || m != tc.message {
			t.Errorf("healthCondition(%q) = %s, %s, %q; want %s, %s, %q", tc.reasons, s, r, m, tc.status, tc.reason, tc.message)
		}
	}
}

func TestConditionPatchTouchesOnlyItsCondition(t *testing.T) {
	var got map[string]map[string][]map[string]any
	if err := json.Unmarshal(conditionPatch(corev1.NodeCondition{Type: NodeCondition, Status: corev1.ConditionFalse}), &got); err != nil {
		t.Fatal(err)
	}
	conds := got["status"]["conditions"]
	if len(got) != 1 || len(got["status"]) != 1 || len(conds) != 1 || conds[0]["type"] != string(NodeCondition) {
		t.Errorf("patch %v, want status.conditions with the one condition %s", got, NodeCondition)
	}
}

func TestSyncNodeCondition(t *testing.T) {
	ctx := context.Background()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
		{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"},
	}}}
	client := fake.NewClientset(node)
	events := record.NewFakeRecorder(10)
	p := &Plugin{o: Options{NodeName: "n", Client: client}, recorder: events}
	cond := func() (ready, ours *corev1.NodeCondition) {
		n, err := client.CoreV1().Nodes().Get(ctx, "n", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range n.Status.Conditions {
			switch c.Type {
			case corev1.NodeReady:
				ready = &n.Status.Conditions[i]
			case NodeCondition:
				ours = &n.Status.Conditions[i]
			}
		}
		return ready, ours
	}
	p.syncNodeCondition(ctx, []string{"", "gone"})
	if ready, ours := cond(); ready == nil || ready.Reason != "KubeletReady" || ours == nil || ours.Status != corev1.ConditionTrue {
		t.Fatalf("after the first sync: Ready %+v, %s %+v", ready, NodeCondition, ours)
	}
	if len(events.Events) != 0 {
		t.Errorf("event for a node that starts healthy: %q", <-events.Events)
	}
	p.syncNodeCondition(ctx, []string{"ecc-uncorrected", "gone"})
	ready, ours := cond()
	if ready == nil || ours == nil || ours.Status != corev1.ConditionFalse || ours.Reason != ConditionReasonUnhealthy ||
		ours.Message != "All Neuron devices are unhealthy: neuron0: ecc-uncorrected, neuron1: gone" {
		t.Fatalf("all unhealthy: Ready %+v, %s %+v", ready, NodeCondition, ours)
	}
	if len(events.Events) != 1 {
		t.Fatalf("%d events when the condition turned False, want 1", len(events.Events))
	}
	if e := <-events.Events; e != "Warning NeuronDevicesUnhealthy Node condition NeuronDevicesHealthy=False: "+ours.Message {
		t.Errorf("event %q", e)
	}
	p.syncNodeCondition(ctx, []string{"", "gone"})
	if _, ours := cond(); ours == nil || ours.Status != corev1.ConditionTrue {
		t.Errorf("one device back: %+v", ours)
	}
	if len(events.Events) != 1 {
		t.Errorf("%d events when the condition turned True again, want 1", len(events.Events))
	}
}
