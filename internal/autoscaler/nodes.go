package autoscaler

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// hasLaunchingTaint reports whether the node carries LaunchingTaintKey (whatever its value or
// effect: a launch template that registers it otherwise must not keep the node held forever).
func hasLaunchingTaint(node *corev1.Node) bool {
	return slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == LaunchingTaintKey })
}

// holdsPods reports whether a node is one the autoscaler launched that still keeps pods off
// with LaunchingTaint. Nodes without LaunchedByLabel are never released, whatever their taints.
func holdsPods(node *corev1.Node) bool {
	return node.Labels[LaunchedByLabel] == LaunchedByValue && node.DeletionTimestamp == nil && hasLaunchingTaint(node)
}

func hasNeuronCapacity(node *corev1.Node) bool {
	for _, r := range topology.Resources {
		if q, ok := node.Status.Allocatable[corev1.ResourceName(r)]; ok && !q.IsZero() {
			return true
		}
	}
	return false
}

func nodeReady(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func readySince(node *corev1.Node) time.Time {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}
