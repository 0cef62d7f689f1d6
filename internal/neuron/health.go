package neuron

import "fmt"

// Health follows the health of a node's devices from one discovery to the next, the same way
// for every component that serves them (the device plugin withdraws unhealthy devices from the
// kubelet, the DRA driver from its ResourceSlice):
//
//   - a device that disappears, or whose uncorrectable error count rises, turns unhealthy;
//   - it is healthy again once it is present and its count is back at or below what it was when
//     it was last healthy (a driver reset clears the counters).
//
// A Health is not safe for concurrent use: its owner serialises Update and Unhealthy.
type Health struct {
	unhealthy []bool
	reasons   []string // the Reason code of each unhealthy device, "" for a healthy one
	errCounts []uint64
}

// Reason codes: why a device is unhealthy, short enough for a label value or a DRA device
// taint's value.
const (
	// ReasonGone: the Neuron driver no longer reports the device.
	ReasonGone = "gone"
	// ReasonECCUncorrected: its uncorrectable ECC error count (HBM or SRAM) rose.
	ReasonECCUncorrected = "ecc-uncorrected"
)

// HealthChange is one device changing state in Update.
type HealthChange struct {
	Device  int
	Healthy bool
	Reason  string // why, in words for an event: "its uncorrectable error count rose from 0 to 3"
	// Code is the reason code of a device turning unhealthy (ReasonGone, ReasonECCUncorrected);
	// "" when it turns healthy.
	Code string
}

// NewHealth starts tracking devices devices, all healthy, with the error counts of node (which
// may be nil: the counts start at zero).
func NewHealth(devices int, node *Node) *Health {
	h := &Health{unhealthy: make([]bool, devices), reasons: make([]string, devices), errCounts: make([]uint64, devices)}
	if node != nil {
		for _, d := range node.Devices {
			if d.Index >= 0 && d.Index < devices {
				h.errCounts[d.Index] = d.ErrorCount()
			}
		}
	}
	return h
}

// Update compares a new discovery with the last one and returns the devices that changed state,
// ascending. node holds the devices that could be read (nil when none could): a device missing
// from it counts as gone.
func (h *Health) Update(node *Node) []HealthChange {
	present := make([]bool, len(h.unhealthy))
	counts := make([]uint64, len(h.unhealthy))
	if node != nil {
		for _, d := range node.Devices {
			if d.Index >= 0 && d.Index < len(present) {
				present[d.Index] = true
				counts[d.Index] = d.ErrorCount()
			}
		}
	}
	var changes []HealthChange
	for d := range h.unhealthy {
		switch {
		case !present[d] && !h.unhealthy[d]:
			h.unhealthy[d], h.reasons[d] = true, ReasonGone
			changes = append(changes, HealthChange{d, false, "it is no longer reported by the Neuron driver", ReasonGone})
		case present[d] && counts[d] > h.errCounts[d] && !h.unhealthy[d]:
			h.unhealthy[d], h.reasons[d] = true, ReasonECCUncorrected
			changes = append(changes, HealthChange{d, false, fmt.Sprintf("its uncorrectable error count rose from %d to %d", h.errCounts[d], counts[d]), ReasonECCUncorrected})
		case present[d] && counts[d] <= h.errCounts[d] && h.unhealthy[d]:
			h.unhealthy[d], h.reasons[d] = false, ""
			h.errCounts[d] = counts[d]
			changes = append(changes, HealthChange{d, true, "it is present and its error counters no longer rise", ""})
		case present[d] && !h.unhealthy[d]:
			h.errCounts[d] = counts[d]
		}
	}
	return changes
}

// Unhealthy returns, per device, whether it is unhealthy now (a copy).
func (h *Health) Unhealthy() []bool {
	return append([]bool(nil), h.unhealthy...)
}

// Reasons returns, per device, the reason code of an unhealthy device (ReasonGone,
// ReasonECCUncorrected) and "" for a healthy one (a copy).
func (h *Health) Reasons() []string {
	return append([]string(nil), h.reasons...)
}

// UnhealthyCount is the number of unhealthy devices.
func (h *Health) UnhealthyCount() int {
	n := 0
	for _, u := range h.unhealthy {
		if u {
			n++
		}
	}
	return n
}
