package topology

import (
	"fmt"
	"slices"
)

// Resource names of the Neuron device plugin.
const (
	ResourceNeuron       = "aws.amazon.com/neuron"
	ResourceNeuronDevice = "aws.amazon.com/neurondevice"
	ResourceNeuronCore   = "aws.amazon.com/neuroncore"
)

// Resources lists the Neuron extended resources.
var Resources = []string{ResourceNeuron, ResourceNeuronDevice, ResourceNeuronCore}

// Unit is what a request counts: whole devices or cores.
type Unit int

// Units.
const (
	UnitDevice Unit = iota + 1
	UnitCore
)

func (u Unit) String() string {
	switch u {
	case UnitDevice:
		return "device"
	case UnitCore:
		return "core"
	}
	return fmt.Sprintf("Unit(%d)", int(u))
}

// UnitOf returns the unit of a Neuron resource name.
func UnitOf(resource string) (Unit, error) {
	switch resource {
	case ResourceNeuron, ResourceNeuronDevice:
		return UnitDevice, nil
	case ResourceNeuronCore:
		return UnitCore, nil
	}
	return 0, fmt.Errorf("resource %q is not a Neuron resource: use %s, %s or %s", resource, ResourceNeuron, ResourceNeuronDevice, ResourceNeuronCore)
}

// Request asks for Count devices or cores on one node.
type Request struct {
	Unit  Unit
	Count int
}

func (r Request) String() string {
	if r.Count == 1 {
		return fmt.Sprintf("1 %s", r.Unit)
	}
	return fmt.Sprintf("%d %ss", r.Count, r.Unit)
}

// Shape is the static description of one node: its instance type, its LNC and its device graph.
// It is immutable and safe to share.
type Shape struct {
	Type           InstanceType
	LNC            int
	CoresPerDevice int // logical cores per device at LNC
	graph          *Graph
	deviceSizes    []int // valid device-set sizes, ascending
	// coreRuns, for up to 8 cores per device, holds for every in-use mask m of one device the
	// count of disjoint free core runs of each size cpd-1..1 inside it (row m, cpd-1 entries;
	// zero for a free or full device), as the placement engine counts them.
	coreRuns []int32
	// sizes is the order of the capability vector's entries: device-set sizes descending, then
	// core-run sizes cpd-1..1 as negative numbers.
	sizes []int
	keys  *packedKeys // nil when the vector does not pack into two integers
}

// NewShape returns the shape of a node of type t at the given LNC (0: the type's default), with
// the canonical links of the type's topology.
func NewShape(t InstanceType, lnc int) (*Shape, error) {
	adj, err := Adjacency(t.Topology, t.Devices)
	if err != nil {
		return nil, fmt.Errorf("instance type %s: %w", t.Name, err)
	}
	g, err := NewGraph(adj)
	if err != nil {
		return nil, fmt.Errorf("instance type %s: %w", t.Name, err)
	}
	return NewShapeWithGraph(t, lnc, g)
}

// NewShapeWithGraph is NewShape with the links the node reports (sysfs connected_devices); they
// must match the catalog's topology for the type.
func NewShapeWithGraph(t InstanceType, lnc int, g *Graph) (*Shape, error) {
	if lnc == 0 {
		lnc = t.DefaultLNC
	}
	if err := t.CheckLNC(lnc); err != nil {
		return nil, err
	}
	if g.Len() != t.Devices {
		return nil, fmt.Errorf("instance type %s has %d devices in the catalog but the node reports %d", t.Name, t.Devices, g.Len())
	}
	if g.Kind() != t.Topology && !(t.Topology == KindRing && g.Kind() == KindChain && t.Devices == 2) {
		return nil, fmt.Errorf("instance type %s is a %s in the catalog but the node's device links form a %s", t.Name, t.Topology, g.Kind())
	}
	s := &Shape{Type: t, LNC: lnc, CoresPerDevice: t.LogicalCoresPerDevice(lnc), graph: g}
	for n := 1; n <= t.Devices; n++ {
		if s.validDeviceCount(n) {
			s.deviceSizes = append(s.deviceSizes, n)
		}
	}
	if cpd := s.CoresPerDevice; cpd >= 2 && cpd <= 8 {
		w := cpd - 1
		full := uint64(1)<<cpd - 1
		s.coreRuns = make([]int32, (full+1)*uint64(w))
		for m := uint64(1); m < full; m++ {
			row := s.coreRuns[m*uint64(w) : (m+1)*uint64(w)]
			run := 0
			for k := 0; k <= cpd; k++ {
				if k < cpd && m&(1<<k) == 0 {
					run++
					continue
				}
				for j := range w {
					row[j] += int32(run / (cpd - 1 - j))
				}
				run = 0
			}
		}
	}
	s.sizes = s.vectorSizes()
	s.keys = newPackedKeys(s)
	return s, nil
}

