package ledger

import (
	"slices"
)

// Preferred chooses the ids the kubelet should take for a container of size ids of resource:
// the matching allocation record's, else the valid connected set the topology engine picks
// among the available ids, else the ids that must be included and the lowest available ones.
func (l *Ledger) Preferred(q Query, resource string, available, mustInclude []string, size int) []string {
	log := q.Log.WithValues("resource", resource, "size", size)
	avail := setOf(available)
	if q.Records {
		if c, _, ok := l.match(q, resource, size); ok {
			if hw, err := c.Container.Hardware(l.shape); err == nil {
				ids := IDsOf(resource, hw)
				if allIn(ids, avail) && allIn(mustInclude, setOf(ids)) {
					log.V(5).Info("Preferring the allocation record's ids", "pod", c.Pod, "container", c.Container.Name, "ids", ids)
					return ids
				}
			}
		}
	}
	hw, err := placeAvoiding(l.shape, resource, size, l.busy(resource, avail))
	if err == nil {
		ids := IDsOf(resource, hw)
		if allIn(mustInclude, setOf(ids)) {
			log.V(5).Info("Preferring the engine's set", "ids", ids)
			return ids
		}
	} else {
		log.V(5).Info("No valid set among the available ids", "err", err)
	}
	out := slices.Clone(mustInclude)
	rest := slices.Clone(available)
	SortIDs(rest)
	for _, id := range rest {
		if len(out) < size && !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

// busy returns the cores a preferred set of resource steers away from: those of the pool's ids
// the kubelet does not offer, and all hardware known to be held, not only what the kubelet's
// pool withholds: the kubelet may not have processed the latest withdrawal yet (it admits the
// next pod right after the previous Allocate), and hardware the extender promised to pods
// waiting for admission is free in this pool but not for another pod.
func (l *Ledger) busy(resource string, avail map[string]bool) map[int]bool {
	busy := map[int]bool{}
	for _, id := range PoolIDs(l.shape, resource) {
		if !avail[id] {
			if hw, err := HardwareOf(l.shape, resource, []string{id}); err == nil {
				for _, c := range hw.Cores {
					busy[c] = true
				}
			}
		}
	}
	for _, h := range l.holdings {
		if h.Resource == resource && !h.Reserved && len(h.KubeletIDs) > 0 {
			continue // held through this pool: not in the available list anyway
		}
		for _, c := range h.Hardware.Cores {
			busy[c] = true
		}
	}
	for _, a := range l.answers {
		for _, c := range a.Hardware.Cores {
			busy[c] = true
		}
	}
	return busy
}

func setOf(ids []string) map[string]bool {
	m := map[string]bool{}
	for _, id := range ids {
		m[id] = true
	}
	return m
}

func allIn(ids []string, set map[string]bool) bool {
	for _, id := range ids {
		if !set[id] {
			return false
		}
	}
	return true
}
