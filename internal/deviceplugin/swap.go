package deviceplugin

import (
	"maps"
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// displacedRecord is a container entry of a pod the kubelet has not admitted whose record says
// served: Allocate matched it to a call that was for another pod (by, the fix of that pod's
// record), and that pod now runs on its hardware.
type displacedRecord struct {
	podUID, container, resource string
	count                       int
	by                          recordFix
}

// displaced returns the fixes that give each displaced record hardware nobody got. admitted
// are the holdings of the containers the kubelet admitted, fixes the fixes of their records
// (served, with the hardware each got). The records are the pods' records before the fixes.
//
// A displaced record takes the old hardware of the record whose container got its hardware.
// When the kubelet admitted several pods in another order than their records were matched, that
// old hardware may have gone to another admitted container too, whose own old hardware is then
// the next candidate, and so on: the chain ends at hardware no admitted container got, which
// the extender still counts as used (it was a record's), so no new pod can have been placed
// there. A chain that breaks (hardware that only overlaps, a container served from the
// kubelet's ids without a record) falls back to a free set the topology engine chooses.
func (p *Plugin) displaced(records map[string]*allocation.Record, covered map[string]bool, fixes []recordFix, pods []*corev1.Pod, admitted []Holding) []recordFix {
	containerOf := func(uid, name, resource string) *allocation.Container {
		if r := records[uid]; r != nil {
			for i := range r.Containers {
				if c := &r.Containers[i]; c.Name == name && c.Resource == resource {
					return c
				}
			}
		}
		return nil
	}
	oldHW := func(f recordFix) (topology.Allocation, bool) {
		c := containerOf(f.podUID, f.container, f.resource)
		if c == nil {
			return topology.Allocation{}, false
		}
		hw, err := c.Hardware(p.shape)
		return hw, err == nil
	}
	var served []recordFix
	for _, f := range fixes {
		if f.served {
			served = append(served, f)
		}
	}
	uids := make([]string, 0, len(records))
	for uid := range records {
		uids = append(uids, uid)
	}
	sort.Strings(uids)
	var found []displacedRecord
	isDisplaced := map[string]bool{}
	for _, f := range served {
		for _, uid := range uids {
			if uid == f.podUID {
				continue
			}
			for _, c := range records[uid].Containers {
				k := uid + "/" + c.Name + "/" + c.Resource
				if c.Resource != f.resource || !c.Served || covered[k] || isDisplaced[k] || !sameHardware(p.shape, c, f.hw) {
					continue
				}
				isDisplaced[k] = true
				found = append(found, displacedRecord{podUID: uid, container: c.Name, resource: c.Resource, count: c.Count(), by: f})
			}
		}
	}
	if len(found) == 0 {
		return nil
	}
	taken := map[int]bool{} // cores of admitted containers, and of hardware given out here
	for _, h := range admitted {
		for _, c := range h.Hardware.Cores {
			taken[c] = true
		}
	}
	overlaps := func(hw topology.Allocation, cores map[int]bool) bool {
		return slices.ContainsFunc(hw.Cores, func(c int) bool { return cores[c] })
	}
	chainEnd := func(f recordFix) (topology.Allocation, bool) {
		seen := map[string]bool{f.podUID + "/" + f.container + "/" + f.resource: true}
		hw, ok := oldHW(f)
		for ok {
			next := -1
			for i, g := range served {
				if !seen[g.podUID+"/"+g.container+"/"+g.resource] && hw.Overlaps(g.hw) {
					next = i
					break
				}
			}
			if next < 0 {
				return hw, !overlaps(hw, taken)
			}
			g := served[next]
			if !slices.Equal(g.hw.Cores, hw.Cores) {
				return topology.Allocation{}, false
			}
			seen[g.podUID+"/"+g.container+"/"+g.resource] = true
			hw, ok = oldHW(g)
		}
		return topology.Allocation{}, false
	}
	var out []recordFix
	var unresolved []displacedRecord
	for _, d := range found {
		hw, ok := chainEnd(d.by)
		if !ok {
			unresolved = append(unresolved, d)
			continue
		}
		for _, c := range hw.Cores {
			taken[c] = true
		}
		out = append(out, recordFix{pod: podByUID(pods, d.podUID), podUID: d.podUID, container: d.container, resource: d.resource, hw: hw, served: false})
	}
	if len(unresolved) == 0 {
		return out
	}
	// Everything any other record names stays out of the fallback's reach, with the fixed
	// records at their new hardware.
	busy := maps.Clone(taken)
	fixedHW := map[string]topology.Allocation{}
	for _, f := range fixes {
		fixedHW[f.podUID+"/"+f.container+"/"+f.resource] = f.hw
	}
	for _, uid := range uids {
		for _, c := range records[uid].Containers {
			k := uid + "/" + c.Name + "/" + c.Resource
			if isDisplaced[k] {
				continue
			}
			hw, ok := fixedHW[k]
			if !ok {
				var err error
				if hw, err = c.Hardware(p.shape); err != nil {
					continue
				}
			}
			for _, core := range hw.Cores {
				busy[core] = true
			}
		}
	}
	for _, d := range unresolved {
		u := topology.NewUsage(p.shape)
		cores := make([]int, 0, len(busy))
		for c := range busy {
			cores = append(cores, c)
		}
		unit, _ := topology.UnitOf(d.resource)
		if err := u.MarkCores(cores); err != nil {
			continue
		}
		fit, err := topology.BestFit.Place(u, topology.Request{Unit: unit, Count: d.count})
		if err != nil {
			// Nothing is free: the record keeps hardware that another container runs on, and
			// the pod's Allocate call is refused rather than served twice.
			continue
		}
		for _, c := range fit.Cores {
			busy[c] = true
		}
		out = append(out, recordFix{pod: podByUID(pods, d.podUID), podUID: d.podUID, container: d.container, resource: d.resource, hw: fit.Allocation, served: false})
	}
	return out
}
