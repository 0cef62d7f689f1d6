package plan

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/testkit"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// planned is what a test expects of one new node: its type and its pods.
type planned struct {
	typ  string
	pods []string
}

func newNodes(s ScaleUp) []planned {
	var out []planned
	for _, n := range s.New() {
		p := planned{typ: n.InstanceType.Name}
		for _, pl := range n.Pods {
			p.pods = append(p.pods, strings.TrimPrefix(pl.Pod, "default/"))
		}
		slices.Sort(p.pods)
		out = append(out, p)
	}
	return out
}

func TestPlan(t *testing.T) {
	trn1Pod := func(name string, n int) PodDemand {
		return demand(testPod(name).Neuron(int64(n)).Selector(labels.InstanceFamily, "trn1"))
	}
	launchingTrn1 := func(pods ...PodDemand) []NodeOption {
		return []NodeOption{{Name: "launching-1", InstanceType: "trn1.32xlarge", Pods: pods}}
	}
	for _, tc := range []struct {
		name      string
		pending   []PodDemand
		launching []NodeOption
		opts      Options
		want      []planned
		cost      float64
		messages  map[string]string // pod -> message substring
		warnings  []string          // pods with NotTriggerScaleUp
	}{
		{
			name:    "seed: one device on the cheapest type",
			pending: []PodDemand{NewPodDemand(seedPod(t, "dev", seedDevice), nil)},
			want:    []planned{{"inf1.xlarge", []string{"dev"}}}, cost: 0.228,
			messages: map[string]string{"dev": "pod triggered scale-up: a new inf1.xlarge node ($0.228/h)"},
		},
		{
			name:    "seed: two cores fit one inf1 device",
			pending: []PodDemand{NewPodDemand(seedPod(t, "cores", seedCores), nil)},
			want:    []planned{{"inf1.xlarge", []string{"cores"}}}, cost: 0.228,
		},
		{
			name:    "seed: eight cores need two connected inf1 devices",
			pending: []PodDemand{NewPodDemand(seedPod(t, "multi", seedMultiple), nil)},
			want:    []planned{{"inf1.6xlarge", []string{"multi"}}}, cost: 1.18,
		},
		{
			// One node per pod would cost 0.228 + 0.228 + 1.18.
			name: "seed: the three workloads share one inf1.6xlarge",
			pending: []PodDemand{
				NewPodDemand(seedPod(t, "dev", seedDevice), nil), NewPodDemand(seedPod(t, "cores", seedCores), nil),
				NewPodDemand(seedPod(t, "multi", seedMultiple), nil),
			},
			want: []planned{{"inf1.6xlarge", []string{"cores", "dev", "multi"}}}, cost: 1.18,
			messages: map[string]string{"dev": "a new inf1.6xlarge node ($1.18/h), together with 2 other pending pods"},
		},
		{
			name:    "7 devices without a selector: the cheapest type that serves 7",
			pending: []PodDemand{demand(testPod("seven").Neuron(7))},
			want:    []planned{{"inf1.24xlarge", []string{"seven"}}}, cost: 4.721,
		},
		{
			name:    "7 devices, inf1 not allowed: inf2.48xlarge",
			pending: []PodDemand{demand(testPod("seven").Neuron(7))},
			opts:    Options{Families: []string{"inf2", "trn1"}},
			want:    []planned{{"inf2.48xlarge", []string{"seven"}}}, cost: 12.98127,
		},
		{
			name:    "two 8-device trn1 pods: one trn1.32xlarge, not two",
			pending: []PodDemand{trn1Pod("a", 8), trn1Pod("b", 8)},
			want:    []planned{{"trn1.32xlarge", []string{"a", "b"}}}, cost: 21.5,
		},
		{
			name:    "four 1-core pods share one inf1.xlarge",
			pending: []PodDemand{demand(testPod("a").NeuronCores(1)), demand(testPod("b").NeuronCores(1)), demand(testPod("c").NeuronCores(1)), demand(testPod("d").NeuronCores(1))},
			want:    []planned{{"inf1.xlarge", []string{"a", "b", "c", "d"}}}, cost: 0.228,
		},
		{
			name:    "four 1-device pods: four inf1.xlarge are cheaper than one inf1.6xlarge",
			pending: []PodDemand{demand(testPod("a").Neuron(1)), demand(testPod("b").Neuron(1)), demand(testPod("c").Neuron(1)), demand(testPod("d").Neuron(1))},
			want:    []planned{{"inf1.xlarge", []string{"a"}}, {"inf1.xlarge", []string{"b"}}, {"inf1.xlarge", []string{"c"}}, {"inf1.xlarge", []string{"d"}}}, cost: 0.912,
		},
		{
			name:      "a launching node takes the pod: no second node",
			pending:   []PodDemand{trn1Pod("new", 8)},
			launching: launchingTrn1(trn1Pod("first", 8)),
			messages:  map[string]string{"new": "node launching-1 (trn1.32xlarge), already launching, will take the pod: no new node"},
		},
		{
			name:      "a pod already planned onto a launching node stays there",
			pending:   []PodDemand{trn1Pod("first", 8)},
			launching: launchingTrn1(trn1Pod("first", 8)),
			messages:  map[string]string{"first": "node launching-1 (trn1.32xlarge), already launching, will take the pod"},
		},
		{
			name:      "a full launching node does not take more",
			pending:   []PodDemand{trn1Pod("new", 8)},
			launching: launchingTrn1(trn1Pod("a", 8), trn1Pod("b", 8)),
			want:      []planned{{"trn1.32xlarge", []string{"new"}}}, cost: 21.5,
		},
		{
			name:      "a launching node of the other mode does not take the pod",
			pending:   []PodDemand{demand(testPod("p").Neuron(1))},
			launching: []NodeOption{{Name: "dra-1", InstanceType: "inf1.xlarge", Mode: labels.AllocationModeDRA}},
			want:      []planned{{"inf1.xlarge", []string{"p"}}}, cost: 0.228,
		},
		{
			name:      "max nodes: existing and launching nodes count",
			pending:   []PodDemand{trn1Pod("a", 16), trn1Pod("b", 16)},
			opts:      Options{MaxNodes: 3, Existing: Capacity{Nodes: 1, Devices: 1}},
			launching: []NodeOption{{Name: "l", InstanceType: "inf1.xlarge"}},
			want:      []planned{{"trn1.32xlarge", []string{"a"}}}, cost: 21.5,
			warnings: []string{"b"},
			messages: map[string]string{"b": "the limit of 3 Neuron nodes is reached: 1 in the cluster, 1 launching, 1 planned for other pending pods"},
		},
		{
			name:    "max devices",
			pending: []PodDemand{trn1Pod("a", 8), demand(testPod("small").Neuron(1))},
			opts:    Options{MaxDevices: 20, Existing: Capacity{Nodes: 1, Devices: 8}},
			want:    []planned{{"inf1.xlarge", []string{"small"}}}, cost: 0.228,
			warnings: []string{"a"},
			messages: map[string]string{"a": "the limit of 20 Neuron devices is reached: the smallest type that can serve the pod, trn1.32xlarge, has 16 devices"},
		},
		{
			name:    "unknown price: launched, and the event says so",
			pending: []PodDemand{demand(testPod("big").Neuron(16).Selector(labels.InstanceType, "trn2.48xlarge"))},
			want:    []planned{{"trn2.48xlarge", []string{"big"}}},
			messages: map[string]string{"big": "pod triggered scale-up: a new trn2.48xlarge node; its price is unknown: the instance catalog has no price for trn2.48xlarge " +
				"and no type with a known price can serve the pod. Set priceUSDPerHour for trn2.48xlarge in a catalog file"},
		},
		{
			name:    "a priced type when one serves: no unknown-price node for a pod without a selector",
			pending: []PodDemand{demand(testPod("p").Neuron(16))},
			want:    []planned{{"inf1.24xlarge", []string{"p"}}}, cost: 4.721,
		},
		{
			name: "an unknown-price node launched anyway takes a small pod beside it",
			pending: []PodDemand{
				demand(testPod("big").Neuron(8).Selector(labels.InstanceType, "trn2.48xlarge")),
				demand(testPod("small").Neuron(1)),
			},
			want:     []planned{{"trn2.48xlarge", []string{"big", "small"}}},
			messages: map[string]string{"small": "the pod goes on a new trn2.48xlarge node launched for other pending pods, together with 1 other pending pod; its price is unknown"},
		},
		{
			name:    "family allow-list",
			pending: []PodDemand{trn1Pod("a", 4), demand(testPod("b").Neuron(1))},
			opts:    Options{Families: []string{"inf1", "inf2"}},
			want:    []planned{{"inf1.xlarge", []string{"b"}}}, cost: 0.228,
			warnings: []string{"a"},
			messages: map[string]string{"a": "the instance types that can serve the pod are trn1.32xlarge (family trn1), but the autoscaler may launch only the families inf1, inf2. " +
				"Allow one of these families in the autoscaler's configuration, or change the pod's nodeSelector"},
		},
		{
			name:     "a pod that Check would refuse gets the reason",
			pending:  []PodDemand{demand(testPod("seven").Neuron(7).Selector(labels.InstanceType, "trn1.32xlarge"))},
			warnings: []string{"seven"},
			messages: map[string]string{"seven": msg7OnTrn1},
		},
		{
			name: "DRA pods get dra nodes; device plugin pods never share them",
			pending: []PodDemand{
				demand(testPod("dra"), DRARequest{Count: 4, InstanceTypes: []string{"trn2.48xlarge"}}),
				demand(testPod("dp").Neuron(1).Selector(labels.InstanceType, "trn2.48xlarge")),
			},
			want: []planned{{"trn2.48xlarge", []string{"dra"}}, {"trn2.48xlarge", []string{"dp"}}},
		},
		{
			name: "two DRA pods share a node; All takes a node of its own",
			pending: []PodDemand{
				demand(testPod("a"), DRARequest{Count: 4}), demand(testPod("b"), DRARequest{Count: 8}),
				demand(testPod("all"), DRARequest{All: true, InstanceTypes: []string{"inf2.xlarge"}}),
			},
			want: []planned{{"inf2.xlarge", []string{"all"}}, {"inf1.24xlarge", []string{"a", "b"}}}, cost: 0.7582 + 4.721,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan, decisions := Plan(tc.pending, tc.launching, tc.opts)
			checkPlan(t, tc.pending, tc.launching, tc.opts, plan, decisions)
			if got := newNodes(plan); !slices.EqualFunc(got, tc.want, func(a, b planned) bool { return a.typ == b.typ && slices.Equal(a.pods, b.pods) }) {
				t.Errorf("new nodes %v, want %v", got, tc.want)
			}
			if math.Abs(plan.CostUSDPerHour-tc.cost) > 1e-9 {
				t.Errorf("cost %v, want %v", plan.CostUSDPerHour, tc.cost)
			}
			for _, d := range decisions {
				name := strings.TrimPrefix(d.Pod, "default/")
				if want := slices.Contains(tc.warnings, name); d.Warning() != want {
					t.Errorf("pod %s: %s %q, want warning=%v", name, d.Reason, d.Message, want)
				}
				if want, ok := tc.messages[name]; ok && !strings.Contains(d.Message, want) {
					t.Errorf("pod %s: message\n%q\nwant it to contain\n%q", name, d.Message, want)
				}
			}
		})
	}
}

