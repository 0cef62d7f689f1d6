package cli

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

	apiv1 "github.com/kube-neuron/kube-neuron/api/neuron.aws.com/v1"
	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/autoscaler/plan"
	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// judgeNode says whether the pod fits on one candidate node now, and why not.
func judgeNode(n *corev1.Node, shape *topology.Shape, d plan.PodDemand, records []*corev1.Pod, claims []*resourcev1.ResourceClaim) NodeVerdict {
	mode := n.Labels[labels.AllocationMode]
	if mode != labels.AllocationModeDRA {
		mode = labels.AllocationModeDevicePlugin
	}
	v := NodeVerdict{Name: n.Name, InstanceType: shape.Type.Name, Mode: mode}
	var usage *topology.Usage
	var holders []allocation.Holder
	if mode == labels.AllocationModeDRA {
		usage, holders = claimHolders(shape, n.Name, claims)
	} else {
		usage, holders, _ = allocation.NodeUsage(shape, n.Name, records)
		v.Unhealthy = unhealthyDevices(n)
	}
	v.FreeDevices, v.FreeCores = nonNil(usage.FreeDevices()), nonNil(usage.FreeCores())
	v.FreeSets = freeSets(usage)
	set := func(verdict, format string, args ...any) NodeVerdict {
		v.Verdict, v.Message = verdict, fmt.Sprintf(format, args...)
		return v
	}
	if n.Spec.Unschedulable {
		return set(VerdictUnschedulable, "cordoned (spec.unschedulable)")
	}
	if t, untolerated := corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), n.Spec.Taints, d.Pod.Spec.Tolerations, func(t *corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
	}, false); untolerated {
		return set(VerdictTainted, "taint %s=%s:%s is not tolerated: add a toleration for %s to the pod, or use another node", t.Key, t.Value, t.Effect, t.Key)
	}
	if len(d.DRA) > 0 {
		if mode != labels.AllocationModeDRA {
			return set(VerdictWrongMode, "a device-plugin node: it publishes no ResourceSlice for the pod's claims")
		}
		need := 0
		for _, r := range d.DRA {
			if r.All {
				need += shape.Devices()
			} else {
				need += max(r.Count, 1)
			}
		}
		if free := len(v.FreeDevices); free < need {
			return set(VerdictInsufficient, "%s free, the claims ask for %d", plural(free, "device"), need)
		}
		return set(VerdictFits, "%s free, enough for the claims' %d; the scheduler's allocator decides with their selectors and constraints", plural(len(v.FreeDevices), "device"), need)
	}
	if mode == labels.AllocationModeDRA {
		return set(VerdictWrongMode, "a DRA node: it serves ResourceClaims, not %s", d.Requests[0].Resource)
	}
	for _, r := range d.Requests {
		u, _ := topology.UnitOf(r.Resource)
		if err := shape.Validate(topology.Request{Unit: u, Count: r.Count}); err != nil {
			sizes := shape.DeviceSizes()
			if u == topology.UnitCore {
				sizes = shape.CoreSizes()
			}
			return set(VerdictUnsupportedCount, "%v (%s accepts %s)", err, shape.Type.Name, plan.FormatSizes(sizes, u))
		}
	}
	if _, _, err := allocation.Plan(usage, d.Requests, topology.BestFit); err == nil {
		if v.Unhealthy > 0 {
			return set(VerdictUnhealthy, "the request fits the free devices by the allocation records, but %s unhealthy (allocatable below capacity): the device plugin offers only healthy ones", plural(v.Unhealthy, "device is", "devices are"))
		}
		return set(VerdictFits, "a valid free set exists now")
	}
	unit, needed, free := "core", allocation.CoresNeeded(shape, d.Requests), usage.FreeCoreCount()
	if allDevices(d.Requests) {
		unit, needed, free = "device", 0, usage.FreeDeviceCount()
		for _, r := range d.Requests {
			needed += r.Count
		}
	}
	if free < needed {
		return set(VerdictInsufficient, "%s free, %d needed", plural(free, unit), needed)
	}
	v.Move = findMove(usage, holders, d.Requests)
	msg := fmt.Sprintf("%s free but no %d connected", plural(free, unit), needed)
	if m := v.Move; m != nil {
		var pods []string
		for _, p := range m.Pods {
			held := "devices " + topology.FormatList(p.Devices)
			if m.Unit == "core" {
				held = "cores " + topology.FormatList(p.Cores)
			}
			pods = append(pods, fmt.Sprintf("%s/%s (%s)", p.Namespace, p.Name, held))
		}
		msg += fmt.Sprintf("; freeing %s %s would make %d connected %ss %s free", pluralWord(len(pods), "pod"), strings.Join(pods, ", "), len(m.Frees), m.Unit, topology.FormatList(m.Frees))
	} else {
		msg += fmt.Sprintf("; no set of up to %d pods frees a valid set", maxMovePods)
	}
	return set(VerdictFragmented, "%s", msg)
}

