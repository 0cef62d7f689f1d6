package plugin

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// PreScore skips the plugin's Score for a pod without Neuron requests.
func (p *Plugin) PreScore(_ context.Context, state fwk.CycleState, _ *corev1.Pod, _ []fwk.NodeInfo) *fwk.Status {
	if _, ok := readState(state); !ok {
		return fwk.NewStatus(fwk.Skip)
	}
	return nil
}

// Score ranks the tightest fit highest, so that large blocks and whole nodes stay free, on the
// extender's scale (its 0-10 times ten, so that both ways of scheduling rank nodes alike), and
// among nodes of the same tenth the fullest first (allocation.Fullness): the node neuron-autoscaler
// launched for the pod ranks first. A node the pod does not fit scores 0.
func (p *Plugin) Score(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, ni fwk.NodeInfo) (int64, *fwk.Status) {
	s, ok := readState(state)
	if !ok {
		return 0, nil
	}
	if ni.Node() == nil {
		return 0, nil
	}
	name := ni.Node().Name
	v, _, err := p.view(ctx, ni)
	if err != nil {
		return 0, nil
	}
	fit, ok := s.scoreBesideNominated(name)
	if !ok {
		// Filter placed the pod on this NodeInfo (the node cache holds its placement) unless
		// pods were nominated to the node, whose score it noted.
		r := p.place(v, pod, s.reqs, s.key)
		if r.err != nil {
			return 0, nil
		}
		fit = r.score
	}
	score := nodeScore(fit, v.usage)
	if planned := pod.Annotations[labels.PlannedNodeAnnotation]; planned != "" {
		if planned == name {
			return fwk.MaxNodeScore, nil
		}
		score = min(score, fwk.MaxNodeScore-fwk.MaxNodeScore/10)
	}
	return score, nil
}

// nodeScore is Score before the planned node: the placement score's tenth times ten, plus the
// node's fullness, at most fwk.MaxNodeScore.
func nodeScore(fit float64, u *topology.Usage) int64 {
	return min(fwk.MaxNodeScore, allocation.Tenths(fit)*(fwk.MaxNodeScore/10)+allocation.Fullness(u))
}

// ScoreExtensions: the scores are on the framework's scale already.
func (p *Plugin) ScoreExtensions() fwk.ScoreExtensions { return nil }
