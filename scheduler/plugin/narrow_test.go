package plugin

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/utils/ptr"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/testkit"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// activatingHandle is a fakeHandle that records the pods the plugin activates.
type activatingHandle struct {
	*fakeHandle
	activated []string
}

func (h *activatingHandle) Activate(_ klog.Logger, pods map[string]*corev1.Pod) {
	for k := range pods {
		h.activated = append(h.activated, k)
	}
}

// readyNode is a node of the type as a kubelet reports it: allocatable CPU, memory, pods and
// the device plugin's Neuron resources.
func readyNode(name, typ string) *testkit.NodeWrapper {
	w := testkit.MakeNode().Name(name).InstanceType(typ).DevicePlugin().Ready()
	n := w.Obj()
	n.Status.Allocatable = n.Status.Capacity.DeepCopy()
	n.Status.Allocatable[corev1.ResourceCPU] = resource.MustParse("128")
	n.Status.Allocatable[corev1.ResourceMemory] = resource.MustParse("512Gi")
	n.Status.Allocatable[corev1.ResourcePods] = resource.MustParse("110")
	return w
}

// coresUsed is a running pod holding the cores on the node (two cores per device, as on trn1
// and inf2).
func coresUsed(node string, cores ...int) *corev1.Pod {
	var devices []int
	for _, c := range cores {
		if d := c / 2; !slices.Contains(devices, d) {
			devices = append(devices, d)
		}
	}
	rec := &allocation.Record{Node: node, Containers: []allocation.Container{{Name: "main", Resource: topology.ResourceNeuronCore, Devices: devices, Cores: cores}}}
	return testkit.MakePod().Name(fmt.Sprintf("%s-%v", node, cores)).Container("main", topology.ResourceNeuronCore, int64(len(cores))).Node(node).Running().Record(rec).Obj()
}

func preFilter(t *testing.T, p *Plugin, pod *corev1.Pod) (sets.Set[string], fwk.CycleState) {
	t.Helper()
	state := framework.NewCycleState()
	res, st := p.PreFilter(context.Background(), state, pod, nil)
	if !st.IsSuccess() {
		t.Fatalf("PreFilter: %v", st)
	}
	if res.AllNodes() {
		return nil, state
	}
	return res.NodeNames, state
}

// TestCandidatesAreTheBestScored: on fleets of trn1 and inf2 nodes with random cores in use,
// PreFilter narrows a pod to the candidateNodes nodes on which Score ranks it highest: no node
// left out scores more than one handed on, and every node handed on passes Filter.
func TestCandidatesAreTheBestScored(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 20 {
		var nodes []*corev1.Node
		var pods []*corev1.Pod
		for i := range 40 {
			typ, cores := "trn1.32xlarge", 32
			if i%2 == 1 {
				typ, cores = "inf2.48xlarge", 24
			}
			name := fmt.Sprintf("n%02d", i)
			nodes = append(nodes, readyNode(name, typ).Obj())
			used := rng.Perm(cores)[:rng.IntN(cores+1)]
			for _, c := range used {
				pods = append(pods, coresUsed(name, c))
			}
		}
		p := newPlugin(newHandle(t, pods, nodes...), topology.BestFit, topology.DefaultCatalog())
		p.candidateNodes = 1 + round%5
		pod := testkit.MakePod().Name("p").NeuronCores(int64(1 + rng.IntN(4))).Obj()
		names, state := preFilter(t, p, pod)
		if names == nil {
			t.Fatalf("round %d: not narrowed", round)
		}
		lowest, highestLeft := int64(fwk.MaxNodeScore+1), int64(-1)
		fits := 0
		for _, n := range nodes {
			ni, _ := p.h.SnapshotSharedLister().NodeInfos().Get(n.Name)
			if !p.Filter(context.Background(), state, pod, ni).IsSuccess() {
				if names.Has(n.Name) {
					t.Errorf("round %d: candidate %s fails Filter", round, n.Name)
				}
				continue
			}
			fits++
			score, _ := p.Score(context.Background(), state, pod, ni)
			if names.Has(n.Name) {
				lowest = min(lowest, score)
			} else {
				highestLeft = max(highestLeft, score)
			}
		}
		if want := min(fits, p.candidateNodes); names.Len() != want {
			t.Errorf("round %d: %d candidates, want %d (%d nodes fit)", round, names.Len(), want, fits)
		}
		if highestLeft > lowest {
			t.Errorf("round %d: a node left out scores %d, above the lowest candidate's %d", round, highestLeft, lowest)
		}
	}
}

