package allocation

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-neuron/kube-neuron/internal/labels"
)

// PlannedNodeHold bounds how long after a node registered its planned pods are kept for it:
// neuron-autoscaler releases a node within a minute of its serving, and deletes one that is not
// Ready 15 minutes after its launch. Should the autoscaler stop, the pods are free again.
const PlannedNodeHold = 20 * time.Minute

// HoldsPlannedPods reports whether the pods neuron-autoscaler launched the node for
// (labels.PlannedNodeAnnotation) wait for it: it still holds pods off (labels.LaunchingTaintKey)
// and is younger than PlannedNodeHold. Meanwhile the schedulers keep those pods off every other
// node: tried while their own node is held, they would take room another launched node has for
// another pod (the scheduler clears a nomination whenever it fails to place the pod, so the
// nomination alone does not keep it).
func HoldsPlannedPods(node *corev1.Node, now time.Time) bool {
	if !slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == labels.LaunchingTaintKey }) {
		return false
	}
	return node.CreationTimestamp.IsZero() || now.Sub(node.CreationTimestamp.Time) <= PlannedNodeHold
}
