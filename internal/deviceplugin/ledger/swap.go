package ledger

import (
	"maps"
	"slices"

	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// displacedEntry is a container entry of a pod the kubelet has not admitted whose record says
// served: Allocate matched it to a call that was for another pod (by, the fix of that pod's
// record), and that pod now runs on its hardware.
type displacedEntry struct {
	key   ContainerKey
	count int
	by    Fix
}

// swap is the working state of displaced.
type swap struct {
	r      *refresh
	served []Fix // the fixes of admitted containers' records
	// taken are the cores of admitted containers, and of hardware given out here.
	taken map[int]bool
}

// displaced returns the fixes that give each displaced record entry hardware nobody got. The
// admitted holdings and their fixes (served, with the hardware each got) are r's so far; the
// records are the pods' records before the fixes.
//
// A displaced entry takes the old hardware of the entry whose container got its hardware. When
// the kubelet admitted several pods in another order than their records were matched, that old
// hardware may have gone to another admitted container too, whose own old hardware is then the
// next candidate, and so on: the chain ends at hardware no admitted container got, which the
// extender still counts as used (it was a record's), so no new pod can have been placed there.
// A chain that breaks (hardware that only overlaps, a container served from the kubelet's ids
// without a record) falls back to a free set the topology engine chooses.
func (r *refresh) displaced() []Fix {
	s := &swap{r: r, taken: map[int]bool{}}
	for _, f := range r.fixes {
		if f.Served {
			s.served = append(s.served, f)
		}
	}
	found := s.find()
	if len(found) == 0 {
		return nil
	}
	for _, h := range r.holdings {
		for _, c := range h.Hardware.Cores {
			s.taken[c] = true
		}
	}
	var out []Fix
	var unresolved []displacedEntry
	for _, d := range found {
		hw, ok := s.chainEnd(d.by)
		if !ok {
			unresolved = append(unresolved, d)
			continue
		}
		for _, c := range hw.Cores {
			s.taken[c] = true
		}
		out = append(out, Fix{Pod: r.podKeyOf(d.key.UID), Key: d.key, Hardware: hw})
	}
	if len(unresolved) > 0 {
		out = append(out, s.fallback(unresolved, found)...)
	}
	return out
}

// find returns the displaced entries: entries of other pods, served, not held by the kubelet,
// that name the hardware an admitted container's record is fixed to.
func (s *swap) find() []displacedEntry {
	r := s.r
	var found []displacedEntry
	isDisplaced := map[ContainerKey]bool{}
	for _, f := range s.served {
		for _, uid := range r.uids {
			if uid == f.Key.UID {
				continue
			}
			for _, c := range r.records[uid].Containers {
				k := ContainerKey{UID: uid, Container: c.Name, Resource: c.Resource}
				if c.Resource != f.Key.Resource || !c.Served || r.covered[k] || isDisplaced[k] || !SameHardware(r.l.shape, c, f.Hardware) {
					continue
				}
				isDisplaced[k] = true
				found = append(found, displacedEntry{key: k, count: c.Count(), by: f})
			}
		}
	}
	return found
}

// oldHardware is what the record of a fixed entry named before the fix.
func (s *swap) oldHardware(f Fix) (topology.Allocation, bool) {
	c := s.r.entry(f.Key)
	if c == nil {
		return topology.Allocation{}, false
	}
	hw, err := c.Hardware(s.r.l.shape)
	return hw, err == nil
}

// chainEnd follows the chain of old hardware from f to hardware no admitted container got.
func (s *swap) chainEnd(f Fix) (topology.Allocation, bool) {
	seen := map[ContainerKey]bool{f.Key: true}
	hw, ok := s.oldHardware(f)
	for ok {
		next := slices.IndexFunc(s.served, func(g Fix) bool { return !seen[g.Key] && hw.Overlaps(g.Hardware) })
		if next < 0 {
			return hw, !slices.ContainsFunc(hw.Cores, func(c int) bool { return s.taken[c] })
		}
		g := s.served[next]
		if !slices.Equal(g.Hardware.Cores, hw.Cores) {
			return topology.Allocation{}, false
		}
		seen[g.Key] = true
		hw, ok = s.oldHardware(g)
	}
	return topology.Allocation{}, false
}

// fallback gives the unresolved entries free sets the topology engine chooses. Everything any
// other record names stays out of its reach, with the fixed records at their new hardware.
func (s *swap) fallback(unresolved, found []displacedEntry) []Fix {
	r := s.r
	isDisplaced := map[ContainerKey]bool{}
	for _, d := range found {
		isDisplaced[d.key] = true
	}
	busy := maps.Clone(s.taken)
	fixedHW := map[ContainerKey]topology.Allocation{}
	for _, f := range r.fixes {
		fixedHW[f.Key] = f.Hardware
	}
	for _, uid := range r.uids {
		for _, c := range r.records[uid].Containers {
			k := ContainerKey{UID: uid, Container: c.Name, Resource: c.Resource}
			if isDisplaced[k] {
				continue
			}
			hw, ok := fixedHW[k]
			if !ok {
				var err error
				if hw, err = c.Hardware(r.l.shape); err != nil {
					continue
				}
			}
			for _, core := range hw.Cores {
				busy[core] = true
			}
		}
	}
	var out []Fix
	for _, d := range unresolved {
		hw, err := placeAvoiding(r.l.shape, d.key.Resource, d.count, busy)
		if err != nil {
			// Nothing is free: the record keeps hardware that another container runs on, and
			// the pod's Allocate call is refused rather than served twice.
			continue
		}
		for _, c := range hw.Cores {
			busy[c] = true
		}
		out = append(out, Fix{Pod: r.podKeyOf(d.key.UID), Key: d.key, Hardware: hw})
	}
	return out
}
