package plan

import (
	"regexp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/dra/opaque"
	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// DRARequest is one request of a pod's ResourceClaims for Neuron devices (DeviceClass
// neuron.aws.com), as the caller resolved it: Count devices, or with All every device of the node.
type DRARequest struct {
	// Name is the request's name in its claim (with firstAvailable, the subrequest's).
	Name  string
	Count int
	All   bool
	// FirstAvailable: the request has alternatives (firstAvailable); Count and All are its
	// first Neuron subrequest's, and the allocator may choose a later one.
	FirstAvailable bool
	// InstanceTypes are the types the request's CEL selectors name (instanceType == 'X' in a
	// conjunction); nil means any.
	InstanceTypes []string
	// Selectors are the request's CEL expressions.
	Selectors []string
	// Matching are the instance types whose new nodes would publish enough devices that match
	// every selector (DeviceTemplates.Resolve); nil when not evaluated. Unmatched says why
	// there is none.
	Matching  []string
	Unmatched string
	// Configs are what the claim's opaque configs for the driver ask of a node (opaque.Resolve,
	// the driver's own code, over the claim's Neuron requests); ConfigError is why the driver
	// refuses them on every node. Refused says why no instance type's driver would accept them
	// (DeviceTemplates.Resolve, which then leaves Matching empty).
	Configs     opaque.Settings
	ConfigError string
	Refused     string
}

func (r DRARequest) String() string {
	if r.All {
		return "all devices"
	}
	return topology.Request{Unit: topology.UnitDevice, Count: r.Count}.String()
}

// PodDemand is a pending pod and what it asks of a Neuron node.
type PodDemand struct {
	Pod *corev1.Pod
	// Requests are the device plugin requests, as the scheduler extender reads them.
	Requests []allocation.Request
	// DRA are the Neuron requests of the pod's ResourceClaims.
	DRA []DRARequest
	// Claims are the pod's ResourceClaims that ask for Neuron devices: the claim the pod's
	// status names, else the one its template would give (ClaimFromTemplate). The planner places
	// them with the kube-scheduler's allocator; when the caller gives none, it places one claim
	// per DRA request.
	Claims []*resourcev1.ResourceClaim
}

// NewPodDemand reads the pod's device plugin requests; dra are the requests the caller resolved
// from the pod's claims (DRARequestsOf). A DRA count below 1 counts as 1.
func NewPodDemand(pod *corev1.Pod, dra []DRARequest) PodDemand {
	d := PodDemand{Pod: pod, Requests: allocation.PodRequests(pod)}
	for _, r := range dra {
		if !r.All && r.Count < 1 {
			r.Count = 1
		}
		d.DRA = append(d.DRA, r)
	}
	return d
}

// Key is namespace/name.
func (d PodDemand) Key() string { return d.Pod.Namespace + "/" + d.Pod.Name }

// id identifies the pod across plans: its UID, or its key when it has none.
func (d PodDemand) id() string {
	if d.Pod.UID != "" {
		return string(d.Pod.UID)
	}
	return d.Key()
}

// Neuron reports whether the pod asks for Neuron devices or cores at all.
func (d PodDemand) Neuron() bool { return len(d.Requests) > 0 || len(d.DRA) > 0 }

// Mode is the allocation mode of the nodes that can serve the pod.
func (d PodDemand) Mode() string {
	if len(d.DRA) > 0 {
		return labels.AllocationModeDRA
	}
	return labels.AllocationModeDevicePlugin
}

// Allows reports whether the pod's nodeSelector, required node affinity and, for DRA, its
// claims' instance types allow a new node of type t, on demand or in some reservation (the
// capacity labels, withCapacity).
func (d PodDemand) Allows(t topology.InstanceType) bool {
	return d.allows(t, NewNodeLabels(t, d.Mode()))
}

// allows is Allows with the new node's labels (NewNodeLabels(t, d.Mode())) given.
func (d PodDemand) allows(t topology.InstanceType, lbls map[string]string) bool {
	for _, r := range d.DRA {
		if r.InstanceTypes != nil && !slices.Contains(r.InstanceTypes, t.Name) || r.Matching != nil && !slices.Contains(r.Matching, t.Name) {
			return false
		}
	}
	return matchesSomeCapacity(d.Pod, lbls)
}

// WaitingForScaleUp reports whether the pod is one the autoscaler acts on: pending, not bound,
// not being deleted, and marked unschedulable by the scheduler. Whether it asks for Neuron
// hardware is PodDemand.Neuron.
func WaitingForScaleUp(pod *corev1.Pod) bool {
	if pod.Spec.NodeName != "" || pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodPending {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			return c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable
		}
	}
	return false
}

