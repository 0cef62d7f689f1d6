package plan

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/testkit"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// checkReservations checks what every plan must satisfy about reservations: a reserved node is
// of its reservation's type, a reservation takes no more new nodes than its Available, an
// UltraServer reservation only whole UltraServers, under ReservedOnly every new node is reserved,
// and each node's capacity labels say where it launches.
func checkReservations(t *testing.T, opts Options, plan ScaleUp) {
	t.Helper()
	byID := map[string]Reservation{}
	for _, res := range opts.Reservations {
		byID[res.ID] = res
	}
	taken := map[string]int{}
	units := map[string]map[string]int{} // reservation -> UltraServer -> its nodes in it
	size := map[string]int{}             // UltraServer -> its nodes
	for k, n := range plan.Nodes {
		l := n.Labels()
		if n.Launching {
			if n.Reservation != "" {
				t.Errorf("launching node %s names reservation %s", n.Name, n.Reservation)
			}
			continue
		}
		if n.Reservation == "" {
			if opts.ReservedOnly {
				t.Errorf("new node %d (%s) is on demand under ReservedOnly", k, n.InstanceType.Name)
			}
			if l[labels.CapacityType] != labels.CapacityTypeOnDemand || l[labels.CapacityReservationID] != "" {
				t.Errorf("on-demand node %d has labels %v", k, l)
			}
			continue
		}
		res, ok := byID[n.Reservation]
		switch {
		case !ok:
			t.Errorf("node %d names reservation %s, which is not in the options", k, n.Reservation)
		case res.InstanceType != n.InstanceType.Name:
			t.Errorf("node %d is a %s in reservation %s of %s", k, n.InstanceType.Name, res.ID, res.InstanceType)
		case res.UltraServer != (n.UltraServer != ""):
			t.Errorf("node %d (UltraServer %q) is in reservation %s (UltraServer %v)", k, n.UltraServer, res.ID, res.UltraServer)
		}
		if l[labels.CapacityType] != labels.CapacityTypeReserved || l[labels.CapacityReservationID] != n.Reservation {
			t.Errorf("node %d in reservation %s has labels %v", k, n.Reservation, l)
		}
		taken[n.Reservation]++
		if n.UltraServer != "" {
			if units[n.Reservation] == nil {
				units[n.Reservation] = map[string]int{}
			}
			units[n.Reservation][n.UltraServer]++
			size[n.UltraServer] = n.InstanceType.UltraServerNodes
		}
	}
	for id, n := range taken {
		if n > byID[id].Available {
			t.Errorf("reservation %s takes %d new nodes, more than its %d available", id, n, byID[id].Available)
		}
	}
	for id, us := range units {
		for u, n := range us {
			if n != size[u] {
				t.Errorf("UltraServer %s has %d nodes in reservation %s, want all its %d", u, n, id, size[u])
			}
		}
	}
}

// reservedPlans are what a test expects of the new nodes: type, reservation and pods.
func reservedPlans(s ScaleUp) []string {
	var out []string
	for _, n := range s.New() {
		p := planned{typ: n.InstanceType.Name}
		for _, pl := range n.Pods {
			p.pods = append(p.pods, strings.TrimPrefix(pl.Pod, "default/"))
		}
		out = append(out, fmt.Sprintf("%s@%s%v", p.typ, n.Reservation, p.pods))
	}
	return out
}

