package plan

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/testkit"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// randomBatch draws a planning round: up to maxPods random pending pods, up to two launching
// nodes (with pending pods planned onto them, and pods the scheduler bound to them), and now and
// then node and device limits, a family allow-list and the first-fit policy.
func randomBatch(r *rand.Rand, maxPods int) ([]PodDemand, []NodeOption, Options) {
	cat := defaultCatalog
	types := cat.Types()
	var pending []PodDemand
	for i := range r.IntN(maxPods + 1) {
		pending = append(pending, randomDemand(r, fmt.Sprintf("p%d", i), types))
	}
	var launching []NodeOption
	planned := r.Perm(len(pending)) // a pod is planned onto one launching node at most
	for i := range r.IntN(3) {
		lo := NodeOption{Name: fmt.Sprintf("l%d", i), InstanceType: types[r.IntN(len(types))].Name}
		if r.IntN(4) == 0 {
			lo.Mode = labels.AllocationModeDRA
		}
		for range r.IntN(3) {
			if len(planned) > 0 {
				lo.Pods = append(lo.Pods, pending[planned[0]])
				planned = planned[1:]
			}
		}
		if r.IntN(3) == 0 {
			lo.Bound = append(lo.Bound, randomDemand(r, fmt.Sprintf("bound-l%d", i), types))
		}
		launching = append(launching, lo)
	}
	opts := Options{Catalog: cat}
	if r.IntN(4) == 0 {
		opts.MaxNodes = 1 + r.IntN(maxPods/2+2)
	}
	if r.IntN(4) == 0 {
		opts.MaxDevices = r.IntN(4*maxPods + 8)
		opts.Existing = Capacity{Nodes: r.IntN(2), Devices: r.IntN(8)}
	}
	if r.IntN(4) == 0 {
		opts.Families = []string{"inf1", "trn1", "trn2", "inf2"}[:1+r.IntN(4)]
	}
	if r.IntN(5) == 0 {
		opts.Policy = topology.FirstFit
	}
	return pending, launching, opts
}

// TestPlanHolds: on larger rounds than the oracle can search, with launching nodes, pods bound
// to them, limits, family allow-lists and the first-fit policy, and on the improvable rounds
// mixed with copies of their pods and random pods, the plan holds (checkPlan: every pod fits on
// its node under the topology engine, limits hold, every pod has its decision), and without
// launching nodes or limits it costs no more than one node of the cheapest type per pod (the
// oracle's price for each pod alone).
func TestPlanHolds(t *testing.T) {
	check := func(t *testing.T, pending []PodDemand, launching []NodeOption, opts Options) {
		plan, decisions := Plan(pending, launching, opts)
		checkPlan(t, pending, launching, opts, plan, decisions)
		if len(launching) > 0 || opts.MaxNodes > 0 || opts.MaxDevices > 0 {
			return
		}
		perPod := perPodCost(pending, opts)
		if got := planCost(plan, decisions); perPod.unplaced == 0 && perPod.unknown == 0 && got.compare(perPod) > 0 {
			t.Errorf("the plan costs %+v, more than one node of the cheapest type per pod, %+v", got, perPod)
		}
	}
	for seed := range uint64(400) {
		r := rand.New(rand.NewPCG(seed, 11))
		pending, launching, opts := randomBatch(r, 30)
		t.Run(fmt.Sprint(seed), func(t *testing.T) { check(t, pending, launching, opts) })
	}
	types := topology.DefaultCatalog().Types()
	for _, sc := range improvable(t) {
		for seed := range uint64(20) {
			r := rand.New(rand.NewPCG(seed, 17))
			var pending []PodDemand
			for c := range 1 + r.IntN(4) {
				pending = append(pending, copies(sc.pending, c)...)
			}
			for i := range r.IntN(10) {
				pending = append(pending, randomDemand(r, fmt.Sprintf("x%d", i), types))
			}
			r.Shuffle(len(pending), func(a, b int) { pending[a], pending[b] = pending[b], pending[a] })
			t.Run(fmt.Sprintf("%s, mixed %d", sc.name, seed), func(t *testing.T) { check(t, pending, nil, sc.opts) })
		}
	}
	for seed := range uint64(3) { // as BenchmarkPlan draws them
		r := rand.New(rand.NewPCG(seed, 2))
		var pending []PodDemand
		for i := range 250 {
			pending = append(pending, randomDemand(r, fmt.Sprintf("p%d", i), types))
		}
		t.Run(fmt.Sprintf("250 pods, seed %d", seed), func(t *testing.T) { check(t, pending, nil, Options{Catalog: topology.DefaultCatalog()}) })
	}
}

