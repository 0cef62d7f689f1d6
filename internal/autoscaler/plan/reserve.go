package plan

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// Reserved capacity. A new node launched into a reservation (Options.Reservations) costs nothing
// more: the search prices it at $0 while it sits in one (run.price), so open tries reservations
// before on-demand types, and evacuate, merge and downsize move pods off on-demand nodes into
// them. Among plans of one price the one that uses fewer reserved instances is better (run.worse):
// a slot left free takes a later pod. A run counts the slots it uses per reservation (run.used)
// and never plans past a reservation's Available; a reserved node that an improvement removes
// gives its slot back. A node's reservation is node.res, 1 + its index in reserves.list (0: on
// demand), so that a node of the zero value is on demand.
//
// A new node carries the capacity labels (withCapacity): kube-neuron.io/capacity-type reserved
// and kube-neuron.io/capacity-reservation-id in a reservation, capacity-type on-demand otherwise.
// A pod's nodeSelector and affinity are evaluated against them like any other label, so a pod
// that selects reserved capacity, or one reservation, goes only there, and a pod that selects
// on-demand never into a reservation. Launching nodes take no pod whose selectors name a
// capacity label: which capacity they run on is not known here.

// reservedMarker stands for a reservation id that a pod names in none of its selectors: label
// values cannot contain it, so no In matches it and no NotIn excludes it.
const reservedMarker = "\x00reserved"

// withCapacity sets the capacity labels of a new node launched into reservation id ("" on
// demand) in l, and returns l.
func withCapacity(l map[string]string, id string) map[string]string {
	if id == "" {
		l[labels.CapacityType] = labels.CapacityTypeOnDemand
		delete(l, labels.CapacityReservationID)
		return l
	}
	l[labels.CapacityType] = labels.CapacityTypeReserved
	l[labels.CapacityReservationID] = id
	return l
}

// isCapacityKey reports whether a label key is one of the capacity labels.
func isCapacityKey(k string) bool {
	return k == labels.CapacityType || k == labels.CapacityReservationID
}

// namesCapacity reports whether the pod's nodeSelector or required node affinity names a
// capacity label.
func namesCapacity(pod *corev1.Pod) bool {
	for k := range pod.Spec.NodeSelector {
		if isCapacityKey(k) {
			return true
		}
	}
	for _, term := range requiredTerms(pod) {
		for _, r := range term.MatchExpressions {
			if isCapacityKey(r.Key) {
				return true
			}
		}
	}
	return false
}

func requiredTerms(pod *corev1.Pod) []corev1.NodeSelectorTerm {
	a := pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return nil
	}
	return a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
}

// namedReservations are the reservation ids the pod's selectors name, and reservedMarker.
func namedReservations(pod *corev1.Pod) []string {
	out := []string{reservedMarker}
	if id, ok := pod.Spec.NodeSelector[labels.CapacityReservationID]; ok {
		out = append(out, id)
	}
	for _, term := range requiredTerms(pod) {
		for _, r := range term.MatchExpressions {
			if r.Key == labels.CapacityReservationID && r.Operator == corev1.NodeSelectorOpIn {
				out = append(out, r.Values...)
			}
		}
	}
	return out
}

// matchesSomeCapacity reports whether the pod's nodeSelector and required node affinity allow a
// new node with labels l on demand or in some reservation.
func matchesSomeCapacity(pod *corev1.Pod, l map[string]string) bool {
	if !namesCapacity(pod) {
		return matchesNode(pod, l)
	}
	for _, id := range append([]string{""}, namedReservations(pod)...) {
		if matchesNode(pod, withCapacity(maps.Clone(l), id)) {
			return true
		}
	}
	return false
}

// allowsIn reports whether the pod allows a new node of type t launched into reservation id (""
// on demand).
func (d PodDemand) allowsIn(t topology.InstanceType, id string) bool {
	if !d.Allows(t) {
		return false
	}
	return !namesCapacity(d.Pod) || matchesNode(d.Pod, withCapacity(NewNodeLabels(t, d.Mode()), id))
}

// reserves are the reservations the general search may launch into (not UltraServer ones), and
// which of them each pod allows.
type reserves struct {
	list []Reservation
	ti   []int // per reservation: its type's index in planner.byPrice
	// capSel: per pod, whether its selectors name a capacity label; for such pods, onDemand are
	// the types it allows on demand and in, per reservation, whether it allows it. The others
	// allow every capacity of the types they allow.
	capSel   []bool
	onDemand []typeSet
	in       [][]bool
	// swap's memos (reserve_swap.go): what a reserved node's pods cost on demand, by its state;
	// the trades that found nothing.
	out    map[uint64]float64
	failed map[swapKey]bool
}

