package extender

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// byNominatedNode indexes the pods not bound yet by status.nominatedNodeName.
const byNominatedNode = "nominatedNode"

// nominatedNodeIndex is the byNominatedNode index function.
func nominatedNodeIndex(obj any) ([]string, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.Spec.NodeName != "" || pod.Status.NominatedNodeName == "" {
		return nil, nil
	}
	return []string{pod.Status.NominatedNodeName}, nil
}

// nominatedNodes returns the nodes some unbound pod is nominated to; nil when none is.
func (s *scorer) nominatedNodes() map[string]bool {
	names := s.pods.ListIndexFuncValues(byNominatedNode)
	if len(names) == 0 {
		return nil
	}
	out := make(map[string]bool, len(names))
	for _, n := range names {
		out[n] = true
	}
	return out
}

// nominatedTo returns the pods nominated to the node that hold room against pod: those the
// kube-scheduler counts for its own resources (not bound, not being deleted, priority at least
// the pod's, not the pod itself), that ask for Neuron hardware and have no allocation record
// or decision of this replica yet (those count in the node's usage already).
func (s *scorer) nominatedTo(node string, pod *corev1.Pod) []*corev1.Pod {
	objs, _ := s.pods.ByIndex(byNominatedNode, node)
	prio := ptr.Deref(pod.Spec.Priority, 0)
	var out []*corev1.Pod
	for _, o := range objs {
		q := o.(*corev1.Pod)
		if q.UID == pod.UID || q.Spec.NodeName != "" || q.DeletionTimestamp != nil || ptr.Deref(q.Spec.Priority, 0) < prio {
			continue
		}
		if len(allocation.PodRequests(q)) == 0 {
			continue
		}
		// A record (or this replica's decision the informer does not show yet) already counts
		// in its node's usage.
		if r, err := s.usage.records.RecordOf(q); err != nil || r != nil || s.usage.decided(q.UID) {
			continue
		}
		out = append(out, q)
	}
	return out
}

// planBind chooses the pod's devices on the node's usage u for a bind. The pods nominated to the
// node keep the room filter set aside for them: the pod's set is chosen together with theirs,
// and held names those that hold room.
func (s *scorer) planBind(u *topology.Usage, node string, pod *corev1.Pod, reqs []allocation.Request) (containers []allocation.Container, held []string, err error) {
	if nominated := s.nominatedTo(node, pod); len(nominated) > 0 {
		containers, _, held, err = allocation.Arrange(u, s.policy, pod, reqs, nominated)
		return containers, held, err
	}
	containers, _, err = s.plan(u, reqs)
	return containers, nil, err
}

// placeBesideNominated is place for a node that pods are nominated to: the pod must fit together
// with them (arrange). The kube-scheduler sets their room aside for its own resources, counted per
// resource name; the extender sets it aside under the topology rules, so that a pod tried first
// does not take the devices the autoscaler launched the node for, for another pod. applies is
// false when no pod holds room against this one.
func (s *scorer) placeBesideNominated(ctx context.Context, shape *topology.Shape, node string, pod *corev1.Pod, reqs []allocation.Request) (score int64, applies bool, err error) {
	nominated := s.nominatedTo(node, pod)
	if len(nominated) == 0 {
		return 0, false, nil
	}
	u, err := s.nodeUsage(ctx, shape, node, pod.UID)
	if err != nil {
		return 0, true, err
	}
	_, fit, held, err := allocation.Arrange(u, s.policy, pod, reqs, nominated)
	if err != nil {
		klog.FromContext(ctx).V(4).Info("Node's room is held for the pods nominated to it", "pod", klog.KObj(pod), "node", node, "nominated", held)
		return 0, true, fmt.Errorf("the node's free Neuron hardware is held for the pods nominated to it (%s), and the pod does not fit beside them: %w", strings.Join(held, ", "), err)
	}
	return allocation.Tenths(fit), true, nil
}