// copies returns a copy of each pod, its name suffixed with -c and no UID.
func copies(pending []PodDemand, c int) []PodDemand {
	var out []PodDemand
	for _, d := range pending {
		pod := d.Pod.DeepCopy()
		pod.Name, pod.UID = fmt.Sprintf("%s-%d", pod.Name, c), ""
		out = append(out, NewPodDemand(pod, d.DRA))
	}
	return out
}

// TestPlanDeterministic: the same round gives the same plan.
func TestPlanDeterministic(t *testing.T) {
	types := topology.DefaultCatalog().Types()
	r := rand.New(rand.NewPCG(5, 6))
	var pending []PodDemand
	for i := range 300 {
		pending = append(pending, randomDemand(r, fmt.Sprintf("p%d", i), types))
	}
	plan, decisions := Plan(pending, nil, Options{})
	for range 2 {
		again, againDecisions := Plan(pending, nil, Options{})
		if !reflect.DeepEqual(plan, again) || !reflect.DeepEqual(decisions, againDecisions) {
			t.Fatalf("two plans of the same pods differ:\n%v\n%v", newNodes(plan), newNodes(again))
		}
	}
}

// TestPlanCacheFollowsUsage: for a node of every type, as pods are put on it one after another,
// the placement the cache gives every request shape is the one the topology engine finds on the
// node as it is then, never one cached for an earlier state of the node.
func TestPlanCacheFollowsUsage(t *testing.T) {
	pending := []PodDemand{
		demand(testPod("dev1").Neuron(1)),
		demand(testPod("dev2").Neuron(2)),
		demand(testPod("dev4").Neuron(4)),
		demand(testPod("core1").NeuronCores(1)),
		demand(testPod("core3").NeuronCores(3)),
		demand(testPod("two-containers").NeuronCores(2).Container("c1", topology.ResourceNeuron, 1)),
		demand(testPod("dra2"), DRARequest{Count: 2}),
		demand(testPod("dra-all"), DRARequest{All: true}),
	}
	p := newPlanner(pending, nil, Options{})
	if len(p.reqs) != len(pending) {
		t.Fatalf("%d request shapes for %d pods of different shapes", len(p.reqs), len(pending))
	}
	for ti, typ := range p.byPrice {
		if p.cores[ti] == 0 {
			continue
		}
		n := p.newNode(ti, labels.AllocationModeDevicePlugin)
		for step := 0; ; step++ {
			var fitting []int
			for q := range p.reqs {
				got := p.fitOn(n, q)
				hw, score, ok := p.sim.place(n.u.Clone(), p.reqs[q])
				if got.ok != ok || ok && (got.score != score || !reflect.DeepEqual(got.hw, hw)) {
					t.Fatalf("%s after %d pods: the cache places %s at %v (fits %v, score %v); the engine at %v (fits %v, score %v)",
						typ.Name, step, pending[q].Pod.Name, got.hw, got.ok, got.score, hw, ok, score)
				}
				if ok {
					fitting = append(fitting, q)
				}
			}
			if len(fitting) == 0 {
				break
			}
			// Request shape q is pod q's: put the shapes that fit in turn, so the node goes
			// through many states, and check the pod got what the engine gave.
			q := fitting[step%len(fitting)]
			want, _, _ := p.sim.place(n.u.Clone(), p.reqs[q])
			p.add(n, q)
			if got := n.pods[len(n.pods)-1].hw; !reflect.DeepEqual(got, want) {
				t.Fatalf("%s: pod %s got %v, the engine gives %v", typ.Name, pending[q].Pod.Name, got, want)
			}
		}
		if len(n.pods) == 0 {
			t.Errorf("%s took none of the pods", typ.Name)
		}
	}
}

// TestPlanHardwareNotShared: two pods placed alike (the same request on nodes in the same state)
// get their own copies of the cached allocation, so changing one plan's hardware changes no
// other's.
func TestPlanHardwareNotShared(t *testing.T) {
	pending := []PodDemand{demand(testPod("a").Neuron(1)), demand(testPod("b").Neuron(1))}
	plan, _ := Plan(pending, nil, Options{})
	nodes := plan.New()
	if len(nodes) != 2 || len(nodes[0].Pods) != 1 || len(nodes[1].Pods) != 1 {
		t.Fatalf("want two nodes of one pod each, got %v", newNodes(plan))
	}
	a, b := nodes[0].Pods[0].Hardware, nodes[1].Pods[0].Hardware
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("the pods were placed differently (%v, %v): the test needs them alike", a, b)
	}
	a[0].Devices[0], a[0].Cores[0] = 99, 99
	if b[0].Devices[0] == 99 || b[0].Cores[0] == 99 {
		t.Errorf("the two pods share their allocation: %v", b)
	}
}