func TestPlanReservations(t *testing.T) {
	trn1 := func(name string, n int) *testkit.PodWrapper {
		return testPod(name).Neuron(int64(n)).Selector(labels.InstanceFamily, "trn1")
	}
	res := func(id, typ string, n int) Reservation { return Reservation{ID: id, InstanceType: typ, Available: n} }
	for _, tc := range []struct {
		name     string
		pending  []PodDemand
		opts     Options
		want     []string // reservedPlans
		cost     float64
		reserved int
		messages map[string]string // pod -> message substring
		warnings []string          // pods with NotTriggerScaleUp
	}{
		{
			name:    "a reservation comes first, and costs nothing",
			pending: []PodDemand{demand(trn1("a", 8))},
			opts:    Options{Reservations: []Reservation{res("cr-a", "trn1.32xlarge", 1)}},
			want:    []string{"trn1.32xlarge@cr-a[a]"}, reserved: 1,
			messages: map[string]string{"a": "pod triggered scale-up: a new trn1.32xlarge node in reservation cr-a (reserved, already paid)"},
		},
		{
			name:    "a reserved trn1.32xlarge before an on-demand inf1.xlarge",
			pending: []PodDemand{demand(testPod("small").Neuron(1))},
			opts:    Options{Reservations: []Reservation{res("cr-a", "trn1.32xlarge", 1)}},
			want:    []string{"trn1.32xlarge@cr-a[small]"}, reserved: 1,
		},
		{
			name:    "pods share a reserved node: one slot, not four",
			pending: []PodDemand{demand(trn1("a", 4)), demand(trn1("b", 4)), demand(trn1("c", 4)), demand(trn1("d", 4))},
			opts:    Options{Reservations: []Reservation{res("cr-a", "trn1.32xlarge", 4)}},
			want:    []string{"trn1.32xlarge@cr-a[a b c d]"}, reserved: 1,
			messages: map[string]string{"a": "in reservation cr-a (reserved, already paid), together with 3 other pending pods"},
		},
		{
			name:    "never past Available: the third pod goes on demand",
			pending: []PodDemand{demand(trn1("a", 16)), demand(trn1("b", 16)), demand(trn1("c", 16))},
			opts:    Options{Reservations: []Reservation{res("cr-a", "trn1.32xlarge", 2)}},
			want:    []string{"trn1.32xlarge@cr-a[a]", "trn1.32xlarge@cr-a[b]", "trn1.32xlarge@[c]"}, cost: 21.5, reserved: 2,
			messages: map[string]string{"c": "a new trn1.32xlarge node ($21.5/h)"},
		},
		{
			name:    "reservations of one type add up, each node names its own",
			pending: []PodDemand{demand(trn1("a", 16)), demand(trn1("b", 16)), demand(trn1("c", 16))},
			opts:    Options{Reservations: []Reservation{res("cr-a", "trn1.32xlarge", 1), res("cr-b", "trn1.32xlarge", 1)}},
			want:    []string{"trn1.32xlarge@cr-a[a]", "trn1.32xlarge@cr-b[b]", "trn1.32xlarge@[c]"}, cost: 21.5, reserved: 2,
		},
		{
			name:    "on-demand fallback off: the pod no reservation takes is refused",
			pending: []PodDemand{demand(trn1("a", 16)), demand(trn1("b", 16)), demand(trn1("c", 16))},
			opts:    Options{Reservations: []Reservation{res("cr-a", "trn1.32xlarge", 2), res("cr-x", "inf1.xlarge", 3)}, ReservedOnly: true},
			want:    []string{"trn1.32xlarge@cr-a[a]", "trn1.32xlarge@cr-a[b]"}, reserved: 2,
			warnings: []string{"c"},
			messages: map[string]string{"c": "no reservation the pod allows has room: the reservations of the types it allows are cr-a (trn1.32xlarge, 0 instances left); " +
				"on-demand fallback is off (autoscaler.onDemandFallback: false, flag --on-demand-fallback=false)"},
		},
		{
			name:     "on-demand fallback off and no reservation of a type the pod allows",
			pending:  []PodDemand{demand(trn1("a", 16))},
			opts:     Options{Reservations: []Reservation{res("cr-x", "inf1.xlarge", 3)}, ReservedOnly: true},
			warnings: []string{"a"},
			messages: map[string]string{"a": "no reservation is of an instance type that can serve the pod (trn1.32xlarge); on-demand fallback is off"},
		},
		{
			name:     "on-demand fallback off and no reservations at all",
			pending:  []PodDemand{demand(testPod("a").Neuron(1))},
			opts:     Options{ReservedOnly: true},
			warnings: []string{"a"},
			messages: map[string]string{"a": "--on-demand-fallback=false"},
		},
		{
			name:    "a pod that selects reserved capacity goes only to a reservation",
			pending: []PodDemand{demand(testPod("r").Neuron(1).Selector(labels.CapacityType, labels.CapacityTypeReserved)), demand(testPod("any").Neuron(1))},
			opts:    Options{Reservations: []Reservation{res("cr-a", "trn1.2xlarge", 1)}},
			want:    []string{"trn1.2xlarge@cr-a[r]", "inf1.xlarge@[any]"}, cost: 0.228, reserved: 1,
		},
		{
			name:     "a pod that selects reserved capacity, and no reservation has room",
			pending:  []PodDemand{demand(trn1("r", 16).Selector(labels.CapacityType, labels.CapacityTypeReserved))},
			opts:     Options{Reservations: []Reservation{res("cr-a", "trn1.32xlarge", 0)}},
			warnings: []string{"r"},
			messages: map[string]string{"r": "no reservation the pod allows has room: the reservations of the types it allows are cr-a (trn1.32xlarge, 0 instances left); " +
				"the pod's nodeSelector allows only reserved capacity (kube-neuron.io/capacity-type=reserved or a kube-neuron.io/capacity-reservation-id)"},
		},
		{
			name:    "a pod that selects on-demand capacity never goes into a reservation",
			pending: []PodDemand{demand(trn1("od", 16).Selector(labels.CapacityType, labels.CapacityTypeOnDemand))},
			opts:    Options{Reservations: []Reservation{res("cr-a", "trn1.32xlarge", 1)}},
			want:    []string{"trn1.32xlarge@[od]"}, cost: 21.5,
		},
		{
			name: "a pod that selects one reservation goes into it",
			pending: []PodDemand{demand(trn1("b", 16).Affinity(testkit.Term(testkit.Expr(labels.CapacityReservationID, "In", "cr-b")))),
				demand(trn1("a", 16))},
			opts: Options{Reservations: []Reservation{res("cr-a", "trn1.32xlarge", 1), res("cr-b", "trn1.32xlarge", 1)}},
			want: []string{"trn1.32xlarge@cr-b[b]", "trn1.32xlarge@cr-a[a]"}, reserved: 2,
		},
		{
			name:    "a reserved node of a type without a price costs nothing and is not of unknown price",
			pending: []PodDemand{demand(testPod("a").Neuron(16).Selector(labels.InstanceType, "trn2.48xlarge"))},
			opts:    Options{Reservations: []Reservation{res("cr-t", "trn2.48xlarge", 1)}},
			want:    []string{"trn2.48xlarge@cr-t[a]"}, reserved: 1,
		},
		{
			name:    "the families still hold: a reservation outside them is not used",
			pending: []PodDemand{demand(testPod("a").Neuron(1))},
			opts:    Options{Reservations: []Reservation{res("cr-a", "trn1.32xlarge", 1)}, Families: []string{"inf1"}},
			want:    []string{"inf1.xlarge@[a]"}, cost: 0.228,
		},
		{
			name:    "reserved nodes count against the node limit",
			pending: []PodDemand{demand(trn1("a", 16)), demand(trn1("b", 16))},
			opts:    Options{Reservations: []Reservation{res("cr-a", "trn1.32xlarge", 2)}, MaxNodes: 1, ReservedOnly: true},
			want:    []string{"trn1.32xlarge@cr-a[a]"}, reserved: 1,
			warnings: []string{"b"},
			messages: map[string]string{"b": "the limit of 1 Neuron node is reached"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan, decisions := Plan(tc.pending, nil, tc.opts)
			checkPlan(t, tc.pending, nil, tc.opts, plan, decisions)
			if got := reservedPlans(plan); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("new nodes %v, want %v", got, tc.want)
			}
			if plan.CostUSDPerHour != tc.cost || plan.ReservedNodes != tc.reserved {
				t.Errorf("cost %v with %d reserved nodes, want %v and %d", plan.CostUSDPerHour, plan.ReservedNodes, tc.cost, tc.reserved)
			}
			var warned []string
			for i, d := range decisions {
				name := strings.TrimPrefix(d.Pod, "default/")
				if d.Warning() {
					warned = append(warned, name)
				}
				if want, ok := tc.messages[name]; ok && !strings.Contains(d.Message, want) {
					t.Errorf("pod %s: message %q, want it to contain %q", tc.pending[i].Key(), d.Message, want)
				}
			}
			if fmt.Sprint(warned) != fmt.Sprint(tc.warnings) && !(len(warned) == 0 && len(tc.warnings) == 0) {
				t.Errorf("refused %v, want %v", warned, tc.warnings)
			}
		})
	}
}

