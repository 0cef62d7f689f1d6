package deviceplugin

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// Holding is hardware in use, or reserved, and through which kubelet pool.
type Holding struct {
	// Pod is namespace/name of the pod, for messages.
	Pod       string
	PodUID    string
	Container string
	// Resource is the pool the container asks through.
	Resource string
	// KubeletIDs are the ids the kubelet holds for the container in that pool; nil when the
	// kubelet holds none (not admitted yet, or not known).
	KubeletIDs []string
	// Hardware is what the container has (or will have).
	Hardware topology.Allocation
	// Reserved marks an extender allocation whose container the device plugin has not served
	// yet: the hardware is promised, the kubelet has not handed out anything for it.
	Reserved bool
	// Admitted marks a holding the kubelet's PodResources show: the kubelet holds KubeletIDs for
	// this container of this pod.
	Admitted bool
}

// poolIDs returns the ids a pool advertises: devices for device pools, cores for the core pool.
func poolIDs(shape *topology.Shape, resource string) []string {
	n := shape.Devices()
	if resource == topology.ResourceNeuronCore {
		n = shape.Cores()
	}
	out := make([]string, n)
	for i := range out {
		out[i] = strconv.Itoa(i)
	}
	return out
}

// hardwareOf turns pool ids into hardware.
func hardwareOf(shape *topology.Shape, resource string, ids []string) (topology.Allocation, error) {
	nums := make([]int, 0, len(ids))
	for _, id := range ids {
		n, err := strconv.Atoi(id)
		if err != nil {
			return topology.Allocation{}, fmt.Errorf("device id %q of %s is not a number: this plugin names its ids 0, 1, 2 and so on", id, resource)
		}
		nums = append(nums, n)
	}
	if resource == topology.ResourceNeuronCore {
		return shape.CoreAllocation(nums)
	}
	return shape.DeviceAllocation(nums)
}

// idsOf returns the pool ids of hardware.
func idsOf(resource string, hw topology.Allocation) []string {
	src := hw.Devices
	if resource == topology.ResourceNeuronCore {
		src = hw.Cores
	}
	out := make([]string, len(src))
	for i, v := range src {
		out[i] = strconv.Itoa(v)
	}
	return out
}

// Withdrawn returns, for one pool, the ids that must be reported unhealthy: ids of unhealthy
// devices, and ids whose hardware overlaps a holding, except the ids the kubelet itself holds in
// this pool and hardware reserved for a container that will be allocated through this pool.
// Each withdrawn id maps to the reason, for logs and events.
func Withdrawn(shape *topology.Shape, resource string, unhealthy []bool, holdings []Holding) map[string]string {
	out := map[string]string{}
	coreOwner := make([]string, shape.Cores())
	for _, h := range holdings {
		if h.Reserved && h.Resource == resource {
			continue
		}
		for _, c := range h.Hardware.Cores {
			if c >= 0 && c < len(coreOwner) && coreOwner[c] == "" {
				coreOwner[c] = fmt.Sprintf("in use by %s (container %s, %s)", h.Pod, h.Container, h.Resource)
			}
		}
	}
	own := map[string]bool{}
	for _, h := range holdings {
		if h.Resource == resource {
			for _, id := range h.KubeletIDs {
				own[id] = true
			}
		}
	}
	standIns := standIns(shape, resource, holdings, coreOwner)
	for _, id := range poolIDs(shape, resource) {
		n, _ := strconv.Atoi(id)
		cores := []int{n}
		device := shape.DeviceOf(n)
		if resource != topology.ResourceNeuronCore {
			cores = shape.CoresOf(n)
			device = n
		}
		if device < len(unhealthy) && unhealthy[device] {
			out[id] = fmt.Sprintf("device %d is unhealthy", device)
			continue
		}
		if own[id] || standIns[id] {
			continue
		}
		for _, c := range cores {
			if coreOwner[c] != "" {
				out[id] = coreOwner[c]
				break
			}
		}
	}
	return out
}