// improvableRound is a round whose first packing the planner improves to the optimum.
type improvableRound struct {
	name    string
	pending []PodDemand
	opts    Options
	want    []planned
	cost    float64
}

// improvable returns rounds in which the planner evacuates a node, merges two and downsizes one.
// With the built-in prices merges and downsizes seldom pay (a larger type never costs less per
// device), so their catalogs change prices, as a catalog file may.
func improvable(t *testing.T) []improvableRound {
	t.Helper()
	catalog := func(prices string) *topology.Catalog { return priceCatalog(t, prices) }
	return []improvableRound{
		{
			// The pods of the largest requests first: p5 takes an inf1.24xlarge of its own; p0
			// opens another with p2 and p1, p6 a third with p4; p3 may only go on a trn1.32xlarge,
			// which has room to spare. p0 and p1 move there and p2 beside p4 and p6: the node they
			// leave empty goes, $30.942/h instead of $35.663/h.
			name: "evacuate: an inf1.24xlarge whose pods fit on the other nodes",
			pending: []PodDemand{
				demand(testPod("p0").Neuron(1).Container("c1", topology.ResourceNeuron, 8)),
				demand(testPod("p1").NeuronCores(1)),
				demand(testPod("p2").NeuronCores(16)),
				demand(testPod("p3").Neuron(1).Container("c1", topology.ResourceNeuronCore, 2).Selector(labels.InstanceFamily, "trn1")),
				demand(testPod("p4").Neuron(6).Selector(labels.InstanceFamily, "inf1")),
				demand(testPod("p5").Neuron(16).Affinity(testkit.Term(testkit.Expr(labels.InstanceFamily, "NotIn", "trn1n")))),
				demand(testPod("p6").NeuronCores(16)),
			},
			want: []planned{{"inf1.24xlarge", []string{"p5"}}, {"inf1.24xlarge", []string{"p2", "p4", "p6"}}, {"trn1.32xlarge", []string{"p0", "p1", "p3"}}},
			cost: 30.942,
		},
		{
			// p0 opens an inf2.24xlarge with p2 ($1.2 for $2 of pods beats an inf1.6xlarge with all
			// three, $2 for $3), p1 may not go there and gets an inf1.xlarge: $2.2 in all, which
			// one inf1.6xlarge with the three pods beats.
			name: "merge: an inf2.24xlarge and an inf1.xlarge into one inf1.6xlarge",
			pending: []PodDemand{
				in(testPod("p0").NeuronCores(3), "inf1.xlarge", "inf2.24xlarge", "inf1.6xlarge"),
				in(testPod("p1").NeuronCores(3), "inf1.xlarge", "inf1.6xlarge"),
				in(testPod("p2").Neuron(1), "inf1.xlarge", "inf2.24xlarge", "inf1.6xlarge"),
			},
			opts: Options{Catalog: catalog("- {name: inf1.xlarge, priceUSDPerHour: 1.0}\n" +
				"- {name: inf2.24xlarge, priceUSDPerHour: 1.2}\n- {name: inf1.6xlarge, priceUSDPerHour: 2.0}\n")},
			want: []planned{{"inf1.6xlarge", []string{"p0", "p1", "p2"}}}, cost: 2.0,
		},
		{
			// i opens an inf1.24xlarge with j1 and j2 ($1.5 for $3.54 of pods beats an
			// inf1.6xlarge with i and k, $1.18 for $2.36); k may only go on an inf1.6xlarge. The
			// three pods of the inf1.24xlarge fit on an inf1.6xlarge.
			name: "downsize: an inf1.24xlarge to an inf1.6xlarge",
			pending: []PodDemand{
				in(testPod("i").Neuron(2), "inf1.6xlarge", "inf1.24xlarge"),
				in(testPod("k").Neuron(2), "inf1.6xlarge"),
				in(testPod("j1").Neuron(1), "inf1.6xlarge", "inf1.24xlarge"),
				in(testPod("j2").Neuron(1), "inf1.6xlarge", "inf1.24xlarge"),
			},
			opts: Options{Catalog: catalog("- {name: inf1.24xlarge, priceUSDPerHour: 1.5}\n")},
			want: []planned{{"inf1.6xlarge", []string{"i", "j1", "j2"}}, {"inf1.6xlarge", []string{"k"}}}, cost: 2.36,
		},
	}
}

