package testkit

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// catalog is the default catalog, parsed once: parsing it costs milliseconds under -race, and
// tests build many nodes.
var catalog = sync.OnceValue(topology.DefaultCatalog)

// NodeWrapper builds a Node; start with MakeNode.
type NodeWrapper struct{ n *corev1.Node }

// MakeNode starts a node with empty labels and annotations, no capacity and no taints.
func MakeNode() *NodeWrapper {
	return &NodeWrapper{n: &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Labels: map[string]string{}, Annotations: map[string]string{},
	}}}
}

// Obj returns the node built so far.
func (w *NodeWrapper) Obj() *corev1.Node { return w.n }

// Name sets the name and, unless UID set one, the UID to UIDOf(name).
func (w *NodeWrapper) Name(name string) *NodeWrapper {
	if w.n.UID == "" || w.n.UID == UIDOf(w.n.Name) {
		w.n.UID = UIDOf(name)
	}
	w.n.Name = name
	return w
}

// Label sets one label.
func (w *NodeWrapper) Label(k, v string) *NodeWrapper { w.n.Labels[k] = v; return w }

// Annotation sets one annotation.
func (w *NodeWrapper) Annotation(k, v string) *NodeWrapper { w.n.Annotations[k] = v; return w }

// InstanceType labels the node with the instance type and, for a type of the default catalog,
// sets the capacity of aws.amazon.com/neuron and aws.amazon.com/neuroncore (at the type's
// default LNC) the way the device plugin advertises them. Allocatable is left alone.
func (w *NodeWrapper) InstanceType(name string) *NodeWrapper {
	w.n.Labels[labels.InstanceType] = name
	if it, ok := catalog().Lookup(name); ok {
		w.Capacity(topology.ResourceNeuron, int64(it.Devices))
		w.Capacity(topology.ResourceNeuronCore, int64(it.LogicalCores(0)))
	}
	return w
}

// Capacity sets the capacity of one resource.
func (w *NodeWrapper) Capacity(res string, n int64) *NodeWrapper {
	if w.n.Status.Capacity == nil {
		w.n.Status.Capacity = corev1.ResourceList{}
	}
	w.n.Status.Capacity[corev1.ResourceName(res)] = qty(n)
	return w
}

// Allocatable sets the allocatable amount of one resource.
func (w *NodeWrapper) Allocatable(res string, n int64) *NodeWrapper {
	if w.n.Status.Allocatable == nil {
		w.n.Status.Allocatable = corev1.ResourceList{}
	}
	w.n.Status.Allocatable[corev1.ResourceName(res)] = qty(n)
	return w
}

// DevicePlugin labels the node as served by the device plugin.
func (w *NodeWrapper) DevicePlugin() *NodeWrapper {
	return w.Label(labels.AllocationMode, labels.AllocationModeDevicePlugin)
}

// DRA labels the node as served by the DRA driver.
func (w *NodeWrapper) DRA() *NodeWrapper {
	return w.Label(labels.AllocationMode, labels.AllocationModeDRA)
}

// Taint adds a taint.
func (w *NodeWrapper) Taint(t corev1.Taint) *NodeWrapper {
	w.n.Spec.Taints = append(w.n.Spec.Taints, t)
	return w
}

// NeuronTaint adds the Neuron taint that NeuronToleration tolerates.
func (w *NodeWrapper) NeuronTaint() *NodeWrapper {
	return w.Taint(corev1.Taint{Key: labels.NeuronTaintKey, Value: labels.NeuronTaintValue, Effect: corev1.TaintEffect(labels.NeuronTaintEffect)})
}

// Unschedulable cordons the node.
func (w *NodeWrapper) Unschedulable() *NodeWrapper { w.n.Spec.Unschedulable = true; return w }

// Ready sets the Ready condition to True.
func (w *NodeWrapper) Ready() *NodeWrapper {
	w.n.Status.Conditions = append(w.n.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue})
	return w
}
