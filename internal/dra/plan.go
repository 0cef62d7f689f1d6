package dra

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"

	apiv1 "github.com/kube-neuron/kube-neuron/api/neuron.aws.com/v1"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// Env names the driver sets in the containers of a claim.
const (
	EnvVisibleCores   = "NEURON_RT_VISIBLE_CORES"
	EnvVisibleDevices = "AWS_NEURON_VISIBLE_DEVICES"
	EnvLNC            = "NEURON_LOGICAL_NC_CONFIG"
	// The UltraServer variables of the Neuron runtime, as the device-plugin-era UltraServer init
	// script writes them.
	EnvUltraServerMode     = "NEURON_RT_ULTRASERVER_MODE"
	EnvUltraServerServerID = "NEURON_RT_ULTRASERVER_SERVER_ID"
	EnvUltraServerNodeID   = "NEURON_RT_ULTRASERVER_NODE_ID"
)

// Plan is what preparing one claim on this node gives: the devices per allocation result, and
// the environment of the claim's containers. It is a pure function of the node and the claim;
// the driver turns it into CDI specs and records it in its checkpoint.
type Plan struct {
	Namespace string          `json:"namespace"`
	Name      string          `json:"name"`
	Devices   []PlannedDevice `json:"devices"`
	// Env is set in every container that uses the claim.
	Env map[string]string `json:"env"`
}

// PlannedDevice is one allocated device of the claim.
type PlannedDevice struct {
	Request string `json:"request"` // the allocation result's request (with a subrequest, "request/sub")
	Pool    string `json:"pool"`
	Device  string `json:"device"` // neurondeviceN or neuronnode
	// Indexes are the Neuron devices (/dev/neuronN) the allocated device stands for: one, or all
	// of the node's for the node device.
	Indexes []int `json:"indexes"`
}