func TestPlanModesAndLabels(t *testing.T) {
	plan, _ := Plan([]PodDemand{demand(testPod("dra"), DRARequest{Count: 1})}, nil, Options{})
	nodes := plan.New()
	if len(nodes) != 1 || nodes[0].Mode != labels.AllocationModeDRA || nodes[0].Labels()[labels.AllocationMode] != labels.AllocationModeDRA {
		t.Fatalf("nodes %+v: want one dra node", nodes)
	}
}

// checkPlan checks what every plan must satisfy: each pod has one decision, in order; a pod is
// on at most one node; every node takes its pods (placed in plan order on a fresh node, with
// the extender's rules and the plan's policy, after the pods bound to and already planned on a
// launching node); pods are on nodes they allow, of their mode, in the allowed families, and of
// the capacity they allow; limits hold; no reservation takes more than its Available and only
// reserved nodes are new under ReservedOnly (checkReservations); refusals say why.
func checkPlan(t *testing.T, pending []PodDemand, launching []NodeOption, opts Options, plan ScaleUp, decisions []Decision) {
	t.Helper()
	cat := opts.Catalog
	if cat == nil {
		cat = topology.DefaultCatalog()
	}
	policy := opts.Policy
	if policy == "" {
		policy = topology.BestFit
	}
	if len(decisions) != len(pending) {
		t.Fatalf("%d decisions for %d pods", len(decisions), len(pending))
	}
	byKey := map[string]PodDemand{}
	for i, d := range pending {
		byKey[d.Key()] = d
		if decisions[i].Pod != d.Key() || decisions[i].UID != d.Pod.UID {
			t.Errorf("decision %d is for %s, want %s", i, decisions[i].Pod, d.Key())
		}
	}
	prior := map[string]bool{}
	for _, lo := range launching {
		for _, d := range lo.Pods {
			prior[d.Key()] = true
		}
	}
	onNode := map[string]int{}
	units := map[string][]NodePlan{} // UltraServer id -> its nodes in the plan
	newCount, newDevices := 0, 0
	var cost float64
	unknown, reserved := 0, 0
	for k, n := range plan.Nodes {
		if n.Launching == (n.Name == "") {
			t.Errorf("node %d: launching %v with name %q", k, n.Launching, n.Name)
		}
		shape, err := topology.NewShape(n.InstanceType, 0)
		if err != nil {
			t.Fatal(err)
		}
		u := topology.NewUsage(shape)
		replay := topology.NewUsage(shape)
		if n.Launching {
			i := slices.IndexFunc(launching, func(lo NodeOption) bool { return lo.Name == n.Name })
			if i < 0 {
				t.Fatalf("node %s is not launching", n.Name)
			}
			s := newSim(cat, policy, nil)
			for _, d := range launching[i].Bound { // the pods the scheduler put there come first
				s.place(u, d)
				s.place(replay, d)
			}
			earlier := slices.Clone(launching[i].Pods) // the planner places them largest first
			slices.SortStableFunc(earlier, func(a, b PodDemand) int { return cmp.Compare(weight(b), weight(a)) })
			for _, d := range earlier {
				s.place(u, d)
				s.place(replay, d)
			}
		} else {
			newCount++
			newDevices += n.InstanceType.Devices
			if n.Reservation != "" {
				reserved++ // already paid
			} else if n.InstanceType.PriceKnown() {
				cost += *n.InstanceType.PriceUSDPerHour
			} else {
				unknown++
			}
			if len(opts.Families) > 0 && !slices.Contains(opts.Families, n.InstanceType.Family) {
				t.Errorf("new node %d is of family %s, not allowed", k, n.InstanceType.Family)
			}
		}
		switch {
		case n.UltraServer != "":
			units[n.UltraServer] = append(units[n.UltraServer], n)
		case n.InstanceType.UltraServerNodes > 0 && !n.Launching:
			t.Errorf("node %d is a new %s outside any UltraServer", k, n.InstanceType.Name)
		case len(n.Pods) == 0:
			t.Errorf("node %d has no pods", k)
		}
		for _, pl := range n.Pods {
			onNode[pl.Pod]++
			d, ok := byKey[pl.Pod]
			if !ok {
				t.Fatalf("node %d holds %s, which is not pending", k, pl.Pod)
			}
			if !d.Allows(n.InstanceType) || d.Mode() != n.Mode || !n.Launching && !d.allowsIn(n.InstanceType, n.Reservation) {
				t.Errorf("pod %s does not allow node %d (%s, %s, reservation %q)", pl.Pod, k, n.InstanceType.Name, n.Mode, n.Reservation)
			}
			for _, a := range pl.Hardware {
				if err := u.Allocate(a); err != nil {
					t.Errorf("node %d (%s): pod %s: %v", k, n.InstanceType.Name, pl.Pod, err)
				}
			}
			if len(d.Requests) > 0 { // the extender's own placement, pod after pod, finds room too
				containers, _, err := allocation.Plan(replay, d.Requests, policy)
				if err != nil {
					t.Errorf("node %d (%s): the extender would refuse pod %s: %v", k, n.InstanceType.Name, pl.Pod, err)
					continue
				}
				for _, c := range containers {
					a, _ := c.Hardware(shape)
					if err := replay.Allocate(a); err != nil {
						t.Errorf("replay: %v", err)
					}
				}
			}
		}
	}
	for id, nodes := range units {
		pods, positions := 0, map[int]bool{}
		for _, n := range nodes {
			pods += len(n.Pods)
			positions[n.UltraServerNode] = true
			if n.InstanceType.Name != nodes[0].InstanceType.Name || n.Launching != nodes[0].Launching {
				t.Errorf("UltraServer %s mixes types or launching and new nodes", id)
			}
		}
		if !nodes[0].Launching && (len(nodes) != nodes[0].InstanceType.UltraServerNodes || len(positions) != len(nodes) || pods == 0) {
			t.Errorf("new UltraServer %s: %d nodes at %d positions with %d pods; want all %d of its nodes, and pods", id, len(nodes), len(positions), pods, nodes[0].InstanceType.UltraServerNodes)
		}
	}
	if math.Abs(cost-plan.CostUSDPerHour) > 1e-9 || unknown != plan.UnknownPriceNodes || reserved != plan.ReservedNodes {
		t.Errorf("cost %v, %d unknown-price and %d reserved nodes reported, counted %v, %d and %d", plan.CostUSDPerHour, plan.UnknownPriceNodes,
			plan.ReservedNodes, cost, unknown, reserved)
	}
	checkReservations(t, opts, plan)
	launchDevices := 0
	for _, lo := range launching {
		if it, ok := cat.Lookup(lo.InstanceType); ok {
			launchDevices += it.Devices
		}
	}
	if opts.MaxNodes > 0 && newCount > max(0, opts.MaxNodes-opts.Existing.Nodes-len(launching)) {
		t.Errorf("%d new nodes break the limit of %d nodes", newCount, opts.MaxNodes)
	}
	if opts.MaxDevices > 0 && newDevices > max(0, opts.MaxDevices-opts.Existing.Devices-launchDevices) {
		t.Errorf("%d new devices break the limit of %d devices", newDevices, opts.MaxDevices)
	}
	for i, d := range decisions {
		key := pending[i].Key()
		switch {
		case onNode[key] > 1:
			t.Errorf("pod %s is on %d nodes", key, onNode[key])
		case d.Reason == ReasonTriggeredScaleUp && onNode[key] == 0 && !prior[key]:
			t.Errorf("pod %s: %q but on no node", key, d.Message)
		case d.Reason == ReasonTriggeredScaleUp && onNode[key] == 1 && (d.Node < 0 || !slices.ContainsFunc(plan.Nodes[d.Node].Pods, func(p Placement) bool { return p.Pod == key })):
			t.Errorf("pod %s: decision names node %d, which does not hold it", key, d.Node)
		case d.Reason == ReasonNotTriggerScaleUp && (onNode[key] > 0 || d.Message == "" || d.Node != -1):
			t.Errorf("pod %s: refused (%q) but on %d nodes, node %d", key, d.Message, onNode[key], d.Node)
		case d.Reason != ReasonTriggeredScaleUp && d.Reason != ReasonNotTriggerScaleUp:
			t.Errorf("pod %s: reason %q", key, d.Reason)
		}
	}
}

