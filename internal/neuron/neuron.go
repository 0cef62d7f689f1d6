package neuron

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// Device is one Neuron device as the driver reports it.
type Device struct {
	Index         int    // N of neuronN
	PhysicalCores int    // sysfs core_count (physical NeuronCores, before LNC grouping)
	Connected     []int  // sysfs connected_devices, ascending; empty when the device has no links
	DeviceName    string // info/architecture/device_name, e.g. Trainium2
	ArchType      string // info/architecture/arch_type, e.g. NCv3
	InstanceType  string // info/architecture/instance_type

	// Uncorrectable ECC error counters (stats/hardware/{mem,sram}_ecc_uncorrected/total). The
	// driver only ever raises them; they drop back to zero only when the driver is reloaded.
	MemECCUncorrected  uint64
	SRAMECCUncorrected uint64

	// EFAAddress is the PCI address (DDDD:BB:DD.F) of the EFA device paired with this device,
	// "" when the node has no EFA devices.
	EFAAddress string
}

// ErrorCount is the sum of the device's uncorrectable error counters (saturating at the maximum
// uint64). A device whose ErrorCount rises between two discoveries has had a new uncorrectable
// error; a non-zero value on its own only says the device had one since the driver was loaded.
func (d Device) ErrorCount() uint64 {
	if d.MemECCUncorrected > math.MaxUint64-d.SRAMECCUncorrected {
		return math.MaxUint64
	}
	return d.MemECCUncorrected + d.SRAMECCUncorrected
}

// UltraServer is the trn2u UltraServer identity from the /sys/class/neuron_device attributes.
type UltraServer struct {
	ServerID2 string // server_id_2: id of the 2-node group, "" when not reported
	ServerID4 string // server_id_4: id of the 4-node UltraServer (16 hex digits from the driver)
	NodeID2   int    // node_id_2: position in the 2-node group, -1 when not reported
	NodeID4   int    // node_id_4: position in the 4-node UltraServer, 0..3
	Mode      string // ultraserver_mode, as the driver prints it (trimmed)
}

// Node is everything discovered on one node.
type Node struct {
	InstanceType  string       // /sys/devices/virtual/dmi/id/product_name (trimmed)
	LNC           int          // from <root>/opt/aws/neuron/logical_nc_config, 0 when the file is absent
	DriverVersion string       // /sys/module/neuron/version, "" when absent
	Devices       []Device     // ascending by Index; Devices[i].Index == i
	UltraServer   *UltraServer // nil when the node is not part of an UltraServer
}

// Hardware is how components see the node's Neuron devices.
type Hardware interface {
	// Discover reads the node's devices. It returns an error when the devices cannot be read or
	// what the driver reports is inconsistent; a node it returns is always self-consistent.
	Discover(ctx context.Context) (*Node, error)
}

// ErrUltraServerBusy is returned (wrapped) by Discover while the driver is still electing the
// node's position in its UltraServer; retry after a few seconds.
var ErrUltraServerBusy = errors.New("the Neuron driver is still forming the UltraServer (node id reads busy): retry in a few seconds")

// Counter names one of a device's ECC error counters.
type Counter int

// Error counters. MemECC and SRAMECC are uncorrectable errors and count in Device.ErrorCount;
// MemECCRepairable counts HBM errors the device repaired, which Discover does not read and which
// do not make a device unhealthy (ReadStats reports it).
const (
	MemECC           Counter = iota + 1 // stats/hardware/mem_ecc_uncorrected/total
	SRAMECC                             // stats/hardware/sram_ecc_uncorrected/total
	MemECCRepairable                    // stats/hardware/mem_ecc_repairable_uncorrected/total
)

// String returns the counter's sysfs directory name.
func (c Counter) String() string {
	switch c {
	case MemECC:
		return "mem_ecc_uncorrected"
	case SRAMECC:
		return "sram_ecc_uncorrected"
	case MemECCRepairable:
		return memECCRepairableDir
	}
	return fmt.Sprintf("Counter(%d)", int(c))
}

func (c Counter) valid() bool { return c == MemECC || c == SRAMECC || c == MemECCRepairable }

// allCounters lists every Counter, in order (Counter c is at index c-1).
func allCounters() []Counter { return []Counter{MemECC, SRAMECC, MemECCRepairable} }

// Shape is the node's shape: its catalog entry, its LNC and the device graph built from the links
// the driver reports (not the catalog's: a node whose links differ from the catalog's topology
// gets sets that are connected on it).
func (n *Node) Shape(cat *topology.Catalog) (*topology.Shape, error) {
	it, err := cat.Get(n.InstanceType)
	if err != nil {
		return nil, err
	}
	adj := make([][]int, len(n.Devices))
	for i, d := range n.Devices {
		adj[i] = d.Connected
	}
	g, err := topology.NewGraph(adj)
	if err != nil {
		return nil, fmt.Errorf("the device links the driver reports: %w", err)
	}
	return topology.NewShapeWithGraph(it, n.LNC, g)
}
