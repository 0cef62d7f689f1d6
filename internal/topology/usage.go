package topology

import (
	"fmt"
	"math/bits"
	"slices"
)

// Allocation is a set of devices or cores given to one container.
type Allocation struct {
	Unit    Unit
	Devices []int // every device the allocation touches, ascending
	Cores   []int // the global core ids given, ascending; all cores of Devices for a device allocation
}

// Overlaps reports whether the two allocations share a core (a device allocation holds every
// core of its devices).
func (a Allocation) Overlaps(b Allocation) bool {
	i, j := 0, 0
	for i < len(a.Cores) && j < len(b.Cores) {
		switch {
		case a.Cores[i] == b.Cores[j]:
			return true
		case a.Cores[i] < b.Cores[j]:
			i++
		default:
			j++
		}
	}
	return false
}

// DeviceAllocation returns the allocation of whole devices.
func (s *Shape) DeviceAllocation(devices []int) (Allocation, error) {
	devs := slices.Sorted(slices.Values(devices))
	a := Allocation{Unit: UnitDevice, Devices: devs, Cores: []int{}}
	for i, d := range devs {
		if d < 0 || d >= s.Devices() {
			return Allocation{}, fmt.Errorf("device %d does not exist on %s (devices 0-%d)", d, s.Type.Name, s.Devices()-1)
		}
		if i > 0 && devs[i-1] == d {
			return Allocation{}, fmt.Errorf("device %d is listed twice", d)
		}
		a.Cores = append(a.Cores, s.CoresOf(d)...)
	}
	return a, nil
}

// CoreAllocation returns the allocation of the given global cores.
func (s *Shape) CoreAllocation(cores []int) (Allocation, error) {
	cs := slices.Sorted(slices.Values(cores))
	a := Allocation{Unit: UnitCore, Devices: []int{}, Cores: cs}
	for i, c := range cs {
		if c < 0 || c >= s.Cores() {
			return Allocation{}, fmt.Errorf("core %d does not exist on %s at LNC %d (cores 0-%d)", c, s.Type.Name, s.LNC, s.Cores()-1)
		}
		if i > 0 && cs[i-1] == c {
			return Allocation{}, fmt.Errorf("core %d is listed twice", c)
		}
		if d := s.DeviceOf(c); len(a.Devices) == 0 || a.Devices[len(a.Devices)-1] != d {
			a.Devices = append(a.Devices, d)
		}
	}
	return a, nil
}

// Usage is what is in use on one node. The zero value is not usable: use NewUsage.
// Usage is not safe for concurrent use; callers serialise access.
type Usage struct {
	shape *Shape
	used  []uint64 // per device: bit k set = logical core k in use
}

// NewUsage returns an empty usage for the shape.
func NewUsage(s *Shape) *Usage {
	return &Usage{shape: s, used: make([]uint64, s.Devices())}
}

// Shape returns the node's shape.
func (u *Usage) Shape() *Shape { return u.shape }

// Clone returns an independent copy.
func (u *Usage) Clone() *Usage {
	return &Usage{shape: u.shape, used: slices.Clone(u.used)}
}

func (u *Usage) full() uint64 { return 1<<u.shape.CoresPerDevice - 1 }

// check validates that a is well formed for this node.
func (u *Usage) check(a Allocation) error {
	var want Allocation
	var err error
	switch a.Unit {
	case UnitDevice:
		want, err = u.shape.DeviceAllocation(a.Devices)
	case UnitCore:
		want, err = u.shape.CoreAllocation(a.Cores)
	default:
		return fmt.Errorf("allocation has no unit")
	}
	if err != nil {
		return err
	}
	if !slices.Equal(want.Devices, slices.Sorted(slices.Values(a.Devices))) || !slices.Equal(want.Cores, slices.Sorted(slices.Values(a.Cores))) {
		return fmt.Errorf("allocation of devices %s and cores %s is inconsistent: its cores must be on its devices (all of them for a device allocation)", FormatList(a.Devices), FormatList(a.Cores))
	}
	return nil
}

