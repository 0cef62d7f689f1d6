package plan

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// Warning reasons: a pod that schedules, or makes another autoscaler launch a node, but does not
// get what its author expects.
const (
	// ReasonKarpenterNeuronCoreMismatch: the neuroncore count fits Karpenter's physical count of
	// an instance type but not the logical count the device plugin advertises at the default LNC.
	ReasonKarpenterNeuronCoreMismatch = "KarpenterNeuronCoreMismatch"
	// ReasonTopologyChecksSkipped: a multi-device request that the scheduler extender never sees,
	// because the pod names another scheduler.
	ReasonTopologyChecksSkipped = "TopologyChecksSkipped"
)

// DefaultSchedulerName is the scheduler the chart registers the extender with (the EKS way).
const DefaultSchedulerName = "my-scheduler"

// Warning is advice about a pod: not a reason to refuse a scale-up, but a way it goes wrong.
type Warning struct {
	Reason  string
	Message string
}

// AdviceOptions configure Advise.
type AdviceOptions struct {
	// Catalog is the instance catalog; nil means topology.DefaultCatalog().
	Catalog *topology.Catalog
	// SchedulerName is the scheduler that calls the scheduler extender; "" means my-scheduler.
	// With the chart's scheduler.defaultScheduler.enabled it is default-scheduler.
	SchedulerName string
}

// Advise returns the warnings for a pod (or a pod template as a pod) that asks for Neuron
// devices or cores through the device plugin:
//   - a neuroncore count above what an instance type the pod allows advertises at its default
//     LNC, but not above Karpenter's count for that type, which counts physical NeuronCores
//     (trn2.48xlarge: Karpenter 16 x 8 = 128, the node 16 x 4 = 64 at LNC 2): Karpenter launches
//     a node the pod can never use, and the pod stays Pending;
//   - a container asking for more than one device, or for cores that span devices on some type
//     it allows, in a pod whose schedulerName is not the extender's scheduler: the topology
//     checks (connected devices, the aligned blocks of torus types) are skipped.
func Advise(pod *corev1.Pod, o AdviceOptions) []Warning {
	cat := o.Catalog
	if cat == nil {
		cat = topology.DefaultCatalog()
	}
	scheduler := o.SchedulerName
	if scheduler == "" {
		scheduler = DefaultSchedulerName
	}
	d := NewPodDemand(pod, nil)
	var allowed []topology.InstanceType
	for _, t := range cat.Types() {
		if d.Allows(t) {
			allowed = append(allowed, t)
		}
	}
	var out []Warning
	for _, r := range d.Requests {
		if r.Resource == topology.ResourceNeuronCore {
			out = append(out, karpenterMismatch(r, allowed)...)
		}
	}
	podScheduler := pod.Spec.SchedulerName
	if podScheduler == "" {
		podScheduler = corev1.DefaultSchedulerName
	}
	if podScheduler != scheduler {
		s := newSim(cat, topology.BestFit, nil)
		for _, r := range d.Requests {
			if w := skippedTopology(s, r, allowed, podScheduler, scheduler); w != nil {
				out = append(out, *w)
			}
		}
	}
	return out
}

// karpenterMismatch warns, for the first type the pod allows whose logical cores at its default
// LNC are fewer than the request and whose physical cores are not.
func karpenterMismatch(r allocation.Request, allowed []topology.InstanceType) []Warning {
	for _, t := range allowed {
		perDevice := t.LogicalCoresPerDevice(t.DefaultLNC)
		logical, physical := t.LogicalCores(t.DefaultLNC), t.PhysicalCores()
		if r.Count <= logical || r.Count > physical {
			continue
		}
		msg := fmt.Sprintf("container %s requests %s: %d. Karpenter advertises %d neuroncores on %s (%s x %d physical NeuronCores) and may launch one for this pod, "+
			"but at the default LNC=%d the device plugin advertises %d (%s x %d logical NeuronCores), so the pod would stay Pending on a node it cannot use. "+
			"Request at most %d neuroncores (at LNC=%d one logical NeuronCore is %d physical ones: %d physical cores are %d), or run the nodes at LNC=1 (NEURON_LOGICAL_NC_CONFIG=1) and say so to the scheduler with a catalog file",
			r.Container, r.Resource, r.Count, physical, t.Name, plural(t.Devices, "device"), t.PhysicalCoresPerDevice,
			t.DefaultLNC, logical, plural(t.Devices, "device"), perDevice,
			logical, t.DefaultLNC, t.DefaultLNC, r.Count, t.LogicalCoresOfPhysical(r.Count, t.DefaultLNC))
		return []Warning{{Reason: ReasonKarpenterNeuronCoreMismatch, Message: msg}}
	}
	return nil
}

// skippedTopology warns when the request needs more than one device on some type the pod allows
// that can serve it.
func skippedTopology(s *sim, r allocation.Request, allowed []topology.InstanceType, podScheduler, scheduler string) *Warning {
	unit, err := topology.UnitOf(r.Resource)
	if err != nil {
		return nil
	}
	req := topology.Request{Unit: unit, Count: r.Count}
	var what string
	switch {
	case unit == topology.UnitDevice && r.Count > 1:
		what = fmt.Sprintf("%d devices", r.Count)
	case unit == topology.UnitCore:
		for _, t := range allowed {
			shape := s.shape(t)
			if shape == nil || shape.Validate(req) != nil {
				continue // a type that cannot serve the count at all is Check's concern
			}
			if shape.DevicesNeeded(req) > 1 {
				what = fmt.Sprintf("%d cores, more than one device of %s holds (%d)", r.Count, t.Name, shape.CoresPerDevice)
				break
			}
		}
	}
	if what == "" {
		return nil
	}
	msg := fmt.Sprintf("container %s requests %s: %d (%s) but the pod's schedulerName is %s, not %s: the scheduler extender's topology checks are skipped. "+
		"%s counts free devices and cores only, so it can place the pod on a node whose free devices are not connected%s, "+
		"and the kubelet then hands out what is free. Set spec.schedulerName: %s in the pod (template), or install the chart with scheduler.admissionPolicy.enabled=true to set it on every Neuron pod",
		r.Container, r.Resource, r.Count, what, podScheduler, scheduler, podScheduler, torusSizes(s), scheduler)
	return &Warning{Reason: ReasonTopologyChecksSkipped, Message: msg}
}

// torusSizes says which device counts torus types accept, as the topology engine has them
// (topology.Shape.DeviceSizes of the catalog's first torus type; the engine's torus is always the
// 4x4 grid, so they all share the list): " (torus types accept only aligned blocks of 1, 4, 8 or
// 16 devices)". It is "" when the catalog has no torus type.
func torusSizes(s *sim) string {
	for _, t := range s.cat.Types() {
		if shape := s.shape(t); shape != nil && shape.Kind() == topology.KindTorus {
			return " (torus types accept only aligned blocks of " + FormatSizes(shape.DeviceSizes(), topology.UnitDevice) + ")"
		}
	}
	return ""
}
