// Package plugin is NeuronTopology, the kube-scheduler framework plugin that places pods asking
// for aws.amazon.com/neuron, neurondevice or neuroncore on the devices and cores the topology
// engine chooses, with the decisions, allocation record and messages of
// neuron-scheduler-extender, inside the scheduler's own cycle:
//
//   - PreFilter reads the pod's Neuron requests (Skip for a pod without any) and the node
//     neuron-autoscaler launched for it, if that node still holds pods off;
//   - Filter places the pod on the node's usage, beside the pods nominated to the node;
//   - Score ranks the tightest fit highest (and the planned node first);
//   - Reserve chooses the devices and counts them at once, so the next pod's cycle sees them;
//     Unreserve forgets them;
//   - Bind posts one Binding carrying the allocation record, so that the record and the
//     binding land in one write (pods without Neuron requests are left to DefaultBinder).
//
// A node's usage is derived from the pods the scheduler's snapshot holds on it: their records
// (kube-neuron.io/allocation, or the published Neuron stack's annotations), or, for a pod the
// scheduler assumed and is binding, the devices Reserve chose.
package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	fwk "k8s.io/kube-scheduler/framework"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/observe"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// Name is the plugin's name in a KubeSchedulerConfiguration.
const Name = "NeuronTopology"

// Args are the plugin's arguments (pluginConfig[].args).
type Args struct {
	// Policy is best-fit (default) or first-fit, as the extender's --placement-policy.
	Policy string `json:"policy,omitempty"`
	// CandidateNodes is how many nodes, best first by the plugin's Score over every node,
	// PreFilter hands the framework for a pod it can narrow (candidates): the framework then
	// filters and scores only those, instead of a sample of the nodes. 0 turns narrowing off;
	// unset is DefaultCandidateNodes.
	CandidateNodes *int `json:"candidateNodes,omitempty"`
}

// Plugin is the NeuronTopology plugin.
type Plugin struct {
	h      fwk.Handle
	policy topology.Policy
	// candidateNodes is Args.CandidateNodes: how many nodes PreFilter narrows a pod to.
	candidateNodes int
	shapes         *allocation.Shapes
	// nodeShapes holds the shape of each node object (shapeOf).
	nodeShapes sync.Map // node name -> *nodeShape
	records    allocation.RecordCache
	// reserved holds the devices Reserve chose for pods whose Binding has not shown in the
	// scheduler's snapshot yet.
	reserved reservations
	// nodes caches, per node and NodeInfo generation, the usage and placements.
	nodes nodeCache
	// overlaps remembers since when each node's records overlap (allocation.OverlapSettle).
	overlaps allocation.Overlaps
	warnings observe.Throttle
	// unsupportedMsgs holds, per pod, the engine's refusal of a count that Filter met in the
	// pod's last cycle, for PostFilter's warning.
	unsupportedMsgs sync.Map // types.UID -> string
	// wide holds the pods whose narrowed cycle found no node: their next cycle is not narrowed.
	wide sync.Map // types.UID -> struct{}
}

var (
	_ fwk.PreFilterPlugin  = (*Plugin)(nil)
	_ fwk.FilterPlugin     = (*Plugin)(nil)
	_ fwk.PostFilterPlugin = (*Plugin)(nil)
	_ fwk.PreScorePlugin   = (*Plugin)(nil)
	_ fwk.ScorePlugin      = (*Plugin)(nil)
	_ fwk.ReservePlugin    = (*Plugin)(nil)
	_ fwk.BindPlugin       = (*Plugin)(nil)
	_ fwk.SignPlugin       = (*Plugin)(nil)
)

// New builds the plugin from its arguments.
func New(_ context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	args, err := decodeArgs(obj)
	if err != nil {
		return nil, err
	}
	policy, err := parsePolicy(args.Policy)
	if err != nil {
		return nil, err
	}
	p := newPlugin(h, policy, topology.DefaultCatalog())
	if args.CandidateNodes != nil {
		if *args.CandidateNodes < 0 {
			return nil, fmt.Errorf("%s: args.candidateNodes %d is negative: use 0 to turn narrowing off, or how many nodes to hand the framework per pod (default %d)", Name, *args.CandidateNodes, DefaultCandidateNodes)
		}
		p.candidateNodes = *args.CandidateNodes
	}
	if h != nil && h.SharedInformerFactory() != nil {
		// Forget what a deleted pod held. (A bound pod's reservation stays until the pod is
		// deleted: the scheduler's cache may still show the assumed copy, without the record,
		// after the pod informer delivered the bound one.)
		_, err := h.SharedInformerFactory().Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			DeleteFunc: func(obj any) {
				if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
					obj = tomb.Obj
				}
				if pod, ok := obj.(*corev1.Pod); ok {
					p.reserved.forget(pod.UID)
					p.records.Forget(pod.UID)
					p.unsupportedMsgs.Delete(pod.UID)
					p.wide.Delete(pod.UID)
				}
			},
		})
		if err != nil {
			return nil, fmt.Errorf("%s: watching pods: %w", Name, err)
		}
	}
	return p, nil
}

func newPlugin(h fwk.Handle, policy topology.Policy, cat *topology.Catalog) *Plugin {
	return &Plugin{h: h, policy: policy, candidateNodes: DefaultCandidateNodes, shapes: allocation.NewShapes(cat)}
}

// decodeArgs decodes the plugin's args strictly: a misspelt field is an error, not a default.
func decodeArgs(obj runtime.Object) (Args, error) {
	var args Args
	if obj == nil {
		return args, nil
	}
	if u, ok := obj.(*runtime.Unknown); ok {
		// The configuration file's YAML arrives as JSON.
		dec := json.NewDecoder(bytes.NewReader(u.Raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&args); err != nil {
			return args, fmt.Errorf("%s: the plugin's args: %w (the fields are policy, best-fit or first-fit, and candidateNodes, 0 or more)", Name, err)
		}
		return args, nil
	}
	if err := frameworkruntime.DecodeInto(obj, &args); err != nil {
		return args, fmt.Errorf("%s: the plugin's args: %w", Name, err)
	}
	return args, nil
}

// parsePolicy returns the placement policy the args name.
func parsePolicy(name string) (topology.Policy, error) {
	switch topology.Policy(name) {
	case "", topology.BestFit:
		return topology.BestFit, nil
	case topology.FirstFit:
		return topology.FirstFit, nil
	}
	return "", fmt.Errorf("%s: args.policy %q is not a placement policy: use %s or %s", Name, name, topology.BestFit, topology.FirstFit)
}

// Name returns the plugin's name.
func (p *Plugin) Name() string { return Name }

// SignPod lets the scheduler batch pods without Neuron requests (nothing of this plugin applies
// to them) and refuses a signature to the others: a placement on a node changes what the next
// pod of the same shape gets there.
func (p *Plugin) SignPod(_ context.Context, pod *corev1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	if len(allocation.PodRequests(pod)) == 0 {
		return nil, nil
	}
	return nil, fwk.NewStatus(fwk.Unschedulable, "pods with Neuron requests are placed one by one")
}
