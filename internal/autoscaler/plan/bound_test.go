package plan

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// configBound is a lower bound of what new nodes of priced types must cost to take the pods: the
// value of a configuration linear program (Gilmore and Gomory's, as for cutting stock), solved by
// column generation. It shares no code with the planner.
//
// A configuration is a node type and how many pods of each group it holds. Pods the bound cannot
// tell apart form a group: same mode, and on each type the same room taken, or none when the
// type is not allowed or the pod alone does not fit on it (the topology engine decides, as for the
// oracle). The room a pod takes on a type is the cores its requests take (Shape.CoresNeeded: a
// device request every core of its devices), every core for "all devices", one device's cores for
// a request with alternatives. A configuration holds pods of one mode whose rooms add up to no
// more than the type's cores: every node that really takes the pods is such a configuration, and
// more are, so the program's value is at most that of any fleet. The program: cover each group
// with configurations, fractionally, at the least price. Its dual gives each group a price y;
// whatever y the simplex ends with, dividing it by the most any configuration is worth at those
// prices over its type's price (Farley's bound, with an exact knapsack per type and mode) makes
// it dual-feasible, so the bound holds even if the simplex stops early.
//
// Only priced types other than UltraServers are used, in opts' families; a pod no such type
// serves is left out (pass only the pods a plan puts on new priced nodes).
func configBound(pods []PodDemand, opts Options) float64 {
	types, groups := boundInstance(pods, opts)
	if len(groups) == 0 {
		return 0
	}
	lp := newMaster(types, groups)
	return lp.solve()
}

// boundType is a priced type the bound may use.
type boundType struct {
	shape *topology.Shape
	price float64
}

// boundGroup is a group of pods the bound cannot tell apart.
type boundGroup struct {
	n    int
	mode string
	room []int // per type: the cores a pod takes; -1 where it may not go
}

func boundInstance(pods []PodDemand, opts Options) ([]boundType, []boundGroup) {
	shapes, policy := nodeTypes(opts)
	var types []boundType
	for _, s := range shapes {
		if s.Type.PriceKnown() {
			types = append(types, boundType{s, *s.Type.PriceUSDPerHour})
		}
	}
	// First by what the pod asks and which types it allows, then by the rooms.
	rooms := map[string][]int{}
	byRoom := map[string]*boundGroup{}
	var order []string
	for i, d := range pods {
		raw := demandKey(d, types)
		room, ok := rooms[raw]
		if !ok {
			room = make([]int, len(types))
			for k, t := range types {
				room[k] = podRoom(pods[i:i+1], t.shape, policy)
			}
			rooms[raw] = room
		}
		if !slices.ContainsFunc(room, func(r int) bool { return r >= 0 }) {
			continue
		}
		key := fmt.Sprint(d.Mode(), room)
		g, ok := byRoom[key]
		if !ok {
			g = &boundGroup{mode: d.Mode(), room: room}
			byRoom[key] = g
			order = append(order, key)
		}
		g.n++
	}
	groups := make([]boundGroup, len(order))
	for k, key := range order {
		groups[k] = *byRoom[key]
	}
	return types, groups
}

// demandKey names what the bound reads of a pod: its mode, requests and the types it allows.
func demandKey(d PodDemand, types []boundType) string {
	var b strings.Builder
	fmt.Fprint(&b, d.Mode())
	for _, r := range d.Requests {
		fmt.Fprintf(&b, "|%s=%d", r.Resource, r.Count)
	}
	for _, r := range d.DRA {
		fmt.Fprintf(&b, "|dra=%d,%v,%v", r.Count, r.All, r.FirstAvailable)
	}
	b.WriteByte('|')
	for _, t := range types {
		if d.Allows(t.shape.Type) {
			b.WriteByte('1')
		} else {
			b.WriteByte('0')
		}
	}
	return b.String()
}

