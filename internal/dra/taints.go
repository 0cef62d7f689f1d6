package dra

import (
	"errors"
	"fmt"
	"slices"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/kube-neuron/kube-neuron/internal/dra/devices"
	"github.com/kube-neuron/kube-neuron/internal/neuron"
)

// UnhealthyTaintKey is the key of the DRA device taint an unhealthy device carries; its value is
// the reason code (neuron.ReasonGone, neuron.ReasonECCUncorrected).
const UnhealthyTaintKey = "neuron.aws.com/unhealthy"

// ParseTaintEffect checks the effect given for uncorrectable errors: NoSchedule (the default,
// for "") or NoExecute.
func ParseTaintEffect(s string) (resourceapi.DeviceTaintEffect, error) {
	switch e := resourceapi.DeviceTaintEffect(s); e {
	case "":
		return resourceapi.DeviceTaintEffectNoSchedule, nil
	case resourceapi.DeviceTaintEffectNoSchedule, resourceapi.DeviceTaintEffectNoExecute:
		return e, nil
	}
	return "", fmt.Errorf("uncorrectable error taint effect %q: want NoSchedule or NoExecute", s)
}

// DeviceHealth is what the slice says about the health of the node's devices.
type DeviceHealth struct {
	// Reasons is the reason code of each unhealthy device, "" for a healthy one
	// (neuron.Health.Reasons).
	Reasons []string
	// Since is when each unhealthy device turned unhealthy (the taint's TimeAdded).
	Since []time.Time
	// UncorrectableEffect is the effect of the taint of a device with uncorrectable errors;
	// every other reason taints NoSchedule.
	UncorrectableEffect resourceapi.DeviceTaintEffect
	// Remove leaves unhealthy devices out of the slice instead of tainting them: the API server
	// does not serve device taints.
	Remove bool
}

// Unhealthy says, per device, whether it is unhealthy.
func (h DeviceHealth) Unhealthy() []bool {
	out := make([]bool, len(h.Reasons))
	for i, r := range h.Reasons {
		out[i] = r != ""
	}
	return out
}

// HealthResources builds the node's pool with its devices' health: every device stays and an
// unhealthy one carries the taint UnhealthyTaintKey=<reason>; the UltraServer node device
// carries the taint of its first unhealthy device. With h.Remove it is Resources with the
// unhealthy devices left out.
func HealthResources(info NodeInfo, h DeviceHealth) resourceslice.DriverResources {
	if h.Remove {
		return Resources(info, h.Unhealthy())
	}
	res := Resources(info, nil)
	pool := res.Pools[info.Name]
	for _, s := range pool.Slices {
		for i := range s.Devices {
			if t, ok := deviceTaint(s.Devices[i].Name, h); ok {
				s.Devices[i].Taints = []resourceapi.DeviceTaint{t}
			}
		}
	}
	return res
}

// deviceTaint is the taint of the device named name, if it has one.
func deviceTaint(name string, h DeviceHealth) (resourceapi.DeviceTaint, bool) {
	idx := -1
	if name == devices.NodeDeviceName {
		idx = slices.IndexFunc(h.Reasons, func(r string) bool { return r != "" })
	} else if i, ok := ParseDeviceName(name); ok && i < len(h.Reasons) && h.Reasons[i] != "" {
		idx = i
	}
	if idx < 0 {
		return resourceapi.DeviceTaint{}, false
	}
	t := resourceapi.DeviceTaint{Key: UnhealthyTaintKey, Value: h.Reasons[idx], Effect: resourceapi.DeviceTaintEffectNoSchedule}
	if h.Reasons[idx] == neuron.ReasonECCUncorrected && h.UncorrectableEffect != "" {
		t.Effect = h.UncorrectableEffect
	}
	if idx < len(h.Since) && !h.Since[idx].IsZero() {
		t.TimeAdded = &metav1.Time{Time: h.Since[idx].Truncate(time.Second)}
	}
	return t, true
}

// TaintsDropped says whether an error of the ResourceSlice controller means the API server
// dropped the device taints it was given: it does not serve them (Kubernetes 1.34, or 1.35
// without the DRADeviceTaints feature gate). The controller reads every slice it writes back
// from the API server's answer and reports the fields that went missing.
func TaintsDropped(err error) bool {
	var dropped *resourceslice.DroppedFieldsError
	return errors.As(err, &dropped) && slices.Contains(dropped.DisabledFeatures(), "DRADeviceTaints")
}

// UpdateSince keeps the time each device turned unhealthy: now for a change to unhealthy, zero
// for one back to healthy; other devices keep theirs.
func UpdateSince(since []time.Time, changes []neuron.HealthChange, now time.Time) {
	for _, c := range changes {
		if c.Device < 0 || c.Device >= len(since) {
			continue
		}
		if c.Healthy {
			since[c.Device] = time.Time{}
		} else {
			since[c.Device] = now
		}
	}
}
