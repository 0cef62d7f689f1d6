package extender

import (
	"context"
	"fmt"
	"slices"
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
func (e *Extender) nominatedNodes() map[string]bool {
	names := e.pods.GetIndexer().ListIndexFuncValues(byNominatedNode)
	if len(names) == 0 {
		return nil
	}
	out := make(map[string]bool, len(names))
	for _, n := range names {
		out[n] = true
	}
	return out
}

// nominatedTo returns the pods nominated to the node that hold room against pod, in the order
// their room is set aside: those the kube-scheduler counts for its own resources (not bound, not
// being deleted, priority at least the pod's, not the pod itself), that ask for Neuron hardware
// and have no allocation record yet (a record already counts in the node's usage). The largest
// request goes first, as the autoscaler's planner packs them.
func (e *Extender) nominatedTo(node string, pod *corev1.Pod, shape *topology.Shape) []*corev1.Pod {
	objs, _ := e.pods.GetIndexer().ByIndex(byNominatedNode, node)
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
		if r, err := e.usageCache.records.RecordOf(q); err != nil || r != nil {
			continue
		}
		out = append(out, q)
	}
	cores := func(q *corev1.Pod) int {
		n := 0
		for _, r := range allocation.PodRequests(q) {
			if r.Resource == topology.ResourceNeuronCore {
				n += r.Count
			} else {
				n += r.Count * shape.CoresPerDevice
			}
		}
		return n
	}
	slices.SortStableFunc(out, func(a, b *corev1.Pod) int {
		if d := cores(b) - cores(a); d != 0 {
			return d
		}
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	return out
}

// reserve returns a copy of u with room set aside for the nominated pods, each placed as a bind
// would place it; a pod that does not fit holds nothing (it cannot run there anyway). It returns
// the names of the pods that hold room.
func (e *Extender) reserve(u *topology.Usage, nominated []*corev1.Pod) (*topology.Usage, []string) {
	u = u.Clone()
	var held []string
	for _, q := range nominated {
		containers, _, err := allocation.Plan(u, allocation.PodRequests(q), e.o.Policy)
		if err != nil {
			continue
		}
		for _, c := range containers {
			if hw, err := c.Hardware(u.Shape()); err == nil {
				_ = u.Allocate(hw) // Plan placed it on u: it fits
			}
		}
		held = append(held, q.Namespace+"/"+q.Name)
	}
	return u, held
}

// placeBesideNominated is place for a node that pods are nominated to: the pod must fit beside
// the room they hold. The kube-scheduler sets that room aside for its own resources, counted per
// resource name; the extender sets it aside under the topology rules, so that a pod tried first
// does not take the devices the autoscaler launched the node for, for another pod.
// applies is false when no pod holds room against this one.
func (e *Extender) placeBesideNominated(ctx context.Context, shape *topology.Shape, node string, pod *corev1.Pod, reqs []allocation.Request) (score int64, applies bool, err error) {
	nominated := e.nominatedTo(node, pod, shape)
	if len(nominated) == 0 {
		return 0, false, nil
	}
	u, err := e.usage(ctx, shape, node, pod.UID)
	if err != nil {
		return 0, true, err
	}
	u, held := e.reserve(u, nominated)
	_, s, err := allocation.Plan(u, reqs, e.o.Policy)
	if err != nil {
		klog.FromContext(ctx).V(4).Info("Node's room is held for the pods nominated to it", "pod", klog.KObj(pod), "node", node, "nominated", held)
		return 0, true, fmt.Errorf("the node's free Neuron hardware is held for the pods nominated to it (%s), and the pod does not fit beside them: %w", strings.Join(held, ", "), err)
	}
	return ExtenderScore(s), true, nil
}