// TestPlanReservationsImprove: slots that the improvements free are used again: pods the search
// put on on-demand nodes move into a reservation when one has room, two reserved nodes whose
// pods fit on one become one, and a slot goes to the node that would cost most on demand.
func TestPlanReservationsImprove(t *testing.T) {
	// Three pods, two slots: the 16-device pod fills one reserved node, the two 8-device pods
	// share the other.
	pending := []PodDemand{demand(testPod("big").Neuron(16).Selector(labels.InstanceFamily, "trn1")),
		demand(testPod("a").Neuron(8).Selector(labels.InstanceFamily, "trn1")), demand(testPod("b").Neuron(8).Selector(labels.InstanceFamily, "trn1"))}
	opts := Options{Reservations: []Reservation{{ID: "cr-a", InstanceType: "trn1.32xlarge", Available: 2}}}
	plan, decisions := Plan(pending, nil, opts)
	checkPlan(t, pending, nil, opts, plan, decisions)
	if plan.ReservedNodes != 2 || plan.CostUSDPerHour != 0 {
		t.Errorf("%v: %d reserved nodes for $%v/h, want 2 for nothing", reservedPlans(plan), plan.ReservedNodes, plan.CostUSDPerHour)
	}

	// A run that put each pod on a reserved node of its own gives slots back by merging.
	p := newPlanner([]PodDemand{demand(testPod("x").Neuron(4).Selector(labels.InstanceFamily, "trn1")), demand(testPod("y").Neuron(4).Selector(labels.InstanceFamily, "trn1"))},
		nil, Options{Catalog: defaultCatalog, Reservations: []Reservation{{ID: "cr-a", InstanceType: "trn1.32xlarge", Available: 2}}})
	r := p.run(false)
	if r.slots() != 2 {
		t.Fatalf("one node per pod: %d reserved nodes, want 2", r.slots())
	}
	if !r.merge() || r.slots() != 1 || len(r.nodes) != 1 || r.nodes[0].res != 1 {
		t.Errorf("after a merge: %d reserved nodes of %d; want the two merged into one reserved node", r.slots(), len(r.nodes))
	}
	if r.room(0) != 1 {
		t.Errorf("the merge left %d slots of 2, want 1", r.room(0))
	}

	// An on-demand node moves into a reservation whose slot an improvement freed.
	p = newPlanner([]PodDemand{demand(testPod("x").Neuron(4).Selector(labels.InstanceFamily, "trn1"))},
		nil, Options{Catalog: defaultCatalog, Reservations: []Reservation{{ID: "cr-a", InstanceType: "trn1.32xlarge", Available: 1}}})
	r = &run{p: p, at: make([]*node, 1), prior: make([]bool, 1), blocked: make([]string, 1), nodesCap: -1, devCap: -1}
	n := r.simulate(p.byPrice[p.typeIndex["trn1.32xlarge"]], labels.AllocationModeDevicePlugin, []int{0})
	r.adopt(n)
	r.put(n)
	if !r.swap() || r.slots() != 1 || r.nodes[0].res != 1 {
		t.Errorf("swap: %d reserved nodes, node in reservation %d; want the on-demand node moved into the reservation", r.slots(), r.nodes[0].res)
	}

	// The search gives the slot to the pod it places first; a pod whose on-demand node would
	// cost more takes it in a trade.
	pending = []PodDemand{demand(testPod("x").Neuron(16)), demand(testPod("y").Neuron(16).Selector(labels.InstanceFamily, "trn1"))}
	opts = Options{Reservations: []Reservation{{ID: "cr-a", InstanceType: "trn1.32xlarge", Available: 1}}}
	plan, decisions = Plan(pending, nil, opts)
	checkPlan(t, pending, nil, opts, plan, decisions)
	if got := reservedPlans(plan); fmt.Sprint(got) != "[inf1.24xlarge@[x] trn1.32xlarge@cr-a[y]]" || plan.CostUSDPerHour != 4.721 {
		t.Errorf("%v for $%v/h; want y in the reservation and x on an inf1.24xlarge ($4.721/h)", got, plan.CostUSDPerHour)
	}
}

