package dra

import (
	"k8s.io/dynamic-resource-allocation/resourceslice"

	apiv1 "github.com/kube-neuron/kube-neuron/api/neuron.aws.com/v1"
	"github.com/kube-neuron/kube-neuron/internal/dra/devices"
)

// DriverName is the DRA driver's name, the domain of its unqualified attributes and the name of
// its DeviceClass.
const DriverName = apiv1.DriverName

// Resource types (attribute resourceType).
const (
	ResourceTypeDevice = devices.ResourceTypeDevice
	ResourceTypeNode   = devices.ResourceTypeNode
)

// NodeDeviceName is the name of the UltraServer node pseudo-device that trn2u nodes publish: a
// claim for it gets every device of the node.
const NodeDeviceName = devices.NodeDeviceName

// NetworkNodeLabels are the node labels EKS sets from EC2 instance topology, published as
// networkNodeLayer1..3.
var NetworkNodeLabels = devices.NetworkNodeLabels

// DeviceName and ParseDeviceName name the Neuron devices in the ResourceSlice.
var (
	DeviceName      = devices.DeviceName
	ParseDeviceName = devices.ParseDeviceName
)

// NodeInfo is everything the ResourceSlice of one node is built from.
type NodeInfo = devices.NodeInfo

// GroupHash is the devicegroupN_id of a group of devices with these EFA addresses.
var GroupHash = devices.GroupHash

// Resources builds the node's pool (devices.Build): one slice of devices, and on UltraServer
// nodes a second slice with the shared counter, since a ResourceSlice holds devices or shared
// counters, not both.
func Resources(info NodeInfo, unhealthy []bool) resourceslice.DriverResources {
	devs, counters := devices.Build(info, unhealthy)
	pool := resourceslice.Pool{Slices: []resourceslice.Slice{{Devices: devs}}}
	if counters != nil {
		pool.Slices = append(pool.Slices, resourceslice.Slice{SharedCounters: counters})
	}
	return resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{info.Name: pool}}
}
