package plugin

import (
	"context"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	v1helper "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/helper"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/noderesources"
	"k8s.io/utils/ptr"

	kneuronlabels "github.com/kube-neuron/kube-neuron/internal/labels"
)

// DefaultCandidateNodes is how many nodes PreFilter hands the framework for a pod it narrows
// (Args.CandidateNodes).
const DefaultCandidateNodes = 10

// candidate is a node the pod's Neuron requests fit, with the plugin's Score there.
type candidate struct {
	ni    fwk.NodeInfo
	score int64
}

// candidates returns the nodes kube-scheduler is to filter and score for the pod: the
// p.candidateNodes nodes the plugin's Score ranks highest (ties in the snapshot's order) among
// those where the pod's Neuron requests fit, no pod is nominated (hasNominated) and hostAdmits
// passes. kube-scheduler otherwise checks a sample of the nodes per pod
// (percentageOfNodesToScore) and packs only within it; here every node is ranked, at the cost
// of one cached placement per node, and the framework's own filters and scores run on the few
// best. nil (every node, sampled as usual) when the pod is not narrowable, no node qualifies, or
// narrowing is off.
func (p *Plugin) candidates(ctx context.Context, pod *corev1.Pod, s *podState) sets.Set[string] {
	k := p.candidateNodes
	if k <= 0 || p.h == nil || p.h.SnapshotSharedLister() == nil || !narrowable(pod) {
		return nil
	}
	lister := p.h.SnapshotSharedLister().NodeInfos()
	if p.antiAffinityMayReject(lister, pod) {
		return nil
	}
	nis, err := lister.List()
	if err != nil {
		return nil
	}
	logger := klog.FromContext(ctx)
	required := nodeaffinity.GetRequiredNodeAffinity(pod)
	opts := resourceOptions()
	comparison := utilfeature.DefaultFeatureGate.Enabled(features.TaintTolerationComparisonOperators)
	// best holds the candidates so far, highest score first and, within a score, in the
	// snapshot's order: a node enters only above the lowest once there are k, so the checks
	// past the score run on few nodes.
	best := make([]candidate, 0, k)
	for _, ni := range nis {
		node := ni.Node()
		if node == nil {
			continue
		}
		v, _, err := p.view(ctx, ni)
		if err != nil {
			continue
		}
		r := p.place(v, pod, s.reqs, s.key)
		if r.err != nil {
			continue
		}
		score := nodeScore(r.score, v.usage)
		if len(best) == k && score <= best[k-1].score {
			continue
		}
		if p.hasNominated(node.Name, pod) || !hostAdmits(logger, pod, ni, required, opts, comparison) {
			continue
		}
		i := sort.Search(len(best), func(i int) bool { return best[i].score < score })
		if len(best) < k {
			best = append(best, candidate{})
		}
		copy(best[i+1:], best[i:len(best)-1])
		best[i] = candidate{ni: ni, score: score}
	}
	if len(best) == 0 {
		return nil
	}
	names := sets.New[string]()
	for _, c := range best {
		names.Insert(c.ni.Node().Name)
	}
	return names
}

// narrowable reports whether the pod may be narrowed to the nodes the plugin ranks best: it
// asks for nothing that a filter hostAdmits does not repeat could refuse on those nodes (host
// ports, volumes beyond the node-local kinds, resource claims, pod affinity or anti-affinity,
// topology spread, a scheduling group), nor for a preference that another plugin's score should
// weigh over all nodes (preferred node affinity), nor for the node neuron-autoscaler launched
// for it.
func narrowable(pod *corev1.Pod) bool {
	spec := &pod.Spec
	if spec.NodeName != "" || pod.Annotations[kneuronlabels.PlannedNodeAnnotation] != "" ||
		len(spec.TopologySpreadConstraints) > 0 || len(spec.ResourceClaims) > 0 || spec.SchedulingGroup != nil {
		return false
	}
	if a := spec.Affinity; a != nil && (a.PodAffinity != nil || a.PodAntiAffinity != nil ||
		a.NodeAffinity != nil && len(a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution) > 0) {
		return false
	}
	for _, c := range spec.InitContainers {
		if hasHostPort(c) {
			return false
		}
	}
	for _, c := range spec.Containers {
		if hasHostPort(c) {
			return false
		}
	}
	for _, v := range spec.Volumes {
		vs := v.VolumeSource
		if vs.EmptyDir == nil && vs.ConfigMap == nil && vs.Secret == nil && vs.Projected == nil && vs.DownwardAPI == nil && vs.HostPath == nil {
			return false
		}
	}
	return true
}

