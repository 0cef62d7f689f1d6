package cli

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	apiv1 "github.com/kube-neuron/kube-neuron/api/neuron.aws.com/v1"
	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/autoscaler/plan"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// heldBy is what the pod holds: its allocation record's containers, or its claims' devices.
func heldBy(cat *topology.Catalog, pod *corev1.Pod, nodes []*corev1.Node, claims []ClaimState) []NodeHolder {
	out := []NodeHolder{}
	if r, err := allocation.RecordOf(pod); err == nil && r != nil {
		for _, c := range r.Containers {
			h := NodeHolder{Pod: pod.Name, Namespace: pod.Namespace, Container: c.Name, Resource: c.Resource, Devices: nonNil(c.Devices), Cores: nonNil(c.Cores)}
			for _, n := range nodes {
				if n.Name != r.Node {
					continue
				}
				if shape, err := allocation.ShapeOfNode(cat, n); err == nil {
					if hw, err := c.Hardware(shape); err == nil {
						h.Devices, h.Cores = nonNil(hw.Devices), nonNil(hw.Cores)
					}
				}
			}
			out = append(out, h)
		}
	}
	for _, c := range claims {
		if !c.Allocated {
			continue
		}
		var devs []int
		for _, name := range c.Devices {
			if d, ok := apiv1.ParseDeviceName(name); ok {
				devs = append(devs, d)
			}
		}
		out = append(out, NodeHolder{Pod: pod.Name, Namespace: pod.Namespace, Resource: DRADriver, Claim: c.Claim, Devices: nonNil(slices.Sorted(slices.Values(devs))), Cores: []int{}})
	}
	return out
}

func describeHolds(hs []NodeHolder) string {
	var parts []string
	for _, h := range hs {
		switch {
		case h.Claim != "":
			parts = append(parts, fmt.Sprintf("claim %s: devices %s", h.Claim, orDash(h.Devices)))
		case h.Resource == topology.ResourceNeuronCore:
			parts = append(parts, fmt.Sprintf("container %s: cores %s (devices %s)", h.Container, orDash(h.Cores), orDash(h.Devices)))
		default:
			parts = append(parts, fmt.Sprintf("container %s: devices %s (cores %s)", h.Container, orDash(h.Devices), orDash(h.Cores)))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return " with " + strings.Join(parts, "; ")
}

// requestTotal is the pod's request summed as the engine places it on one node.
func requestTotal(d plan.PodDemand) string {
	devices, cores := 0, 0
	for _, r := range d.Requests {
		if r.Resource == topology.ResourceNeuronCore {
			cores += r.Count
		} else {
			devices += r.Count
		}
	}
	var parts []string
	if devices > 0 {
		parts = append(parts, plural(devices, "device"))
	}
	if cores > 0 {
		parts = append(parts, plural(cores, "core"))
	}
	all := false
	for _, r := range d.DRA {
		if r.All {
			all = true
		} else if !r.FirstAvailable {
			devices += max(r.Count, 1)
		}
	}
	if len(d.DRA) > 0 {
		parts = []string{plural(devices, "device") + " through ResourceClaims"}
		if all {
			parts[0] = "all devices of a node through ResourceClaims"
		}
	}
	return strings.Join(parts, " and ")
}

// plural writes "1 device", "3 devices"; with a second form, that one for n != 1.
func plural(n int, one string, many ...string) string {
	if n == 1 {
		return "1 " + one
	}
	if len(many) > 0 {
		return strconv.Itoa(n) + " " + many[0]
	}
	return strconv.Itoa(n) + " " + one + "s"
}

// validCounts writes the counts of the units the requests use: "1, 4, 8 or 16 devices".
func validCounts(tc TypeCounts, reqs []ExplainRequest) string {
	devices, cores := len(reqs) == 0, false
	for _, r := range reqs {
		if r.Unit == topology.UnitCore.String() {
			cores = true
		} else {
			devices = true
		}
	}
	var parts []string
	if devices {
		parts = append(parts, plan.FormatSizes(tc.Devices, topology.UnitDevice))
	}
	if cores {
		parts = append(parts, plan.FormatSizes(tc.Cores, topology.UnitCore))
	}
	return strings.Join(parts, "; ")
}
