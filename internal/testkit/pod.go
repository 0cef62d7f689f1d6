package testkit

import (
	"maps"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// PublishedAllocTime is the NEURON_ALLOC_TIME Published writes: a fixed instant in unix
// nanoseconds (2023-11-14), so tests that order pods by it say so with AllocTime.
const PublishedAllocTime int64 = 1700000000000000000

// PodWrapper builds a Pod; start with MakePod.
type PodWrapper struct{ p *corev1.Pod }

// MakePod starts a pod in DefaultNamespace with empty labels and annotations.
func MakePod() *PodWrapper {
	return &PodWrapper{p: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Namespace: DefaultNamespace, Labels: map[string]string{}, Annotations: map[string]string{},
	}}}
}

// Obj returns the pod built so far.
func (w *PodWrapper) Obj() *corev1.Pod { return w.p }

// Namespace sets the namespace.
func (w *PodWrapper) Namespace(ns string) *PodWrapper { w.p.Namespace = ns; return w }

// Name sets the name and, unless UID set one, the UID to UIDOf(name).
func (w *PodWrapper) Name(name string) *PodWrapper {
	if w.p.UID == "" || w.p.UID == UIDOf(w.p.Name) {
		w.p.UID = UIDOf(name)
	}
	w.p.Name = name
	return w
}

// UID sets the UID.
func (w *PodWrapper) UID(uid types.UID) *PodWrapper { w.p.UID = uid; return w }

// Label sets one label.
func (w *PodWrapper) Label(k, v string) *PodWrapper { w.p.Labels[k] = v; return w }

// Annotation sets one annotation.
func (w *PodWrapper) Annotation(k, v string) *PodWrapper { w.p.Annotations[k] = v; return w }

// Annotations merges a into the pod's annotations.
func (w *PodWrapper) Annotations(a map[string]string) *PodWrapper {
	maps.Copy(w.p.Annotations, a)
	return w
}

// Node binds the pod to a node (spec.nodeName).
func (w *PodWrapper) Node(name string) *PodWrapper { w.p.Spec.NodeName = name; return w }

// Phase sets status.phase.
func (w *PodWrapper) Phase(p corev1.PodPhase) *PodWrapper { w.p.Status.Phase = p; return w }

// Running is Phase(corev1.PodRunning).
func (w *PodWrapper) Running() *PodWrapper { return w.Phase(corev1.PodRunning) }

// Pending is Phase(corev1.PodPending).
func (w *PodWrapper) Pending() *PodWrapper { return w.Phase(corev1.PodPending) }

// Container adds a container asking for count of res in its limits only, as users write
// extended resources; res "" adds a container without resources.
func (w *PodWrapper) Container(name, res string, count int64) *PodWrapper {
	c := corev1.Container{Name: name}
	if res != "" {
		c.Resources.Limits = corev1.ResourceList{corev1.ResourceName(res): qty(count)}
	}
	w.p.Spec.Containers = append(w.p.Spec.Containers, c)
	return w
}

// DefaultedContainer adds a container asking for count of res in both limits and requests,
// as the API server's defaulting leaves a container that set only the limit.
func (w *PodWrapper) DefaultedContainer(name, res string, count int64) *PodWrapper {
	l := corev1.ResourceList{corev1.ResourceName(res): qty(count)}
	w.p.Spec.Containers = append(w.p.Spec.Containers, corev1.Container{Name: name, Resources: corev1.ResourceRequirements{
		Limits: l, Requests: l.DeepCopy(),
	}})
	return w
}

// Neuron adds DefaultContainer asking for devices aws.amazon.com/neuron in its limits.
func (w *PodWrapper) Neuron(devices int64) *PodWrapper {
	return w.Container(DefaultContainer, topology.ResourceNeuron, devices)
}

// NeuronCores adds DefaultContainer asking for cores aws.amazon.com/neuroncore in its limits.
func (w *PodWrapper) NeuronCores(cores int64) *PodWrapper {
	return w.Container(DefaultContainer, topology.ResourceNeuronCore, cores)
}

// Selector sets one nodeSelector entry.
func (w *PodWrapper) Selector(k, v string) *PodWrapper {
	if w.p.Spec.NodeSelector == nil {
		w.p.Spec.NodeSelector = map[string]string{}
	}
	w.p.Spec.NodeSelector[k] = v
	return w
}

// Affinity sets required node affinity with the given terms (ORed, as in the API).
func (w *PodWrapper) Affinity(terms ...corev1.NodeSelectorTerm) *PodWrapper {
	w.p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms},
	}}
	return w
}

// Tolerations replaces the pod's tolerations; with no arguments the pod tolerates nothing.
func (w *PodWrapper) Tolerations(t ...corev1.Toleration) *PodWrapper {
	w.p.Spec.Tolerations = t
	return w
}

// TolerateNeuron adds the toleration of the Neuron taint (NeuronToleration).
func (w *PodWrapper) TolerateNeuron() *PodWrapper {
	w.p.Spec.Tolerations = append(w.p.Spec.Tolerations, NeuronToleration())
	return w
}

// ClaimTemplate adds a pod-level resource claim called name generated from template.
func (w *PodWrapper) ClaimTemplate(name, template string) *PodWrapper {
	w.p.Spec.ResourceClaims = append(w.p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: name, ResourceClaimTemplateName: &template})
	return w
}

// Record writes r's annotations on the pod, as the extender's bind does, and binds the pod to
// r.Node. It writes no NEURON_ALLOC_TIME: add AllocTime when the test needs one.
func (w *PodWrapper) Record(r *allocation.Record) *PodWrapper {
	maps.Copy(w.p.Annotations, r.Annotations())
	w.p.Spec.NodeName = r.Node
	return w
}

// AllocTime sets NEURON_ALLOC_TIME to t unix nanoseconds.
func (w *PodWrapper) AllocTime(t int64) *PodWrapper {
	w.p.Annotations[allocation.AllocTime] = strconv.FormatInt(t, 10)
	return w
}

// Published writes the annotations the published Neuron stack leaves on a pod it placed:
// AWS_NEURON_IDS ids, NEURON_ALLOCATED "false" and NEURON_ALLOC_TIME PublishedAllocTime
// (call AllocTime afterwards for another). It writes no record of ours.
func (w *PodWrapper) Published(ids string) *PodWrapper {
	w.p.Annotations[allocation.AWSNeuronIDs] = ids
	w.p.Annotations[allocation.Allocated] = "false"
	return w.AllocTime(PublishedAllocTime)
}

// NeuronToleration tolerates the Neuron taint that Neuron nodes carry (NoSchedule).
func NeuronToleration() corev1.Toleration {
	return corev1.Toleration{Key: labels.NeuronTaintKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffect(labels.NeuronTaintEffect)}
}

// Term is a node selector term whose expressions are ANDed.
func Term(exprs ...corev1.NodeSelectorRequirement) corev1.NodeSelectorTerm {
	return corev1.NodeSelectorTerm{MatchExpressions: exprs}
}

// Expr is one node selector requirement.
func Expr(key string, op corev1.NodeSelectorOperator, values ...string) corev1.NodeSelectorRequirement {
	return corev1.NodeSelectorRequirement{Key: key, Operator: op, Values: values}
}

func qty(n int64) resource.Quantity { return *resource.NewQuantity(n, resource.DecimalSI) }
