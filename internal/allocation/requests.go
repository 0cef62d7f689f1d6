package allocation

import (
	"fmt"
	"slices"
	"sort"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// Request is what one container asks for.
type Request struct {
	Container string
	Resource  string
	Count     int
}

// PodRequests returns the pod's Neuron requests, init containers first, in spec order. A
// container asking for Neuron resources takes them from its limits (extended resources are
// requested in limits, equal to requests).
func PodRequests(pod *corev1.Pod) []Request {
	var out []Request
	for _, c := range append(slices.Clone(pod.Spec.InitContainers), pod.Spec.Containers...) {
		for _, res := range topology.Resources {
			q, ok := c.Resources.Limits[corev1.ResourceName(res)]
			if !ok {
				q, ok = c.Resources.Requests[corev1.ResourceName(res)]
			}
			if ok && q.Value() > 0 {
				out = append(out, Request{Container: c.Name, Resource: res, Count: int(q.Value())})
			}
		}
	}
	return out
}

// Plan places every request of a pod on a node whose current usage is u (u is not changed).
// It returns the record entries in request order and the node's score for the pod: the lowest
// score of its placements (0-100, higher is a tighter fit). Requests are placed largest first,
// so that a pod's big request is not blocked by its own small one. The scheduler extender binds
// with it and the autoscaler simulates new nodes with it, so a node the autoscaler launches for
// a pod is one the extender accepts.
func Plan(u *topology.Usage, reqs []Request, policy topology.Policy) ([]Container, float64, error) {
	if len(reqs) == 1 { // the common case: nothing to apply between placements, so no copy
		r := reqs[0]
		unit, err := topology.UnitOf(r.Resource)
		if err != nil {
			return nil, 0, err
		}
		fit, err := policy.Place(u, topology.Request{Unit: unit, Count: r.Count})
		if err != nil {
			return nil, 0, err
		}
		return []Container{{Name: r.Container, Resource: r.Resource, Devices: fit.Devices, Cores: fit.Cores}}, fit.Score, nil
	}
	shape := u.Shape()
	work := u.Clone()
	order := make([]int, len(reqs))
	for i := range order {
		order[i] = i
	}
	size := func(r Request) int { return CoresNeeded(shape, []Request{r}) }
	sort.SliceStable(order, func(a, b int) bool { return size(reqs[order[a]]) > size(reqs[order[b]]) })
	out := make([]Container, len(reqs))
	score := 100.0
	for _, i := range order {
		r := reqs[i]
		unit, err := topology.UnitOf(r.Resource)
		if err != nil {
			return nil, 0, err
		}
		fit, err := policy.Place(work, topology.Request{Unit: unit, Count: r.Count})
		if err != nil {
			return nil, 0, fmt.Errorf("container %s: %w", r.Container, err)
		}
		if err := work.Allocate(fit.Allocation); err != nil {
			return nil, 0, fmt.Errorf("internal error: %w", err)
		}
		out[i] = Container{Name: r.Container, Resource: r.Resource, Devices: fit.Devices, Cores: fit.Cores}
		score = min(score, fit.Score)
	}
	return out, score, nil
}

// CoresNeeded is the number of cores the requests take together on a node of the shape, when
// they fit (topology.Shape.CoresNeeded): a core request its count, a device request every core of
// its devices. A resource that is not a Neuron resource counts as a device request.
func CoresNeeded(shape *topology.Shape, reqs []Request) int {
	n := 0
	for _, r := range reqs {
		unit, err := topology.UnitOf(r.Resource)
		if err != nil {
			unit = topology.UnitDevice
		}
		n += shape.CoresNeeded(topology.Request{Unit: unit, Count: r.Count})
	}
	return n
}

// PackingWeight orders pods for packing a node, largest first, as neuron-autoscaler's planner
// packs them and the scheduler extender places the pods nominated to a node: a device counts 1,
// a core one half, whatever the node's cores per device.
func PackingWeight(reqs []Request) float64 {
	w := 0.0
	for _, r := range reqs {
		if r.Resource == topology.ResourceNeuronCore {
			w += float64(r.Count) / 2
		} else {
			w += float64(r.Count)
		}
	}
	return w
}

// PlacementKey identifies what a pod's placement on a node depends on besides the node's usage
// and the policy: the requests' resources and counts, in order (the containers' names do not
// matter). The schedulers cache placements under it. It is "" for a pod with a record of its
// own, whose placement must leave that record out of the usage and is never cached.
func PlacementKey(pod *corev1.Pod, reqs []Request) string {
	if _, has := pod.Annotations[Annotation]; has {
		return ""
	}
	b := make([]byte, 0, 48)
	for _, r := range reqs {
		b = append(b, r.Resource...)
		b = append(b, '=')
		b = strconv.AppendInt(b, int64(r.Count), 10)
		b = append(b, ';')
	}
	return string(b)
}

// Tenths maps a placement score (0-100) to 0-10: the extender's prioritize scale, which the
// plugin's Score multiplies by ten so that both ways of scheduling rank nodes alike.
func Tenths(score float64) int64 {
	return max(0, min(10, int64(score/10)))
}

// Fullness is 0 to 9, the share of the node's cores in use: added to Tenths times ten, it
// orders the nodes within one tenth, so that of two nodes a pod fits equally well the fuller
// one fills first.
func Fullness(u *topology.Usage) int64 {
	cores := u.Shape().Cores()
	if cores == 0 {
		return 0
	}
	return int64(9 * (cores - u.FreeCoreCount()) / cores)
}
