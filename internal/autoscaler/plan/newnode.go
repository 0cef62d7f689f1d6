package plan

import (
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// NewNodeLabels returns the labels a new Neuron node of type t carries; mode is
// labels.AllocationModeDevicePlugin or labels.AllocationModeDRA. Check and Plan evaluate pods'
// nodeSelector and node affinity against these labels and the capacity labels (NodePlan.Labels)
// and no other.
func NewNodeLabels(t topology.InstanceType, mode string) map[string]string {
	return map[string]string{
		labels.InstanceType:   t.Name,
		labels.InstanceFamily: t.Family,
		archLabel:             archValue,
		osLabel:               osValue,
		labels.AllocationMode: mode,
	}
}

// newNodeLabelKeys describes NewNodeLabels in messages.
const newNodeLabelKeys = labels.InstanceType + ", " + labels.InstanceFamily + ", " + archLabel + "=" + archValue +
	", " + osLabel + "=" + osValue + ", " + labels.AllocationMode + ", " + labels.CapacityType + " and (in a reservation) " + labels.CapacityReservationID

// NeuronTaint is the taint every new Neuron node carries: aws.amazon.com/neuron=true:NoSchedule.
func NeuronTaint() corev1.Taint {
	return corev1.Taint{Key: labels.NeuronTaintKey, Value: labels.NeuronTaintValue, Effect: corev1.TaintEffect(labels.NeuronTaintEffect)}
}

// ToleratesNeuronTaint reports whether the pod tolerates NeuronTaint, which every Neuron node
// carries.
func ToleratesNeuronTaint(pod *corev1.Pod) bool {
	taint := NeuronTaint()
	return slices.ContainsFunc(pod.Spec.Tolerations, func(t corev1.Toleration) bool {
		return t.ToleratesTaint(klog.Background(), &taint, false)
	})
}

// IsDevicePluginDaemonSet reports whether ds is a Neuron device plugin: its name or its pod
// template's name contains neuron-device-plugin (seed 000). It may have no pods yet.
func IsDevicePluginDaemonSet(ds *appsv1.DaemonSet) bool {
	return strings.Contains(ds.Name, DevicePluginName) || strings.Contains(ds.Spec.Template.Name, DevicePluginName)
}

// IsDRADriverDaemonSet reports whether ds is the Neuron DRA driver's kubelet plugin: its name or
// its pod template's name contains neuron-dra-driver-kubelet-plugin, or its pod template has the
// label app: neuron-dra-driver-kubelet-plugin (both the published chart and ours).
func IsDRADriverDaemonSet(ds *appsv1.DaemonSet) bool {
	return strings.Contains(ds.Name, DRADriverName) || strings.Contains(ds.Spec.Template.Name, DRADriverName) ||
		ds.Spec.Template.Labels["app"] == DRADriverName
}

// matchesNode reports whether a new node with labels lbls satisfies the pod's nodeSelector and
// required node affinity (terms ORed, expressions ANDed, as the scheduler evaluates them). A new
// node's name is not known: matchFields on metadata.name match only through NotIn.
func matchesNode(pod *corev1.Pod, lbls map[string]string) bool {
	for k, v := range pod.Spec.NodeSelector {
		if got, ok := lbls[k]; !ok || got != v {
			return false
		}
	}
	a := pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return true
	}
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		if termMatches(term, lbls) {
			return true
		}
	}
	return false
}

func termMatches(term corev1.NodeSelectorTerm, lbls map[string]string) bool {
	if len(term.MatchExpressions) == 0 && len(term.MatchFields) == 0 {
		return false // an empty term matches no node
	}
	for _, r := range term.MatchExpressions {
		if !requirementMatches(r, lbls) {
			return false
		}
	}
	for _, r := range term.MatchFields {
		if r.Key != "metadata.name" || r.Operator != corev1.NodeSelectorOpNotIn {
			return false
		}
	}
	return true
}

func requirementMatches(r corev1.NodeSelectorRequirement, lbls map[string]string) bool {
	v, ok := lbls[r.Key]
	switch r.Operator {
	case corev1.NodeSelectorOpIn:
		return ok && slices.Contains(r.Values, v)
	case corev1.NodeSelectorOpNotIn:
		return !ok || !slices.Contains(r.Values, v)
	case corev1.NodeSelectorOpExists:
		return ok
	case corev1.NodeSelectorOpDoesNotExist:
		return !ok
	case corev1.NodeSelectorOpGt, corev1.NodeSelectorOpLt:
		if !ok || len(r.Values) != 1 {
			return false
		}
		have, err1 := strconv.ParseInt(v, 10, 64)
		want, err2 := strconv.ParseInt(r.Values[0], 10, 64)
		if err1 != nil || err2 != nil {
			return false
		}
		if r.Operator == corev1.NodeSelectorOpGt {
			return have > want
		}
		return have < want
	}
	return false
}
