package lab

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestRegisteredTaintsKeepTheLaunchingTaint: a node the autoscaler's local provider created
// keeps the taints it was launched with (the autoscaler removes its launching taint itself) but
// node.kubernetes.io/not-ready once the simulated kubelet registers it, and gains the
// simulator's own without a duplicate.
func TestRegisteredTaintsKeepTheLaunchingTaint(t *testing.T) {
	neuron := corev1.Taint{Key: "aws.amazon.com/neuron", Value: "true", Effect: corev1.TaintEffectNoSchedule}
	launching := corev1.Taint{Key: "kube-neuron.io/launching", Value: "true", Effect: corev1.TaintEffectNoSchedule}
	notReady := corev1.Taint{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule}
	got := registeredTaints([]corev1.Taint{notReady, neuron, launching}, []corev1.Taint{neuron})
	if want := []corev1.Taint{neuron, launching}; !slices.Equal(got, want) {
		t.Errorf("taints %v, want %v", got, want)
	}
	if got, want := registeredTaints([]corev1.Taint{notReady}, []corev1.Taint{neuron}), []corev1.Taint{neuron}; !slices.Equal(got, want) {
		t.Errorf("taints %v, want %v", got, want)
	}
}
