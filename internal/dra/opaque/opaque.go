// Package opaque is the DRA driver's handling of a claim's opaque configs (NeuronConfig,
// UltraServerConfig): which apply to the claim's devices, and whether a node can apply them. The
// driver calls it when it prepares a claim; the autoscaler calls the same code for the nodes it
// may launch, so that it refuses exactly what the driver would refuse, in the driver's words.
// It is pure: no Kubernetes client.
package opaque

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"

	apiv1 "github.com/kube-neuron/kube-neuron/api/neuron.aws.com/v1"
	"github.com/kube-neuron/kube-neuron/internal/neuron"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// The UltraServer variables of the Neuron runtime, as the device-plugin-era UltraServer init
// script writes them.
const (
	EnvUltraServerMode     = "NEURON_RT_ULTRASERVER_MODE"
	EnvUltraServerServerID = "NEURON_RT_ULTRASERVER_SERVER_ID"
	EnvUltraServerNodeID   = "NEURON_RT_ULTRASERVER_NODE_ID"
)

// Settings are what a claim's opaque configs ask of the node; 0 where no config asks.
type Settings struct {
	// LNC is the NeuronConfig's logicalNeuronCore.
	LNC int
	// UltraServerMode is the UltraServerConfig's ultraserverMode.
	UltraServerMode int
}

// IsZero reports whether no config applies.
func (s Settings) IsZero() bool { return s == Settings{} }

// Resolve decodes the driver's opaque configs (those of the DeviceClass first, then the claim's
// own: a later one of the same kind wins) that apply to the claim's devices, one entry of
// requests per device (the allocation result's request, "request/sub" for a subrequest).
func Resolve(configs []resourceapi.DeviceAllocationConfiguration, requests []string) (Settings, error) {
	// Per device, the config of each kind that applies to it.
	type applied struct {
		neuron *apiv1.NeuronConfig
		ultra  *apiv1.UltraServerConfig
	}
	per := make([]applied, len(requests))
	for i, c := range configs {
		if c.Opaque == nil || c.Opaque.Driver != apiv1.DriverName {
			continue
		}
		cfg, err := apiv1.Decode(c.Opaque.Parameters.Raw)
		if err != nil {
			return Settings{}, fmt.Errorf("opaque config %d (from the %s): %w", i, configSource(c.Source), err)
		}
		for j, r := range requests {
			if !appliesTo(c.Requests, r) {
				continue
			}
			switch cfg := cfg.(type) {
			case *apiv1.NeuronConfig:
				per[j].neuron = cfg
			case *apiv1.UltraServerConfig:
				per[j].ultra = cfg
			}
		}
	}
	var s Settings
	for _, a := range per {
		if a.neuron != nil {
			if s.LNC != 0 && s.LNC != a.neuron.LogicalNeuronCore {
				return Settings{}, fmt.Errorf("the claim's configs ask for logicalNeuronCore %d and %d: every device of one claim runs at one LNC, so split the requests into two claims", s.LNC, a.neuron.LogicalNeuronCore)
			}
			s.LNC = a.neuron.LogicalNeuronCore
		}
		if a.ultra != nil {
			if s.UltraServerMode != 0 && s.UltraServerMode != a.ultra.UltraserverMode {
				return Settings{}, fmt.Errorf("the claim's configs ask for ultraserverMode %d and %d: use one UltraServerConfig per claim", s.UltraServerMode, a.ultra.UltraserverMode)
			}
			s.UltraServerMode = a.ultra.UltraserverMode
		}
	}
	return s, nil
}

// Shape returns the shape the claim's devices run at on a node of shape: the node's, or the one
// of the LNC a NeuronConfig asks for.
func (s Settings) Shape(shape *topology.Shape) (*topology.Shape, error) {
	if s.LNC == 0 {
		return shape, nil
	}
	if !shape.Type.LNCConfigurable {
		// The published driver's message, verbatim (seed 003).
		return nil, fmt.Errorf("LNC value is not configurable for instance type %s", shape.Type.Name)
	}
	return topology.NewShapeWithGraph(shape.Type, s.LNC, shape.Graph())
}

// UltraServerEnv is the Neuron runtime's UltraServer environment for the UltraServerConfig's
// mode of 1, 2 or 4 nodes, on node (as messages name it: "node x") of type typ in UltraServer us
// (nil outside any); nil when no UltraServerConfig applies. The runtime numbers its modes 1 (X4:
// four nodes), 2 (X2H: two nodes) and 4 (X1: one node).
func (s Settings) UltraServerEnv(node, typ string, us *neuron.UltraServer) (map[string]string, error) {
	mode := s.UltraServerMode
	if mode == 0 {
		return nil, nil
	}
	if us == nil {
		return nil, fmt.Errorf("UltraServerConfig needs a node of a Trn2 UltraServer (trn2u.48xlarge), but %s is a %s outside any UltraServer: select devices with resourceType == 'neuron_node'", node, typ)
	}
	switch mode {
	case 4:
		return map[string]string{EnvUltraServerMode: "1", EnvUltraServerServerID: us.ServerID4, EnvUltraServerNodeID: strconv.Itoa(us.NodeID4)}, nil
	case 2:
		if us.ServerID2 == "" || us.NodeID2 < 0 {
			return nil, fmt.Errorf("ultraserverMode 2 needs the node's 2-node group, which the Neuron driver of %s does not report (server_id_2, node_id_2): use ultraserverMode 4 or 1", node)
		}
		return map[string]string{EnvUltraServerMode: "2", EnvUltraServerServerID: us.ServerID2, EnvUltraServerNodeID: strconv.Itoa(us.NodeID2)}, nil
	case 1:
		return map[string]string{EnvUltraServerMode: "4", EnvUltraServerServerID: us.ServerID4, EnvUltraServerNodeID: "0"}, nil
	}
	return nil, fmt.Errorf("ultraserverMode %d is not valid: use 1, 2 or 4", mode)
}

// ValidateNew reports what the driver of a new node of type t would refuse: the checks of
// Shape and UltraServerEnv, on the node as its type defines it. What only the running node
// knows (whether its Neuron driver reports the 2-node group) is taken to be there.
func (s Settings) ValidateNew(t topology.InstanceType) error {
	if s.IsZero() {
		return nil
	}
	shape, err := topology.NewShape(t, 0)
	if err != nil {
		return err
	}
	if _, err := s.Shape(shape); err != nil {
		return err
	}
	var us *neuron.UltraServer
	if t.UltraServerNodes > 0 {
		us = &neuron.UltraServer{ServerID2: "unknown", ServerID4: "unknown"}
	}
	_, err = s.UltraServerEnv("a new node", t.Name, us)
	return err
}

// appliesTo reports whether a config for requests applies to an allocation result of request
// (which may name a subrequest, "parent/sub").
func appliesTo(requests []string, request string) bool {
	if len(requests) == 0 {
		return true
	}
	parent, _, _ := strings.Cut(request, "/")
	return slices.Contains(requests, request) || slices.Contains(requests, parent)
}

func configSource(s resourceapi.AllocationConfigSource) string {
	switch s {
	case resourceapi.AllocationConfigSourceClass:
		return "DeviceClass"
	case resourceapi.AllocationConfigSourceClaim:
		return "claim"
	}
	return string(s)
}
