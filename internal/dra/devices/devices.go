// Package devices builds the devices the Neuron DRA driver publishes in its ResourceSlice, with
// their attributes (DESIGN section 4), from what the node reports. The driver publishes them; the
// autoscaler builds those of nodes it may launch, to evaluate claims' CEL selectors against them.
package devices

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	apiv1 "github.com/kube-neuron/kube-neuron/api/neuron.aws.com/v1"
	"github.com/kube-neuron/kube-neuron/internal/neuron"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// Resource types (attribute resourceType).
const (
	ResourceTypeDevice = "neuron_device"
	ResourceTypeNode   = "neuron_node"
)

// NodeDeviceName is the name of the UltraServer node pseudo-device that trn2u nodes publish: a
// claim for it gets every device of the node.
const NodeDeviceName = apiv1.NodeDeviceName

// CounterSetName and CounterName are the shared counter that keeps NodeDeviceName and the node's
// devices apart: each device consumes one, the node device all of them.
const (
	CounterSetName = "neuron-devices"
	CounterName    = "devices"
)

// NetworkNodeLabels are the node labels EKS sets from EC2 instance topology
// (DescribeInstanceTopology), network node layer 1 to 3; the driver publishes them as
// networkNodeLayer1..3.
var NetworkNodeLabels = [3]string{
	"topology.k8s.aws/network-node-layer-1",
	"topology.k8s.aws/network-node-layer-2",
	"topology.k8s.aws/network-node-layer-3",
}

// DeviceName and ParseDeviceName name the Neuron devices in the ResourceSlice.
var (
	DeviceName      = apiv1.DeviceName
	ParseDeviceName = apiv1.ParseDeviceName
)

// NodeInfo is everything the ResourceSlice of one node is built from.
type NodeInfo struct {
	Name string
	// Shape is the node's type, LNC and device graph (neuron.Node.Shape).
	Shape    *topology.Shape
	Hardware *neuron.Node // what the Neuron driver reports
	// NetworkNodes are EC2 network node layers 1 to 3 ("" where unknown).
	NetworkNodes [3]string
	// DriverVersion is this DRA driver's semantic version (attribute draDriverVersion).
	DriverVersion string
}

// Build returns the devices of the node's pool: one per healthy Neuron device with the
// attributes of DESIGN section 4, and on UltraServer nodes the node pseudo-device with the shared
// counter that keeps it and the devices apart (counters is nil on other nodes). unhealthy[i]
// leaves device i out (and the node device, which stands for all of them).
func Build(info NodeInfo, unhealthy []bool) (devices []resourceapi.Device, counters []resourceapi.CounterSet) {
	n := len(info.Hardware.Devices)
	it, coresPerDevice := info.Shape.Type, info.Shape.CoresPerDevice
	ultra := info.Hardware.UltraServer != nil
	groups := deviceGroups(info.Hardware)

	anyUnhealthy := false
	for i := range n {
		if i < len(unhealthy) && unhealthy[i] {
			anyUnhealthy = true
			continue
		}
		attrs := commonAttributes(info)
		attrs["deviceId"] = intAttr(i)
		attrs["resourceType"] = strAttr(ResourceTypeDevice)
		if row, col, ok := info.Shape.GridPosition(i); ok {
			attrs["topology_x"] = intAttr(row)
			attrs["topology_y"] = intAttr(col)
			attrs["topology4_id"] = intAttr(i / 4)
			attrs["topology8_id"] = intAttr(i / 8)
		}
		for size, ids := range groups {
			attrs[resourceapi.QualifiedName(fmt.Sprintf("resource.aws.com/devicegroup%d_id", size))] = strAttr(ids[i])
		}
		d := resourceapi.Device{
			Name:       DeviceName(i),
			Attributes: attrs,
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
				"cores":  {Value: *resource.NewQuantity(int64(coresPerDevice), resource.DecimalSI)},
				"memory": {Value: *resource.NewQuantity(int64(it.DeviceMemoryGiB)<<30, resource.BinarySI)},
			},
		}
		if ultra {
			d.ConsumesCounters = []resourceapi.DeviceCounterConsumption{{
				CounterSet: CounterSetName,
				Counters:   map[string]resourceapi.Counter{CounterName: {Value: *resource.NewQuantity(1, resource.DecimalSI)}},
			}}
		}
		devices = append(devices, d)
	}
	if ultra {
		if !anyUnhealthy {
			attrs := commonAttributes(info)
			attrs["resourceType"] = strAttr(ResourceTypeNode)
			devices = append(devices, resourceapi.Device{
				Name:       NodeDeviceName,
				Attributes: attrs,
				Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
					"devices": {Value: *resource.NewQuantity(int64(n), resource.DecimalSI)},
					"cores":   {Value: *resource.NewQuantity(int64(n*coresPerDevice), resource.DecimalSI)},
					"memory":  {Value: *resource.NewQuantity(int64(n*it.DeviceMemoryGiB)<<30, resource.BinarySI)},
				},
				ConsumesCounters: []resourceapi.DeviceCounterConsumption{{
					CounterSet: CounterSetName,
					Counters:   map[string]resourceapi.Counter{CounterName: {Value: *resource.NewQuantity(int64(n), resource.DecimalSI)}},
				}},
			})
		}
		counters = []resourceapi.CounterSet{{
			Name:     CounterSetName,
			Counters: map[string]resourceapi.Counter{CounterName: {Value: *resource.NewQuantity(int64(n), resource.DecimalSI)}},
		}}
	}
	return devices, counters
}