func hasHostPort(c corev1.Container) bool {
	for _, port := range c.Ports {
		if port.HostPort != 0 {
			return true
		}
	}
	return false
}

// antiAffinityMayReject reports whether a pod already placed has a required anti-affinity term
// that may select the pod: InterPodAffinity would then refuse the pod on every node of that
// pod's topology domain, which hostAdmits does not check. The namespaces' labels are not at
// hand, so a term with a namespace selector counts as selecting the pod's namespace.
func (p *Plugin) antiAffinityMayReject(lister fwk.NodeInfoLister, pod *corev1.Pod) bool {
	nis, err := lister.HavePodsWithRequiredAntiAffinityList()
	if err != nil {
		return true
	}
	podLabels := labels.Set(pod.Labels)
	for _, ni := range nis {
		for _, pi := range ni.GetPodsWithRequiredAntiAffinity() {
			for _, term := range pi.GetRequiredAntiAffinityTerms() {
				inNamespace := term.Namespaces.Has(pod.Namespace)
				if !inNamespace && term.NamespaceSelector != nil {
					_, selectable := term.NamespaceSelector.Requirements() // false only for labels.Nothing()
					inNamespace = selectable
				}
				if inNamespace && term.Selector.Matches(podLabels) {
					return true
				}
			}
		}
	}
	return false
}

// hasNominated reports whether pods are nominated to the node that the framework's filters
// count against the pod (priority at least the pod's): the candidates leave such a node to the
// usual sampling, whose Filter sees them.
func (p *Plugin) hasNominated(node string, pod *corev1.Pod) bool {
	prio := ptr.Deref(pod.Spec.Priority, 0)
	for _, pi := range p.h.NominatedPodsForNode(node) {
		if q := pi.GetPod(); q.UID != pod.UID && ptr.Deref(q.Spec.Priority, 0) >= prio {
			return true
		}
	}
	return false
}

// hostAdmits repeats, for a candidate, the default filters that a narrowable pod can fail on a
// node: NodeUnschedulable, TaintToleration (NoSchedule and NoExecute), NodeAffinity (node
// selector and required node affinity) and NodeResourcesFit (every resource, pod count
// included). The framework runs them again on the candidates; a miss only costs a cycle
// (PostFilter).
func hostAdmits(logger klog.Logger, pod *corev1.Pod, ni fwk.NodeInfo, required nodeaffinity.RequiredNodeAffinity, opts noderesources.ResourceRequestsOptions, comparison bool) bool {
	node := ni.Node()
	if node.Spec.Unschedulable && !v1helper.TolerationsTolerateTaint(logger, pod.Spec.Tolerations, &corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}, comparison) {
		return false
	}
	if _, untolerated := v1helper.FindMatchingUntoleratedTaint(logger, node.Spec.Taints, pod.Spec.Tolerations, helper.DoNotScheduleTaintsFilterFunc(), comparison); untolerated {
		return false
	}
	if ok, err := required.Match(node); err != nil || !ok {
		return false
	}
	return len(noderesources.Fits(pod, ni, nil, opts)) == 0
}

// resourceOptions are NodeResourcesFit's options under the scheduler's feature gates.
func resourceOptions() noderesources.ResourceRequestsOptions {
	gate := utilfeature.DefaultFeatureGate
	return noderesources.ResourceRequestsOptions{
		EnablePodLevelResources:           gate.Enabled(features.PodLevelResources),
		EnableDRAExtendedResource:         gate.Enabled(features.DRAExtendedResource),
		EnableDRANodeAllocatableResources: gate.Enabled(features.DRANodeAllocatableResources),
	}
}