// reserves returns the planner's reservations and which of them each pod allows, with the pods
// that only a reservation may take moved to the front of the order; nil when there is nothing to
// decide (no reservation, no pod that names a capacity label, on-demand nodes allowed).
func (p *planner) reserves() *reserves {
	rv := &reserves{capSel: make([]bool, len(p.pending))}
	for _, res := range p.opts.Reservations {
		ti, ok := p.typeIndex[res.InstanceType]
		if !ok || res.UltraServer || p.byPrice[ti].UltraServerNodes > 0 {
			continue
		}
		rv.list = append(rv.list, res)
		rv.ti = append(rv.ti, ti)
	}
	anySel := false
	for i, d := range p.pending {
		rv.capSel[i] = namesCapacity(d.Pod)
		anySel = anySel || rv.capSel[i]
	}
	if len(rv.list) == 0 && !anySel && !p.opts.ReservedOnly {
		return nil
	}
	rv.onDemand = make([]typeSet, len(p.pending))
	rv.in = make([][]bool, len(p.pending))
	for i, d := range p.pending {
		if !rv.capSel[i] {
			continue
		}
		rv.onDemand[i] = newTypeSet(len(p.byPrice))
		for ti, t := range p.byPrice {
			if p.allow[i].has(ti) && matchesNode(d.Pod, withCapacity(NewNodeLabels(t, p.mode[i]), "")) {
				rv.onDemand[i].add(ti)
			}
		}
		rv.in[i] = make([]bool, len(rv.list))
		for k, res := range rv.list {
			ti := rv.ti[k]
			rv.in[i][k] = p.allow[i].has(ti) && matchesNode(d.Pod, withCapacity(NewNodeLabels(p.byPrice[ti], p.mode[i]), res.ID))
		}
	}
	if !anySel {
		return rv
	}
	// Pods that only a reservation may take go first: a pod that may go on demand would
	// otherwise take the slot they need.
	only := func(i int) bool {
		return rv.capSel[i] && !slices.ContainsFunc(p.cands[i], func(t topology.InstanceType) bool { return rv.onDemand[i].has(p.typeIndex[t.Name]) })
	}
	slices.SortStableFunc(p.order, func(a, b int) int {
		switch oa, ob := only(a), only(b); {
		case oa && !ob:
			return -1
		case ob && !oa:
			return 1
		}
		return 0
	})
	for k, i := range p.order {
		p.rank[i] = k
	}
	return rv
}

// capacityOK reports whether pod i allows the capacity of a node of type ti: launching, on demand
// (res 0) or in reservation res-1. The type itself is allow's to say.
func (p *planner) capacityOK(i, ti, res int, launching bool) bool {
	rv := p.rv
	if rv == nil || !rv.capSel[i] {
		return launching || res > 0 || !p.opts.ReservedOnly
	}
	switch {
	case launching:
		return false
	case res == 0:
		return !p.opts.ReservedOnly && rv.onDemand[i].has(ti)
	}
	return rv.in[i][res-1]
}

// onDemandOK reports whether every one of the pods allows an on-demand node of type ti.
func (p *planner) onDemandOK(pods []int, ti int) bool {
	for _, i := range pods {
		if !p.capacityOK(i, ti, 0, false) {
			return false
		}
	}
	return true
}

// price is what a new node costs the run: nothing while it sits in a reservation, else its
// type's price; priced is false for an on-demand node of a type without a price.
func (r *run) price(n *node) float64 {
	if n.res > 0 || !n.t.PriceKnown() {
		return 0
	}
	return *n.t.PriceUSDPerHour
}

func (r *run) priced(n *node) bool { return n.res > 0 || n.t.PriceKnown() }

// room is how many more nodes reservation k takes in this run.
func (r *run) room(k int) int {
	if r.used == nil {
		return r.p.rv.list[k].Available
	}
	return r.p.rv.list[k].Available - r.used[k]
}

// reserve counts a new node that joins (d 1) or leaves (d -1) the run against its reservation.
func (r *run) reserve(n *node, d int) {
	if n.res == 0 || n.launching {
		return
	}
	if r.used == nil {
		r.used = make([]int, len(r.p.rv.list))
	}
	k := n.res - 1
	full := r.room(k) <= 0
	r.used[k] += d
	if full != (r.room(k) <= 0) {
		r.resGen++ // the reservations with room changed: merges and downsizes that failed may not now
	}
}

// slots counts the reserved nodes of the run.
func (r *run) slots() int {
	n := 0
	for _, u := range r.used {
		n += u
	}
	return n
}

// freed is how many of the nodes sit in reservation k.
func freed(k int, nodes []*node) int {
	n := 0
	for _, o := range nodes {
		if o.res == k+1 {
			n++
		}
	}
	return n
}