// Indexes returns every Neuron device of the plan, ascending.
func (p *Plan) Indexes() []int {
	var out []int
	for _, d := range p.Devices {
		out = append(out, d.Indexes...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// PlanClaim works out what the claim gets on this node. Its errors are what the kubelet shows
// the user in the pod's FailedPrepareDynamicResources event.
func PlanClaim(info NodeInfo, claim *resourceapi.ResourceClaim) (*Plan, error) {
	if claim.Status.Allocation == nil {
		return nil, fmt.Errorf("claim %s/%s is not allocated", claim.Namespace, claim.Name)
	}
	p := &Plan{Namespace: claim.Namespace, Name: claim.Name, Env: map[string]string{}}
	n := len(info.Hardware.Devices)
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != DriverName {
			continue
		}
		if r.Pool != info.Name {
			return nil, fmt.Errorf("device %s of request %s was allocated from pool %s, but this is node %s: the claim was allocated for another node", r.Device, r.Request, r.Pool, info.Name)
		}
		d := PlannedDevice{Request: r.Request, Pool: r.Pool, Device: r.Device}
		if r.Device == NodeDeviceName {
			if info.Hardware.UltraServer == nil {
				return nil, fmt.Errorf("device %s was allocated, but node %s (%s) is not part of an UltraServer", r.Device, info.Name, info.Shape.Type.Name)
			}
			for i := range n {
				d.Indexes = append(d.Indexes, i)
			}
		} else {
			i, ok := ParseDeviceName(r.Device)
			if !ok || i >= n {
				return nil, fmt.Errorf("device %s of request %s is not a device of node %s, which has %s to %s", r.Device, r.Request, info.Name, DeviceName(0), DeviceName(n-1))
			}
			d.Indexes = []int{i}
		}
		p.Devices = append(p.Devices, d)
	}
	if len(p.Devices) == 0 {
		return nil, fmt.Errorf("claim %s/%s has no device of driver %s", claim.Namespace, claim.Name, DriverName)
	}
	if err := p.applyConfigs(info, claim.Status.Allocation.Devices.Config); err != nil {
		return nil, fmt.Errorf("error applying config: %w", err)
	}
	return p, nil
}

// applyConfigs decodes the driver's opaque configs that apply to the claim's devices (those of
// the DeviceClass first, then the claim's own: a later one of the same kind wins) and sets the
// environment.
func (p *Plan) applyConfigs(info NodeInfo, configs []resourceapi.DeviceAllocationConfiguration) error {
	// Per device, the config of each kind that applies to it.
	type applied struct {
		neuron *apiv1.NeuronConfig
		ultra  *apiv1.UltraServerConfig
	}
	per := make([]applied, len(p.Devices))
	for i, c := range configs {
		if c.Opaque == nil || c.Opaque.Driver != DriverName {
			continue
		}
		cfg, err := apiv1.Decode(c.Opaque.Parameters.Raw)
		if err != nil {
			return fmt.Errorf("opaque config %d (from the %s): %w", i, configSource(c.Source), err)
		}
		for j, d := range p.Devices {
			if !appliesTo(c.Requests, d.Request) {
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

	shape := info.Shape
	var lncSet, ultraSet *applied
	for j := range per {
		a := &per[j]
		if a.neuron != nil {
			if lncSet != nil && lncSet.neuron.LogicalNeuronCore != a.neuron.LogicalNeuronCore {
				return fmt.Errorf("the claim's configs ask for logicalNeuronCore %d and %d: every device of one claim runs at one LNC, so split the requests into two claims", lncSet.neuron.LogicalNeuronCore, a.neuron.LogicalNeuronCore)
			}
			lncSet = a
		}
		if a.ultra != nil {
			if ultraSet != nil && ultraSet.ultra.UltraserverMode != a.ultra.UltraserverMode {
				return fmt.Errorf("the claim's configs ask for ultraserverMode %d and %d: use one UltraServerConfig per claim", ultraSet.ultra.UltraserverMode, a.ultra.UltraserverMode)
			}
			ultraSet = a
		}
	}
	if lncSet != nil {
		want := lncSet.neuron.LogicalNeuronCore
		if !shape.Type.LNCConfigurable {
			// The published driver's message, verbatim (seed 003).
			return fmt.Errorf("LNC value is not configurable for instance type %s", shape.Type.Name)
		}
		var err error
		if shape, err = topology.NewShapeWithGraph(shape.Type, want, shape.Graph()); err != nil {
			return err
		}
		p.Env[EnvLNC] = strconv.Itoa(want)
	}
	if ultraSet != nil {
		env, err := ultraServerEnv(info, ultraSet.ultra.UltraserverMode)
		if err != nil {
			return err
		}
		for k, v := range env {
			p.Env[k] = v
		}
	}

	devices := p.Indexes()
	var cores []int
	for _, d := range devices {
		cores = append(cores, shape.CoresOf(d)...)
	}
	p.Env[EnvVisibleCores] = topology.JoinIDs(cores)
	p.Env[EnvVisibleDevices] = topology.JoinIDs(devices)
	return nil
}

// ultraServerEnv is the Neuron runtime's UltraServer environment for a mode of 1, 2 or 4 nodes.
// The runtime numbers its modes 1 (X4: four nodes), 2 (X2H: two nodes) and 4 (X1: one node).
func ultraServerEnv(info NodeInfo, mode int) (map[string]string, error) {
	us := info.Hardware.UltraServer
	if us == nil {
		return nil, fmt.Errorf("UltraServerConfig needs a node of a Trn2 UltraServer (trn2u.48xlarge), but node %s is a %s outside any UltraServer: select devices with resourceType == 'neuron_node'", info.Name, info.Shape.Type.Name)
	}
	switch mode {
	case 4:
		return map[string]string{EnvUltraServerMode: "1", EnvUltraServerServerID: us.ServerID4, EnvUltraServerNodeID: strconv.Itoa(us.NodeID4)}, nil
	case 2:
		if us.ServerID2 == "" || us.NodeID2 < 0 {
			return nil, fmt.Errorf("ultraserverMode 2 needs the node's 2-node group, which the Neuron driver of node %s does not report (server_id_2, node_id_2): use ultraserverMode 4 or 1", info.Name)
		}
		return map[string]string{EnvUltraServerMode: "2", EnvUltraServerServerID: us.ServerID2, EnvUltraServerNodeID: strconv.Itoa(us.NodeID2)}, nil
	case 1:
		return map[string]string{EnvUltraServerMode: "4", EnvUltraServerServerID: us.ServerID4, EnvUltraServerNodeID: "0"}, nil
	}
	return nil, fmt.Errorf("ultraserverMode %d is not valid: use 1, 2 or 4", mode)
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
