package lab

import (
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/neuron"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// adoptedSpec is the simulated node for a Node object: its instance type and allocation mode
// from its labels, the type's default LNC and the default driver version.
func adoptedSpec(cat *topology.Catalog, node *corev1.Node) (NodeSpec, error) {
	it, err := cat.Get(node.Labels[labels.InstanceType])
	if err != nil {
		return NodeSpec{}, fmt.Errorf("label %s: %w", labels.InstanceType, err)
	}
	mode := node.Labels[labels.AllocationMode]
	if mode == "" {
		mode = ModeDevicePlugin
	}
	if mode != ModeDevicePlugin && mode != ModeDRA {
		return NodeSpec{}, fmt.Errorf("label %s=%q: use %s or %s", labels.AllocationMode, mode, ModeDevicePlugin, ModeDRA)
	}
	spec := NodeSpec{Name: node.Name, InstanceType: it, Mode: mode, LNC: it.DefaultLNC, DriverVersion: DefaultDriverVersion, Kubelet: KubeletSimulated}
	us, err := ultraServerOf(node.Labels)
	if err != nil {
		return NodeSpec{}, err
	}
	if us != nil {
		if it.UltraServerNodes == 0 {
			return NodeSpec{}, fmt.Errorf("label %s: %s is not an UltraServer type", labels.UltraServerServerID4, it.Name)
		}
		spec.UltraServer, spec.UltraServerName = us, us.ServerID4
	}
	return spec, nil
}

// ultraServerOf reads an UltraServer member's identity from its node labels
// (labels.UltraServerLabels); nil when the node carries none.
func ultraServerOf(l map[string]string) (*neuron.UltraServer, error) {
	id := l[labels.UltraServerServerID4]
	if id == "" {
		return nil, nil
	}
	us := &neuron.UltraServer{ServerID4: id, ServerID2: l[labels.UltraServerServerID2], NodeID2: -1, Mode: l[labels.UltraServerMode]}
	var err error
	if us.NodeID4, err = strconv.Atoi(l[labels.UltraServerNodeID4]); err != nil || us.NodeID4 < 0 || us.NodeID4 > 3 {
		return nil, fmt.Errorf("label %s=%q: want the node's position in its UltraServer, 0 to 3", labels.UltraServerNodeID4, l[labels.UltraServerNodeID4])
	}
	if v := l[labels.UltraServerNodeID2]; v != "" {
		if us.NodeID2, err = strconv.Atoi(v); err != nil || us.NodeID2 < 0 || us.NodeID2 > 1 {
			return nil, fmt.Errorf("label %s=%q: want the node's position in its pair, 0 or 1", labels.UltraServerNodeID2, v)
		}
	}
	return us, nil
}