// openReserved launches a node for pod i into a reservation with room that it allows, within the
// limits: of the reservations' types the one whose node (with pack, filled with later pods as
// open fills) takes the most value, among equals the cheapest on demand. It reports whether it
// launched one.
func (r *run) openReserved(i int, pack bool) bool {
	p := r.p
	if p.rv == nil {
		return false
	}
	var best *node
	bestV := -1.0
	tried := map[int]bool{}
	for k := range p.rv.list {
		ti := p.rv.ti[k]
		t := p.byPrice[ti]
		if tried[ti] || r.room(k) <= 0 || !p.famOK[ti] || !p.allow[i].has(ti) || !p.capacityOK(i, ti, k+1, false) ||
			!r.withinLimits(1, t.Devices) || !p.serves(ti, p.req[i]) {
			continue
		}
		tried[ti] = true
		n := r.fill(t, i, pack, k+1)
		if n == nil {
			continue
		}
		v := 0.0
		for _, pl := range n.pods {
			v += p.value[pl.pod] + 1e-6 // a pod of unknown value still counts
		}
		if v > bestV+1e-9 || v > bestV-1e-9 && ti < best.ti {
			best, bestV = n, v
		}
	}
	if best == nil {
		return false
	}
	r.adopt(best)
	r.put(best)
	return true
}

// onDemandAllowed reports whether pod i may go on an on-demand new node of some type at all.
func (r *run) onDemandAllowed(i int) bool {
	p := r.p
	if p.opts.ReservedOnly {
		return false
	}
	if p.rv == nil || !p.rv.capSel[i] {
		return true
	}
	for _, t := range p.cands[i] {
		if p.rv.onDemand[i].has(p.typeIndex[t.Name]) {
			return true
		}
	}
	return false
}

// mayReserve reports whether a reservation with room (counting the slots a and b give back) may
// take the pods of a and b on one node that is better than the two: cheaper than bound, or as
// cheap and in fewer reservation slots.
func (r *run) mayReserve(a, b *node, bound float64) bool {
	p := r.p
	if p.rv == nil || bound <= 1e-9 && (a.res == 0 || b.res == 0) {
		return false
	}
	for k, ti := range p.rv.ti {
		if r.room(k)+freed(k, []*node{a, b}) > 0 && a.allow.has(ti) && b.allow.has(ti) && a.need[ti]+b.need[ti] <= p.cores[ti] {
			return true
		}
	}
	return false
}

// reserved returns a node in a reservation with room (counting the slots the replaced nodes give
// back) that takes all the pods and is better than the replaced nodes: cheaper than bound, or as
// cheap and in fewer reservation slots; nil when there is none. allow and need are what the pods
// allow and take together, as for cheapest. Smaller types are tried first.
func (r *run) reserved(pods []int, allow typeSet, need []int, mode string, bound float64, replaced ...*node) *node {
	p := r.p
	if p.rv == nil {
		return nil
	}
	slots, devices := 0, 0
	for _, o := range replaced {
		if o.res > 0 {
			slots++
		}
		devices += o.t.Devices
	}
	if bound <= 1e-9 && slots < 2 {
		return nil
	}
	order := make([]int, len(p.rv.list))
	for k := range order {
		order[k] = k
	}
	slices.SortStableFunc(order, func(a, b int) int { return p.rv.ti[a] - p.rv.ti[b] })
	for _, k := range order {
		ti := p.rv.ti[k]
		t := p.byPrice[ti]
		if r.room(k)+freed(k, replaced) <= 0 || !p.famOK[ti] || !allow.has(ti) || need[ti] > p.cores[ti] ||
			!r.withinLimits(1-len(replaced), t.Devices-devices) {
			continue
		}
		if n := r.simulateIn(ti, mode, pods, k+1); n != nil {
			return n
		}
	}
	return nil
}

// simulateIn places pods on a fresh node of type ti in reservation res-1, largest first; nil when
// they do not all fit or one does not allow it.
func (r *run) simulateIn(ti int, mode string, pods []int, res int) *node {
	p := r.p
	if p.cores[ti] == 0 {
		return nil
	}
	pods = slices.Clone(pods)
	p.sortPods(pods)
	n := p.newNode(ti, mode)
	n.res = res
	for _, i := range pods {
		if !r.compatible(i, n) || !p.fitOn(n, p.req[i]).ok {
			return nil
		}
		p.add(n, i)
	}
	return n
}

// reservationID is the id of the reservation node n sits in; "" on demand.
func (p *planner) reservationID(n *node) string {
	if n.res == 0 {
		return ""
	}
	return p.rv.list[n.res-1].ID
}

