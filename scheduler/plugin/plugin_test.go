package plugin

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/events"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/testkit"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// fakeHandle is the part of the framework's Handle the plugin uses: the snapshot, the nominated
// pods, a client and an event recorder. Any other method panics (the embedded nil interface).
type fakeHandle struct {
	fwk.Handle
	snapshot  *cache.Snapshot
	nominated map[string][]*corev1.Pod
	client    *fake.Clientset
	recorder  *events.FakeRecorder
}

func (h *fakeHandle) SnapshotSharedLister() fwk.SharedLister    { return h.snapshot }
func (h *fakeHandle) ClientSet() kubernetes.Interface           { return h.client }
func (h *fakeHandle) EventRecorder() events.EventRecorderLogger { return h.recorder }
func (h *fakeHandle) NominatedPodsForNode(node string) []fwk.PodInfo {
	var out []fwk.PodInfo
	for _, p := range h.nominated[node] {
		pi, _ := framework.NewPodInfo(p)
		out = append(out, pi)
	}
	return out
}

func newHandle(t *testing.T, pods []*corev1.Pod, nodes ...*corev1.Node) *fakeHandle {
	t.Helper()
	return &fakeHandle{snapshot: cache.NewSnapshot(pods, nodes), client: fake.NewClientset(), recorder: events.NewFakeRecorder(10)}
}

func trn1(name string) *corev1.Node {
	return testkit.MakeNode().Name(name).InstanceType("trn1.32xlarge").DevicePlugin().Obj()
}

// cycle runs PreFilter and Filter for the pod on every node of the snapshot, and returns the
// statuses by node.
func cycle(t *testing.T, p *Plugin, state fwk.CycleState, pod *corev1.Pod) map[string]*fwk.Status {
	t.Helper()
	ctx := context.Background()
	if _, st := p.PreFilter(ctx, state, pod, nil); !st.IsSuccess() {
		t.Fatalf("PreFilter: %v", st)
	}
	nis, err := p.h.SnapshotSharedLister().NodeInfos().List()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*fwk.Status{}
	for _, ni := range nis {
		out[ni.Node().Name] = p.Filter(ctx, state, pod, ni)
	}
	return out
}

func TestArgs(t *testing.T) {
	for _, tc := range []struct {
		args           string
		want           topology.Policy
		wantCandidates int
		wantErr        string
	}{
		{args: `{}`, want: topology.BestFit, wantCandidates: DefaultCandidateNodes},
		{args: `{"policy":"first-fit"}`, want: topology.FirstFit, wantCandidates: DefaultCandidateNodes},
		{args: `{"candidateNodes":0}`, want: topology.BestFit, wantCandidates: 0},
		{args: `{"policy":"best-fit","candidateNodes":3}`, want: topology.BestFit, wantCandidates: 3},
		{args: `{"candidateNodes":-1}`, wantErr: "args.candidateNodes -1 is negative: use 0 to turn narrowing off"},
		{args: `{"candidateNodes":"ten"}`, wantErr: "cannot unmarshal"},
		{args: `{"policy":"tightest"}`, wantErr: `args.policy "tightest" is not a placement policy: use best-fit or first-fit`},
		{args: `{"polcy":"first-fit"}`, wantErr: "unknown field"},
	} {
		got, err := New(context.Background(), &runtime.Unknown{Raw: []byte(tc.args), ContentType: runtime.ContentTypeJSON}, nil)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("args %s: error %v, want one containing %q", tc.args, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("args %s: %v", tc.args, err)
		}
		if p := got.(*Plugin).policy; p != tc.want {
			t.Errorf("args %s: policy %s, want %s", tc.args, p, tc.want)
		}
		if n := got.(*Plugin).candidateNodes; n != tc.wantCandidates {
			t.Errorf("args %s: candidateNodes %d, want %d", tc.args, n, tc.wantCandidates)
		}
	}
}