// vectorSizes returns the order of the capability vector's entries (Shape.sizes).
func (s *Shape) vectorSizes() []int {
	out := make([]int, 0, len(s.deviceSizes)+max(s.CoresPerDevice-1, 0))
	for i := len(s.deviceSizes) - 1; i >= 0; i-- {
		out = append(out, s.deviceSizes[i])
	}
	for k := s.CoresPerDevice - 1; k >= 1; k-- {
		out = append(out, -k)
	}
	return out
}

// Devices is the number of devices of the node.
func (s *Shape) Devices() int { return s.Type.Devices }

// Cores is the number of logical cores of the node.
func (s *Shape) Cores() int { return s.Type.Devices * s.CoresPerDevice }

// Kind is the node's topology kind.
func (s *Shape) Kind() Kind { return s.graph.Kind() }

// Graph returns the node's device graph.
func (s *Shape) Graph() *Graph { return s.graph }

// DeviceSizes returns the device counts a request may ask for, ascending.
func (s *Shape) DeviceSizes() []int { return slices.Clone(s.deviceSizes) }

// CoreSizes returns the core counts a request may ask for, ascending.
func (s *Shape) CoreSizes() []int {
	var out []int
	for n := 1; n <= s.Cores(); n++ {
		if s.validCoreCount(n) {
			out = append(out, n)
		}
	}
	return out
}

// CoresNeeded is the number of cores a request takes on the node: a core request its count, a
// device request every core of its devices. It does not check that the request is valid.
func (s *Shape) CoresNeeded(r Request) int {
	if r.Unit == UnitCore {
		return r.Count
	}
	return r.Count * s.CoresPerDevice
}

// DevicesNeeded is the number of devices a request touches on the node: a device request its
// count, a core request the fewest devices its cores fit on (ceil(count / CoresPerDevice)), which
// is the number a valid placement takes. It does not check that the request is valid.
func (s *Shape) DevicesNeeded(r Request) int {
	if r.Unit == UnitCore {
		return (r.Count + s.CoresPerDevice - 1) / s.CoresPerDevice
	}
	return r.Count
}

// DeviceSets returns every device set of n devices that the topology rules allow one container
// to hold (IsValidDeviceSet), each ascending, in ascending lexicographic order; none when n is
// not a valid device count. On a switched node that is every subset of n devices.
func (s *Shape) DeviceSets(n int) [][]int {
	if !s.validDeviceCount(n) {
		return nil
	}
	var out [][]int
	set := make([]int, 0, n)
	var walk func(next int)
	walk = func(next int) {
		if len(set) == n {
			if s.IsValidDeviceSet(set) {
				out = append(out, slices.Clone(set))
			}
			return
		}
		for d := next; d <= s.Devices()-(n-len(set)); d++ {
			set = append(set, d)
			walk(d + 1)
			set = set[:len(set)-1]
		}
	}
	walk(0)
	return out
}

// CoresOf returns the global core ids of device d.
func (s *Shape) CoresOf(d int) []int {
	out := make([]int, s.CoresPerDevice)
	for k := range out {
		out[k] = d*s.CoresPerDevice + k
	}
	return out
}

// GridPosition returns the row and column of device d in the 4x4 grid of a torus node (the
// devices are numbered row-major, as Adjacency links them); ok is false on other topologies.
func (s *Shape) GridPosition(d int) (row, col int, ok bool) {
	if s.Kind() != KindTorus {
		return 0, 0, false
	}
	return d / 4, d % 4, true
}

// DeviceOf returns the device of global core c.
func (s *Shape) DeviceOf(c int) int { return c / s.CoresPerDevice }
