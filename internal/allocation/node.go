package allocation

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// ShapeOfNode returns the shape of a Neuron node from its instance type label and, for the LNC,
// the ratio of cores to devices the device plugin advertises in its capacity (the catalog's
// default LNC when it advertises none).
func ShapeOfNode(cat *topology.Catalog, node *corev1.Node) (*topology.Shape, error) {
	name := node.Labels[labels.InstanceType]
	if name == "" {
		return nil, fmt.Errorf("node %s has no %s label", node.Name, labels.InstanceType)
	}
	it, err := cat.Get(name)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", node.Name, err)
	}
	devices := node.Status.Capacity[corev1.ResourceName(topology.ResourceNeuron)]
	cores := node.Status.Capacity[corev1.ResourceName(topology.ResourceNeuronCore)]
	s, err := topology.NewShape(it, it.LNCOfCounts(devices.Value(), cores.Value()))
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", node.Name, err)
	}
	return s, nil
}

// IsNeuronNode reports whether the node's instance type is in the catalog.
func IsNeuronNode(cat *topology.Catalog, node *corev1.Node) bool {
	_, ok := cat.Lookup(node.Labels[labels.InstanceType])
	return ok
}