// TestCandidatesPreferThePartUsedNode: a one-core pod on a fleet of empty nodes and one node with
// a core left beside a used one is narrowed to that node first: the node a sample would miss.
func TestCandidatesPreferThePartUsedNode(t *testing.T) {
	nodes := []*corev1.Node{readyNode("part", "inf2.48xlarge").Obj()}
	for i := range 30 {
		nodes = append(nodes, readyNode(fmt.Sprintf("empty-%02d", i), "trn1.32xlarge").Obj())
	}
	p := newPlugin(newHandle(t, []*corev1.Pod{coresUsed("part", 0, 1, 2)}, nodes...), topology.BestFit, topology.DefaultCatalog())
	p.candidateNodes = 1
	names, _ := preFilter(t, p, testkit.MakePod().Name("p").NeuronCores(1).Obj())
	if !names.Equal(sets.New("part")) {
		t.Errorf("candidates %v, want [part]", sets.List(names))
	}
}

// TestCandidatesPassTheHostFilters: a node that the pod's Neuron requests fit best but that
// NodeUnschedulable, TaintToleration, NodeAffinity or NodeResourcesFit refuses is not a
// candidate; the next best is.
func TestCandidatesPassTheHostFilters(t *testing.T) {
	noSchedule := corev1.Taint{Key: "dedicated", Value: "x", Effect: corev1.TaintEffectNoSchedule}
	for _, tc := range []struct {
		name string
		best func(*testkit.NodeWrapper)
		pod  func(*testkit.PodWrapper)
		want string // the candidate
	}{
		{name: "as is", want: "best"},
		{name: "cordoned", best: func(w *testkit.NodeWrapper) { w.Unschedulable() }, want: "other"},
		{name: "cordoned, tolerated", best: func(w *testkit.NodeWrapper) { w.Unschedulable() },
			pod: func(w *testkit.PodWrapper) {
				w.Tolerations(corev1.Toleration{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule})
			}, want: "best"},
		{name: "tainted", best: func(w *testkit.NodeWrapper) { w.Taint(noSchedule) }, want: "other"},
		{name: "tainted, tolerated", best: func(w *testkit.NodeWrapper) { w.Taint(noSchedule) },
			pod: func(w *testkit.PodWrapper) {
				w.Tolerations(corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "x"})
			},
			want: "best"},
		{name: "PreferNoSchedule", best: func(w *testkit.NodeWrapper) {
			w.Taint(corev1.Taint{Key: "soft", Effect: corev1.TaintEffectPreferNoSchedule})
		}, want: "best"},
		{name: "node selector", pod: func(w *testkit.PodWrapper) { w.Selector("pool", "b") }, want: "other"},
		{name: "required node affinity", pod: func(w *testkit.PodWrapper) {
			w.Affinity(corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "pool", Operator: corev1.NodeSelectorOpIn, Values: []string{"b"}}}})
		}, want: "other"},
		{name: "CPU", best: func(w *testkit.NodeWrapper) {
			w.Obj().Status.Allocatable[corev1.ResourceCPU] = resource.MustParse("1")
		}, want: "other"},
		{name: "pod count", best: func(w *testkit.NodeWrapper) {
			w.Obj().Status.Allocatable[corev1.ResourcePods] = resource.MustParse("1")
		}, want: "other"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			best := readyNode("best", "inf2.48xlarge").Label("pool", "a")
			if tc.best != nil {
				tc.best(best)
			}
			other := readyNode("other", "trn1.32xlarge").Label("pool", "b")
			p := newPlugin(newHandle(t, []*corev1.Pod{coresUsed("best", 0)}, best.Obj(), other.Obj()), topology.BestFit, topology.DefaultCatalog())
			p.candidateNodes = 1
			w := testkit.MakePod().Name("p").NeuronCores(1)
			w.Obj().Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}
			if tc.pod != nil {
				tc.pod(w)
			}
			names, _ := preFilter(t, p, w.Obj())
			if !names.Equal(sets.New(tc.want)) {
				t.Errorf("candidates %v, want [%s]", sets.List(names), tc.want)
			}
		})
	}
}

