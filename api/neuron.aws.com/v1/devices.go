package v1

import (
	"strconv"
	"strings"
)

// Device names the driver publishes in its ResourceSlices (pool = node name): every Neuron
// device is DeviceName(index), and a node of a Trn2 UltraServer also has NodeDeviceName, which
// stands for all of the node's devices and is never allocated together with any of them.
const (
	DevicePrefix   = "neurondevice"
	NodeDeviceName = "neuronnode"
)

// DeviceName is the name of Neuron device index i ("neurondevice3").
func DeviceName(i int) string { return DevicePrefix + strconv.Itoa(i) }

// ParseDeviceName returns the index of a name DeviceName gives, and whether it is one.
func ParseDeviceName(name string) (int, bool) {
	s, ok := strings.CutPrefix(name, DevicePrefix)
	if !ok || s == "" || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	i, err := strconv.Atoi(s)
	if err != nil || i < 0 {
		return 0, false
	}
	return i, true
}
