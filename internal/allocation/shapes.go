package allocation

import (
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// Shapes answers a node's shape for the schedulers (the extender and the NeuronTopology plugin),
// or why they cannot serve the node, building each shape (its device graph) once per instance
// type and capacity. Safe for concurrent use.
type Shapes struct {
	catalog *topology.Catalog
	built   sync.Map // instance type + capacities -> *topology.Shape (immutable)
}

// NewShapes returns a Shapes over the catalog.
func NewShapes(cat *topology.Catalog) *Shapes { return &Shapes{catalog: cat} }

// Of returns the node's shape, or why Neuron pods cannot be placed on it by device plugin
// requests: not a Neuron node, or served by the DRA driver.
func (s *Shapes) Of(node *corev1.Node) (*topology.Shape, error) {
	name := node.Name
	if !IsNeuronNode(s.catalog, node) {
		return nil, fmt.Errorf("node %s is not a Neuron node (instance type %q is not in the catalog)", name, node.Labels[labels.InstanceType])
	}
	if node.Labels[labels.AllocationMode] == labels.AllocationModeDRA {
		return nil, fmt.Errorf("node %s is served by the DRA driver (%s=%s): request its devices with a ResourceClaim", name, labels.AllocationMode, labels.AllocationModeDRA)
	}
	devices := node.Status.Capacity[corev1.ResourceName(topology.ResourceNeuron)]
	cores := node.Status.Capacity[corev1.ResourceName(topology.ResourceNeuronCore)]
	key := node.Labels[labels.InstanceType] + "|" + devices.String() + "|" + cores.String()
	if shape, ok := s.built.Load(key); ok {
		return shape.(*topology.Shape), nil
	}
	shape, err := ShapeOfNode(s.catalog, node)
	if err == nil {
		s.built.Store(key, shape)
	}
	return shape, err
}
