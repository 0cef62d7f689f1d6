package extender

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/labels"
)

// Filter returns the nodes where the topology engine finds a valid set for every Neuron
// container of the pod, and why the others fail.
func (e *Extender) Filter(ctx context.Context, pod *corev1.Pod, names []string) (passed []string, failed, unresolvable map[string]string) {
	start := e.o.Now()
	defer func() { e.metrics.filterSeconds.Observe(e.o.Now().Sub(start).Seconds()) }()
	reqs := allocation.PodRequests(pod)
	if len(reqs) == 0 {
		return slices.Clone(names), map[string]string{}, map[string]string{}
	}
	var held map[string]string
	if node := e.waitingFor(pod); node != "" {
		names, held = keepOnly(names, node, fmt.Sprintf("the pod waits for node %s, which neuron-autoscaler launched for it (annotation %s) and releases once it serves", node, labels.PlannedNodeAnnotation))
	}
	passed, failed, unresolvable, unsupported := e.scores.filter(ctx, pod, reqs, names)
	for name, why := range held {
		failed[name] = why
	}
	klog.FromContext(ctx).V(5).Info("Filter", "pod", klog.KObj(pod), "nodes", len(names), "passed", len(passed), "failed", len(failed), "unresolvable", len(unresolvable))
	if len(passed) == 0 && unsupported != "" {
		e.metrics.refusals.WithLabelValues("unsupported").Inc()
		e.warn(pod, "UnsupportedNeuronRequest", unsupported)
	} else if len(passed) == 0 && len(names) > 0 {
		e.metrics.refusals.WithLabelValues("no-fit").Inc()
	}
	return passed, failed, unresolvable
}

// keepOnly returns the names that are node, and the others with why they fail.
func keepOnly(names []string, node, why string) (kept []string, failed map[string]string) {
	kept, failed = make([]string, 0, 1), map[string]string{}
	for _, name := range names {
		if name == node {
			kept = append(kept, name)
		} else {
			failed[name] = why
		}
	}
	return kept, failed
}

// Prioritize scores the nodes, in the order of names: the tightest fit highest, so that large
// blocks and whole nodes stay free. A node the pod does not fit scores 0.
func (e *Extender) Prioritize(ctx context.Context, pod *corev1.Pod, names []string) []int64 {
	scores, _ := e.scores.prioritize(ctx, pod, names)
	return scores
}

// waitingFor returns the node neuron-autoscaler launched for the pod
// (labels.PlannedNodeAnnotation) while that node still holds pods off (labels.LaunchingTaintKey);
// "" otherwise, and once the node is older than allocation.PlannedNodeHold. The pod is kept off every other
// node meanwhile: tried while its own node is held, it would take room another launched node has
// for another pod (the scheduler clears its nomination whenever it fails to place it, so the
// nomination alone does not keep it).
func (e *Extender) waitingFor(pod *corev1.Pod) string {
	name := pod.Annotations[labels.PlannedNodeAnnotation]
	if name == "" {
		return ""
	}
	node, err := e.nodes.Get(name)
	if err != nil || !allocation.HoldsPlannedPods(node, e.o.Now()) {
		return ""
	}
	return name
}

// warn emits a Warning event on the pod, at most once a minute per message.
func (e *Extender) warn(pod *corev1.Pod, reason, msg string) {
	if e.warnings.Due(string(pod.UID)+"|"+msg, e.o.Now()) {
		e.recorder.Event(pod, corev1.EventTypeWarning, reason, msg)
	}
}