// standIns returns the ids of this pool that stand in for hardware reserved for a container
// waiting to be admitted through the pool. A container served on other hardware than its kubelet
// ids (the kubelet admitted two pods in the other order than their records were matched, and
// the plugin swapped their records) holds ids a and hardware b: b's ids are withdrawn, and a's
// hardware is free but the kubelet holds a. When a's hardware is reserved for the waiting pod,
// the kubelet would find no id for it ("requested number of devices unavailable", seen when the
// node is full): b's id is offered instead, and Allocate serves the pod its record, a's hardware.
// The ids are paired over the pool's admitted holdings together, not one holding at a time:
// swaps chain (x holds the kubelet's ids of y's hardware, y those of the waiting pod's), and
// only the ids the kubelet holds without anyone's hardware behind them, and the hardware held
// without the kubelet's ids, are left to pair. coreOwner is the owner of each core as Withdrawn
// computed it (reserved holdings of this pool left out).
func standIns(shape *topology.Shape, resource string, holdings []Holding, coreOwner []string) map[string]bool {
	reserved := map[int]bool{}
	for _, h := range holdings {
		if h.Reserved && h.Resource == resource {
			for _, c := range h.Hardware.Cores {
				reserved[c] = true
			}
		}
	}
	if len(reserved) == 0 {
		return nil
	}
	coresOfID := func(id string) []int {
		n, _ := strconv.Atoi(id)
		if resource == topology.ResourceNeuronCore {
			return []int{n}
		}
		return shape.CoresOf(n)
	}
	kubelet, hardware := map[string]bool{}, map[string]bool{}
	for _, h := range holdings {
		if h.Resource != resource || h.Reserved || len(h.KubeletIDs) == 0 {
			continue
		}
		for _, id := range h.KubeletIDs {
			kubelet[id] = true
		}
		for _, id := range idsOf(resource, h.Hardware) {
			hardware[id] = true
		}
	}
	var kubeletOnly, hardwareOnly []string // a and b above
	for id := range kubelet {
		if !hardware[id] {
			kubeletOnly = append(kubeletOnly, id)
		}
	}
	for id := range hardware {
		if !kubelet[id] {
			hardwareOnly = append(hardwareOnly, id)
		}
	}
	sortIDs(kubeletOnly)
	sortIDs(hardwareOnly)
	out := map[string]bool{}
	for i := 0; i < len(kubeletOnly) && i < len(hardwareOnly); i++ {
		waiting := true
		for _, c := range coresOfID(kubeletOnly[i]) {
			if c < 0 || c >= len(coreOwner) || coreOwner[c] != "" || !reserved[c] {
				waiting = false
				break
			}
		}
		if waiting {
			out[hardwareOnly[i]] = true
		}
	}
	return out
}

// Conflicts returns the holdings whose hardware overlaps hw, other than those of the pod podUID
// that the kubelet has not admitted (what its record promises). An empty podUID (a call for an
// unknown pod) excludes nothing: holdings of unknown pods are other pods' too. A container of
// podUID that the kubelet admitted is a conflict like any other: a call for the same ids again is
// answered before matching, so a call matched to that pod's record is for another pod.
func Conflicts(hw topology.Allocation, podUID string, holdings []Holding) []Holding {
	var out []Holding
	for _, h := range holdings {
		if podUID != "" && h.PodUID == podUID && !h.Admitted {
			continue
		}
		if h.Hardware.Overlaps(hw) {
			out = append(out, h)
		}
	}
	return out
}

// Candidate is a container entry of an allocation record: the scheduler extender's, or one
// derived from the published Neuron stack's annotations.
type Candidate struct {
	Pod       string // namespace/name
	PodUID    string
	AllocTime int64
	Created   int64 // unix nanoseconds
	Container allocation.Container
	Index     int // position in the record
	// Published marks a record derived from the published Neuron stack's annotations.
	Published bool
}

// Match chooses the container an Allocate (or GetPreferredAllocation) call for count ids of
// resource is for: among unserved entries of the same resource and count, the oldest
// NEURON_ALLOC_TIME first, then the oldest pod, then by name and container order. skip lists
// "podUID/container" entries already taken by calls in flight. Entries of the scheduler
// extender's records come before entries derived from the published Neuron stack's annotations:
// the kubelet admits a pod right after its binding, so a call is far more likely for a pod the
// extender just bound than for one the published extension bound before kube-neuron took over
// and that the kubelet has still not admitted.
func Match(cands []Candidate, resource string, count int, skip map[string]bool) (Candidate, bool) {
	var fit []Candidate
	for _, c := range cands {
		if c.Container.Resource == resource && !c.Container.Served && c.Container.Count() == count && !skip[c.PodUID+"/"+c.Container.Name] {
			fit = append(fit, c)
		}
	}
	if len(fit) == 0 {
		return Candidate{}, false
	}
	sort.SliceStable(fit, func(i, j int) bool {
		a, b := fit[i], fit[j]
		if a.Published != b.Published {
			return !a.Published
		}
		if a.AllocTime != b.AllocTime {
			return a.AllocTime < b.AllocTime
		}
		if a.Created != b.Created {
			return a.Created < b.Created
		}
		if a.Pod != b.Pod {
			return a.Pod < b.Pod
		}
		return a.Index < b.Index
	})
	return fit[0], true
}

// describe lists candidates for error messages.
func describe(cands []Candidate, resource string) string {
	var parts []string
	for _, c := range cands {
		if c.Container.Resource == resource {
			state := "waiting"
			if c.Container.Served {
				state = "served"
			}
			parts = append(parts, fmt.Sprintf("%s/%s (%d, %s)", c.Pod, c.Container.Name, c.Container.Count(), state))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
