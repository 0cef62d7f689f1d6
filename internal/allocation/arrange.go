package allocation

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// Arrange places the pod together with the pods nominated to the node: the pod fits when it fits
// beside every nominated pod that fits without it (a nominated pod that does not fit anyway
// holds nothing). It tries a few orders, the autoscaler planner's first (largest first, then
// oldest, then by name), then the pod first, smallest first and the pod last, and keeps the
// first that works: the planner found some order for the node's pods, but pods added in later
// rounds and the binds so far may have left a layout that only another order completes. It
// returns the pod's record entries and score, and the nominated pods that hold room; the error
// says why the pod does not fit.
func Arrange(u *topology.Usage, policy topology.Policy, pod *corev1.Pod, reqs []Request, nominated []*corev1.Pod) ([]Container, float64, []string, error) {
	type item struct {
		pod    *corev1.Pod
		reqs   []Request
		weight float64
	}
	items := []item{{pod, reqs, PackingWeight(reqs)}}
	for _, q := range nominated {
		r := PodRequests(q)
		items = append(items, item{q, r, PackingWeight(r)})
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
	place := func(order []item) (mine []Container, score float64, held []string, err error) {
		work := u.Clone()
		for _, it := range order {
			containers, fit, perr := Plan(work, it.reqs, policy)
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