// randomDemand draws a pod: device or core requests (sometimes two containers), or a DRA claim,
// with no selector, a family, a type or an affinity.
func randomDemand(r *rand.Rand, name string, types []topology.InstanceType) PodDemand {
	b := testPod(name)
	dra := r.IntN(6) == 0
	if !dra {
		for range 1 + r.IntN(4)/3 {
			switch r.IntN(3) {
			case 0:
				b.Container(fmt.Sprintf("c%d", len(b.Obj().Spec.Containers)), topology.ResourceNeuronCore, []int64{1, 2, 3, 4, 8, 16}[r.IntN(6)])
			default:
				b.Container(fmt.Sprintf("c%d", len(b.Obj().Spec.Containers)), topology.ResourceNeuron, []int64{1, 1, 2, 4, 4, 6, 7, 8, 12, 16}[r.IntN(10)])
			}
		}
	}
	switch r.IntN(6) {
	case 0:
		b.Selector(labels.InstanceFamily, types[r.IntN(len(types))].Family)
	case 1:
		b.Selector(labels.InstanceType, types[r.IntN(len(types))].Name)
	case 2:
		b.Affinity(testkit.Term(testkit.Expr(labels.InstanceFamily, "NotIn", types[r.IntN(len(types))].Family)),
			testkit.Term(testkit.Expr(labels.InstanceType, "In", types[r.IntN(len(types))].Name)))
	}
	if dra {
		req := DRARequest{Count: []int{1, 2, 4, 8, 16}[r.IntN(5)], All: r.IntN(5) == 0}
		if r.IntN(3) == 0 {
			req.InstanceTypes = []string{types[r.IntN(len(types))].Name}
		}
		return demand(b, req)
	}
	return demand(b)
}