// TestPodsNotNarrowed: PreFilter leaves the whole fleet to the framework for a pod asking for
// anything the candidates' checks do not repeat, and when narrowing is off.
func TestPodsNotNarrowed(t *testing.T) {
	term := corev1.PodAffinityTerm{TopologyKey: "kubernetes.io/hostname", LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}}}
	for _, tc := range []struct {
		name string
		pod  func(*corev1.Pod)
		off  bool
		want bool // narrowed
	}{
		{name: "plain", want: true},
		{name: "node-local volumes", want: true, pod: func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{
				{Name: "a", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "b", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{}}},
				{Name: "c", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{}}},
				{Name: "d", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{}}},
				{Name: "e", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/dev/shm"}}},
			}
		}},
		{name: "narrowing off", off: true},
		{name: "persistent volume claim", pod: func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}
		}},
		{name: "host port", pod: func(p *corev1.Pod) {
			p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 8080, HostPort: 8080}}
		}},
		{name: "pod anti-affinity", pod: func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{term}}}
		}},
		{name: "pod affinity", pod: func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{Weight: 1, PodAffinityTerm: term}}}}
		}},
		{name: "preferred node affinity", pod: func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 1, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "pool", Operator: corev1.NodeSelectorOpExists}}}}}}}
		}},
		{name: "topology spread", pod: func(p *corev1.Pod) {
			p.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "topology.kubernetes.io/zone", WhenUnsatisfiable: corev1.ScheduleAnyway}}
		}},
		{name: "resource claim", pod: func(p *corev1.Pod) {
			p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("t")}}
		}},
		{name: "planned node", pod: func(p *corev1.Pod) { p.Annotations[labels.PlannedNodeAnnotation] = "gone" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPlugin(newHandle(t, nil, readyNode("a", "trn1.32xlarge").Obj(), readyNode("b", "inf2.48xlarge").Obj()), topology.BestFit, topology.DefaultCatalog())
			if tc.off {
				p.candidateNodes = 0
			}
			pod := testkit.MakePod().Name("p").NeuronCores(1).Obj()
			if tc.pod != nil {
				tc.pod(pod)
			}
			if names, _ := preFilter(t, p, pod); (names != nil) != tc.want {
				t.Errorf("narrowed to %v, want narrowed %v", sets.List(names), tc.want)
			}
		})
	}
}

// TestPlacedPodsAntiAffinity: a placed pod whose required anti-affinity selects the pod (by
// namespace, or by any namespace selector, whose labels the plugin does not know) keeps the pod
// from being narrowed; one that selects other pods does not.
func TestPlacedPodsAntiAffinity(t *testing.T) {
	anti := func(ns []string, nsSelector *metav1.LabelSelector) *corev1.Pod {
		q := testkit.MakePod().Name("guard").Node("a").Running().Obj()
		q.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			TopologyKey: "topology.kubernetes.io/zone", Namespaces: ns, NamespaceSelector: nsSelector,
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "train"}},
		}}}}
		return q
	}
	for _, tc := range []struct {
		name   string
		placed *corev1.Pod
		labels string
		want   bool
	}{
		{name: "selects the pod", placed: anti(nil, nil), labels: "train"},
		{name: "selects other pods", placed: anti(nil, nil), labels: "serve", want: true},
		{name: "other namespace", placed: anti([]string{"elsewhere"}, nil), labels: "train", want: true},
		{name: "namespace selector", placed: anti([]string{"elsewhere"}, &metav1.LabelSelector{MatchLabels: map[string]string{"team": "ml"}}), labels: "train"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPlugin(newHandle(t, []*corev1.Pod{tc.placed}, readyNode("a", "trn1.32xlarge").Obj(), readyNode("b", "trn1.32xlarge").Obj()), topology.BestFit, topology.DefaultCatalog())
			pod := testkit.MakePod().Name("p").Label("app", tc.labels).NeuronCores(1).Obj()
			if names, _ := preFilter(t, p, pod); (names != nil) != tc.want {
				t.Errorf("narrowed to %v, want narrowed %v", sets.List(names), tc.want)
			}
		})
	}
}

// TestCandidatesSkipNodesWithNominatedPods: a node with a pod nominated to it (of the pod's
// priority or above) is left to the usual sampling, whose Filter sees the nominated pod.
func TestCandidatesSkipNodesWithNominatedPods(t *testing.T) {
	h := newHandle(t, []*corev1.Pod{coresUsed("best", 0)}, readyNode("best", "inf2.48xlarge").Obj(), readyNode("other", "trn1.32xlarge").Obj())
	low := testkit.MakePod().Name("low").NeuronCores(1).Obj()
	low.Spec.Priority = ptr.To[int32](-1)
	h.nominated = map[string][]*corev1.Pod{"best": {low}}
	p := newPlugin(h, topology.BestFit, topology.DefaultCatalog())
	p.candidateNodes = 1
	pod := testkit.MakePod().Name("p").NeuronCores(1).Obj()
	if names, _ := preFilter(t, p, pod); !names.Equal(sets.New("best")) {
		t.Errorf("beside a lower-priority nominated pod: candidates %v, want [best]", sets.List(names))
	}
	low.Spec.Priority = ptr.To[int32](0)
	if names, _ := preFilter(t, p, pod); !names.Equal(sets.New("other")) {
		t.Errorf("beside a nominated pod of the same priority: candidates %v, want [other]", sets.List(names))
	}
}

