package extender

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

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
// "" otherwise, and once the node is older than plannedNodeHold. The pod is kept off every other
// node meanwhile: tried while its own node is held, it would take room another launched node has
// for another pod (the scheduler clears its nomination whenever it fails to place it, so the
// nomination alone does not keep it).
func (e *Extender) waitingFor(pod *corev1.Pod) string {
	name := pod.Annotations[labels.PlannedNodeAnnotation]
	if name == "" {
		return ""
	}
	node, err := e.nodes.Get(name)
	if err != nil || !slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == labels.LaunchingTaintKey }) {
		return ""
	}
	if !node.CreationTimestamp.IsZero() && e.o.Now().Sub(node.CreationTimestamp.Time) > plannedNodeHold {
		return "" // the autoscaler should have released it long ago: do not hold the pod for it
	}
	return name
}

// plannedNodeHold bounds how long after a node registered its planned pods are kept for it:
// neuron-autoscaler releases a node within a minute of its serving, and deletes one that is not
// Ready 15 minutes after its launch. Should the autoscaler stop, the pods are free again.
const plannedNodeHold = 20 * time.Minute

// warn emits a Warning event on the pod, at most once a minute per message.
func (e *Extender) warn(pod *corev1.Pod, reason, msg string) {
	if e.warnings.due(string(pod.UID)+"|"+msg, e.o.Now()) {
		e.recorder.Event(pod, corev1.EventTypeWarning, reason, msg)
	}
}

// warnings remembers when each pod was told each message.
type warnings struct {
	mu   sync.Mutex
	sent map[string]time.Time // pod UID + message -> when the pod was told
}

// due reports whether the message under key was not sent within the last minute, and notes it
// as sent now if so. Entries older than ten minutes are dropped.
func (w *warnings) due(key string, now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.sent == nil {
		w.sent = map[string]time.Time{}
	}
	last, seen := w.sent[key]
	due := !seen || now.Sub(last) > time.Minute
	if due {
		w.sent[key] = now
	}
	for k, t := range w.sent {
		if now.Sub(t) > 10*time.Minute {
			delete(w.sent, k)
		}
	}
	return due
}