func TestPlanProperties(t *testing.T) {
	cat := topology.DefaultCatalog()
	types := cat.Types()
	for seed := range uint64(300) {
		r := rand.New(rand.NewPCG(seed, 7))
		var pending []PodDemand
		for i := range r.IntN(9) {
			pending = append(pending, randomDemand(r, fmt.Sprintf("p%d", i), types))
		}
		var launching []NodeOption
		for i := range r.IntN(3) {
			t := types[r.IntN(len(types))]
			lo := NodeOption{Name: fmt.Sprintf("l%d", i), InstanceType: t.Name}
			if r.IntN(4) == 0 {
				lo.Mode = labels.AllocationModeDRA
			}
			if len(pending) > 0 && r.IntN(2) == 0 {
				lo.Pods = append(lo.Pods, pending[r.IntN(len(pending))])
			}
			launching = append(launching, lo)
		}
		opts := Options{Catalog: cat}
		if r.IntN(3) == 0 {
			opts.MaxNodes = 1 + r.IntN(6)
		}
		if r.IntN(3) == 0 {
			opts.MaxDevices = r.IntN(60)
			opts.Existing = Capacity{Nodes: r.IntN(2), Devices: r.IntN(8)}
		}
		if r.IntN(4) == 0 {
			opts.Families = []string{"inf1", "trn1", "trn2"}[:1+r.IntN(3)]
		}
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			plan, decisions := Plan(pending, launching, opts)
			checkPlan(t, pending, launching, opts, plan, decisions)
			// Without limits or launching nodes, never dearer than one cheapest node per pod.
			if len(launching) > 0 || opts.MaxNodes > 0 || opts.MaxDevices > 0 {
				return
			}
			naive := perPodCost(pending, opts)
			if got := planCost(plan, decisions); naive.unplaced == 0 && naive.unknown == 0 && got.compare(naive) > 0 {
				t.Errorf("plan costs %+v, one node per pod %+v", got, naive)
			}
		})
	}
}

