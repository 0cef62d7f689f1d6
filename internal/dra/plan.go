package dra

import (
	"fmt"
	"maps"
	"slices"
	"strconv"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/kube-neuron/kube-neuron/internal/dra/opaque"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// Env names the driver sets in the containers of a claim.
const (
	EnvVisibleCores   = "NEURON_RT_VISIBLE_CORES"
	EnvVisibleDevices = "AWS_NEURON_VISIBLE_DEVICES"
	EnvLNC            = "NEURON_LOGICAL_NC_CONFIG"
	// The UltraServer variables of the Neuron runtime, as the device-plugin-era UltraServer init
	// script writes them.
	EnvUltraServerMode     = opaque.EnvUltraServerMode
	EnvUltraServerServerID = opaque.EnvUltraServerServerID
	EnvUltraServerNodeID   = opaque.EnvUltraServerNodeID
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

// applyConfigs applies the driver's opaque configs that apply to the claim's devices (those of
// the DeviceClass first, then the claim's own: a later one of the same kind wins) and sets the
// environment. The rules are package opaque's, which the autoscaler runs for new nodes too.
func (p *Plan) applyConfigs(info NodeInfo, configs []resourceapi.DeviceAllocationConfiguration) error {
	requests := make([]string, len(p.Devices))
	for i, d := range p.Devices {
		requests[i] = d.Request
	}
	s, err := opaque.Resolve(configs, requests)
	if err != nil {
		return err
	}
	shape, err := s.Shape(info.Shape)
	if err != nil {
		return err
	}
	if s.LNC != 0 {
		p.Env[EnvLNC] = strconv.Itoa(s.LNC)
	}
	env, err := s.UltraServerEnv("node "+info.Name, info.Shape.Type.Name, info.Hardware.UltraServer)
	if err != nil {
		return err
	}
	maps.Copy(p.Env, env)

	devices := p.Indexes()
	var cores []int
	for _, d := range devices {
		cores = append(cores, shape.CoresOf(d)...)
	}
	p.Env[EnvVisibleCores] = topology.JoinIDs(cores)
	p.Env[EnvVisibleDevices] = topology.JoinIDs(devices)
	return nil
}
