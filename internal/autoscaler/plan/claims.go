package plan

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kube-neuron/kube-neuron/internal/dra/devices"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// ClaimFromTemplate is the ResourceClaim the resourceclaim controller would create for the pod's
// claim podClaim from a template with this spec: not allocated yet, owned by the pod alone.
func ClaimFromTemplate(namespace, pod, podClaim string, spec resourcev1.ResourceClaimSpec) *resourcev1.ResourceClaim {
	name := pod + "-" + podClaim
	return &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: types.UID("template:" + namespace + "/" + name)},
		Spec:       spec,
	}
}

// claimsFromRequests makes one claim per request, for a demand whose caller gave its requests
// only (DRARequest: a count or all devices of DeviceClass neuron.aws.com, with selectors).
func claimsFromRequests(pod string, rs []DRARequest) []*resourcev1.ResourceClaim {
	out := make([]*resourcev1.ResourceClaim, 0, len(rs))
	for k, r := range rs {
		req := resourcev1.ExactDeviceRequest{DeviceClassName: DeviceClass, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: int64(max(r.Count, 1))}
		if r.All {
			req.AllocationMode, req.Count = resourcev1.DeviceAllocationModeAll, 0
		}
		for _, e := range r.Selectors {
			req.Selectors = append(req.Selectors, resourcev1.DeviceSelector{CEL: &resourcev1.CELDeviceSelector{Expression: e}})
		}
		name := fmt.Sprintf("%s-request-%d", pod, k)
		out = append(out, &resourcev1.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("request:" + name)},
			Spec:       resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "r", Exactly: &req}}}},
		})
	}
	return out
}

// claimsOf are the pod's claims the allocator places: Claims, or one per DRA request when the
// caller gave none.
func claimsOf(d PodDemand) []*resourcev1.ResourceClaim {
	if len(d.Claims) > 0 {
		return d.Claims
	}
	return claimsFromRequests(d.Key(), d.DRA)
}

// claimsKey is what the allocator reads of the pod's claims, as a key of the placement cache:
// each claim's spec, or the devices an allocated claim holds.
func claimsKey(d PodDemand) string {
	var b strings.Builder
	for _, c := range d.Claims {
		if c.Status.Allocation != nil {
			b.WriteString("allocated:")
			for _, r := range c.Status.Allocation.Devices.Results {
				fmt.Fprintf(&b, "%s/%s,", r.Driver, r.Device)
			}
		} else {
			spec, _ := json.Marshal(c.Spec)
			b.Write(spec)
		}
		b.WriteByte(';')
	}
	return b.String()
}

// isNeuronClass reports whether a DeviceClass selects Neuron devices: neuron.aws.com itself, or a
// class whose selectors name the driver.
func (ts *DeviceTemplates) isNeuronClass(name string) bool {
	if name == DeviceClass {
		return true
	}
	c, err := ts.classes.Get(name)
	if err != nil {
		return false
	}
	return slices.ContainsFunc(c.Spec.Selectors, func(s resourcev1.DeviceSelector) bool {
		return s.CEL != nil && (strings.Contains(s.CEL.Expression, `"`+DeviceClass+`"`) || strings.Contains(s.CEL.Expression, `'`+DeviceClass+`'`))
	})
}

// forTemplate is the claim as the allocator places it on the template of a new node of type t:
// its Neuron requests only (the autoscaler plans no other driver's devices; constraints keep
// only the requests that remain), their selectors as forNewNode gives them. It returns nil when
// the claim asks for no Neuron device.
func (ts *DeviceTemplates) forTemplate(ctx context.Context, c *resourcev1.ResourceClaim, t topology.InstanceType) *resourcev1.ResourceClaim {
	out := c.DeepCopy()
	out.Status = resourcev1.ResourceClaimStatus{}
	reqs := out.Spec.Devices.Requests[:0]
	var dropped []string
	for _, r := range out.Spec.Devices.Requests {
		switch {
		case r.Exactly != nil && ts.isNeuronClass(r.Exactly.DeviceClassName):
			r.Exactly.Selectors = ts.forNewNode(ctx, t, r.Exactly.Selectors)
		case r.Exactly == nil:
			subs := r.FirstAvailable[:0]
			for _, s := range r.FirstAvailable {
				if ts.isNeuronClass(s.DeviceClassName) {
					s.Selectors = ts.forNewNode(ctx, t, s.Selectors)
					subs = append(subs, s)
				}
			}
			r.FirstAvailable = subs
			if len(subs) == 0 {
				dropped = append(dropped, r.Name)
				continue
			}
		default:
			dropped = append(dropped, r.Name)
			continue
		}
		reqs = append(reqs, r)
	}
	if len(reqs) == 0 {
		return nil
	}
	out.Spec.Devices.Requests = reqs
	if len(dropped) > 0 {
		cons := out.Spec.Devices.Constraints[:0]
		for _, k := range out.Spec.Devices.Constraints {
			if len(k.Requests) > 0 {
				k.Requests = slices.DeleteFunc(k.Requests, func(name string) bool {
					base, _, _ := strings.Cut(name, "/")
					return slices.Contains(dropped, base)
				})
				if len(k.Requests) == 0 {
					continue
				}
			}
			cons = append(cons, k)
		}
		out.Spec.Devices.Constraints = cons
	}
	return out
}

// deviceIndices are the Neuron devices of allocation results, by index: the UltraServer node
// device stands for all n devices of its node.
func deviceIndices(results []resourcev1.DeviceRequestAllocationResult, n int) []int {
	var out []int
	for _, r := range results {
		if r.Driver != DeviceClass {
			continue
		}
		if r.Device == devices.NodeDeviceName {
			for i := range n {
				out = append(out, i)
			}
		} else if i, ok := devices.ParseDeviceName(r.Device); ok {
			out = append(out, i)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
