package extender

import (
	"cmp"
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

// arrange places the pod together with the pods nominated to the node: the pod fits when it fits
// beside every nominated pod that fits without it (a nominated pod that does not fit anyway
// holds nothing). It tries a few orders, the autoscaler planner's first (largest first, then
// oldest, then by name), then the pod first, smallest first and the pod last, and keeps the
// first that works: the planner found some order for the node's pods, but pods added in later
// rounds and the binds so far may have left a layout that only another order completes. It
// returns the pod's record entries and score, and the nominated pods that hold room; the error
// says why the pod does not fit.
func (s *scorer) arrange(u *topology.Usage, nominated []*corev1.Pod, pod *corev1.Pod, reqs []allocation.Request) ([]allocation.Container, float64, []string, error) {
	type item struct {
		pod    *corev1.Pod
		reqs   []allocation.Request
		weight float64
	}
	items := []item{{pod, reqs, allocation.PackingWeight(reqs)}}
	for _, q := range nominated {
		r := allocation.PodRequests(q)
		items = append(items, item{q, r, allocation.PackingWeight(r)})
	}
	slices.SortStableFunc(items, func(a, b item) int {
		return cmp.Or(cmp.Compare(b.weight, a.weight), a.pod.CreationTimestamp.Compare(b.pod.CreationTimestamp.Time),
			strings.Compare(a.pod.Namespace+"/"+a.pod.Name, b.pod.Namespace+"/"+b.pod.Name))
	})
	mineAt := slices.IndexFunc(items, func(it item) bool { return it.pod == pod })
	moved := func(to int) []item {
		out := slices.Delete(slices.Clone(items), mineAt, mineAt+1)
		return slices.Insert(out, min(to, len(out)), items[mineAt])
	}
	smallest := slices.Clone(items)
	slices.Reverse(smallest)
	orders := [][]item{items, moved(0), smallest, moved(len(items))}

	// place runs one order; it returns the pod's placement (err: why it does not fit) and the
	// nominated pods that fit.
	place := func(order []item) (mine []allocation.Container, score float64, held []string, err error) {
		work := u.Clone()
		for _, it := range order {
			containers, fit, perr := s.plan(work, it.reqs)
			switch {
			case it.pod == pod && perr != nil:
				return nil, 0, held, perr
			case it.pod == pod:
				mine, score = containers, fit
			case perr != nil:
				continue
			default:
				held = append(held, it.pod.Namespace+"/"+it.pod.Name)
			}
			for _, c := range containers {
				if hw, herr := c.Hardware(work.Shape()); herr == nil {
					_ = work.Allocate(hw) // Plan placed it on work: it fits
				}
			}
		}
		return mine, score, held, nil
	}
	// The pod may not take the room of any nominated pod that fits without it.
	_, _, without, _ := place(slices.Delete(slices.Clone(items), mineAt, mineAt+1))
	var firstErr error
	var firstHeld []string
	for _, order := range orders {
		mine, score, held, err := place(order)
		if err == nil && len(held) >= len(without) {
			return mine, score, held, nil
		}
		if firstErr == nil {
			firstErr, firstHeld = err, held
			if err == nil {
				firstErr, firstHeld = fmt.Errorf("it would leave no room for %d of them", len(without)-len(held)), without
			}
		}
	}
	return nil, 0, firstHeld, firstErr
}

// planBind chooses the pod's devices on the node's usage u for a bind. The pods nominated to the
// node keep the room filter set aside for them: the pod's set is chosen together with theirs,
// and held names those that hold room.
func (s *scorer) planBind(u *topology.Usage, node string, pod *corev1.Pod, reqs []allocation.Request) (containers []allocation.Container, held []string, err error) {
	if nominated := s.nominatedTo(node, pod); len(nominated) > 0 {
		containers, _, held, err = s.arrange(u, nominated, pod, reqs)
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
	_, fit, held, err := s.arrange(u, nominated, pod, reqs)
	if err != nil {
		klog.FromContext(ctx).V(4).Info("Node's room is held for the pods nominated to it", "pod", klog.KObj(pod), "node", node, "nominated", held)
		return 0, true, fmt.Errorf("the node's free Neuron hardware is held for the pods nominated to it (%s), and the pod does not fit beside them: %w", strings.Join(held, ", "), err)
	}
	return ExtenderScore(fit), true, nil
}