// TestCheckCapacitySelectors: a pod that selects a capacity label is not refused for it: some
// new node carries each (in a reservation, or on demand).
func TestCheckCapacitySelectors(t *testing.T) {
	for _, w := range []*testkit.PodWrapper{
		testPod("reserved").Neuron(1).Selector(labels.CapacityType, labels.CapacityTypeReserved),
		testPod("on-demand").Neuron(1).Selector(labels.CapacityType, labels.CapacityTypeOnDemand),
		testPod("id").Neuron(1).Selector(labels.CapacityReservationID, "cr-0123"),
		testPod("affinity").Neuron(1).Affinity(testkit.Term(testkit.Expr(labels.CapacityReservationID, "Exists"))),
	} {
		if pr := Check(demand(w), allDaemonSets); len(pr) > 0 {
			t.Errorf("%s: %v", w.Obj().Name, messages(pr))
		}
	}
	if pr := Check(demand(testPod("spot").Neuron(1).Selector(labels.CapacityType, "spot")), allDaemonSets); len(pr) == 0 {
		t.Errorf("a pod that selects spot capacity passed Check: no new node is spot")
	}
}

// TestPlanUltraServerReservations: an UltraServer reservation takes whole UltraServers, for
// nothing, and never more than it has.
func TestPlanUltraServerReservations(t *testing.T) {
	us := func(id string, n int) Reservation {
		return Reservation{ID: id, InstanceType: "trn2u.48xlarge", Available: n, UltraServer: true}
	}
	t.Run("one UltraServer into the reservation", func(t *testing.T) {
		pending := us4Pods(t, 4)
		opts := Options{Reservations: []Reservation{us("cr-us", 4)}}
		plan, decisions := Plan(pending, nil, opts)
		checkPlan(t, pending, nil, opts, plan, decisions)
		if plan.ReservedNodes != 4 || len(plan.New()) != 4 || plan.New()[0].Reservation != "cr-us" {
			t.Errorf("%v: %d reserved nodes, want the UltraServer's 4 in cr-us", reservedPlans(plan), plan.ReservedNodes)
		}
		if !strings.Contains(decisions[0].Message, "in reservation cr-us: reserved, already paid") {
			t.Errorf("message %q", decisions[0].Message)
		}
	})
	t.Run("room for less than an UltraServer: on demand", func(t *testing.T) {
		pending := us4Pods(t, 4)
		opts := Options{Reservations: []Reservation{us("cr-us", 3)}}
		plan, decisions := Plan(pending, nil, opts)
		checkPlan(t, pending, nil, opts, plan, decisions)
		if plan.ReservedNodes != 0 || len(plan.New()) != 4 {
			t.Errorf("%v: %d reserved nodes, want an on-demand UltraServer", reservedPlans(plan), plan.ReservedNodes)
		}
	})
	spec := seedTemplate(t, "us-4-node-config.yaml")
	spec.Devices.Config = nil
	t.Run("two UltraServers, room for one: the other on demand", func(t *testing.T) {
		pending := claimPods("solo", 5, spec)
		opts := Options{Reservations: []Reservation{us("cr-us", 7)}}
		plan, decisions := Plan(pending, nil, opts)
		checkPlan(t, pending, nil, opts, plan, decisions)
		if plan.ReservedNodes != 4 || len(plan.New()) != 8 {
			t.Errorf("%v: %d reserved nodes of %d, want 4 of 8", reservedPlans(plan), plan.ReservedNodes, len(plan.New()))
		}
	})
	t.Run("on-demand fallback off: the second UltraServer is refused", func(t *testing.T) {
		pending := claimPods("solo", 5, spec)
		opts := Options{Reservations: []Reservation{us("cr-us", 7)}, ReservedOnly: true}
		plan, decisions := Plan(pending, nil, opts)
		checkPlan(t, pending, nil, opts, plan, decisions)
		if plan.ReservedNodes != 4 || len(plan.New()) != 4 || !decisions[4].Warning() ||
			!strings.Contains(decisions[4].Message, "cr-us (trn2u.48xlarge, 3 instances left, an UltraServer takes 4); on-demand fallback is off") {
			t.Errorf("%v: %d reserved nodes; last pod: %s", reservedPlans(plan), plan.ReservedNodes, decisions[4].Message)
		}
	})
	t.Run("on-demand fallback off and no UltraServer reservation", func(t *testing.T) {
		pending := us4Pods(t, 4)
		opts := Options{Reservations: []Reservation{{ID: "cr-a", InstanceType: "trn1.32xlarge", Available: 4}}, ReservedOnly: true}
		plan, decisions := Plan(pending, nil, opts)
		checkPlan(t, pending, nil, opts, plan, decisions)
		if len(plan.New()) != 0 || !decisions[0].Warning() || !strings.Contains(decisions[0].Message, "the pod needs an UltraServer node: no reservation is of an instance type that can serve the pod (trn2u.48xlarge); on-demand fallback is off") {
			t.Errorf("%v; first pod: %s", reservedPlans(plan), decisions[0].Message)
		}
	})
}