// TestReserveCountsForTheNextCycle schedules 4-device pods one after another as the scheduler
// does (the snapshot of each cycle holds the pods assumed before, without their records): each
// gets an aligned block of its own, and once the node is full the next pod is refused.
func TestReserveCountsForTheNextCycle(t *testing.T) {
	node := trn1("trn1-a")
	h := newHandle(t, nil, node)
	p := newPlugin(h, topology.BestFit, topology.DefaultCatalog())
	var assumed []*corev1.Pod
	var blocks [][]int
	for i := range 5 {
		h.snapshot = cache.NewSnapshot(assumed, []*corev1.Node{node})
		pod := testkit.MakePod().Name("four-" + string(rune('a'+i))).Neuron(4).Obj()
		state := framework.NewCycleState()
		st := cycle(t, p, state, pod)["trn1-a"]
		if i == 4 {
			if st.Code() != fwk.Unschedulable || !strings.Contains(st.Message(), "4") {
				t.Fatalf("fifth pod: status %v, want Unschedulable (the node is full)", st)
			}
			break
		}
		if !st.IsSuccess() {
			t.Fatalf("pod %d: Filter %v", i, st)
		}
		if st := p.Reserve(context.Background(), state, pod, "trn1-a"); !st.IsSuccess() {
			t.Fatalf("pod %d: Reserve %v", i, st)
		}
		blocks = append(blocks, p.reserved.get(pod.UID).Containers[0].Devices)
		a := pod.DeepCopy()
		a.Spec.NodeName = "trn1-a" // the scheduler assumed it: on the node, without a record
		assumed = append(assumed, a)
	}
	slices.SortFunc(blocks, func(a, b []int) int { return a[0] - b[0] })
	want := [][]int{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15}}
	if !slices.EqualFunc(blocks, want, slices.Equal) {
		t.Errorf("blocks %v, want the four aligned blocks %v", blocks, want)
	}
	// Unreserve frees the devices of a pod whose binding failed.
	p.Unreserve(context.Background(), nil, assumed[0], "trn1-a")
	h.snapshot = cache.NewSnapshot(assumed[1:], []*corev1.Node{node})
	if st := cycle(t, p, framework.NewCycleState(), testkit.MakePod().Name("again").Neuron(4).Obj())["trn1-a"]; !st.IsSuccess() {
		t.Errorf("after Unreserve: %v, want the freed block to take the pod", st)
	}
}

// TestUnsupportedCount: 7 devices on a trn1.32xlarge is refused with the seeds' message, as
// unresolvable (preemption cannot help), and PostFilter warns the pod once.
func TestUnsupportedCount(t *testing.T) {
	h := newHandle(t, nil, trn1("trn1-a"))
	p := newPlugin(h, topology.BestFit, topology.DefaultCatalog())
	pod := testkit.MakePod().Name("seven").Neuron(7).Obj()
	state := framework.NewCycleState()
	st := cycle(t, p, state, pod)["trn1-a"]
	const msg = "Instance type trn1.32xlarge does not support requests for device: 7. Please request a different number of devices."
	if st.Code() != fwk.UnschedulableAndUnresolvable || st.Message() != msg {
		t.Fatalf("Filter: %v %q, want UnschedulableAndUnresolvable %q", st.Code(), st.Message(), msg)
	}
	for range 2 {
		cycle(t, p, state, pod)
		if _, st := p.PostFilter(context.Background(), state, pod, nil); st.Code() != fwk.Unschedulable {
			t.Fatalf("PostFilter: %v, want Unschedulable (it never makes a pod schedulable)", st)
		}
	}
	select {
	case e := <-h.recorder.Events:
		if !strings.Contains(e, "Warning UnsupportedNeuronRequest") || !strings.Contains(e, msg) {
			t.Errorf("event %q, want a Warning UnsupportedNeuronRequest with the message", e)
		}
	default:
		t.Fatal("no UnsupportedNeuronRequest event")
	}
	select {
	case e := <-h.recorder.Events:
		t.Errorf("a second event within the minute: %q", e)
	default:
	}
}

