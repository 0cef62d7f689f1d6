package topology

import (
	"fmt"
	"math/bits"
	"slices"
	"strings"
)

// UnsupportedCountError is a request whose count the instance type never accepts. Its message is
// the Neuron scheduler extension's, verbatim, so users find it in the Neuron documentation.
type UnsupportedCountError struct {
	InstanceType string
	Unit         Unit
	Count        int
}

func (e *UnsupportedCountError) Error() string {
	return fmt.Sprintf("Instance type %s does not support requests for %s: %d. Please request a different number of %ss.", e.InstanceType, e.Unit, e.Count, e.Unit)
}

// InsufficientError is a valid request that does not fit the node's free devices or cores now.
type InsufficientError struct {
	InstanceType string
	Request      Request
	FreeDevices  []int // devices with no core in use
	FreeCores    []int
	Hint         string
}

func (e *InsufficientError) Error() string {
	free := fmt.Sprintf("free devices: %s", orNone(FormatList(e.FreeDevices)))
	if e.Request.Unit == UnitCore {
		free += fmt.Sprintf("; free cores: %s", orNone(FormatList(e.FreeCores)))
	}
	msg := fmt.Sprintf("no free valid set of %s on this %s node (%s)", e.Request, e.InstanceType, free)
	if e.Hint != "" {
		msg += "; " + e.Hint
	}
	return msg
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func (s *Shape) validDeviceCount(n int) bool {
	total := s.Type.Devices
	if n < 1 || n > total {
		return false
	}
	if n == 1 || n == total {
		return true
	}
	switch s.Kind() {
	case KindChain, KindRing, KindSwitched:
		return true
	case KindTorus:
		return n == 4 || n == 8
	}
	return false
}

func (s *Shape) validCoreCount(n int) bool {
	cpd := s.CoresPerDevice
	if n < 1 || n > s.Cores() {
		return false
	}
	if n <= cpd || n == s.Cores() {
		return true
	}
	if !s.validDeviceCount(s.DevicesNeeded(Request{Unit: UnitCore, Count: n})) {
		return false
	}
	if s.Kind() == KindTorus && n%cpd != 0 {
		return false
	}
	return true
}

// accepts reports whether Validate accepts the request, without building its error.
func (s *Shape) accepts(r Request) bool {
	switch {
	case r.Count < 1:
		return false
	case r.Unit == UnitDevice:
		return s.validDeviceCount(r.Count)
	case r.Unit == UnitCore:
		return s.validCoreCount(r.Count)
	}
	return false
}

// Validate checks that the node's instance type accepts the request's count at all, whatever is
// in use. It returns an *UnsupportedCountError with the Neuron scheduler extension's message.
func (s *Shape) Validate(r Request) error {
	if r.Count < 1 {
		return fmt.Errorf("a request for %d %ss is not valid: request at least 1", r.Count, r.Unit)
	}
	ok := false
	switch r.Unit {
	case UnitDevice:
		ok = s.validDeviceCount(r.Count)
	case UnitCore:
		ok = s.validCoreCount(r.Count)
	default:
		return fmt.Errorf("unknown unit %v", r.Unit)
	}
	if !ok {
		return &UnsupportedCountError{InstanceType: s.Type.Name, Unit: r.Unit, Count: r.Count}
	}
	return nil
}

// IsValidDeviceSet reports whether devices (any order, no duplicates) is a set the topology rules
// allow one container to hold.
func (s *Shape) IsValidDeviceSet(devices []int) bool {
	n := len(devices)
	total := s.Type.Devices
	if n == 0 || n > total {
		return false
	}
	return s.isValidSortedDeviceSet(slices.Sorted(slices.Values(devices)))
}

// isValidSortedDeviceSet is IsValidDeviceSet for devices in ascending order.
func (s *Shape) isValidSortedDeviceSet(sorted []int) bool {
	n := len(sorted)
	total := s.Type.Devices
	if n == 0 || n > total {
		return false
	}
	for i, d := range sorted {
		if d < 0 || d >= total || (i > 0 && sorted[i-1] == d) {
			return false
		}
	}
	if n == 1 || n == total {
		return true
	}
	switch s.Kind() {
	case KindSwitched:
		return true
	case KindTorus:
		return (n == 4 || n == 8) && sorted[0]%n == 0 && sorted[n-1] == sorted[0]+n-1
	case KindChain, KindRing:
		return s.contiguous(sorted)
	}
	return false
}

// validRun is isValidSortedDeviceSet for the devices first..first+n-1.
func (s *Shape) validRun(first, n int) bool {
	total := s.Type.Devices
	switch {
	case n < 1 || first < 0 || first+n > total:
		return false
	case n == 1 || n == total:
		return true
	}
	switch s.Kind() {
	case KindSwitched:
		return true
	case KindTorus:
		return (n == 4 || n == 8) && first%n == 0
	case KindChain, KindRing:
		if total > 64 {
			return s.contiguousLong(seq(first, n))
		}
		var in uint64
		for d := first; d < first+n; d++ {
			in |= s.freeBit(d)
		}
		return s.contiguousMask(in)
	}
	return false
}

// contiguous reports whether the devices form one run along the chain or ring.
func (s *Shape) contiguous(devices []int) bool {
	total := s.Type.Devices
	if total > 64 {
		return s.contiguousLong(devices)
	}
	var in uint64
	for _, d := range devices {
		in |= s.freeBit(d)
	}
	return s.contiguousMask(in)
}

// contiguousMask is contiguous for the devices at the positions along the links set in in
// (bit p: the device at position p), on a node of at most 64 devices. A run starts at every
// position in the set whose predecessor is not; a ring's first position follows its last.
func (s *Shape) contiguousMask(in uint64) bool {
	total := s.Type.Devices
	prev := in << 1
	if s.Kind() == KindRing {
		prev |= in >> (total - 1) & 1
	}
	return bits.OnesCount64(in&^prev) == 1
}

// contiguousLong is contiguous for nodes of more than 64 devices.
func (s *Shape) contiguousLong(devices []int) bool {
	total := s.Type.Devices
	in := make([]bool, total)
	for _, d := range devices {
		in[s.graph.pos[d]] = true
	}
	// Count the starts of runs in link order; a ring wraps around.
	starts := 0
	for p := range total {
		prev := p - 1
		if prev < 0 {
			if s.Kind() == KindChain {
				if in[p] {
					starts++
				}
				continue
			}
			prev = total - 1
		}
		if in[p] && !in[prev] {
			starts++
		}
	}
	return starts == 1
}

// describeSets explains which sets a device count may take, for error messages.
func (s *Shape) describeSets(n int) string {
	if s.Kind() != KindTorus || n == 1 || n == s.Type.Devices {
		switch s.Kind() {
		case KindChain, KindRing:
			return fmt.Sprintf("%d-device sets must be contiguous along the %s", n, s.Kind())
		}
		return ""
	}
	var blocks []string
	for start := 0; start < s.Type.Devices; start += n {
		blocks = append(blocks, fmt.Sprintf("%d-%d", start, start+n-1))
	}
	return fmt.Sprintf("%d-device sets must be one of %s", n, strings.Join(blocks, ", "))
}
