package plugin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// recordOf is the pod's allocation record: its annotation (or the published stack's), else the
// devices Reserve chose for it, else nil.
func (p *Plugin) recordOf(pod *corev1.Pod) (*allocation.Record, error) {
	r, err := p.records.RecordOf(pod)
	if err != nil || r != nil {
		return r, err
	}
	return p.reserved.get(pod.UID), nil
}

// nodeView is a node as one Filter or Score call sees it: its shape, the usage of the pods the
// snapshot holds on it, and the pods nominated to it that hold room (those the framework added
// to the NodeInfo it passed, which are not bound yet).
type nodeView struct {
	name      string
	shape     *topology.Shape
	usage     *topology.Usage
	nominated []*corev1.Pod
	// cached is the cache's entry the usage comes from, nil when it is not cached (a copy of
	// the NodeInfo with nominated pods, or records that overlap).
	cached *nodeEntry
}

// view derives the node's view from the NodeInfo, with the usage from the cache when the
// NodeInfo's generation is the one it was derived at. The error says why the node cannot take
// the pod at all (unresolvable: its shape) or for now (its records overlap).
func (p *Plugin) view(ctx context.Context, ni fwk.NodeInfo) (v nodeView, unresolvable bool, err error) {
	node := ni.Node()
	if node == nil {
		return v, true, errors.New("the node is gone")
	}
	v.name = node.Name
	gen := ni.GetGeneration()
	// The NodeInfo the entry was derived from, unchanged since: the same pods, and none of them
	// nominated (a NodeInfo with nominated pods is never cached).
	if e := p.nodes.entry(v.name, gen, node); e != nil {
		v.shape, v.usage, v.cached = e.shape, e.usage, e
		return v, false, nil
	}
	if v.shape, err = p.shapeOf(node); err != nil {
		return v, true, err
	}
	pods := ni.GetPods()
	list := make([]*corev1.Pod, 0, len(pods))
	for _, pi := range pods {
		switch q := pi.GetPod(); {
		case q.Spec.NodeName != "":
			list = append(list, q)
		case p.holdsRoom(q):
			v.nominated = append(v.nominated, q)
		}
	}
	u, _, problems := allocation.NodeUsageWith(v.shape, v.name, list, p.recordOf)
	var overlap error
	for _, perr := range problems {
		if errors.As(perr, new(*allocation.OverlapError)) {
			overlap = perr
		}
	}
	if p.overlaps.Settling(v.name, overlap != nil, time.Now()) {
		return v, false, fmt.Errorf("the allocation records on node %s overlap (%v): the device plugin is correcting them; the node takes pods again once it is done", v.name, overlap)
	}
	for _, perr := range problems {
		klog.FromContext(ctx).Error(perr, "Ignoring an allocation record", "node", v.name)
	}
	v.usage = u
	// A NodeInfo with nominated pods is a copy the framework made for this pod: its generation
	// is not the snapshot's.
	if overlap == nil && len(v.nominated) == 0 {
		v.cached = p.nodes.keep(v.name, gen, node, v.shape, u)
	}
	return v, false, nil
}

// nodeShape is a node object's shape, or why the plugin cannot serve the node.
type nodeShape struct {
	node  *corev1.Node
	shape *topology.Shape
	err   error
}

// shapeOf returns the node's shape, worked out once per node object: the scheduler's snapshot
// hands out the same object until the node changes.
func (p *Plugin) shapeOf(node *corev1.Node) (*topology.Shape, error) {
	if v, ok := p.nodeShapes.Load(node.Name); ok {
		if ns := v.(*nodeShape); ns.node == node {
			return ns.shape, ns.err
		}
	}
	shape, err := p.shapes.Of(node)
	p.nodeShapes.Store(node.Name, &nodeShape{node: node, shape: shape, err: err})
	return shape, err
}

// holdsRoom reports whether a pod nominated to a node (not bound yet) holds Neuron room there:
// it asks for Neuron hardware and has no record or reservation yet (those count in the usage).
// The framework adds to a NodeInfo only the nominated pods whose priority is at least the
// scheduled pod's, never the pod itself.
func (p *Plugin) holdsRoom(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp != nil || len(allocation.PodRequests(pod)) == 0 {
		return false
	}
	r, err := p.recordOf(pod)
	return err == nil && r == nil
}

// place places the requests on the node: beside the nominated pods when there are any (never
// cached), else from the cache of placements at the node's generation.
func (p *Plugin) place(v nodeView, pod *corev1.Pod, reqs []allocation.Request, key string) placed {
	if len(v.nominated) > 0 {
		return p.placeBesideNominated(v, pod, reqs)
	}
	cache := key != "" && v.cached != nil
	if cache {
		if r, ok := v.cached.fit(key); ok {
			return r
		}
	}
	_, score, err := allocation.Plan(v.usage, reqs, p.policy)
	r := placed{score: score, err: err}
	if cache {
		v.cached.keepFit(key, r)
	}
	return r
}

// placeBesideNominated places the pod together with the pods nominated to the node
// (allocation.Arrange): the scheduler sets their room aside for its own resources, counted per
// resource name; this sets it aside under the topology rules, so that a pod tried first does not
// take the devices the autoscaler launched the node for, for another pod.
func (p *Plugin) placeBesideNominated(v nodeView, pod *corev1.Pod, reqs []allocation.Request) placed {
	_, score, held, err := allocation.Arrange(v.usage, p.policy, pod, reqs, v.nominated)
	if err != nil {
		return placed{err: fmt.Errorf("the node's free Neuron hardware is held for the pods nominated to it (%s), and the pod does not fit beside them: %w", strings.Join(held, ", "), err)}
	}
	return placed{score: score}
}