// podRoom is the room the pod (pods[0]) takes on a node of the shape, -1 when it may not go there.
func podRoom(pod []PodDemand, shape *topology.Shape, policy topology.Policy) int {
	d := pod[0]
	if !d.Allows(shape.Type) {
		return -1
	}
	alternatives := slices.ContainsFunc(d.DRA, func(r DRARequest) bool { return r.FirstAvailable })
	if !alternatives && !fitsTogether(pod, 1, shape, policy) {
		return -1
	}
	room := 0
	for _, r := range d.Requests {
		unit, err := topology.UnitOf(r.Resource)
		if err != nil {
			return -1
		}
		room += shape.CoresNeeded(topology.Request{Unit: unit, Count: r.Count})
	}
	for _, r := range d.DRA {
		switch {
		case r.FirstAvailable:
			room += shape.CoresPerDevice
		case r.All:
			room += shape.Cores()
		default:
			room += r.Count * shape.CoresPerDevice
		}
	}
	return min(room, shape.Cores())
}

// master is the configuration program, min sum price*lambda subject to covering every group,
// solved by the revised simplex with an explicit basis inverse. Its columns are configurations
// and one surplus per group.
type master struct {
	types  []boundType
	groups []boundGroup
	modes  []string
	cols   []column    // the columns in the basis, one per group row
	inv    [][]float64 // the basis inverse
	x      []float64   // the basic columns' values
	pool   []column    // configurations generated so far
}

type column struct {
	cost    float64
	a       []float64 // per group: pods of the group it holds; surplus: -1 on its row
	surplus bool
}

func newMaster(types []boundType, groups []boundGroup) *master {
	m := &master{types: types, groups: groups}
	for _, g := range groups {
		if !slices.Contains(m.modes, g.mode) {
			m.modes = append(m.modes, g.mode)
		}
	}
	n := len(groups)
	m.inv = make([][]float64, n)
	m.x = make([]float64, n)
	for i, g := range groups {
		// The start: each group on nodes of the type that holds it cheapest, alone.
		best := column{cost: math.Inf(1)}
		for k, t := range types {
			if g.room[k] < 0 {
				continue
			}
			per := min(g.n, t.shape.Cores()/g.room[k])
			if best.a == nil || t.price/float64(per) < best.cost/best.a[i] {
				best = column{cost: t.price, a: make([]float64, n)}
				best.a[i] = float64(per)
			}
		}
		m.cols = append(m.cols, best)
		m.inv[i] = make([]float64, n)
		m.inv[i][i] = 1 / best.a[i]
		m.x[i] = float64(g.n) / best.a[i]
	}
	return m
}

// duals returns y = c_B B^-1.
func (m *master) duals() []float64 {
	n := len(m.groups)
	y := make([]float64, n)
	for r, c := range m.cols {
		if c.cost == 0 {
			continue
		}
		for j := range n {
			y[j] += c.cost * m.inv[r][j]
		}
	}
	return y
}

// reduced is a column's reduced cost at the duals y.
func reduced(c column, y []float64) float64 {
	d := c.cost
	for g, a := range c.a {
		d -= a * y[g]
	}
	return d
}

// pivot brings c into the basis; false when the column is unbounded (it never is: every
// configuration costs more than nothing).
func (m *master) pivot(c column) bool {
	n := len(m.groups)
	d := make([]float64, n)
	for r := range n {
		for g, a := range c.a {
			if a != 0 {
				d[r] += m.inv[r][g] * a
			}
		}
	}
	leave, ratio := -1, math.Inf(1)
	for r := range n {
		if d[r] > 1e-9 {
			if q := m.x[r] / d[r]; q < ratio-1e-12 {
				leave, ratio = r, q
			}
		}
	}
	if leave < 0 {
		return false
	}
	p := d[leave]
	for j := range n {
		m.inv[leave][j] /= p
	}
	m.x[leave] /= p
	for r := range n {
		if r == leave || d[r] == 0 {
			continue
		}
		f := d[r]
		for j := range n {
			m.inv[r][j] -= f * m.inv[leave][j]
		}
		m.x[r] = max(0, m.x[r]-f*m.x[leave])
	}
	m.cols[leave] = c
	return true
}