// TestNarrowedCycleWithoutNodeTriesEveryNode: when no candidate passed the framework's filters,
// PostFilter activates the pod and stops the PostFilter plugins after it (nothing is preempted);
// the pod's next cycle is not narrowed, and the one after is again.
func TestNarrowedCycleWithoutNodeTriesEveryNode(t *testing.T) {
	before := narrowingCounts(t)
	h := &activatingHandle{fakeHandle: newHandle(t, nil, readyNode("a", "trn1.32xlarge").Obj())}
	p := newPlugin(h, topology.BestFit, topology.DefaultCatalog())
	pod := testkit.MakePod().Name("p").UID("uid-p").NeuronCores(1).Obj()
	names, state := preFilter(t, p, pod)
	if names == nil {
		t.Fatal("not narrowed")
	}
	_, st := p.PostFilter(context.Background(), state, pod, framework.NewDefaultNodeToStatus())
	if st.Code() != fwk.UnschedulableAndUnresolvable || !strings.Contains(st.Message(), "the nodes NeuronTopology ranked best for the pod (candidateNodes 10) did not pass the other filters; the pod is tried again on every node") {
		t.Errorf("PostFilter: %v, want UnschedulableAndUnresolvable saying the pod is tried on every node", st)
	}
	if !slices.Equal(h.activated, []string{"default/p"}) {
		t.Errorf("activated %v, want [default/p]", h.activated)
	}
	if names, state = preFilter(t, p, pod); names != nil {
		t.Errorf("the cycle after: narrowed to %v, want every node", sets.List(names))
	}
	if _, st := p.PostFilter(context.Background(), state, pod, framework.NewDefaultNodeToStatus()); st.Code() != fwk.Unschedulable {
		t.Errorf("PostFilter of a cycle not narrowed: %v, want Unschedulable (the next PostFilter plugin runs)", st)
	}
	if names, _ = preFilter(t, p, pod); names == nil {
		t.Error("the cycle after that: not narrowed")
	}
	// scheduler_neuron_topology_narrowing_total counted each cycle.
	after := narrowingCounts(t)
	for result, want := range map[string]float64{narrowedResult: 2, sampledResult: 1, retriedResult: 1} {
		if got := after[result] - before[result]; got != want {
			t.Errorf("narrowing_total{result=%q} went up by %v, want %v", result, got, want)
		}
	}
}

// narrowingCounts reads scheduler_neuron_topology_narrowing_total by result.
func narrowingCounts(t *testing.T) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, r := range []string{narrowedResult, sampledResult, retriedResult} {
		v, err := testutil.GetCounterMetricValue(narrowingCycles.WithLabelValues(r))
		if err != nil {
			t.Fatal(err)
		}
		out[r] = v
	}
	return out
}

// TestCandidatesFollowTheSnapshot: narrowing reads the cycle's snapshot, so the pod Reserve
// placed in one cycle moves the next pod's candidates: it fills the half-used device of b, whose
// next core then breaks a free segment, and a, with a half-used device left, comes first.
func TestCandidatesFollowTheSnapshot(t *testing.T) {
	nodes := []*corev1.Node{readyNode("a", "inf2.48xlarge").Obj(), readyNode("b", "inf2.48xlarge").Obj()}
	placed := []*corev1.Pod{coresUsed("a", 0), coresUsed("b", 0, 1, 2)}
	h := newHandle(t, placed, nodes...)
	p := newPlugin(h, topology.BestFit, topology.DefaultCatalog())
	p.candidateNodes = 1
	first := testkit.MakePod().Name("first").UID("uid-first").NeuronCores(1).Obj()
	names, state := preFilter(t, p, first)
	if !names.Equal(sets.New("b")) {
		t.Fatalf("first pod: candidates %v, want [b] (a half-used device on both, b fuller)", sets.List(names))
	}
	if st := p.Reserve(context.Background(), state, first, "b"); !st.IsSuccess() {
		t.Fatal(st)
	}
	assumed := first.DeepCopy()
	assumed.Spec.NodeName = "b" // the scheduler's cache holds the assumed pod, without a record
	h.snapshot = cache.NewSnapshot(append(placed, assumed), nodes)
	if names, _ := preFilter(t, p, testkit.MakePod().Name("second").NeuronCores(1).Obj()); !names.Equal(sets.New("a")) {
		t.Errorf("second pod: candidates %v, want [a]", sets.List(names))
	}
}