// Allocate marks the allocation in use. It fails, changing nothing, when the allocation is
// malformed or any of its cores is already in use: a device or core is never handed out twice.
func (u *Usage) Allocate(a Allocation) error {
	if err := u.check(a); err != nil {
		return err
	}
	cpd := u.shape.CoresPerDevice
	var busy []int
	for _, c := range a.Cores {
		if u.used[c/cpd]&(1<<(c%cpd)) != 0 {
			busy = append(busy, c)
		}
	}
	if len(busy) > 0 {
		if a.Unit == UnitDevice {
			var devs []int
			for _, c := range busy {
				devs = append(devs, c/cpd)
			}
			return fmt.Errorf("devices %s are already in use, wholly or partly", FormatList(devs))
		}
		return fmt.Errorf("cores %s are already in use", FormatList(busy))
	}
	for _, c := range a.Cores {
		u.used[c/cpd] |= 1 << (c % cpd)
	}
	return nil
}

// Release frees the allocation. It fails, changing nothing, when any of its cores is not in use.
func (u *Usage) Release(a Allocation) error {
	if err := u.check(a); err != nil {
		return err
	}
	cpd := u.shape.CoresPerDevice
	var idle []int
	for _, c := range a.Cores {
		if u.used[c/cpd]&(1<<(c%cpd)) == 0 {
			idle = append(idle, c)
		}
	}
	if len(idle) > 0 {
		return fmt.Errorf("cannot release cores %s: they are not in use", FormatList(idle))
	}
	for _, c := range a.Cores {
		u.used[c/cpd] &^= 1 << (c % cpd)
	}
	return nil
}

// DeviceFree reports whether device d has no core in use.
func (u *Usage) DeviceFree(d int) bool { return u.used[d] == 0 }

// CoreFree reports whether global core c is free.
func (u *Usage) CoreFree(c int) bool {
	cpd := u.shape.CoresPerDevice
	return u.used[c/cpd]&(1<<(c%cpd)) == 0
}

// FreeDevices returns the devices with no core in use.
func (u *Usage) FreeDevices() []int {
	out := []int{}
	for d, m := range u.used {
		if m == 0 {
			out = append(out, d)
		}
	}
	return out
}

// UsedDevices returns the devices with at least one core in use.
func (u *Usage) UsedDevices() []int {
	out := []int{}
	for d, m := range u.used {
		if m != 0 {
			out = append(out, d)
		}
	}
	return out
}

// FreeCores returns the free global core ids.
func (u *Usage) FreeCores() []int {
	out := []int{}
	cpd := u.shape.CoresPerDevice
	for d, m := range u.used {
		for k := range cpd {
			if m&(1<<k) == 0 {
				out = append(out, d*cpd+k)
			}
		}
	}
	return out
}

// UsedCores returns the global core ids in use.
func (u *Usage) UsedCores() []int {
	out := []int{}
	cpd := u.shape.CoresPerDevice
	for d, m := range u.used {
		for k := range cpd {
			if m&(1<<k) != 0 {
				out = append(out, d*cpd+k)
			}
		}
	}
	return out
}

// FreeCoreCount returns the number of free cores.
func (u *Usage) FreeCoreCount() int {
	n := 0
	for _, m := range u.used {
		n += u.shape.CoresPerDevice - bits.OnesCount64(m)
	}
	return n
}

// FreeDeviceCount returns the number of devices with no core in use.
func (u *Usage) FreeDeviceCount() int {
	n := 0
	for _, m := range u.used {
		if m == 0 {
			n++
		}
	}
	return n
}

// MarkDevices marks whole devices in use (for example devices another stack handed out).
func (u *Usage) MarkDevices(devices []int) error {
	a, err := u.shape.DeviceAllocation(devices)
	if err != nil {
		return err
	}
	return u.Allocate(a)
}

// MarkCores marks cores in use.
func (u *Usage) MarkCores(cores []int) error {
	a, err := u.shape.CoreAllocation(cores)
	if err != nil {
		return err
	}
	return u.Allocate(a)
}
