package plan

import (
	"math"
	"slices"
)

// The search gives reservation slots to pods in its order, largest first, and its improvements
// free slots (a merge of two reserved nodes, an evacuated one). swap moves on-demand nodes into
// the slots left, the dearest first, all in one step (rehome); and trades: a reserved node whose
// pods an on-demand node takes for less than another on-demand node costs goes on demand, and
// that dearer node's pods take its slot.

// swapKey identifies a swap that found nothing: the states of the reserved and the on-demand
// node, and what the limits' verdicts depend on.
type swapKey struct {
	a, b uint64
	lim  [3]int
}

// onDemandPrice is what an on-demand node costs; +Inf for a type without a price (a node of
// unknown price ranks above any price).
func onDemandPrice(n *node) float64 {
	if !n.t.PriceKnown() {
		return math.Inf(1)
	}
	return *n.t.PriceUSDPerHour
}

// swap makes the trades it finds, each reserved and on-demand node in one at most, trying the
// reserved nodes whose pods cost least on demand with the dearest on-demand nodes first. It
// reports whether it made one.
func (r *run) swap() bool {
	p := r.p
	if p.rv == nil || p.opts.ReservedOnly {
		return false
	}
	var reserved, onDemand []int // indices into r.nodes
	for k, n := range r.nodes {
		switch {
		case n.launching:
		case n.res > 0:
			reserved = append(reserved, k)
		default:
			onDemand = append(onDemand, k)
		}
	}
	if len(onDemand) == 0 {
		return false
	}
	if p.rv.out == nil {
		p.rv.out, p.rv.failed = map[uint64]float64{}, map[swapKey]bool{}
	}
	// out is what a reserved node's pods cost on demand, by its state.
	out := func(a *node) float64 {
		if v, ok := p.rv.out[a.gen]; ok {
			return v
		}
		v := math.Inf(1)
		if m := r.cheapest(podsOf(a), a.allow, a.need, a.mode, math.Inf(1), 1, a.t.Devices); m != nil {
			v = *m.t.PriceUSDPerHour
		}
		p.rv.out[a.gen] = v
		return v
	}
	slices.SortStableFunc(onDemand, func(x, y int) int { return cmpFloat(onDemandPrice(r.nodes[y]), onDemandPrice(r.nodes[x])) })
	if r.rehome(onDemand) {
		return true
	}
	if len(reserved) == 0 {
		return false
	}
	slices.SortStableFunc(reserved, func(x, y int) int { return cmpFloat(out(r.nodes[x]), out(r.nodes[y])) })
	lim := r.limitState()
	budget := 4*len(reserved) + 64 // simulations of on-demand nodes' pods in a slot
	swapped := false
	taken := map[int]bool{}
	for _, ka := range reserved {
		a := r.nodes[ka]
		ca := out(a)
		if math.IsInf(ca, 1) {
			continue
		}
		for _, kb := range onDemand {
			b := r.nodes[kb]
			if onDemandPrice(b) <= ca+1e-9 {
				break
			}
			if taken[kb] || b.mode != a.mode || !b.allow.has(a.ti) || b.need[a.ti] > p.cores[a.ti] {
				continue
			}
			key := swapKey{a.gen, b.gen, lim}
			if p.rv.failed[key] {
				continue
			}
			if budget == 0 {
				return swapped
			}
			budget--
			mb := r.simulateIn(a.ti, b.mode, podsOf(b), a.res)
			var ma *node
			if mb != nil {
				ma = r.cheapest(podsOf(a), a.allow, a.need, a.mode, math.Inf(1), 1, a.t.Devices)
			}
			if mb == nil || ma == nil || *ma.t.PriceUSDPerHour >= onDemandPrice(b)-1e-9 ||
				!r.withinLimits(0, ma.t.Devices-a.t.Devices+mb.t.Devices-b.t.Devices) {
				p.rv.failed[key] = true
				continue
			}
			r.replace(ka, ma)
			r.replace(kb, mb)
			taken[kb], swapped = true, true
			break
		}
	}
	return swapped
}

// rehome moves the on-demand nodes (indices into r.nodes, dearest first) into reservations with
// room, each onto the smallest reserved type that takes its pods (reserved). It reports whether
// it moved one.
func (r *run) rehome(onDemand []int) bool {
	p := r.p
	room := false
	for k := range p.rv.list {
		room = room || r.room(k) > 0
	}
	if !room {
		return false
	}
	lim := r.limitState()
	moved := false
	for _, kb := range onDemand {
		b := r.nodes[kb]
		key := swapKey{b.gen, 0, lim}
		if p.rv.failed[key] {
			continue
		}
		m := r.reserved(podsOf(b), b.allow, b.need, b.mode, math.Inf(1), b)
		if m == nil {
			p.rv.failed[key] = true
			continue
		}
		r.replace(kb, m)
		moved = true
		lim = r.limitState()
	}
	return moved
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
