package testkit

import (
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	neuronv1 "github.com/kube-neuron/kube-neuron/api/neuron.aws.com/v1"
)

// NeuronDriver is the DRA driver and device class name Device, Config and Request use.
const NeuronDriver = neuronv1.DriverName

// ClaimWrapper builds a ResourceClaim; start with MakeClaim.
type ClaimWrapper struct{ c *resourceapi.ResourceClaim }

// MakeClaim starts an unallocated claim in DefaultNamespace with no requests.
func MakeClaim() *ClaimWrapper {
	return &ClaimWrapper{c: &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{
		Namespace: DefaultNamespace, Labels: map[string]string{}, Annotations: map[string]string{},
	}}}
}

// Obj returns the claim built so far.
func (w *ClaimWrapper) Obj() *resourceapi.ResourceClaim { return w.c }

// Namespace sets the namespace.
func (w *ClaimWrapper) Namespace(ns string) *ClaimWrapper { w.c.Namespace = ns; return w }

// Name sets the name and, unless UID set one, the UID to UIDOf(name).
func (w *ClaimWrapper) Name(name string) *ClaimWrapper {
	if w.c.UID == "" || w.c.UID == UIDOf(w.c.Name) {
		w.c.UID = UIDOf(name)
	}
	w.c.Name = name
	return w
}

// Request adds an exact-count request called name for count devices of the Neuron device class.
func (w *ClaimWrapper) Request(name string, count int64) *ClaimWrapper {
	w.c.Spec.Devices.Requests = append(w.c.Spec.Devices.Requests, resourceapi.DeviceRequest{
		Name: name, Exactly: &resourceapi.ExactDeviceRequest{
			DeviceClassName: NeuronDriver, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count,
		},
	})
	return w
}

// Device allocates devices of pool (the node's name for our driver) to request, from NeuronDriver.
// The first call makes the claim allocated.
func (w *ClaimWrapper) Device(request, pool string, devices ...string) *ClaimWrapper {
	a := w.allocation()
	for _, d := range devices {
		a.Devices.Results = append(a.Devices.Results, resourceapi.DeviceRequestAllocationResult{
			Request: request, Driver: NeuronDriver, Pool: pool, Device: d,
		})
	}
	return w
}

// Config adds NeuronDriver's opaque config params (JSON) for requests (all when none), taken
// from the claim, to the allocation.
func (w *ClaimWrapper) Config(params string, requests ...string) *ClaimWrapper {
	return w.ConfigFrom(NeuronDriver, resourceapi.AllocationConfigSourceClaim, params, requests...)
}

// ConfigFrom adds an opaque config of driver, from source (the claim or its class), for
// requests (all when none), to the allocation.
func (w *ClaimWrapper) ConfigFrom(driver string, source resourceapi.AllocationConfigSource, params string, requests ...string) *ClaimWrapper {
	a := w.allocation()
	a.Devices.Config = append(a.Devices.Config, resourceapi.DeviceAllocationConfiguration{
		Source: source, Requests: requests,
		DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
			Driver: driver, Parameters: runtime.RawExtension{Raw: []byte(params)},
		}},
	})
	return w
}

// Allocated marks the claim allocated, with no devices unless Device adds some.
func (w *ClaimWrapper) Allocated() *ClaimWrapper { w.allocation(); return w }

// ReservedFor reserves the claim for the pod called pod, with UID UIDOf(pod).
func (w *ClaimWrapper) ReservedFor(pod string) *ClaimWrapper {
	w.c.Status.ReservedFor = append(w.c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{
		Resource: "pods", Name: pod, UID: UIDOf(pod),
	})
	return w
}

// Template returns a ResourceClaimTemplate with the claim's namespace and name whose claims
// get the claim's spec (its requests).
func (w *ClaimWrapper) Template() *resourceapi.ResourceClaimTemplate {
	return &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.c.Namespace, Name: w.c.Name, UID: w.c.UID},
		Spec:       resourceapi.ResourceClaimTemplateSpec{Spec: *w.c.Spec.DeepCopy()},
	}
}

func (w *ClaimWrapper) allocation() *resourceapi.AllocationResult {
	if w.c.Status.Allocation == nil {
		w.c.Status.Allocation = &resourceapi.AllocationResult{}
	}
	return w.c.Status.Allocation
}