// reservationMessage says why no new node takes pod i: no reservation it allows has room, and it
// may not go on demand. A limit that kept a reservation's node from launching says so instead.
func (r *run) reservationMessage(i int) string {
	p := r.p
	var names []string
	if p.rv != nil {
		for k, res := range p.rv.list {
			ti := p.rv.ti[k]
			if !slices.ContainsFunc(p.cands[i], func(t topology.InstanceType) bool { return t.Name == res.InstanceType }) {
				continue
			}
			names = append(names, reservationString(res, r.room(k)))
			if r.room(k) > 0 && p.capacityOK(i, ti, k+1, false) {
				return r.limitMessage(i) // it had room and the pod allows it: a limit kept it out
			}
		}
	}
	return capacityMessage(p.pending[i], p.opts.ReservedOnly, names, p.cands[i])
}

// reservationString is "cr-1 (trn1.32xlarge, 2 instances left)"; more is added in the brackets.
func reservationString(res Reservation, left int, more ...string) string {
	return fmt.Sprintf("%s (%s)", res.ID, strings.Join(append([]string{res.InstanceType, plural(max(left, 0), "instance") + " left"}, more...), ", "))
}

// capacityMessage explains a pod that no reservation takes and that may not go on demand:
// reservedOnly (the autoscaler's on-demand fallback is off), or its own selectors. names are the
// reservations of the types that can serve it, with the instances they have left.
func capacityMessage(d PodDemand, reservedOnly bool, names []string, cands []topology.InstanceType) string {
	var typeNames []string
	for _, t := range cands {
		typeNames = append(typeNames, t.Name)
	}
	res := "no reservation is of an instance type that can serve the pod (" + strings.Join(typeNames, ", ") + ")"
	if len(names) > 0 {
		res = "no reservation the pod allows has room: the reservations of the types it allows are " + strings.Join(names, ", ")
	}
	if reservedOnly {
		return res + "; on-demand fallback is off (autoscaler.onDemandFallback: false, flag --on-demand-fallback=false), so the autoscaler launches only into reservations. " +
			"Add or extend a reservation of one of these types, allow on-demand fallback, or wait for reserved nodes to free up"
	}
	return res + "; the pod's " + constraintNames(d) + " allow" + pluralS(len(constraintList(d)) == 1) + " only reserved capacity (" +
		labels.CapacityType + "=" + labels.CapacityTypeReserved + " or a " + labels.CapacityReservationID + "). " +
		"Add or extend a reservation of one of these types, or allow on-demand capacity in the pod's " + constraintNames(d)
}

// UltraServer reservations (Reservation.UltraServer, or a reservation of an UltraServer type)
// take whole UltraServers: one takes UltraServerNodes of a reservation's Available instances.

// ultraServerReservation reports whether the unit planner launches into res.
func ultraServerReservation(res Reservation, cat *topology.Catalog) bool {
	t, ok := cat.Lookup(res.InstanceType)
	return res.UltraServer || ok && t.UltraServerNodes > 0
}

// capacityOK reports whether pod i allows the capacity of unit un: a launching unit only when
// its selectors name no capacity label (its capacity is not known here).
func (up *unitPlanner) capacityOK(i int, un *unit) bool {
	d := up.pending[i]
	if un.launching {
		return !namesCapacity(d.Pod)
	}
	return d.allowsIn(un.t, un.res)
}

// placeReserved launches a unit for pod i into an UltraServer reservation with room for a whole
// UltraServer that the pod allows, of the cheapest type (on demand) that takes it. It reports
// whether it launched one, or a limit blocked the pod.
func (up *unitPlanner) placeReserved(i int, group string, types []topology.InstanceType) bool {
	d := up.pending[i]
	for _, t := range types {
		if !d.Allows(t) || up.sim.shape(t) == nil || !up.fit(topology.NewUsage(up.sim.shape(t)), i).ok {
			continue
		}
		for _, res := range up.opts.Reservations {
			if res.InstanceType != t.Name || !ultraServerReservation(res, up.opts.Catalog) ||
				res.Available-up.used[res.ID] < t.UltraServerNodes || !d.allowsIn(t, res.ID) {
				continue
			}
			up.launch(i, t, group, res.ID)
			return true
		}
	}
	return false
}

// reservationMessage says why no unit takes pod i: no UltraServer reservation it allows has room
// for a whole UltraServer, and it may not go on demand.
func (up *unitPlanner) reservationMessage(i int, types []topology.InstanceType) string {
	d := up.pending[i]
	var names []string
	var serving []topology.InstanceType
	for _, t := range types {
		if !d.Allows(t) || up.sim.shape(t) == nil || !up.fit(topology.NewUsage(up.sim.shape(t)), i).ok {
			continue
		}
		serving = append(serving, t)
		for _, res := range up.opts.Reservations {
			if res.InstanceType == t.Name && ultraServerReservation(res, up.opts.Catalog) {
				names = append(names, reservationString(res, res.Available-up.used[res.ID], fmt.Sprintf("an UltraServer takes %d", t.UltraServerNodes)))
			}
		}
	}
	return "the pod needs an UltraServer node: " + capacityMessage(d, up.opts.ReservedOnly, names, serving)
}