// findMove returns the smallest set of pods (then the fewest cores held, then by name) whose
// release lets the requests fit, trying at most maxMoveTrials sets of at most maxMovePods pods.
func findMove(u *topology.Usage, holders []allocation.Holder, reqs []allocation.Request) *Move {
	type podHeld struct {
		ns, name string
		hw       []topology.Allocation
		cores    int
	}
	var pods []*podHeld
	index := map[string]*podHeld{}
	for _, h := range holders {
		k := h.Namespace + "/" + h.Name
		p := index[k]
		if p == nil {
			p = &podHeld{ns: h.Namespace, name: h.Name}
			index[k] = p
			pods = append(pods, p)
		}
		p.hw = append(p.hw, h.Hardware)
		p.cores += len(h.Hardware.Cores)
	}
	slices.SortFunc(pods, func(a, b *podHeld) int {
		return cmp.Or(cmp.Compare(a.cores, b.cores), strings.Compare(a.ns+"/"+a.name, b.ns+"/"+b.name))
	})
	trials := 0
	for k := 1; k <= min(maxMovePods, len(pods)); k++ {
		var best []int
		bestCores := 0
		var bestFit []allocation.Container
		idx := make([]int, k)
		var walk func(pos, start int) bool
		walk = func(pos, start int) bool {
			if pos == k {
				trials++
				work := u.Clone()
				cores := 0
				for _, i := range idx {
					for _, a := range pods[i].hw {
						_ = work.Release(a)
					}
					cores += pods[i].cores
				}
				if best != nil && cores >= bestCores {
					return trials < maxMoveTrials
				}
				if fit, _, err := allocation.Plan(work, reqs, topology.BestFit); err == nil {
					best, bestCores, bestFit = slices.Clone(idx), cores, fit
				}
				return trials < maxMoveTrials
			}
			for i := start; i < len(pods); i++ {
				idx[pos] = i
				if !walk(pos+1, i+1) {
					return false
				}
			}
			return true
		}
		more := walk(0, 0)
		if best != nil {
			m := &Move{Unit: "device"}
			var frees []int
			for _, c := range bestFit {
				if c.Resource == topology.ResourceNeuronCore {
					m.Unit = "core"
				}
			}
			for _, c := range bestFit {
				if m.Unit == "core" {
					frees = append(frees, c.Cores...)
				} else {
					frees = append(frees, c.Devices...)
				}
			}
			m.Frees = slices.Compact(slices.Sorted(slices.Values(frees)))
			for _, i := range best {
				p := pods[i]
				mp := MovedPod{Namespace: p.ns, Name: p.name}
				for _, a := range p.hw {
					mp.Devices = append(mp.Devices, a.Devices...)
					mp.Cores = append(mp.Cores, a.Cores...)
				}
				mp.Devices = nonNil(slices.Compact(slices.Sorted(slices.Values(mp.Devices))))
				mp.Cores = nonNil(slices.Compact(slices.Sorted(slices.Values(mp.Cores))))
				m.Pods = append(m.Pods, mp)
			}
			slices.SortFunc(m.Pods, func(a, b MovedPod) int { return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name) })
			return m
		}
		if !more {
			return nil
		}
	}
	return nil
}

// freeSets returns disjoint free sets of devices that a device request can take, largest
// first: aligned blocks on a torus, segments on a ring or chain, every free device on a
// switched node.
func freeSets(u *topology.Usage) [][]int {
	s := u.Shape()
	free := u.FreeDevices()
	out := [][]int{}
	if len(free) == 0 {
		return out
	}
	if s.Kind() == topology.KindSwitched || s.Devices() == 1 {
		return append(out, free)
	}
	taken := make([]bool, s.Devices())
	sizes := s.DeviceSizes()
	for i := len(sizes) - 1; i >= 0; i-- {
		for _, set := range s.DeviceSets(sizes[i]) {
			if slices.ContainsFunc(set, func(d int) bool { return taken[d] || !u.DeviceFree(d) }) {
				continue
			}
			for _, d := range set {
				taken[d] = true
			}
			out = append(out, set)
		}
	}
	return out
}

// claimHolders is what the allocated claims hold on a DRA node, each claim as a holder named
// by the pod it is reserved for (the claim when none).
func claimHolders(shape *topology.Shape, node string, claims []*resourcev1.ResourceClaim) (*topology.Usage, []allocation.Holder) {
	u := topology.NewUsage(shape)
	var holders []allocation.Holder
	for _, c := range claims {
		if c.Status.Allocation == nil {
			continue
		}
		var devs []int
		for _, r := range c.Status.Allocation.Devices.Results {
			if r.Driver != DRADriver || r.Pool != node {
				continue
			}
			if r.Device == apiv1.NodeDeviceName {
				for d := range shape.Devices() {
					devs = append(devs, d)
				}
			} else if d, ok := apiv1.ParseDeviceName(r.Device); ok {
				devs = append(devs, d)
			}
		}
		if len(devs) == 0 {
			continue
		}
		hw, err := shape.DeviceAllocation(slices.Compact(slices.Sorted(slices.Values(devs))))
		if err != nil || u.Allocate(hw) != nil {
			continue
		}
		name := "claim " + c.Name
		for _, ref := range c.Status.ReservedFor {
			if ref.Resource == "pods" {
				name = ref.Name
				break
			}
		}
		holders = append(holders, allocation.Holder{Namespace: c.Namespace, Name: name, Hardware: hw})
	}
	return u, holders
}

// unhealthyDevices is how many devices a device-plugin node advertises but does not offer:
// capacity minus allocatable of its device resource.
func unhealthyDevices(n *corev1.Node) int {
	for _, res := range []string{topology.ResourceNeuron, topology.ResourceNeuronDevice} {
		c, ok := n.Status.Capacity[corev1.ResourceName(res)]
		if !ok {
			continue
		}
		a := n.Status.Allocatable[corev1.ResourceName(res)]
		return max(int(c.Value()-a.Value()), 0)
	}
	return 0
}

// podMatchesNode: the pod's nodeSelector and required node affinity allow the node.
func podMatchesNode(pod *corev1.Pod, n *corev1.Node) bool {
	ok, err := nodeaffinity.GetRequiredNodeAffinity(pod).Match(n)
	return err == nil && ok
}

func allDevices(reqs []allocation.Request) bool {
	for _, r := range reqs {
		if r.Resource == topology.ResourceNeuronCore {
			return false
		}
	}
	return true
}
