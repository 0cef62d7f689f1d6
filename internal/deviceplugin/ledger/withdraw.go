package ledger

import (
	"fmt"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// Withdrawn returns, for one pool, the ids the plugin reports unhealthy, with the ledger's
// holdings: see Withdrawn.
func (l *Ledger) Withdrawn(resource string, unhealthy []bool) map[string]string {
	return Withdrawn(l.shape, resource, unhealthy, l.holdings)
}

// Withdrawn returns, for one pool, the ids that must be reported unhealthy: ids of unhealthy
// devices, and ids whose hardware overlaps a holding, except the ids the kubelet itself holds in
// this pool and hardware reserved for a container that will be allocated through this pool.
// Each withdrawn id maps to the reason, for logs and events.
func Withdrawn(shape *topology.Shape, resource string, unhealthy []bool, holdings []Holding) map[string]string {
	out := map[string]string{}
	coreOwner := make([]string, shape.Cores())
	own := map[string]bool{}
	for _, h := range holdings {
		if h.Resource == resource {
			for _, id := range h.KubeletIDs {
				own[id] = true
			}
		}
		if h.Reserved && h.Resource == resource {
			continue
		}
		reason := ""
		for _, c := range h.Hardware.Cores {
			if c >= 0 && c < len(coreOwner) && coreOwner[c] == "" {
				if reason == "" {
					reason = fmt.Sprintf("in use by %s (container %s, %s)", h.Holder(), h.Container, h.Resource)
				}
				coreOwner[c] = reason
			}
		}
	}
	standIns := standIns(shape, resource, holdings, coreOwner)
	for _, id := range PoolIDs(shape, resource) {
		if device := deviceOfID(shape, resource, id); device < len(unhealthy) && unhealthy[device] {
			out[id] = fmt.Sprintf("device %d is unhealthy", device)
			continue
		}
		if own[id] || standIns[id] {
			continue
		}
		for _, c := range coresOfID(shape, resource, id) {
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
	kubeletOnly, hardwareOnly := unpaired(resource, holdings) // a and b above
	out := map[string]bool{}
	for i := 0; i < len(kubeletOnly) && i < len(hardwareOnly); i++ {
		waiting := true
		for _, c := range coresOfID(shape, resource, kubeletOnly[i]) {
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

// unpaired returns, over the pool's holdings through the kubelet, the ids the kubelet holds that
// no holding's hardware is behind, and the ids of hardware held without the kubelet's ids, both
// ascending.
func unpaired(resource string, holdings []Holding) (kubeletOnly, hardwareOnly []string) {
	kubelet, hardware := map[string]bool{}, map[string]bool{}
	for _, h := range holdings {
		if h.Resource != resource || h.Reserved || len(h.KubeletIDs) == 0 {
			continue
		}
		for _, id := range h.KubeletIDs {
			kubelet[id] = true
		}
		for _, id := range IDsOf(resource, h.Hardware) {
			hardware[id] = true
		}
	}
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
	SortIDs(kubeletOnly)
	SortIDs(hardwareOnly)
	return kubeletOnly, hardwareOnly
}

// Conflicts returns the holdings whose hardware overlaps hw, other than those of the pod podUID
// that the kubelet has not admitted (what its record promises). An empty podUID (a call for an
// unknown pod) excludes nothing: holdings of unknown pods are other pods' too. A container of
// podUID that the kubelet admitted is a conflict like any other: a call for the same ids again is
// answered before matching, so a call matched to that pod's record is for another pod.
func Conflicts(hw topology.Allocation, podUID types.UID, holdings []Holding) []Holding {
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
