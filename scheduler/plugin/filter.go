package plugin

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

const stateKey fwk.StateKey = Name

// podState is what PreFilter worked out for the pod, for the rest of its cycle.
type podState struct {
	reqs []allocation.Request
	key  string // allocation.PlacementKey
	// planned is the node neuron-autoscaler launched for the pod while it still holds pods off
	// ("" otherwise): the pod waits for it.
	planned string
	// narrowed: PreFilter handed the framework only the candidates (Plugin.candidates).
	narrowed bool

	// besideNominated are the placement scores Filter found beside the pods the framework
	// added to a node's NodeInfo (nominated to it), by node, for Score: Score gets the
	// snapshot's NodeInfo, without them. Elsewhere Score finds Filter's placement in the node
	// cache.
	mu              sync.Mutex
	besideNominated map[string]float64
}

// filteredBesideNominated notes the score Filter found on the node beside its nominated pods.
// (With nominated pods the framework filters twice, with them and then without: the score
// beside them stands.)
func (s *podState) filteredBesideNominated(node string, score float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.besideNominated == nil {
		s.besideNominated = map[string]float64{}
	}
	s.besideNominated[node] = score
}

// scoreBesideNominated returns the score Filter found on the node beside its nominated pods.
func (s *podState) scoreBesideNominated(node string) (float64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	score, ok := s.besideNominated[node]
	return score, ok
}

// Clone shares the state: what Filter notes in it is by node, the same for every copy.
func (s *podState) Clone() fwk.StateData { return s }

func readState(state fwk.CycleState) (*podState, bool) {
	d, err := state.Read(stateKey)
	if err != nil {
		return nil, false
	}
	s, ok := d.(*podState)
	return s, ok
}

// PreFilter reads the pod's Neuron requests (a pod without any skips the plugin) and, unless the
// pod's last cycle was narrowed and found no node, narrows the nodes the framework checks to the
// candidates the plugin ranks best.
func (p *Plugin) PreFilter(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, _ []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	p.unsupportedMsgs.Delete(pod.UID)
	_, wide := p.wide.LoadAndDelete(pod.UID)
	reqs := allocation.PodRequests(pod)
	if len(reqs) == 0 {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	s := &podState{reqs: reqs, key: allocation.PlacementKey(pod, reqs), planned: p.waitingFor(pod)}
	state.Write(stateKey, s)
	var names sets.Set[string]
	if !wide && s.planned == "" {
		names = p.candidates(ctx, pod, s)
	}
	if names == nil {
		narrowingCycles.WithLabelValues(sampledResult).Inc()
		return nil, nil
	}
	narrowingCycles.WithLabelValues(narrowedResult).Inc()
	s.narrowed = true
	return &fwk.PreFilterResult{NodeNames: names}, nil
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
		if len(v.nominated) > 0 {
			s.filteredBesideNominated(v.name, r.score)
		}
		return nil
	case errors.As(r.err, new(*topology.UnsupportedCountError)):
		p.unsupportedMsgs.Store(pod.UID, r.err.Error())
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, r.err.Error())
	default:
		return fwk.NewStatus(fwk.Unschedulable, r.err.Error())
	}
}

// PostFilter runs when no node passed. When PreFilter had narrowed the pod to its candidates
// and another filter refused them all (one that hostAdmits does not repeat), the pod is tried
// again at once on every node: PostFilter activates it and stops the PostFilter plugins after it
// (my-scheduler's profile runs it before DefaultPreemption), so that nothing is preempted for a
// pod that may fit elsewhere. Otherwise a request that some node's instance type does not support
// gets an UnsupportedNeuronRequest warning on the pod, as from the extender (at most once a
// minute per message). It never makes the pod schedulable itself.
func (p *Plugin) PostFilter(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, _ fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
	if s, ok := readState(state); ok && s.narrowed {
		p.unsupportedMsgs.Delete(pod.UID)
		p.wide.Store(pod.UID, struct{}{})
		narrowingCycles.WithLabelValues(retriedResult).Inc()
		klog.FromContext(ctx).V(2).Info("No candidate node passed the other filters; trying the pod again on every node", "pod", klog.KObj(pod))
		if p.h != nil {
			p.h.Activate(klog.FromContext(ctx), map[string]*corev1.Pod{pod.Namespace + "/" + pod.Name: pod})
		}
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("the nodes %s ranked best for the pod (candidateNodes %d) did not pass the other filters; the pod is tried again on every node", Name, p.candidateNodes))
	}
	if msg, ok := p.unsupportedMsgs.LoadAndDelete(pod.UID); ok && p.h != nil && p.warnings.Due(string(pod.UID)+"|"+msg.(string), time.Now()) {
		p.h.EventRecorder().Eventf(pod, nil, corev1.EventTypeWarning, "UnsupportedNeuronRequest", "Scheduling", msg.(string))
	}
	return nil, fwk.NewStatus(fwk.Unschedulable)
}

// waitingFor returns the node neuron-autoscaler launched for the pod (labels.PlannedNodeAnnotation)
// while that node still holds its planned pods (allocation.HoldsPlannedPods); "" otherwise.
func (p *Plugin) waitingFor(pod *corev1.Pod) string {
	name := pod.Annotations[labels.PlannedNodeAnnotation]
	if name == "" || p.h == nil || p.h.SnapshotSharedLister() == nil {
		return ""
	}
	ni, err := p.h.SnapshotSharedLister().NodeInfos().Get(name)
	if err != nil || ni.Node() == nil || !allocation.HoldsPlannedPods(ni.Node(), time.Now()) {
		return ""
	}
	return name
}