// randomReservations draws up to three reservations of random types (UltraServer ones for
// UltraServer types), with no room now and then.
func randomReservations(r *rand.Rand, types []topology.InstanceType) []Reservation {
	var out []Reservation
	for k := range r.IntN(4) {
		t := types[r.IntN(len(types))]
		res := Reservation{ID: fmt.Sprintf("cr-%d", k), InstanceType: t.Name, Available: r.IntN(4)}
		if t.UltraServerNodes > 0 {
			res.UltraServer, res.Available = true, r.IntN(3)*t.UltraServerNodes+r.IntN(2)
		}
		out = append(out, res)
	}
	return out
}

// withCapacitySelector makes some pods select reserved capacity, on-demand capacity or one
// reservation.
func withCapacitySelector(r *rand.Rand, pending []PodDemand, res []Reservation) {
	for _, d := range pending {
		if r.IntN(6) != 0 {
			continue
		}
		if d.Pod.Spec.NodeSelector == nil {
			d.Pod.Spec.NodeSelector = map[string]string{}
		}
		switch k := r.IntN(3); {
		case k == 0:
			d.Pod.Spec.NodeSelector[labels.CapacityType] = labels.CapacityTypeReserved
		case k == 1:
			d.Pod.Spec.NodeSelector[labels.CapacityType] = labels.CapacityTypeOnDemand
		case len(res) > 0:
			d.Pod.Spec.NodeSelector[labels.CapacityReservationID] = res[r.IntN(len(res))].ID
		}
	}
}

