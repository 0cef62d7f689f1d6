package plugin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

const stateKey fwk.StateKey = Name

// podState is what PreFilter worked out for the pod, for the rest of its cycle.
type podState struct {
	reqs []allocation.Request
	key  string // placementKey
	// planned is the node neuron-autoscaler launched for the pod while it still holds pods off
	// ("" otherwise): the pod waits for it.
	planned string
}

// Clone shares the state: nothing changes it after PreFilter.
func (s *podState) Clone() fwk.StateData { return s }

func readState(state fwk.CycleState) (*podState, bool) {
	d, err := state.Read(stateKey)
	if err != nil {
		return nil, false
	}
	s, ok := d.(*podState)
	return s, ok
}

// PreFilter reads the pod's Neuron requests; a pod without any skips the plugin.
func (p *Plugin) PreFilter(_ context.Context, state fwk.CycleState, pod *corev1.Pod, _ []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	p.unsupportedMsgs.Delete(pod.UID)
	reqs := allocation.PodRequests(pod)
	if len(reqs) == 0 {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	state.Write(stateKey, &podState{reqs: reqs, key: placementKey(pod, reqs), planned: p.waitingFor(pod)})
	return nil, nil
}

// PreFilterExtensions: the nominated pods the framework adds to a NodeInfo are read from it in
// Filter, so nothing needs updating.
func (p *Plugin) PreFilterExtensions() fwk.PreFilterExtensions { return nil }

// Filter passes the node when the topology engine finds a valid set for every Neuron container
// of the pod there, beside the pods nominated to it; the status says why not otherwise.
func (p *Plugin) Filter(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, ni fwk.NodeInfo) *fwk.Status {
	s, ok := readState(state)
	if !ok {
		return nil // PreFilter skipped the pod: no Neuron requests
	}
	if s.planned != "" && ni.Node() != nil && ni.Node().Name != s.planned {
		return fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("the pod waits for node %s, which neuron-autoscaler launched for it (annotation %s) and releases once it serves", s.planned, labels.PlannedNodeAnnotation))
	}
	v, unresolvable, err := p.view(ctx, ni)
	if err != nil {
		if unresolvable {
			return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, err.Error())
		}
		return fwk.NewStatus(fwk.Unschedulable, err.Error())
	}
	r := p.place(v, pod, s.reqs, s.key)
	switch {
	case r.err == nil:
		return nil
	case errors.As(r.err, new(*topology.UnsupportedCountError)):
		p.unsupportedMsgs.Store(pod.UID, r.err.Error())
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, r.err.Error())
	default:
		return fwk.NewStatus(fwk.Unschedulable, r.err.Error())
	}
}

// PostFilter runs when no node passed: a request that some node's instance type does not
// support gets an UnsupportedNeuronRequest warning on the pod, as from the extender (at most once
// a minute per message). It never makes the pod schedulable itself.
func (p *Plugin) PostFilter(_ context.Context, _ fwk.CycleState, pod *corev1.Pod, _ fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
	if msg, ok := p.unsupportedMsgs.LoadAndDelete(pod.UID); ok && p.h != nil && p.warnings.due(string(pod.UID)+"|"+msg.(string), time.Now()) {
		p.h.EventRecorder().Eventf(pod, nil, corev1.EventTypeWarning, "UnsupportedNeuronRequest", "Scheduling", msg.(string))
	}
	return nil, fwk.NewStatus(fwk.Unschedulable)
}

// waitingFor returns the node neuron-autoscaler launched for the pod (labels.PlannedNodeAnnotation)
// while that node still holds pods off (labels.LaunchingTaintKey); "" otherwise, and once the
// node is older than plannedNodeHold. The pod is kept off every other node meanwhile: tried while
// its own node is held, it would take room another launched node has for another pod.
func (p *Plugin) waitingFor(pod *corev1.Pod) string {
	name := pod.Annotations[labels.PlannedNodeAnnotation]
	if name == "" || p.h == nil || p.h.SnapshotSharedLister() == nil {
		return ""
	}
	ni, err := p.h.SnapshotSharedLister().NodeInfos().Get(name)
	if err != nil || ni.Node() == nil {
		return ""
	}
	node := ni.Node()
	if !slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == labels.LaunchingTaintKey }) {
		return ""
	}
	if !node.CreationTimestamp.IsZero() && time.Since(node.CreationTimestamp.Time) > plannedNodeHold {
		return ""
	}
	return name
}

// plannedNodeHold bounds how long after a node registered its planned pods are kept for it:
// neuron-autoscaler releases a node within a minute of its serving, and deletes one that is not
// Ready 15 minutes after its launch. Should the autoscaler stop, the pods are free again.
const plannedNodeHold = 20 * time.Minute