// TestPlanPacksWhereCheaper: many small pods cost far less packed than one node each.
func TestPlanPacksWhereCheaper(t *testing.T) {
	var pending []PodDemand
	for i := range 8 {
		pending = append(pending, demand(testPod(fmt.Sprintf("p%d", i)).Neuron(4).Selector(labels.InstanceFamily, "trn1")))
	}
	plan, decisions := Plan(pending, nil, Options{})
	checkPlan(t, pending, nil, Options{}, plan, decisions)
	if got := newNodes(plan); len(got) != 2 || plan.CostUSDPerHour != 43 {
		t.Errorf("nodes %v cost %v: want two trn1.32xlarge, $43/h (eight would cost $172/h)", got, plan.CostUSDPerHour)
	}
}

// lowerBound is a lower bound of what the pods the plan puts on new, priced nodes must cost: each
// pod pays for the share of a node its devices are (cores as whole devices' worth, a DRA "all"
// request a whole node, a request with alternatives one device) on the cheapest priced type it allows. No plan can cost less: a node's
// price is at least the sum of the shares of the pods on it.
func lowerBound(plan ScaleUp, pending []PodDemand, types []topology.InstanceType) float64 {
	byKey := map[string]PodDemand{}
	for _, d := range pending {
		byKey[d.Key()] = d
	}
	var sum float64
	for _, n := range plan.New() {
		if !n.InstanceType.PriceKnown() {
			continue
		}
		for _, pl := range n.Pods {
			d := byKey[pl.Pod]
			best := -1.0
			for _, t := range types {
				if !t.PriceKnown() || !d.Allows(t) {
					continue
				}
				var devices float64
				for _, r := range d.Requests {
					if r.Resource == topology.ResourceNeuronCore {
						devices += float64(r.Count) / float64(t.LogicalCoresPerDevice(0))
					} else {
						devices += float64(r.Count)
					}
				}
				for _, r := range d.DRA {
					switch {
					case r.FirstAvailable: // a later alternative may take fewer: one device at least
						devices++
					case r.All:
						devices += float64(t.Devices)
					default:
						devices += float64(r.Count)
					}
				}
				share := min(devices/float64(t.Devices), 1) * *t.PriceUSDPerHour
				if best < 0 || share < best {
					best = share
				}
			}
			if best > 0 {
				sum += best
			}
		}
	}
	return sum
}