// TestPodsWithoutNeuronRequests are left to the other plugins: PreFilter and PreScore skip,
// Bind skips (DefaultBinder binds), SignPod signs.
func TestPodsWithoutNeuronRequests(t *testing.T) {
	h := newHandle(t, nil, trn1("trn1-a"))
	p := newPlugin(h, topology.BestFit, topology.DefaultCatalog())
	pod := testkit.MakePod().Name("web").Obj()
	state := framework.NewCycleState()
	if _, st := p.PreFilter(context.Background(), state, pod, nil); !st.IsSkip() {
		t.Errorf("PreFilter: %v, want Skip", st)
	}
	if st := p.PreScore(context.Background(), state, pod, nil); !st.IsSkip() {
		t.Errorf("PreScore: %v, want Skip", st)
	}
	if st := p.Bind(context.Background(), state, pod, "trn1-a"); !st.IsSkip() {
		t.Errorf("Bind: %v, want Skip", st)
	}
	if _, st := p.SignPod(context.Background(), pod); !st.IsSuccess() {
		t.Errorf("SignPod: %v, want a signature", st)
	}
	if _, st := p.SignPod(context.Background(), testkit.MakePod().Name("n").Neuron(1).Obj()); st.IsSuccess() {
		t.Error("SignPod signed a Neuron pod")
	}
}

// TestUsageFromRecords: bound pods count by their records, the published stack's too; a
// terminated pod counts nothing.
func TestUsageFromRecords(t *testing.T) {
	node := trn1("trn1-a")
	rec := func(devs ...int) *allocation.Record {
		var cores []int
		for _, d := range devs {
			cores = append(cores, 2*d, 2*d+1)
		}
		return &allocation.Record{Node: "trn1-a", Containers: []allocation.Container{{Name: "main", Resource: topology.ResourceNeuron, Devices: devs, Cores: cores}}}
	}
	pods := []*corev1.Pod{
		testkit.MakePod().Name("a").Neuron(8).Node("trn1-a").Running().Record(rec(0, 1, 2, 3, 4, 5, 6, 7)).Obj(),
		testkit.MakePod().Name("b").Neuron(4).Node("trn1-a").Running().Published("8,9,10,11").Obj(),
		testkit.MakePod().Name("done").Neuron(4).Node("trn1-a").Phase(corev1.PodSucceeded).Record(rec(12, 13, 14, 15)).Obj(),
	}
	h := newHandle(t, pods, node)
	p := newPlugin(h, topology.BestFit, topology.DefaultCatalog())
	if st := cycle(t, p, framework.NewCycleState(), testkit.MakePod().Name("four").Neuron(4).Obj())["trn1-a"]; !st.IsSuccess() {
		t.Fatalf("4 devices beside 8 + 4 in use: %v, want them to fit on 12-15", st)
	}
	if st := cycle(t, p, framework.NewCycleState(), testkit.MakePod().Name("eight").Neuron(8).Obj())["trn1-a"]; st.Code() != fwk.Unschedulable {
		t.Fatalf("8 devices beside 12 in use: %v, want Unschedulable", st)
	}
}

// TestNominatedPodsKeepTheirRoom: the framework adds the pods nominated to a node to the NodeInfo
// it filters on; a pod tried first does not take the room they need, and Reserve chooses beside
// them too.
func TestNominatedPodsKeepTheirRoom(t *testing.T) {
	node := trn1("trn1-a")
	big := testkit.MakePod().Name("big").Neuron(16).Obj() // nominated, not bound
	h := newHandle(t, nil, node)
	h.nominated = map[string][]*corev1.Pod{"trn1-a": {big}}
	p := newPlugin(h, topology.BestFit, topology.DefaultCatalog())
	small := testkit.MakePod().Name("small").Neuron(4).Obj()
	state := framework.NewCycleState()
	if _, st := p.PreFilter(context.Background(), state, small, nil); !st.IsSuccess() {
		t.Fatal(st)
	}
	withNominated := framework.NewNodeInfo(big)
	withNominated.SetNode(node)
	st := p.Filter(context.Background(), state, small, withNominated)
	if st.Code() != fwk.Unschedulable || !strings.Contains(st.Message(), "held for the pods nominated to it (default/big)") {
		t.Fatalf("Filter beside a nominated 16-device pod: %v, want Unschedulable naming default/big", st)
	}
	if st := p.Reserve(context.Background(), state, small, "trn1-a"); st.Code() != fwk.Unschedulable || !strings.Contains(st.Message(), "beside the pods nominated to it (default/big)") {
		t.Fatalf("Reserve: %v, want Unschedulable naming default/big", st)
	}
	if score, _ := p.Score(context.Background(), state, small, withNominated); score != 0 {
		t.Errorf("Score where the pod does not fit beside the nominated pod: %d, want 0", score)
	}
}