// commonAttributes are the attributes of every device of the node.
func commonAttributes(info NodeInfo) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		"instanceType": strAttr(info.Shape.Type.Name),
	}
	if v := info.Hardware.DriverVersion; v != "" {
		attrs["neuronDriverVersion"] = strAttr(v)
	}
	if v := info.DriverVersion; v != "" {
		attrs["draDriverVersion"] = resourceapi.DeviceAttribute{VersionValue: ptr.To(v)}
	}
	for i, nn := range info.NetworkNodes {
		if nn != "" {
			attrs[resourceapi.QualifiedName(fmt.Sprintf("networkNodeLayer%d", i+1))] = strAttr(nn)
		}
	}
	if us := info.Hardware.UltraServer; us != nil {
		attrs["ultraserverId"] = strAttr(us.ServerID4)
		attrs["ultraserverNodeId"] = intAttr(us.NodeID4)
	}
	return attrs
}

// deviceGroups computes the resource.aws.com/devicegroup{1,4,8,16}_id values per device, the way
// the connected-device-maps-over-EFA library does, so that they match what the EFA driver
// publishes: devicegroup1_id is the EFA PCI address paired with the device; devicegroupN_id is the
// first 16 hex characters of the sha256 of the comma-joined, sorted, de-duplicated EFA addresses
// of devices [g*N, (g+1)*N), g = deviceId / N. A node whose devices are not all paired with an EFA
// device gets none; sizes larger than the node get none.
func deviceGroups(hw *neuron.Node) map[int][]string {
	n := len(hw.Devices)
	addrs := make([]string, n)
	for i, d := range hw.Devices {
		if d.EFAAddress == "" {
			return nil
		}
		addrs[i] = d.EFAAddress
	}
	if n == 0 {
		return nil
	}
	out := map[int][]string{1: addrs}
	for _, size := range []int{4, 8, 16} {
		if size > n {
			continue
		}
		ids := make([]string, n)
		for i := range n {
			g := i / size
			end := min((g+1)*size, n)
			ids[i] = GroupHash(addrs[g*size : end])
		}
		out[size] = ids
	}
	return out
}

// GroupHash is the devicegroupN_id of a group of devices with these EFA addresses.
func GroupHash(efaAddresses []string) string {
	s := slices.Compact(slices.Sorted(slices.Values(efaAddresses)))
	sum := sha256.Sum256([]byte(strings.Join(s, ",")))
	return hex.EncodeToString(sum[:])[:16]
}

func strAttr(s string) resourceapi.DeviceAttribute {
	return resourceapi.DeviceAttribute{StringValue: ptr.To(s)}
}

func intAttr(i int) resourceapi.DeviceAttribute {
	return resourceapi.DeviceAttribute{IntValue: ptr.To(int64(i))}
}