// solve runs column generation and returns the best Farley bound it met. The configurations are
// priced at duals smoothed toward the best dual-feasible prices so far (Wentges' smoothing), which
// cuts the rounds the plain method spends zigzagging; where that finds no column that improves
// the program, the round prices at the current duals.
func (m *master) solve() float64 {
	const smoothing = 0.6
	n := len(m.groups)
	best := 0.0
	var center []float64
	for round := 0; round < 400; round++ {
		m.pivotPool()
		cur := m.duals()
		for g := range cur {
			cur[g] = max(0, cur[g])
		}
		added := 0
		for _, alpha := range []float64{smoothing, 0} {
			y := cur
			if center != nil && alpha > 0 {
				y = make([]float64, n)
				for g := range y {
					y[g] = alpha*center[g] + (1-alpha)*cur[g]
				}
			} else if alpha > 0 {
				continue
			}
			value := 0.0
			for g, grp := range m.groups {
				value += float64(grp.n) * y[g]
			}
			theta := 0.0
			for k, t := range m.types {
				for _, mode := range m.modes {
					worth, a := m.knapsack(k, mode, y)
					theta = max(theta, worth/t.price)
					if c := (column{cost: t.price, a: a}); reduced(c, cur) < -1e-7*t.price {
						m.pool = append(m.pool, c)
						added++
					}
				}
			}
			if theta > 0 && value/max(theta, 1) > best {
				best = value / max(theta, 1)
				center = make([]float64, n)
				for g := range y {
					center[g] = y[g] / max(theta, 1)
				}
			}
			if added > 0 {
				break
			}
		}
		if added == 0 {
			break
		}
	}
	return best
}

// pivotPool pivots on columns of the pool and surpluses while one prices out.
func (m *master) pivotPool() {
	n := len(m.groups)
	for range 20 * n {
		y := m.duals()
		entering, least := column{}, -1e-9
		for g := range n {
			if y[g] < least {
				a := make([]float64, n)
				a[g] = -1
				entering, least = column{a: a, surplus: true}, y[g]
			}
		}
		for _, c := range m.pool {
			if rc := reduced(c, y) / c.cost; rc < least {
				entering, least = c, rc
			}
		}
		if entering.a == nil || !m.pivot(entering) {
			return
		}
	}
}

// knapsack returns the most pods of the mode worth y that fit on a node of type k by room, and
// how many of each group that takes.
func (m *master) knapsack(k int, mode string, y []float64) (float64, []float64) {
	capacity := m.types[k].shape.Cores()
	type item struct {
		g, copies, room int
		worth           float64
	}
	var items []item
	for g, grp := range m.groups {
		r := grp.room[k]
		if grp.mode != mode || r < 0 || y[g] <= 0 {
			continue
		}
		// Binary splitting of the copies that may go on one node.
		left := min(grp.n, capacity/max(r, 1))
		for c := 1; left > 0; c *= 2 {
			take := min(c, left)
			items = append(items, item{g, take, take * r, float64(take) * y[g]})
			left -= take
		}
	}
	best := make([]float64, capacity+1)
	keep := make([][]bool, len(items))
	for i, it := range items {
		keep[i] = make([]bool, capacity+1)
		for c := capacity; c >= it.room; c-- {
			if v := best[c-it.room] + it.worth; v > best[c] {
				best[c], keep[i][c] = v, true
			}
		}
	}
	a := make([]float64, len(m.groups))
	c := capacity
	for i := len(items) - 1; i >= 0; i-- {
		if keep[i][c] {
			a[items[i].g] += float64(items[i].copies)
			c -= items[i].room
		}
	}
	return best[capacity], a
}

// newPricedPods returns the pods a plan puts on new nodes of priced types other than UltraServers.
func newPricedPods(plan ScaleUp, pending []PodDemand) []PodDemand {
	byKey := map[string]PodDemand{}
	for _, d := range pending {
		byKey[d.Key()] = d
	}
	var out []PodDemand
	for _, n := range plan.New() {
		if !n.InstanceType.PriceKnown() || n.InstanceType.UltraServerNodes > 0 {
			continue
		}
		for _, pl := range n.Pods {
			out = append(out, byKey[pl.Pod])
		}
	}
	return out
}