// TestPlanReservationProperties: on random rounds with random reservations (UltraServer ones
// too), the fallback on or off and pods that select capacity, every plan holds (checkPlan, with
// checkReservations: no reservation ever takes more than its Available), and reservations come
// first: no on-demand new node is of a type a reservation with room left could take, with pods
// that name no capacity.
func TestPlanReservationProperties(t *testing.T) {
	types := defaultCatalog.Types()
	solo := seedTemplate(t, "us-4-node-config.yaml") // a node device claim: whole UltraServers, shared
	solo.Devices.Config = nil
	for seed := range uint64(400) {
		r := rand.New(rand.NewPCG(seed, 24))
		pending, launching, opts := randomBatch(r, 24)
		opts.Reservations = randomReservations(r, types)
		opts.ReservedOnly = r.IntN(3) == 0
		switch r.IntN(4) {
		case 0:
			pending = append(pending, us4Pods(t, 1+r.IntN(4))...)
		case 1:
			pending = append(pending, claimPods("solo", 1+r.IntN(12), solo)...)
		}
		if r.IntN(3) == 0 {
			opts.Reservations = append(opts.Reservations, Reservation{ID: "cr-us", InstanceType: "trn2u.48xlarge", Available: r.IntN(10), UltraServer: true})
		}
		withCapacitySelector(r, pending, opts.Reservations)
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			plan, decisions := Plan(pending, launching, opts)
			checkPlan(t, pending, launching, opts, plan, decisions)
			used := map[string]int{}
			for _, n := range plan.New() {
				used[n.Reservation]++
			}
			room := map[string]int{} // type -> the most room one of its reservations has left
			for _, res := range opts.Reservations {
				if t, ok := defaultCatalog.Lookup(res.InstanceType); ok && (len(opts.Families) == 0 || slices.Contains(opts.Families, t.Family)) {
					room[res.InstanceType] = max(room[res.InstanceType], res.Available-used[res.ID])
				}
			}
			byKey := map[string]PodDemand{}
			for _, d := range pending {
				byKey[d.Key()] = d
			}
			named := map[string]bool{} // UltraServer -> a pod on it names a capacity label
			for _, n := range plan.Nodes {
				for _, pl := range n.Pods {
					named[n.UltraServer] = named[n.UltraServer] || namesCapacity(byKey[pl.Pod].Pod)
				}
			}
			for k, n := range plan.Nodes {
				if n.Launching || n.Reservation != "" || room[n.InstanceType.Name] < max(1, n.InstanceType.UltraServerNodes) {
					continue
				}
				selects := named[n.UltraServer] && n.UltraServer != ""
				for _, pl := range n.Pods {
					selects = selects || namesCapacity(byKey[pl.Pod].Pod)
				}
				if !selects {
					t.Errorf("node %d: an on-demand %s while a reservation of the type has room for %d", k, n.InstanceType.Name, room[n.InstanceType.Name])
				}
			}
		})
	}
}