// TestPlannedNodeHoldsThePod: a pod neuron-autoscaler launched a node for waits for that node
// while it is launching, and ranks it first.
func TestPlannedNodeHoldsThePod(t *testing.T) {
	planned := testkit.MakeNode().Name("new").InstanceType("trn1.32xlarge").DevicePlugin().Taint(corev1.Taint{Key: labels.LaunchingTaintKey, Effect: corev1.TaintEffectNoSchedule}).Obj()
	planned.CreationTimestamp = metav1.NewTime(time.Now())
	other := trn1("old")
	h := newHandle(t, nil, planned, other)
	p := newPlugin(h, topology.BestFit, topology.DefaultCatalog())
	pod := testkit.MakePod().Name("p").Neuron(4).Annotation(labels.PlannedNodeAnnotation, "new").Obj()
	state := framework.NewCycleState()
	got := cycle(t, p, state, pod)
	if st := got["old"]; st.Code() != fwk.Unschedulable || !strings.Contains(st.Message(), "the pod waits for node new, which neuron-autoscaler launched for it") {
		t.Errorf("other node: %v, want Unschedulable saying the pod waits for node new", st)
	}
	if st := got["new"]; !st.IsSuccess() {
		t.Errorf("planned node: %v", st)
	}
	ni, _ := h.snapshot.NodeInfos().Get("new")
	if s, _ := p.Score(context.Background(), state, pod, ni); s != fwk.MaxNodeScore {
		t.Errorf("planned node scores %d, want %d", s, fwk.MaxNodeScore)
	}
	// Once the node serves (taint gone), the pod may go anywhere.
	planned.Spec.Taints = nil
	h.snapshot = cache.NewSnapshot(nil, []*corev1.Node{planned, other})
	if st := cycle(t, p, framework.NewCycleState(), pod)["old"]; !st.IsSuccess() {
		t.Errorf("other node once the planned one serves: %v", st)
	}
}

// TestBindCarriesTheRecord: the Binding carries the record Reserve chose, NEURON_ALLOC_TIME and
// the pod's UID, in one request.
func TestBindCarriesTheRecord(t *testing.T) {
	h := newHandle(t, nil, trn1("trn1-a"))
	var mu sync.Mutex
	var got []*corev1.Binding
	h.client.PrependReactor("create", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "binding" {
			return false, nil, nil
		}
		mu.Lock()
		defer mu.Unlock()
		got = append(got, a.(clienttesting.CreateAction).GetObject().(*corev1.Binding))
		return true, nil, nil
	})
	p := newPlugin(h, topology.BestFit, topology.DefaultCatalog())
	pod := testkit.MakePod().Name("two").NeuronCores(2).Obj()
	state := framework.NewCycleState()
	cycle(t, p, state, pod)
	if st := p.Reserve(context.Background(), state, pod, "trn1-a"); !st.IsSuccess() {
		t.Fatal(st)
	}
	if st := p.Bind(context.Background(), state, pod, "trn1-a"); !st.IsSuccess() {
		t.Fatal(st)
	}
	if len(got) != 1 {
		t.Fatalf("%d Bindings, want 1", len(got))
	}
	b := got[0]
	rec, err := allocation.Parse(b.Annotations[allocation.Annotation])
	if err != nil || rec.Node != "trn1-a" || !slices.Equal(rec.Containers[0].Cores, []int{0, 1}) {
		t.Errorf("record %+v (%v), want cores 0,1 on trn1-a", rec, err)
	}
	if b.UID != pod.UID || b.Target.Name != "trn1-a" || b.Annotations[allocation.AllocTime] == "" || b.Annotations[allocation.AWSNeuronIDs] != "0,1" {
		t.Errorf("binding %+v", b)
	}
}