// instanceTypeCEL matches `device.attributes['neuron.aws.com'].instanceType == 'X'` (either
// quote, either side).
var instanceTypeCEL = regexp.MustCompile(`device\.attributes\[\s*["']` + regexp.QuoteMeta(DeviceClass) +
	`["']\s*\]\.instanceType\s*==\s*["']([^"']+)["']|["']([^"']+)["']\s*==\s*device\.attributes\[\s*["']` +
	regexp.QuoteMeta(DeviceClass) + `["']\s*\]\.instanceType`)

// DRARequestsOf returns the Neuron requests of a ResourceClaim (or template) spec: the requests
// of DeviceClass neuron.aws.com (for firstAvailable, the first such subrequest), with their count
// or All, and the instance type when a CEL selector requires instanceType == 'X' (in a
// conjunction; an expression with || or ! is not read and allows any type).
func DRARequestsOf(spec resourcev1.ResourceClaimSpec) []DRARequest {
	var out []DRARequest
	for _, r := range spec.Devices.Requests {
		var class string
		var sel []resourcev1.DeviceSelector
		var mode resourcev1.DeviceAllocationMode
		var count int64
		name := r.Name
		switch {
		case r.Exactly != nil:
			class, sel, mode, count = r.Exactly.DeviceClassName, r.Exactly.Selectors, r.Exactly.AllocationMode, r.Exactly.Count
		default:
			for _, s := range r.FirstAvailable {
				if s.DeviceClassName == DeviceClass {
					class, sel, mode, count = s.DeviceClassName, s.Selectors, s.AllocationMode, s.Count
					name += "/" + s.Name
					break
				}
			}
		}
		if class != DeviceClass {
			continue
		}
		req := DRARequest{Name: name, All: mode == resourcev1.DeviceAllocationModeAll, Count: int(count), FirstAvailable: r.Exactly == nil}
		for _, s := range sel {
			if s.CEL != nil {
				req.Selectors = append(req.Selectors, s.CEL.Expression)
			}
		}
		if !req.All && req.Count < 1 {
			req.Count = 1
		}
		for _, s := range sel {
			if s.CEL == nil {
				continue
			}
			e := strings.ReplaceAll(s.CEL.Expression, "!=", "")
			if strings.Contains(e, "||") || strings.Contains(e, "!") {
				continue
			}
			for _, m := range instanceTypeCEL.FindAllStringSubmatch(s.CEL.Expression, -1) {
				name := m[1] + m[2]
				if req.InstanceTypes == nil {
					req.InstanceTypes = []string{name}
				} else if !slices.Contains(req.InstanceTypes, name) {
					req.InstanceTypes = []string{} // two different types in one conjunction: none
				}
			}
		}
		out = append(out, req)
	}
	return withConfigs(out, spec.Devices.Config)
}

// withConfigs sets Configs, or ConfigError, on the requests of one claim from its configs, as the
// driver resolves them when it prepares the claim.
func withConfigs(reqs []DRARequest, configs []resourcev1.DeviceClaimConfiguration) []DRARequest {
	if len(reqs) == 0 || len(configs) == 0 {
		return reqs
	}
	names := make([]string, len(reqs))
	for i, r := range reqs {
		names[i] = r.Name
	}
	alloc := make([]resourcev1.DeviceAllocationConfiguration, len(configs))
	for i, c := range configs {
		alloc[i] = resourcev1.DeviceAllocationConfiguration{Source: resourcev1.AllocationConfigSourceClaim, Requests: c.Requests, DeviceConfiguration: c.DeviceConfiguration}
	}
	s, err := opaque.Resolve(alloc, names)
	for i := range reqs {
		reqs[i].Configs = s
		if err != nil {
			reqs[i].ConfigError = err.Error()
		}
	}
	return reqs
}

// demandString describes a single-request pod: "7 devices", "6 cores", "all devices".
func demandString(d PodDemand) string {
	if len(d.Requests) == 1 {
		u, err := topology.UnitOf(d.Requests[0].Resource)
		if err != nil {
			return "the pod"
		}
		return topology.Request{Unit: u, Count: d.Requests[0].Count}.String()
	}
	if len(d.DRA) == 1 {
		return d.DRA[0].String()
	}
	return "the pod"
}

func draString(rs []DRARequest) string {
	var out []string
	for _, r := range rs {
		out = append(out, r.String())
	}
	return strings.Join(out, ", ")
}
