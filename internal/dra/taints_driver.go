package dra

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// unhealthyNow says, for an event, what became of an unhealthy device in the slice.
func (d *Driver) unhealthyNow(device int, code string) string {
	if d.removeUnhealthy.Load() {
		return DeviceName(device) + " leaves the node's ResourceSlice (the API server does not serve device taints)"
	}
	t, _ := deviceTaint(DeviceName(device), DeviceHealth{Reasons: reasonAt(device, code), UncorrectableEffect: d.taintEffect})
	return DeviceName(device) + " stays in the node's ResourceSlice with the taint " + t.Key + "=" + t.Value + ":" + string(t.Effect)
}

// healthyAgain says, for an event, what became of a device that recovered.
func (d *Driver) healthyAgain(device int) string {
	if d.removeUnhealthy.Load() {
		return DeviceName(device) + " is back in the node's ResourceSlice"
	}
	return "the taint " + UnhealthyTaintKey + " of " + DeviceName(device) + " is lifted"
}

// reasonAt is a Reasons slice with code at device and "" before it.
func reasonAt(device int, code string) []string {
	r := make([]string, device+1)
	r[device] = code
	return r
}

// taintsNotServed logs and records, once, that the API server dropped the device taints, and
// republishes with the unhealthy devices left out.
func (d *Driver) taintsNotServed(ctx context.Context) {
	logger := klog.FromContext(ctx)
	logger.Info("The API server does not serve DRA device taints (Kubernetes 1.34, or 1.35 without the DRADeviceTaints feature gate): unhealthy devices leave the ResourceSlice instead of being tainted")
	if d.recorder != nil {
		nodeRef := &corev1.ObjectReference{Kind: "Node", Name: d.o.NodeName, UID: types.UID(d.o.NodeName)}
		d.recorder.Event(nodeRef, corev1.EventTypeWarning, "NeuronDeviceTaintsNotServed", "The API server dropped the DRA device taints of the node's ResourceSlice (Kubernetes 1.34, or 1.35 without the DRADeviceTaints feature gate); unhealthy Neuron devices leave the ResourceSlice instead")
	}
	go func() {
		if err := d.publish(ctx); err != nil {
			logger.Error(err, "Republishing without the unhealthy devices")
		}
	}()
}