// TestPlanImproves: the planner evacuates, merges and downsizes nodes of its first packing, and
// ends at the optimum, also for two copies of the round's pods where the oracle can search them.
func TestPlanImproves(t *testing.T) {
	for _, sc := range improvable(t) {
		t.Run(sc.name, func(t *testing.T) {
			plan, decisions := Plan(sc.pending, nil, sc.opts)
			checkPlan(t, sc.pending, nil, sc.opts, plan, decisions)
			if got := newNodes(plan); !reflect.DeepEqual(got, sc.want) || math.Abs(plan.CostUSDPerHour-sc.cost) > 1e-9 {
				t.Errorf("new nodes %v at $%v/h, want %v at $%v/h", got, plan.CostUSDPerHour, sc.want, sc.cost)
			}
			for n := 1; n <= 2 && n*len(sc.pending) <= 8; n++ {
				var pending []PodDemand
				for c := range n {
					pending = append(pending, copies(sc.pending, c)...)
				}
				plan, decisions := Plan(pending, nil, sc.opts)
				checkPlan(t, pending, nil, sc.opts, plan, decisions)
				if got, opt := planCost(plan, decisions), optimalFleet(pending, sc.opts); got.compare(opt.cost) != 0 {
					t.Errorf("%d copies: the plan %v costs %+v, the optimum %s %+v", n, newNodes(plan), got, fleetString(pending, opt), opt.cost)
				}
			}
		})
	}
}