// BenchmarkFilter is one Filter call on a trn1.32xlarge with four pods on it: cached (the
// node did not change since the last pod of the same shape) and derived (a new generation).
func BenchmarkFilter(b *testing.B) {
	node := trn1("trn1-a")
	var pods []*corev1.Pod
	for i, devs := range [][]int{{0}, {4, 5, 6, 7}, {8}, {12}} {
		var cores []int
		for _, d := range devs {
			cores = append(cores, 2*d, 2*d+1)
		}
		name := "p" + string(rune('a'+i))
		pods = append(pods, testkit.MakePod().Name(name).Neuron(int64(len(devs))).Node("trn1-a").Running().
			Record(&allocation.Record{Node: "trn1-a", Containers: []allocation.Container{{Name: "main", Resource: topology.ResourceNeuron, Devices: devs, Cores: cores}}}).Obj())
	}
	h := &fakeHandle{snapshot: cache.NewSnapshot(pods, []*corev1.Node{node})}
	p := newPlugin(h, topology.BestFit, topology.DefaultCatalog())
	pod := testkit.MakePod().Name("one").Neuron(1).Obj()
	state := framework.NewCycleState()
	if _, st := p.PreFilter(context.Background(), state, pod, nil); !st.IsSuccess() {
		b.Fatal(st)
	}
	ni, _ := h.snapshot.NodeInfos().Get("trn1-a")
	b.Run("cached", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if st := p.Filter(context.Background(), state, pod, ni); !st.IsSuccess() {
				b.Fatal(st)
			}
		}
	})
	b.Run("derived", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			p.nodes.forget("trn1-a")
			if st := p.Filter(context.Background(), state, pod, ni); !st.IsSuccess() {
				b.Fatal(st)
			}
		}
	})
}

// TestBindWithoutReservationFails: a Neuron pod is never left to DefaultBinder, which would bind
// it without a record.
func TestBindWithoutReservationFails(t *testing.T) {
	h := newHandle(t, nil, trn1("trn1-a"))
	p := newPlugin(h, topology.BestFit, topology.DefaultCatalog())
	pod := testkit.MakePod().Name("four").Neuron(4).Obj()
	state := framework.NewCycleState()
	cycle(t, p, state, pod)
	st := p.Bind(context.Background(), state, pod, "trn1-a")
	if st.Code() != fwk.Error || !strings.Contains(st.Message(), "no Neuron devices are reserved for pod default/four on node trn1-a") {
		t.Fatalf("Bind without Reserve: %v, want an Error naming the pod", st)
	}
	if n := len(h.client.Actions()); n != 0 {
		t.Errorf("%d API calls, want none", n)
	}
}

// TestScoreBesideNominatedPods: Score gets the snapshot's NodeInfo, without the pods nominated
// to the node, yet ranks the node by the placement Filter found beside them.
func TestScoreBesideNominatedPods(t *testing.T) {
	node := trn1("trn1-a")
	big := testkit.MakePod().Name("big").Neuron(8).Obj() // nominated, not bound
	h := newHandle(t, nil, node)
	p := newPlugin(h, topology.BestFit, topology.DefaultCatalog())
	small := testkit.MakePod().Name("small").Neuron(4).Obj()
	ni, _ := h.snapshot.NodeInfos().Get("trn1-a")
	ctx := context.Background()

	alone := framework.NewCycleState()
	cycle(t, p, alone, small)
	scoreAlone, _ := p.Score(ctx, alone, small, ni)

	state := framework.NewCycleState()
	if _, st := p.PreFilter(ctx, state, small, nil); !st.IsSuccess() {
		t.Fatal(st)
	}
	withNominated := framework.NewNodeInfo(big)
	withNominated.SetNode(node)
	if st := p.Filter(ctx, state, small, withNominated); !st.IsSuccess() {
		t.Fatalf("Filter beside a nominated 8-device pod: %v", st)
	}
	if st := p.Filter(ctx, state, small, ni); !st.IsSuccess() { // the framework's second pass, without them
		t.Fatalf("Filter: %v", st)
	}
	scoreBeside, _ := p.Score(ctx, state, small, ni)
	if scoreBeside <= scoreAlone {
		t.Errorf("Score beside the nominated pod %d, alone %d: want the tighter fit beside it to rank higher", scoreBeside, scoreAlone)
	}
}

