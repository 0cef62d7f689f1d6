// Package labels holds the label, annotation and taint keys that kube-neuron's parts and the
// published Neuron stack agree on (DESIGN section 4). It has no logic beyond building label sets.
package labels

import (
	"strconv"

	"github.com/kube-neuron/kube-neuron/internal/neuron"
)

// Node labels.
const (
	InstanceType   = "node.kubernetes.io/instance-type"
	InstanceFamily = "karpenter.k8s.aws/instance-family"
	Hostname       = "kubernetes.io/hostname"
	// AllocationMode says which component serves the node's Neuron devices:
	// AllocationModeDevicePlugin or AllocationModeDRA.
	AllocationMode             = "kube-neuron.io/allocation-mode"
	AllocationModeDevicePlugin = "device-plugin"
	AllocationModeDRA          = "dra"

	UltraServerMode      = "neuron.amazonaws.com/ultraserver-mode"
	UltraServerServerID2 = "neuron.amazonaws.com/ultraserver-server-id-2"
	UltraServerServerID4 = "neuron.amazonaws.com/ultraserver-server-id-4"
	UltraServerNodeID2   = "neuron.amazonaws.com/ultraserver-node-id-2"
	UltraServerNodeID4   = "neuron.amazonaws.com/ultraserver-node-id-4"
)

// What neuron-autoscaler and neuron-scheduler-extender agree on about the nodes the autoscaler
// launches.
const (
	// LaunchingTaintKey is the startup taint of the nodes neuron-autoscaler launches: they hold
	// pods off with it until they serve and the pods planned onto them are nominated to them.
	LaunchingTaintKey = "kube-neuron.io/launching"
	// PlannedNodeAnnotation, on a pending pod, names the node neuron-autoscaler launched for it.
	// While that node exists and still carries LaunchingTaintKey, the scheduler extender keeps
	// the pod off every other node: the scheduler clears a pod's nomination whenever it fails to
	// place it, so the nomination alone does not keep a pod, tried while its own node is held, from
	// taking room another launched node has for another pod.
	PlannedNodeAnnotation = "kube-neuron.io/planned-node"
)

// Reserved capacity: the labels of the nodes neuron-autoscaler launches into a capacity
// reservation (an On-Demand Capacity Reservation or a Capacity Block for ML) or on demand.
const (
	// CapacityReservationID is the reservation's id (cr-...) on a node launched into one.
	CapacityReservationID = "kube-neuron.io/capacity-reservation-id"
	// CapacityType is CapacityTypeReserved or CapacityTypeOnDemand.
	CapacityType         = "kube-neuron.io/capacity-type"
	CapacityTypeReserved = "reserved"
	CapacityTypeOnDemand = "on-demand"
	// CapacityReservationEndAnnotation, on a node of a reservation that ends (a Capacity
	// Block), is the reservation's end time, RFC 3339 in UTC: the node is drained and removed a
	// lead time before it.
	CapacityReservationEndAnnotation = "kube-neuron.io/capacity-reservation-end"
)

// The taint every Neuron node carries: aws.amazon.com/neuron=true:NoSchedule.
const (
	NeuronTaintKey    = "aws.amazon.com/neuron"
	NeuronTaintValue  = "true"
	NeuronTaintEffect = "NoSchedule"
)

// UltraServerLabels returns the node labels of an UltraServer member; nil when us is nil.
func UltraServerLabels(us *neuron.UltraServer) map[string]string {
	if us == nil {
		return nil
	}
	l := map[string]string{
		UltraServerServerID4: us.ServerID4,
		UltraServerNodeID4:   strconv.Itoa(us.NodeID4),
	}
	if us.Mode != "" {
		l[UltraServerMode] = us.Mode
	}
	if us.ServerID2 != "" {
		l[UltraServerServerID2] = us.ServerID2
	}
	if us.NodeID2 >= 0 {
		l[UltraServerNodeID2] = strconv.Itoa(us.NodeID2)
	}
	return l
}