// priceCatalog is the built-in catalog with the prices of a catalog file's instanceTypes list.
func priceCatalog(t *testing.T, prices string) *topology.Catalog {
	t.Helper()
	c, err := topology.DefaultCatalog().Apply([]byte("apiVersion: kube-neuron.io/v1\nkind: InstanceCatalog\ninstanceTypes:\n" + prices))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// in is the pod with required node affinity for the given instance types.
func in(b *testkit.PodWrapper, types ...string) PodDemand {
	return demand(b.Affinity(testkit.Term(testkit.Expr(labels.InstanceType, "In", types...))))
}

// TestPlanMergeAndDownsize runs evacuate, merge and downsize steps on nodes set up by hand: a
// merge or downsize that found nothing is tried again once one of its nodes has changed, though
// another node now sits where it was, and once the limits have room again; a merge whose pods
// take the whole new node is made, and so is an evacuation that fills the node a pod moves to;
// the counts the limits are checked against follow the nodes.
func TestPlanMergeAndDownsize(t *testing.T) {
	// Every pod takes 3 cores of one device: two never share an inf1.xlarge (1 device), an
	// inf1.6xlarge (4 devices, $1.5/h here) takes four and is cheaper than two inf1.xlarge ($1/h
	// each).
	cat := priceCatalog(t, "- {name: inf1.xlarge, priceUSDPerHour: 1.0}\n- {name: inf1.6xlarge, priceUSDPerHour: 1.5}\n")
	var pending []PodDemand
	for i := range 8 {
		pending = append(pending, in(testPod(fmt.Sprintf("p%d", i)).NeuronCores(3), "inf1.xlarge", "inf1.6xlarge"))
	}
	for i := range 4 { // pods 8 to 11: a whole device each
		pending = append(pending, in(testPod(fmt.Sprintf("d%d", i)).Neuron(1), "inf1.xlarge", "inf1.6xlarge"))
	}
	setup := func(t *testing.T, devCap int) (*run, func(typ string, pods ...int)) {
		p := newPlanner(pending, nil, Options{Catalog: cat})
		r := &run{p: p, at: make([]*node, len(pending)), prior: make([]bool, len(pending)), blocked: make([]string, len(pending)),
			nodesCap: -1, devCap: devCap}
		add := func(typ string, pods ...int) {
			n := p.newNode(p.typeIndex[typ], labels.AllocationModeDevicePlugin)
			for _, i := range pods {
				if !p.fitOn(n, p.req[i]).ok {
					t.Fatalf("pod %d does not fit on the %s node", i, typ)
				}
				p.add(n, i)
			}
			r.adopt(n)
			r.put(n)
		}
		return r, add
	}
	types := func(r *run) []string {
		var out []string
		nodes, devices := 0, 0
		for _, n := range r.nodes {
			out = append(out, n.t.Name)
			nodes++
			devices += n.t.Devices
		}
		if nodes != r.newN || devices != r.newD { // what the limits are checked against
			t.Errorf("the run counts %d new nodes with %d devices; they are %d with %d", r.newN, r.newD, nodes, devices)
		}
		return out
	}

	t.Run("another node at the place of one that did not merge", func(t *testing.T) {
		r, add := setup(t, -1)
		add("inf1.xlarge", 0)
		add("inf1.6xlarge", 1, 2, 3, 4) // 3 cores of each device: no room for p0, nor a type below $2.5/h for five
		if r.merge() {
			t.Fatalf("merged %v", types(r))
		}
		r.remove(1)
		add("inf1.xlarge", 6) // now second, where the full inf1.6xlarge was
		if !r.merge() {
			t.Fatalf("two inf1.xlarge ($2/h) did not merge into an inf1.6xlarge ($1.5/h): %v", types(r))
		}
	})
	t.Run("the limits have room again", func(t *testing.T) {
		r, add := setup(t, 4)
		add("inf1.xlarge", 0)
		add("inf1.xlarge", 1)
		add("inf1.xlarge", 2)
		if r.merge() { // any two into an inf1.6xlarge: 5 devices, over the limit of 4
			t.Fatalf("merged beyond the device limit: %v", types(r))
		}
		r.remove(2)
		if !r.merge() { // the two left into an inf1.6xlarge: 4 devices
			t.Fatalf("two inf1.xlarge did not merge into an inf1.6xlarge within the limit: %v", types(r))
		}
		if got := types(r); !slices.Equal(got, []string{"inf1.6xlarge"}) {
			t.Errorf("nodes %v, want one inf1.6xlarge", got)
		}
	})
	t.Run("a merge that fills the new node", func(t *testing.T) {
		r, add := setup(t, -1)
		add("inf1.6xlarge", 8, 9, 10)
		add("inf1.xlarge", 11)
		if !r.merge() { // four devices into the four of an inf1.6xlarge, $1.5/h instead of $2.5/h
			t.Fatalf("an inf1.6xlarge with 3 devices taken and an inf1.xlarge did not merge: %v", types(r))
		}
		if got := types(r); !slices.Equal(got, []string{"inf1.6xlarge"}) {
			t.Errorf("nodes %v, want one inf1.6xlarge", got)
		}
	})
	t.Run("an evacuation that fills the node the pod moves to", func(t *testing.T) {
		r, add := setup(t, -1)
		add("inf1.6xlarge", 8, 9, 10)
		add("inf1.xlarge", 11)
		if !r.evacuate() { // d3 takes the last free device of the inf1.6xlarge: its node goes
			t.Fatalf("the inf1.xlarge was not evacuated onto the free device of the inf1.6xlarge: %v", types(r))
		}
		if got := types(r); !slices.Equal(got, []string{"inf1.6xlarge"}) || len(r.nodes[0].pods) != 4 {
			t.Errorf("nodes %v, want one inf1.6xlarge with four pods", got)
		}
	})
	t.Run("another node at the place of one that was not downsized", func(t *testing.T) {
		r, add := setup(t, -1)
		add("inf1.6xlarge", 0, 1) // 6 cores: no cheaper type takes them
		if r.downsize() {
			t.Fatalf("downsized %v", types(r))
		}
		r.remove(0)
		add("inf1.6xlarge", 2)
		if !r.downsize() {
			t.Fatalf("an inf1.6xlarge with 3 cores taken was not downsized: %v", types(r))
		}
		if got := types(r); !slices.Equal(got, []string{"inf1.xlarge"}) {
			t.Errorf("nodes %v, want one inf1.xlarge", got)
		}
	})
}

// TestPlanMergePairs checks that merge's pairs, found through the nodes sorted by need, are
// exactly the pairs of the run's nodes that pass merge's own filters (wantMergePairs), in the
// run's order: on runs without packing (a node per pod, many pairs that may merge) and with it,
// without reservations and with them, where a node in a reservation costs nothing and a pair
// may merge into a reservation's type; with reservations also before every merge of the
// improvement steps, as the reservations fill and free up.
func TestPlanMergePairs(t *testing.T) {
	types := topology.DefaultCatalog().Types()
	var general []topology.InstanceType // the types the general search launches into reservations
	for _, ty := range types {
		if ty.UltraServerNodes == 0 {
			general = append(general, ty)
		}
	}
	total, reserved, withRoom, full := 0, 0, 0, 0
	check := func(t *testing.T, what string, ru *run) {
		t.Helper()
		want := wantMergePairs(ru)
		if got := ru.mergePairs(); !slices.Equal(got, want) {
			t.Fatalf("%s: %d nodes, mergePairs found %d pairs, want %d:\n got %v\nwant %v", what, len(ru.nodes), len(got), len(want), got, want)
		}
		total += len(want)
		if ru.p.rv == nil {
			return
		}
		for _, ab := range want {
			if ru.nodes[ab[0]].res > 0 || ru.nodes[ab[1]].res > 0 {
				reserved++
			}
		}
		for k := range ru.p.rv.list {
			if ru.room(k) > 0 {
				withRoom++
			} else {
				full++
			}
		}
	}
	for seed := range uint64(60) {
		r := rand.New(rand.NewPCG(seed, 11))
		var pending []PodDemand
		for i := range 20 + r.IntN(200) {
			pending = append(pending, randomDemand(r, fmt.Sprintf("p%d", i), types))
		}
		opts := Options{Catalog: topology.DefaultCatalog()}
		if seed%2 == 1 { // reservations, of one type now and then, from empty to more than the run takes
			for k := range 1 + r.IntN(3) {
				ty := general[r.IntN(len(general))]
				if k > 0 && r.IntN(4) == 0 {
					ty = general[slices.IndexFunc(general, func(t topology.InstanceType) bool { return t.Name == opts.Reservations[0].InstanceType })]
				}
				available := r.IntN(30)
				if r.IntN(2) == 0 {
					available = r.IntN(4)
				}
				opts.Reservations = append(opts.Reservations, Reservation{ID: fmt.Sprintf("cr-%d", k), InstanceType: ty.Name, Available: available})
			}
			opts.ReservedOnly = r.IntN(4) == 0
			if r.IntN(2) == 0 {
				withCapacitySelector(r, pending, opts.Reservations)
			}
			if r.IntN(2) == 0 { // other prices, $0 among them: a node on demand and one reserved cost nothing
				var prices strings.Builder
				for _, ty := range types {
					if k := r.IntN(3); k < 2 {
						fmt.Fprintf(&prices, "- {name: %s, priceUSDPerHour: %.3f}\n", ty.Name, float64(k*ty.Devices)*(0.2+r.Float64()))
					}
				}
				c, err := opts.Catalog.Apply([]byte("apiVersion: kube-neuron.io/v1\nkind: InstanceCatalog\ninstanceTypes:\n" + prices.String()))
				if err != nil {
					t.Fatal(err)
				}
				opts.Catalog = c
			}
		}
		p := newPlanner(pending, nil, opts)
		for _, pack := range []bool{false, true} {
			what := fmt.Sprintf("seed %d, pack %v, reservations %v", seed, pack, opts.Reservations)
			ru := p.run(pack)
			check(t, what, ru)
			if !pack && p.rv != nil {
				steps := 0
				merge := func() bool {
					check(t, fmt.Sprintf("%s, improvement step %d", what, steps), ru)
					steps++
					return ru.merge()
				}
				for ru.evacuate() || merge() || ru.downsize() || ru.swap() {
				}
			}
		}
	}
	if total < 1000 || reserved < 1000 || withRoom < 50 || full < 50 {
		t.Fatalf("the runs had %d pairs that may merge, %d with a reserved node, and reservations with room %d times, full %d: too few to check mergePairs against",
			total, reserved, withRoom, full)
	}
}

// wantMergePairs are the pairs of the run's nodes (positions a < b) that pass merge's filters
// before its memo of failed merges, tried on every pair: both new, of one mode, and priced with
// a type mayMerge accepts or a reservation mayReserve accepts below their prices to the run, or
// of one unknown-price type with cores enough for both.
func wantMergePairs(ru *run) [][2]int {
	p := ru.p
	var want [][2]int
	for a, na := range ru.nodes {
		for b := a + 1; b < len(ru.nodes); b++ {
			nb := ru.nodes[b]
			if na.launching || nb.launching || na.mode != nb.mode {
				continue
			}
			if ru.priced(na) && ru.priced(nb) {
				if bound := ru.price(na) + ru.price(nb); p.mayMerge(na, nb, bound) || ru.mayReserve(na, nb, bound) {
					want = append(want, [2]int{a, b})
				}
			} else if na.t.Name == nb.t.Name && na.need[na.ti]+nb.need[na.ti] <= p.cores[na.ti] {
				want = append(want, [2]int{a, b})
			}
		}
	}
	return want
}