// TestParallelFilterAndScore: Filter and Score run on many nodes at once, for pods of several
// shapes in turn, and find what they find one at a time.
func TestParallelFilterAndScore(t *testing.T) {
	var nodes []*corev1.Node
	for i := range 8 {
		nodes = append(nodes, trn1("trn1-"+string(rune('a'+i))))
	}
	shapes := []*corev1.Pod{
		testkit.MakePod().Name("one").Neuron(1).Obj(),
		testkit.MakePod().Name("four").Neuron(4).Obj(),
		testkit.MakePod().Name("cores").NeuronCores(3).Obj(),
		testkit.MakePod().Name("seven").Neuron(7).Obj(),
	}
	want := map[string]int64{}
	seq := newPlugin(newHandle(t, nil, nodes...), topology.BestFit, topology.DefaultCatalog())
	for _, pod := range shapes {
		state := framework.NewCycleState()
		for node, st := range cycle(t, seq, state, pod) {
			ni, _ := seq.h.SnapshotSharedLister().NodeInfos().Get(node)
			s, _ := seq.Score(context.Background(), state, pod, ni)
			want[pod.Name+"/"+node] = int64(st.Code())*1000 + s
		}
	}
	h := newHandle(t, nil, nodes...)
	p := newPlugin(h, topology.BestFit, topology.DefaultCatalog())
	nis, _ := h.snapshot.NodeInfos().List()
	var mu sync.Mutex
	got := map[string]int64{}
	var wg sync.WaitGroup
	for range 4 {
		for _, pod := range shapes {
			state := framework.NewCycleState()
			if _, st := p.PreFilter(context.Background(), state, pod, nis); !st.IsSuccess() {
				t.Fatal(st)
			}
			for _, ni := range nis {
				wg.Go(func() {
					st := p.Filter(context.Background(), state, pod, ni)
					s, _ := p.Score(context.Background(), state, pod, ni)
					mu.Lock()
					defer mu.Unlock()
					got[pod.Name+"/"+ni.Node().Name] = int64(st.Code())*1000 + s
				})
			}
		}
	}
	wg.Wait()
	if len(got) != len(want) {
		t.Fatalf("%d results, want %d", len(got), len(want))
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: status*1000+score %d in parallel, %d one at a time", k, got[k], w)
		}
	}
}

// TestScoreFullerNodeWithinATenth: of two nodes on which a one-core pod fits equally well (a
// core beside a half-used device, 9 tenths on both), the fuller one scores higher, so that a
// backlog fills one node after another instead of keeping many part-used.
func TestScoreFullerNodeWithinATenth(t *testing.T) {
	core := func(node string, c int) *corev1.Pod {
		rec := &allocation.Record{Node: node, Containers: []allocation.Container{{Name: "main", Resource: topology.ResourceNeuronCore, Devices: []int{c / 2}, Cores: []int{c}}}}
		return testkit.MakePod().Name(fmt.Sprintf("%s-%d", node, c)).NeuronCores(1).Node(node).Running().Record(rec).Obj()
	}
	var pods []*corev1.Pod
	for c := range 9 { // cores 0-8: devices 0-3 full, device 4 half used
		pods = append(pods, core("full", c))
	}
	pods = append(pods, core("light", 0)) // device 0 half used
	h := newHandle(t, pods, trn1("full"), trn1("light"))
	p := newPlugin(h, topology.BestFit, topology.DefaultCatalog())
	pod := testkit.MakePod().Name("p").NeuronCores(1).Obj()
	state := framework.NewCycleState()
	for node, st := range cycle(t, p, state, pod) {
		if !st.IsSuccess() {
			t.Fatalf("%s: %v", node, st)
		}
	}
	score := map[string]int64{}
	for _, name := range []string{"full", "light"} {
		ni, _ := h.snapshot.NodeInfos().Get(name)
		score[name], _ = p.Score(context.Background(), state, pod, ni)
	}
	if score["full"]/10 != score["light"]/10 {
		t.Fatalf("scores %v: want the same tenth on both (a core beside a half-used device)", score)
	}
	if score["full"] <= score["light"] {
		t.Errorf("scores %v: want the fuller node higher", score)
	}
}