// TestPlanReservationsNeverDearer: reservations only make a plan cheaper. On random rounds
// without limits, the plan with random reservations places as many pods and costs no more than
// the plan without them.
func TestPlanReservationsNeverDearer(t *testing.T) {
	types := defaultCatalog.Types()
	for seed := range uint64(300) {
		r := rand.New(rand.NewPCG(seed, 99))
		pending, _, opts := randomBatch(r, 24)
		opts.MaxNodes, opts.MaxDevices = 0, 0
		reservations := randomReservations(r, types)
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			without, wd := Plan(pending, nil, opts)
			opts.Reservations = reservations
			with, d := Plan(pending, nil, opts)
			checkPlan(t, pending, nil, opts, with, d)
			if got, base := planCost(with, d), planCost(without, wd); got.compare(base) > 0 {
				t.Errorf("with reservations %v the plan costs %+v, without %+v", reservations, got, base)
			}
		})
	}
}

// BenchmarkPlanReserved plans BenchmarkPlan's batches with three reservations of 20 instances
// (trn1.32xlarge, inf2.48xlarge, inf1.6xlarge), and reports planning speed (pods/s), the nodes
// launched into them (reserved) and what the on-demand rest costs ($/h).
func BenchmarkPlanReserved(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("pods=%d", n), func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, 2))
			types := topology.DefaultCatalog().Types()
			var pending []PodDemand
			for i := range n {
				pending = append(pending, randomDemand(r, fmt.Sprintf("p%d", i), types))
			}
			opts := Options{Catalog: topology.DefaultCatalog(), Reservations: []Reservation{
				{ID: "cr-1", InstanceType: "trn1.32xlarge", Available: 20}, {ID: "cr-2", InstanceType: "inf2.48xlarge", Available: 20},
				{ID: "cr-3", InstanceType: "inf1.6xlarge", Available: 20}}}
			var plan ScaleUp
			for b.Loop() {
				plan, _ = Plan(pending, nil, opts)
			}
			b.ReportMetric(float64(len(pending))*float64(b.N)/b.Elapsed().Seconds(), "pods/s")
			b.ReportMetric(float64(plan.ReservedNodes), "reserved")
			b.ReportMetric(plan.CostUSDPerHour, "$/h")
		})
	}
}