// TestPlanBoundPodsTakeRoom: the scheduler put a pod planned elsewhere on a launching node; a
// pending pod planned onto that node no longer fits there and is planned again, and a pending
// pod that fits in the room left goes there without a new node.
func TestPlanBoundPodsTakeRoom(t *testing.T) {
	big := demand(testPod("big").Neuron(16).Selector(labels.InstanceFamily, "trn1"))
	four := demand(testPod("four").Neuron(4))
	one := demand(testPod("one").Neuron(1).Selector(labels.InstanceFamily, "trn1"))
	launching := []NodeOption{{Name: "n1", InstanceType: "trn1.32xlarge", Pods: []PodDemand{big}, Bound: []PodDemand{four}}}
	plan, decisions := Plan([]PodDemand{big, one}, launching, Options{})
	var newBig, oneOnN1 bool
	for _, n := range plan.Nodes {
		for _, pl := range n.Pods {
			if pl.Pod == big.Key() && !n.Launching {
				newBig = true
			}
			if pl.Pod == one.Key() && n.Name == "n1" {
				oneOnN1 = true
			}
		}
	}
	if !newBig {
		t.Errorf("the 16-device pod whose room was taken got no new node: %+v %+v", plan, decisions)
	}
	if !oneOnN1 {
		t.Errorf("the 1-device pod did not go into the launching node's free room: %+v", plan)
	}
}
