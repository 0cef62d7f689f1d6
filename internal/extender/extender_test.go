package extender

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/testkit"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// cluster is the test fleet:
//
//	trn-empty   trn1.32xlarge, nothing in use
//	trn-partly  trn1.32xlarge, devices 0-3 held by pod holder-partly
//	trn-full    trn1.32xlarge, all 16 devices held by pod holder-full
//	inf-empty   inf2.48xlarge, only a terminated pod's record names it
//	trn-dra     trn1.32xlarge served by the DRA driver
//	cpu         m5.large, no Neuron devices
func cluster() []runtime.Object {
	done := testkit.MakePod().Name("done").Neuron(12).Record(recordOn("inf-empty", seqInts(0, 12)...)).AllocTime(1).Obj()
	done.Status.Phase = corev1.PodSucceeded
	objs := []runtime.Object{}
	for _, n := range clusterNodes() {
		objs = append(objs, n.DeepCopy())
	}
	return append(objs,
		testkit.MakePod().Name("holder-partly").Neuron(4).Record(recordOn("trn-partly", 0, 1, 2, 3)).AllocTime(1).Obj(),
		testkit.MakePod().Name("holder-full").Neuron(16).Record(recordOn("trn-full", seqInts(0, 16)...)).AllocTime(1).Obj(),
		done,
	)
}

// clusterNodes are cluster's nodes, built once: testkit's InstanceType parses the catalog for
// every node, which takes milliseconds under -race, and most tests start from cluster.
var clusterNodes = sync.OnceValue(func() []*corev1.Node {
	return []*corev1.Node{
		testkit.MakeNode().Name("trn-empty").InstanceType(trn1).Obj(),
		testkit.MakeNode().Name("trn-partly").InstanceType(trn1).Obj(),
		testkit.MakeNode().Name("trn-full").InstanceType(trn1).Obj(),
		testkit.MakeNode().Name("inf-empty").InstanceType(inf2).Obj(),
		testkit.MakeNode().Name("trn-dra").InstanceType(trn1).DRA().Obj(),
		testkit.MakeNode().Name("cpu").InstanceType("m5.large").Obj(),
	}
})

var allNodes = []string{"trn-empty", "trn-partly", "trn-full", "inf-empty", "trn-dra", "cpu"}

const unsupported7 = "Instance type trn1.32xlarge does not support requests for device: 7. Please request a different number of devices."

func TestNewNeedsClient(t *testing.T) {
	if _, err := New(Options{}); err == nil {
		t.Fatal("New without a client must fail")
	}
}

func TestFilter(t *testing.T) {
	e, _, ctx := startExtender(t, cluster()...)
	for _, tc := range []struct {
		name         string
		pod          *corev1.Pod
		nodes        []string
		passed       []string
		failed       map[string]string // node -> substring of the reason
		unresolvable map[string]string
	}{
		{
			name:   "4 devices",
			pod:    testkit.MakePod().Name("p").Neuron(4).Obj(),
			nodes:  append(slices.Clone(allNodes), "ghost"),
			passed: []string{"trn-empty", "trn-partly", "inf-empty"},
			failed: map[string]string{"trn-full": "no free valid set of 4 devices on this trn1.32xlarge node (free devices: none)"},
			unresolvable: map[string]string{
				"trn-dra": "node trn-dra is served by the DRA driver (kube-neuron.io/allocation-mode=dra): request its devices with a ResourceClaim",
				"cpu":     `node cpu is not a Neuron node (instance type "m5.large" is not in the catalog)`,
				"ghost":   "node ghost is not known to the extender yet",
			},
		},
		{
			name:   "7 devices: unsupported on trn1, fine on the inf2 ring",
			pod:    testkit.MakePod().Name("p").Neuron(7).Obj(),
			nodes:  []string{"trn-empty", "trn-partly", "trn-full", "inf-empty"},
			passed: []string{"inf-empty"},
			failed: map[string]string{},
			unresolvable: map[string]string{
				"trn-empty":  unsupported7,
				"trn-partly": unsupported7,
				"trn-full":   unsupported7,
			},
		},
		{
			name:         "no Neuron request passes every node",
			pod:          testkit.MakePod().Name("p").Container("main", "", 0).Obj(),
			nodes:        allNodes,
			passed:       allNodes,
			failed:       map[string]string{},
			unresolvable: map[string]string{},
		},
		{
			// 13 cores span 7 devices: a valid set on the inf2 ring, never on the trn1 torus.
			name:   "13 cores",
			pod:    testkit.MakePod().Name("p").NeuronCores(13).Obj(),
			nodes:  []string{"trn-empty", "trn-partly", "trn-full", "inf-empty"},
			passed: []string{"inf-empty"},
			failed: map[string]string{},
			unresolvable: map[string]string{
				"trn-empty":  "does not support requests for core: 13",
				"trn-partly": "does not support requests for core: 13",
				"trn-full":   "does not support requests for core: 13",
			},
		},
		{
			// A failed bind can leave the pod's own record behind: it must not block the pod.
			name:         "the pod's own record does not count",
			pod:          testkit.MakePod().Name("holder-full").Neuron(16).Record(recordOn("trn-full", seqInts(0, 16)...)).AllocTime(1).Obj(),
			nodes:        []string{"trn-full", "trn-partly"},
			passed:       []string{"trn-full"},
			failed:       map[string]string{"trn-partly": "no free valid set of 16 devices"},
			unresolvable: map[string]string{},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			passed, failed, unresolvable := e.Filter(ctx, tc.pod, tc.nodes)
			if !slices.Equal(passed, tc.passed) {
				t.Errorf("passed %v, want %v", passed, tc.passed)
			}
			checkReasons(t, "failed", failed, tc.failed)
			checkReasons(t, "unresolvable", unresolvable, tc.unresolvable)
		})
	}
}

func checkReasons(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	if !slices.Equal(slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want))) {
		t.Errorf("%s nodes %v, want %v", what, got, want)
		return
	}
	for node, sub := range want {
		if !strings.Contains(got[node], sub) {
			t.Errorf("%s %s: reason %q does not contain %q", what, node, got[node], sub)
		}
	}
}

func TestFilterExactUnsupportedMessage(t *testing.T) {
	e, client, ctx := startExtender(t, cluster()...)
	pod := testkit.MakePod().Name("seven").Neuron(7).Obj()
	if _, err := client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	passed, failed, unresolvable := e.Filter(ctx, pod, []string{"trn-empty"})
	if len(passed) != 0 || len(failed) != 0 {
		t.Fatalf("passed %v failed %v", passed, failed)
	}
	if got := unresolvable["trn-empty"]; got != unsupported7 {
		t.Errorf("message %q, want %q", got, unsupported7)
	}
	// No node passed because of an unsupported count: the pod is told with a Warning event.
	waitFor(t, 10*time.Second, "an UnsupportedNeuronRequest event", func() bool {
		evs, err := client.CoreV1().Events("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		for _, ev := range evs.Items {
			if ev.Reason == "UnsupportedNeuronRequest" && ev.Type == corev1.EventTypeWarning && ev.Message == unsupported7 && ev.InvolvedObject.Name == pod.Name {
				return true
			}
		}
		return false
	})
}

func TestPrioritize(t *testing.T) {
	e, _, ctx := startExtender(t, cluster()...)
	list := e.Prioritize(ctx, testkit.MakePod().Name("p").Neuron(4).Obj(), allNodes)
	if len(list) != len(allNodes) {
		t.Fatalf("scores for %d nodes, want %d: %v", len(list), len(allNodes), list)
	}
	scores := map[string]int64{}
	for i, s := range list {
		if s < 0 || s > 10 {
			t.Errorf("%s: score %d out of 0-10", allNodes[i], s)
		}
		scores[allNodes[i]] = s
	}
	if scores["trn-partly"] <= scores["trn-empty"] {
		t.Errorf("partly used node scores %d, empty node %d: want the partly used one first", scores["trn-partly"], scores["trn-empty"])
	}
	for _, n := range []string{"trn-full", "trn-dra", "cpu"} {
		if scores[n] != 0 {
			t.Errorf("%s scores %d, want 0 (it cannot take the pod)", n, scores[n])
		}
	}
	none := e.Prioritize(ctx, testkit.MakePod().Name("p").Container("main", "", 0).Obj(), allNodes)
	for i, s := range none {
		if s != 0 {
			t.Errorf("a pod without Neuron requests: %s scores %d, want 0", allNodes[i], s)
		}
	}
}

// TestPrioritizeUsesFiltersScores: prioritize answers from what filter computed for the pod,
// also when the scheduler sends the nodes in another order or fewer of them, and places again
// a node whose usage changed since.
func TestPrioritizeUsesFiltersScores(t *testing.T) {
	e, client, ctx := startExtender(t, cluster()...)
	p := testkit.MakePod().Name("p").Neuron(4).Obj()
	names := []string{"trn-empty", "trn-partly", "inf-empty"}
	fresh := e.Prioritize(ctx, p, names) // no memo: placed now
	if passed, _, _ := e.Filter(ctx, p, names); len(passed) != 3 {
		t.Fatalf("filter passed %v", passed)
	}
	if fresh[1] == fresh[0] {
		t.Fatalf("scores %v: the test needs the partly used node to score apart from the empty one", fresh)
	}
	reordered := []string{"inf-empty", "trn-partly", "trn-empty"}
	got := e.Prioritize(ctx, p, reordered)
	if want := []int64{fresh[2], fresh[1], fresh[0]}; !slices.Equal(got, want) {
		t.Errorf("reordered: scores %v, want %v", got, want)
	}
	// trn-empty fills up after filter: prioritize must not use filter's score for it.
	if passed, _, _ := e.Filter(ctx, p, names); len(passed) != 3 {
		t.Fatalf("filter passed %v", passed)
	}
	createPod(t, ctx, client, testkit.MakePod().Name("all").Neuron(16).Record(recordOn("trn-empty", seqInts(0, 16)...)).AllocTime(1).Obj())
	waitFor(t, 5*time.Second, "the informer to show pod all", func() bool {
		_, ok, _ := e.pods.GetStore().GetByKey("default/all")
		return ok
	})
	if got := e.Prioritize(ctx, p, names); got[0] != 0 || got[1] != fresh[1] {
		t.Errorf("after trn-empty filled up: scores %v, want 0 for it and %d for trn-partly", got, fresh[1])
	}
}

// createPod stores the pod in the fake API server.
func createPod(t testing.TB, ctx context.Context, client *fake.Clientset, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	p, err := client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func getPod(t testing.TB, ctx context.Context, client *fake.Clientset, ns, name string) *corev1.Pod {
	t.Helper()
	p, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// waitFor waits until cond holds, looking every 5 ms, and fails the test after timeout.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	waitEvery(t, 5*time.Millisecond, timeout, what, cond)
}

func waitEvery(t testing.TB, interval, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), interval, timeout, true, func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("timed out after %v waiting for %s", timeout, what)
	}
}

func bindings(client *fake.Clientset) []*corev1.Binding {
	var out []*corev1.Binding
	for _, a := range client.Actions() {
		if a.GetVerb() == "create" && a.GetResource().Resource == "pods" && a.GetSubresource() == "binding" {
			out = append(out, a.(k8stesting.CreateAction).GetObject().(*corev1.Binding))
		}
	}
	return out
}

func TestBind(t *testing.T) {
	e, client, ctx := startExtender(t, cluster()...)
	pod := createPod(t, ctx, client, testkit.MakePod().Name("p").Neuron(4).Obj())
	before := time.Now().UnixNano()
	if err := e.Bind(ctx, pod.Namespace, pod.Name, pod.UID, "trn-partly"); err != nil {
		t.Fatal(err)
	}

	got := getPod(t, ctx, client, pod.Namespace, pod.Name)
	rec, err := allocation.RecordOf(got)
	if err != nil || rec == nil {
		t.Fatalf("record: %v, %v (annotations %v)", rec, err, got.Annotations)
	}
	want := &allocation.Record{Node: "trn-partly", Containers: []allocation.Container{{
		Name: "main", Resource: topology.ResourceNeuron, Devices: []int{4, 5, 6, 7}, Cores: seqInts(8, 8),
	}}}
	if rec.Encode() != want.Encode() {
		t.Errorf("record %s, want %s (best fit: the block next to the used 0-3)", rec.Encode(), want.Encode())
	}
	for k, v := range map[string]string{
		allocation.AWSNeuronIDs: "4,5,6,7",
		allocation.Allocated:    "false",
		allocation.ResourceType: topology.ResourceNeuron,
	} {
		if got.Annotations[k] != v {
			t.Errorf("annotation %s = %q, want %q", k, got.Annotations[k], v)
		}
	}
	if at, err := strconv.ParseInt(got.Annotations[allocation.AllocTime], 10, 64); err != nil || at < before || at > time.Now().UnixNano() {
		t.Errorf("annotation %s = %q: want unix nanoseconds of the bind", allocation.AllocTime, got.Annotations[allocation.AllocTime])
	}

	bs := bindings(client)
	if len(bs) != 1 {
		t.Fatalf("%d binding creates, want 1", len(bs))
	}
	b := bs[0]
	if b.Name != pod.Name || b.Namespace != pod.Namespace || b.UID != pod.UID || b.Target.Kind != "Node" || b.Target.Name != "trn-partly" {
		t.Errorf("binding %+v", b)
	}
	// The record travels in the Binding: the API server writes it with spec.nodeName.
	for _, k := range []string{allocation.Annotation, allocation.AWSNeuronIDs, allocation.AllocTime, allocation.Allocated, allocation.ResourceType} {
		if b.Annotations[k] != got.Annotations[k] {
			t.Errorf("binding annotation %s = %q, pod has %q", k, b.Annotations[k], got.Annotations[k])
		}
	}
	if got.Spec.NodeName != "trn-partly" {
		t.Errorf("pod bound to %q", got.Spec.NodeName)
	}

	lease, err := client.CoordinationV1().Leases("kube-system").Get(ctx, "kube-neuron-bind-trn-partly", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if lease.Annotations["kube-neuron.io/node"] != "trn-partly" || lease.Labels["app.kubernetes.io/managed-by"] != "neuron-scheduler-extender" {
		t.Errorf("lease metadata %+v", lease.ObjectMeta)
	}
	if lease.Spec.LeaseDurationSeconds == nil || *lease.Spec.LeaseDurationSeconds != 15 || lease.Spec.AcquireTime == nil {
		t.Errorf("lease spec %+v", lease.Spec)
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != "test" || lease.Spec.RenewTime == nil {
		t.Errorf("lease spec %+v", lease.Spec)
	}
}

func TestBindWithoutNeuronRequests(t *testing.T) {
	e, client, ctx := startExtender(t, cluster()...)
	pod := createPod(t, ctx, client, testkit.MakePod().Name("plain").Container("main", "", 0).Obj())
	if err := e.Bind(ctx, pod.Namespace, pod.Name, pod.UID, "trn-empty"); err != nil {
		t.Fatal(err)
	}
	if got := getPod(t, ctx, client, pod.Namespace, pod.Name); len(got.Annotations) != 0 {
		t.Errorf("annotations %v, want none", got.Annotations)
	}
	if len(bindings(client)) != 1 {
		t.Errorf("want one binding")
	}
}

func TestBindRefusals(t *testing.T) {
	e, client, ctx := startExtender(t, cluster()...)
	pod := createPod(t, ctx, client, testkit.MakePod().Name("p").Neuron(4).Obj())
	for _, tc := range []struct {
		name, ns, pod string
		uid           types.UID
		node, want    string
	}{
		{"replaced pod", pod.Namespace, pod.Name, "other-uid", "trn-empty", "was replaced"},
		{"missing pod", "default", "nope", "x", "trn-empty", "getting pod default/nope"},
		{"full node", pod.Namespace, pod.Name, pod.UID, "trn-full", "no longer fits node trn-full"},
		{"DRA node", pod.Namespace, pod.Name, pod.UID, "trn-dra", "served by the DRA driver"},
		{"non-Neuron node", pod.Namespace, pod.Name, pod.UID, "cpu", "is not a Neuron node"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := e.Bind(ctx, tc.ns, tc.pod, tc.uid, tc.node)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
	if got := getPod(t, ctx, client, pod.Namespace, pod.Name); got.Annotations[allocation.Annotation] != "" {
		t.Errorf("a refused bind left a record: %v", got.Annotations)
	}
	if n := len(bindings(client)); n != 0 {
		t.Errorf("%d bindings after refused binds", n)
	}
}

func TestBindFailureLeavesNoRecord(t *testing.T) {
	e, client, ctx := startExtender(t, cluster()...)
	var fail sync.Map // pod name -> true: its binding create fails
	client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "binding" {
			return false, nil, nil
		}
		b := a.(k8stesting.CreateAction).GetObject().(*corev1.Binding)
		if _, ok := fail.Load(b.Name); ok {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods/binding"}, "", errors.New("the API server said no"))
		}
		return false, nil, nil
	})
	pod := createPod(t, ctx, client, testkit.MakePod().Name("p").Neuron(4).Obj())
	fail.Store(pod.Name, true)
	err := e.Bind(ctx, pod.Namespace, pod.Name, pod.UID, "trn-empty")
	if err == nil || !strings.Contains(err.Error(), "the API server said no") {
		t.Fatalf("err = %v, want the binding error", err)
	}
	if bs := bindings(client); len(bs) != 1 || bs[0].Annotations[allocation.Annotation] == "" {
		t.Fatalf("want one Binding create carrying the record, got %d", len(bs))
	}
	got := getPod(t, ctx, client, pod.Namespace, pod.Name)
	for _, k := range []string{allocation.Annotation, allocation.AWSNeuronIDs, allocation.AllocTime, allocation.Allocated, allocation.ResourceType} {
		if v, ok := got.Annotations[k]; ok {
			t.Errorf("failed bind left annotation %s=%q", k, v)
		}
	}

	// The devices are free again: the retry of the same pod gets the whole node's first block.
	fail.Delete(pod.Name)
	start := time.Now()
	if err := e.Bind(ctx, pod.Namespace, pod.Name, pod.UID, "trn-empty"); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the retry after a failed bind took %v", d)
	}
	rec, err := allocation.RecordOf(getPod(t, ctx, client, pod.Namespace, pod.Name))
	if err != nil || rec == nil || !slices.Equal(rec.Containers[0].Devices, []int{0, 1, 2, 3}) {
		t.Errorf("record after the retry: %+v, %v", rec, err)
	}
}

func TestSequentialBindsAreDisjoint(t *testing.T) {
	e, client, ctx := startExtender(t, cluster()...)
	var seen []int
	for i := range 4 {
		pod := createPod(t, ctx, client, testkit.MakePod().Name(fmt.Sprintf("p%d", i)).Neuron(4).Obj())
		// No waiting for the informer: Bind itself waits for the previous decision.
		if err := e.Bind(ctx, pod.Namespace, pod.Name, pod.UID, "trn-empty"); err != nil {
			t.Fatalf("bind %d: %v", i, err)
		}
		rec, err := allocation.RecordOf(getPod(t, ctx, client, pod.Namespace, pod.Name))
		if err != nil || rec == nil {
			t.Fatalf("bind %d: record %v, %v", i, rec, err)
		}
		for _, d := range rec.Containers[0].Devices {
			if slices.Contains(seen, d) {
				t.Fatalf("bind %d took device %d again (had %v)", i, d, seen)
			}
			seen = append(seen, d)
		}
	}
	slices.Sort(seen)
	if !slices.Equal(seen, seqInts(0, 16)) {
		t.Errorf("four 4-device binds took %v, want every device once", seen)
	}
	// The node is full now, as the next bind and a filter both see.
	pod := createPod(t, ctx, client, testkit.MakePod().Name("p-extra").Neuron(1).Obj())
	if err := e.Bind(ctx, pod.Namespace, pod.Name, pod.UID, "trn-empty"); err == nil || !strings.Contains(err.Error(), "no longer fits") {
		t.Errorf("bind on a full node: %v", err)
	}
	if passed, _, _ := e.Filter(ctx, pod, []string{"trn-empty"}); len(passed) != 0 {
		t.Errorf("filter passes the full node")
	}
}

func TestConcurrentBindsAreDisjoint(t *testing.T) {
	e, client, ctx := startExtender(t, cluster()...)
	const n = 16 // 16 pods of 2 cores fill a trn1 exactly
	pods := make([]*corev1.Pod, n)
	for i := range pods {
		pods[i] = createPod(t, ctx, client, testkit.MakePod().Name(fmt.Sprintf("c%d", i)).NeuronCores(2).Obj())
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, p := range pods {
		wg.Go(func() { errs[i] = e.Bind(ctx, p.Namespace, p.Name, p.UID, "trn-empty") })
	}
	wg.Wait()
	used := map[int]string{}
	for i, p := range pods {
		if errs[i] != nil {
			t.Errorf("bind %s: %v", p.Name, errs[i])
			continue
		}
		rec, err := allocation.RecordOf(getPod(t, ctx, client, p.Namespace, p.Name))
		if err != nil || rec == nil {
			t.Fatalf("%s: record %v, %v", p.Name, rec, err)
		}
		for _, c := range rec.Containers[0].Cores {
			if other, ok := used[c]; ok {
				t.Errorf("core %d given to %s and %s", c, other, p.Name)
			}
			used[c] = p.Name
		}
	}
	if len(used) != 32 {
		t.Errorf("%d cores used, want all 32", len(used))
	}
}

func TestLeaseName(t *testing.T) {
	if got := LeaseName("n1"); got != "kube-neuron-bind-n1" {
		t.Errorf("LeaseName(n1) = %q", got)
	}
	long := strings.Repeat("a", 253)
	got := LeaseName(long)
	if len(got) > 253 || !strings.HasPrefix(got, "kube-neuron-bind-") {
		t.Errorf("LeaseName(long) = %q (%d chars)", got, len(got))
	}
	if LeaseName(long) != got || LeaseName(long+"b") == got {
		t.Errorf("LeaseName must be a stable, distinct name for long node names")
	}
}

// TestBindAfterFailedBindDoesNotStall: a bind whose Binding create fails leaves the node's Lease
// naming that pod as the last decision, and the pod never gets a record; the next bind to the
// node must not wait for it (waitForBinds' 5 s deadline, holding the node's lock).
func TestBindAfterFailedBindDoesNotStall(t *testing.T) {
	e, client, ctx := startExtender(t, cluster()...)
	client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "binding" && a.(k8stesting.CreateAction).GetObject().(*corev1.Binding).Name == "fails" {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods/binding"}, "", errors.New("the API server said no"))
		}
		return false, nil, nil
	})
	p := createPod(t, ctx, client, testkit.MakePod().Name("fails").Neuron(4).Obj())
	q := createPod(t, ctx, client, testkit.MakePod().Name("next").Neuron(4).Obj())
	if err := e.Bind(ctx, p.Namespace, p.Name, p.UID, "trn-empty"); err == nil {
		t.Fatal("the bind must fail")
	}
	// Let the informer see the rollback, as it has by the time the scheduler binds again.
	waitFor(t, 5*time.Second, "the informer to see the rollback", func() bool {
		obj, ok, _ := e.pods.GetStore().GetByKey("default/fails")
		if !ok {
			return false
		}
		_, has := obj.(*corev1.Pod).Annotations[allocation.Annotation]
		return !has
	})
	// And the pod to bind next and the node's Lease, which the first bind created.
	waitFor(t, 5*time.Second, "the informers to show pod next and the Lease", func() bool {
		_, pod, _ := e.pods.GetStore().GetByKey("default/next")
		_, lease, _ := e.owner.leases.GetByKey("kube-system/" + LeaseName("trn-empty"))
		return pod && lease
	})
	start := time.Now()
	if err := e.Bind(ctx, q.Namespace, q.Name, q.UID, "trn-empty"); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("the bind after a failed bind took %v", d)
	}
}

// TestBindSeesPodsTheIndexerHas reproduces a race in the usage cache: the pod informer updates
// its indexer before it runs event handlers, and the cache's generation is bumped only by a
// handler. Between the two, usage() returns the cached usage although the indexer already holds
// a new record, and Bind (which waited for exactly that record through waitForBinds) handed
// the same devices out again. The test stands in for the window by adding the record to the
// indexer directly, as the informer does before it notifies handlers. Bind now derives usage
// from the indexer itself.
func TestBindSeesPodsTheIndexerHas(t *testing.T) {
	e, client, ctx := startExtender(t, cluster()...)
	pod := createPod(t, ctx, client, testkit.MakePod().Name("p").Neuron(4).Obj())
	// Filter caches trn-empty's usage: nothing in use.
	if passed, _, _ := e.Filter(ctx, pod, []string{"trn-empty"}); len(passed) != 1 {
		t.Fatal("trn-empty must pass")
	}
	// Another replica's decision reaches the indexer; the handlers have not run yet.
	other := testkit.MakePod().Name("other").Neuron(4).Record(recordOn("trn-empty", 0, 1, 2, 3)).AllocTime(1).Obj()
	if err := e.pods.GetIndexer().Add(other); err != nil {
		t.Fatal(err)
	}
	if err := e.Bind(ctx, pod.Namespace, pod.Name, pod.UID, "trn-empty"); err != nil {
		t.Fatal(err)
	}
	rec, err := allocation.RecordOf(getPod(t, ctx, client, pod.Namespace, pod.Name))
	if err != nil || rec == nil {
		t.Fatalf("record %v, %v", rec, err)
	}
	for _, d := range rec.Containers[0].Devices {
		if d < 4 {
			t.Errorf("bound to devices %v: device %d is held by pod other, which the indexer has", rec.Containers[0].Devices, d)
			break
		}
	}
}

// TestBindsToOneNodeOverlap: the node lock covers the decision, not the Binding post, so a bind
// to a node whose previous Binding is not posted yet decides and binds meanwhile, on other
// devices. (decide is called directly: the fake clientset serialises its reactors, so a slow
// Binding cannot be played with one.)
func TestBindsToOneNodeOverlap(t *testing.T) {
	e, client, ctx := startExtender(t, cluster()...)
	slow := createPod(t, ctx, client, testkit.MakePod().Name("slow").Neuron(4).Obj())
	fast := createPod(t, ctx, client, testkit.MakePod().Name("fast").Neuron(4).Obj())
	post, err := e.decide(ctx, slow.Namespace, slow.Name, slow.UID, "trn-empty")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- e.Bind(ctx, fast.Namespace, fast.Name, fast.UID, "trn-empty") }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the second bind waited for the first one's Binding")
	}
	if n := e.owner.inflightBinds("trn-empty"); n != 1 {
		t.Errorf("%d Bindings in flight, want slow's", n)
	}
	if err := post(ctx); err != nil {
		t.Fatal(err)
	}
	a, _ := allocation.RecordOf(getPod(t, ctx, client, slow.Namespace, slow.Name))
	b, _ := allocation.RecordOf(getPod(t, ctx, client, fast.Namespace, fast.Name))
	if a == nil || b == nil {
		t.Fatalf("records %v %v", a, b)
	}
	for _, d := range a.Containers[0].Devices {
		if slices.Contains(b.Containers[0].Devices, d) {
			t.Fatalf("device %d given to both: %v and %v", d, a.Containers[0].Devices, b.Containers[0].Devices)
		}
	}
}

// TestRetriedBindKeepsTheFirstDecision: the scheduler retries a bind that timed out while the
// first is still posting; the retry's decision fails (the pod is bound by the first), and its
// failure must not take the first decision's devices out of the usage.
func TestRetriedBindKeepsTheFirstDecision(t *testing.T) {
	e, client, ctx := startExtender(t, cluster()...)
	x := createPod(t, ctx, client, testkit.MakePod().Name("x").Neuron(4).Obj())
	first, err := e.decide(ctx, x.Namespace, x.Name, x.UID, "trn-empty")
	if err != nil {
		t.Fatal(err)
	}
	second, err := e.decide(ctx, x.Namespace, x.Name, x.UID, "trn-empty")
	if err != nil {
		t.Fatal(err)
	}
	if err := first(ctx); err != nil {
		t.Fatal(err)
	}
	rec, _ := allocation.RecordOf(getPod(t, ctx, client, x.Namespace, x.Name))
	if rec == nil {
		t.Fatal("no record after the first bind")
	}
	// The fake API server binds a bound pod again; play the real one's refusal.
	client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "binding" {
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "pods/binding"}, "x", errors.New("pod x is already assigned to node trn-empty"))
		}
		return false, nil, nil
	})
	if err := second(ctx); err == nil {
		t.Fatal("the second Binding must fail")
	}
	// Whether or not the informer has shown x yet, its devices count.
	shape, err := e.scores.shapes.get("trn-empty")
	if err != nil {
		t.Fatal(err)
	}
	u, err := e.scores.freshUsage(ctx, shape, "trn-empty", "")
	if err != nil {
		t.Fatal(err)
	}
	hw, err := rec.Containers[0].Hardware(shape)
	if err != nil {
		t.Fatal(err)
	}
	if err := u.Allocate(hw); err == nil {
		t.Fatalf("devices %v of the landed decision are free in the usage after the retry failed", rec.Containers[0].Devices)
	}
}

func TestUsageCacheKeepsOtherDecisionsOfAPod(t *testing.T) {
	c := newUsageCache()
	r1 := &allocation.Record{Node: "n", Containers: []allocation.Container{{Name: "c", Resource: "aws.amazon.com/neuron", Devices: []int{0}}}}
	r2 := &allocation.Record{Node: "n", Containers: []allocation.Container{{Name: "c", Resource: "aws.amazon.com/neuron", Devices: []int{1}}}}
	first := c.remember("n", "uid-x", "ns/x", r1)
	second := c.remember("n", "uid-x", "ns/x", r2)
	c.failedBind("n", "uid-x", second)
	if got := c.recent["n"]["uid-x"]; len(got) != 1 || got[0].seq != first {
		t.Fatalf("after the second decision failed: %+v, want the first only", got)
	}
	if !c.known("n", "uid-x") {
		t.Error("the pod's landed decision is not known")
	}
	c.failedBind("n", "uid-x", first)
	if _, ok := c.recent["n"]["uid-x"]; ok {
		t.Error("both decisions failed but one still counts")
	}
}

// TestFilterSeesChangesAfterCaching: filter's cached placements are dropped when the node's
// usage changes, by this replica's bind or by another pod's record arriving through the
// informer.
func TestFilterSeesChangesAfterCaching(t *testing.T) {
	e, client, ctx := startExtender(t, cluster()...)
	p := testkit.MakePod().Name("p").Neuron(8).Obj()
	for range 2 { // the second call is answered from the cache
		if passed, _, _ := e.Filter(ctx, p, []string{"trn-empty"}); len(passed) != 1 {
			t.Fatal("an 8-device pod must fit the empty trn1.32xlarge")
		}
	}
	// Another replica's pod takes devices 0-7; 8-15 are still free for one more.
	createPod(t, ctx, client, testkit.MakePod().Name("a").Neuron(8).Record(recordOn("trn-empty", 0, 1, 2, 3, 4, 5, 6, 7)).AllocTime(1).Obj())
	waitFor(t, 5*time.Second, "the informer to show pod a", func() bool {
		_, ok, _ := e.pods.GetStore().GetByKey("default/a")
		return ok
	})
	if passed, _, _ := e.Filter(ctx, p, []string{"trn-empty"}); len(passed) != 1 {
		t.Fatal("devices 8-15 are still free")
	}
	// And now it takes them (this replica's bind, which the informer may not show yet).
	q := createPod(t, ctx, client, testkit.MakePod().Name("q").Neuron(8).Obj())
	if err := e.Bind(ctx, q.Namespace, q.Name, q.UID, "trn-empty"); err != nil {
		t.Fatal(err)
	}
	passed, failed, _ := e.Filter(ctx, p, []string{"trn-empty"})
	if len(passed) != 0 || failed["trn-empty"] == "" {
		t.Fatalf("after this replica's bind the node is full: passed %v failed %v", passed, failed)
	}
}

// TestDecisionArrivingBetweenTheTwoReadsCounts: the informer stores a pod's record in its
// indexer and then drops the decision from this replica's recent ones. A usage that read the
// indexer before the record arrived and recent after it was dropped missed the decision, and
// the next bind gave its devices again (seen once in make bench-scheduler).
func TestDecisionArrivingBetweenTheTwoReadsCounts(t *testing.T) {
	e, client, ctx := startExtender(t, cluster()...)
	q := createPod(t, ctx, client, testkit.MakePod().Name("q").Neuron(16).Obj())
	// The decision is made (it counts in recent); its Binding is not posted, so only the test
	// delivers the pod with its record, in the window between the two reads.
	if _, err := e.decide(ctx, q.Namespace, q.Name, q.UID, "trn-empty"); err != nil {
		t.Fatal(err)
	}
	e.scores.usage.mu.Lock()
	rec := e.scores.usage.recent["trn-empty"][q.UID][0].record
	e.scores.usage.mu.Unlock()
	landed := q.DeepCopy()
	landed.Spec.NodeName = "trn-empty"
	maps.Copy(landed.Annotations, rec.Annotations())
	e.scores.betweenReads = func() {
		e.scores.betweenReads = nil
		if err := e.pods.GetIndexer().Update(landed); err != nil {
			t.Error(err)
		}
		e.scores.usage.handler().OnUpdate(q, landed)
	}
	defer func() { e.scores.betweenReads = nil }()
	shape, err := e.scores.shapes.get("trn-empty")
	if err != nil {
		t.Fatal(err)
	}
	u, err := e.scores.freshUsage(ctx, shape, "trn-empty", "")
	if err != nil {
		t.Fatal(err)
	}
	if u.DeviceFree(0) {
		t.Fatal("q's 16 devices are free in the usage read while its record arrived")
	}
}

// TestFilterFollowsNodeChanges: nodeShape answers from the node informer's events, so a node
// added, switched to the DRA driver or deleted after the start is seen as it is now.
func TestFilterFollowsNodeChanges(t *testing.T) {
	e, client, ctx := startExtender(t, cluster()...)
	p := testkit.MakePod().Name("p").Neuron(4).Obj()
	filter := func() (passed []string, unresolvable map[string]string) {
		passed, _, unresolvable = e.Filter(ctx, p, []string{"late"})
		return passed, unresolvable
	}
	if _, u := filter(); u["late"] != "node late is not known to the extender yet" {
		t.Fatalf("before the node exists: %v", u)
	}
	late, err := client.CoreV1().Nodes().Create(ctx, testkit.MakeNode().Name("late").InstanceType(trn1).Obj(), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the new node to take the pod", func() bool { p, _ := filter(); return len(p) == 1 })

	late.Labels[labels.AllocationMode] = labels.AllocationModeDRA
	if _, err := client.CoreV1().Nodes().Update(ctx, late, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the node switched to DRA to be refused", func() bool {
		_, u := filter()
		return strings.Contains(u["late"], "is served by the DRA driver")
	})

	if err := client.CoreV1().Nodes().Delete(ctx, "late", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the deleted node to be unknown", func() bool {
		_, u := filter()
		return u["late"] == "node late is not known to the extender yet"
	})
}

func TestStripManagedFields(t *testing.T) {
	pod := testkit.MakePod().Name("p").Neuron(1).Obj()
	pod.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply}}
	out, err := stripManagedFields(pod)
	if err != nil || out.(*corev1.Pod).ManagedFields != nil || out.(*corev1.Pod).Name != "p" {
		t.Errorf("pod after the transform: %+v, %v", out, err)
	}
	if pod.ManagedFields == nil {
		t.Error("the transform changed the object it was given (the fake clientset still reads it)")
	}
	node := testkit.MakeNode().Name("n").Obj()
	node.ManagedFields = pod.ManagedFields
	if out, err := stripManagedFields(node); err != nil || out.(*corev1.Node).ManagedFields != nil || node.ManagedFields == nil {
		t.Errorf("node after the transform: %+v, %v; given: %v", out, err, node.ManagedFields)
	}
	tomb := cache.DeletedFinalStateUnknown{Key: "default/p", Obj: pod}
	if out, err := stripManagedFields(tomb); err != nil || out != any(tomb) {
		t.Errorf("a tombstone must pass unchanged: %+v, %v", out, err)
	}
}

// TestEventsThatChangeNoUsageKeepTheGeneration: the informer showing this replica's own bind,
// and status updates of a bound pod, leave the node's usage as it was, so its generation (and
// with it the cached usage and placements) stays; a changed record does not.
func TestEventsThatChangeNoUsageKeepTheGeneration(t *testing.T) {
	e, client, ctx := startExtender(t, cluster()...)
	gen := func() uint64 { g, _ := e.scores.usage.generationFor("trn-empty", ""); return g }
	q := createPod(t, ctx, client, testkit.MakePod().Name("q").Neuron(4).Obj())
	if err := e.Bind(ctx, q.Namespace, q.Name, q.UID, "trn-empty"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the informer to show the bind", func() bool { return !e.scores.usage.known("trn-empty", q.UID) })
	afterBind := gen()
	if passed, _, _ := e.Filter(ctx, testkit.MakePod().Name("p").Neuron(8).Obj(), []string{"trn-empty"}); len(passed) != 1 {
		t.Fatal("8 devices must still fit next to q's 4")
	}
	if passed, _, _ := e.Filter(ctx, testkit.MakePod().Name("big").Neuron(16).Obj(), []string{"trn-empty"}); len(passed) != 0 {
		t.Fatal("q's devices must count after the informer showed the bind")
	}

	// The kubelet starts q: a status update.
	bound, err := client.CoreV1().Pods("default").Get(ctx, "q", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bound.Status.Phase = corev1.PodRunning
	if _, err := client.CoreV1().Pods("default").UpdateStatus(ctx, bound, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the informer to show q running", func() bool {
		obj, _, _ := e.pods.GetStore().GetByKey("default/q")
		return obj.(*corev1.Pod).Status.Phase == corev1.PodRunning
	})
	if g := gen(); g != afterBind {
		t.Errorf("a status update moved the generation from %d to %d", afterBind, g)
	}

	// q finishes: its devices are free, and the generation moves.
	bound.Status.Phase = corev1.PodSucceeded
	if _, err := client.CoreV1().Pods("default").UpdateStatus(ctx, bound, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "q's devices to be free", func() bool {
		passed, _, _ := e.Filter(ctx, testkit.MakePod().Name("big").Neuron(16).Obj(), []string{"trn-empty"})
		return len(passed) == 1
	})
	if g := gen(); g == afterBind {
		t.Error("the generation did not move when q finished")
	}
}

func TestSameUsage(t *testing.T) {
	c := newUsageCache()
	rec := &allocation.Record{Node: "n", Containers: []allocation.Container{{Name: "main", Resource: topology.ResourceNeuron, Devices: []int{0}}}}
	other := &allocation.Record{Node: "n", Containers: []allocation.Container{{Name: "main", Resource: topology.ResourceNeuron, Devices: []int{1}}}}
	pod := func(r *allocation.Record, phase corev1.PodPhase, extra ...string) *corev1.Pod {
		p := testkit.MakePod().Name("p").Neuron(1).Obj()
		if r != nil {
			p.Annotations[allocation.Annotation] = r.Encode()
			p.Annotations[allocation.AllocTime] = "1"
		}
		for i := 0; i+1 < len(extra); i += 2 {
			p.Annotations[extra[i]] = extra[i+1]
		}
		p.Status.Phase = phase
		return p
	}
	for _, tc := range []struct {
		name     string
		old, new *corev1.Pod
		recent   *allocation.Record // this replica's decision for the pod, if any
		want     bool
	}{
		{"status update, same record", pod(rec, corev1.PodPending), pod(rec, corev1.PodRunning), nil, true},
		{"record changed", pod(rec, corev1.PodRunning), pod(other, corev1.PodRunning), nil, false},
		{"finished", pod(rec, corev1.PodRunning), pod(rec, corev1.PodSucceeded), nil, false},
		{"alloc time changed", pod(rec, corev1.PodRunning), pod(rec, corev1.PodRunning, allocation.AllocTime, "2"), nil, false},
		{"own bind shown", pod(nil, corev1.PodPending), pod(rec, corev1.PodPending), rec, true},
		{"another replica's bind", pod(nil, corev1.PodPending), pod(rec, corev1.PodPending), nil, false},
		{"bind landed with another record than decided", pod(nil, corev1.PodPending), pod(rec, corev1.PodPending), other, false},
		{"published pod taken over", pod(nil, corev1.PodPending, allocation.AWSNeuronIDs, "0"), pod(rec, corev1.PodPending), rec, false},
		{"record removed", pod(rec, corev1.PodRunning), pod(nil, corev1.PodRunning), nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.recent != nil {
				c.remember("n", tc.new.UID, "default/p", tc.recent)
				defer c.failedBind("n", tc.new.UID, c.seq)
			}
			if got := c.sameUsage(tc.old, tc.new); got != tc.want {
				t.Errorf("sameUsage = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestRememberKeepsTheCachedUsage: a bind decision turns the node's cached usage into the next
// generation's by adding the decision, so that filtering the next pod of a backlog does not
// derive the node again; the result is what deriving it gives. A decision that overlaps what
// the cache counts drops the cache instead.
func TestRememberKeepsTheCachedUsage(t *testing.T) {
	e, _, ctx := startExtender(t, cluster()...)
	const node = "trn-partly"
	shape, err := e.scores.shapes.get(node)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.scores.nodeUsage(ctx, shape, node, ""); err != nil { // fills the cache
		t.Fatal(err)
	}
	rec := func(devices ...int) *allocation.Record {
		return &allocation.Record{Node: node, Containers: []allocation.Container{{Name: "main", Resource: "aws.amazon.com/neuron", Devices: devices}}}
	}
	e.scores.usage.remember(node, "uid-new", "default/new", rec(4, 5, 6, 7))
	c := e.scores.usage
	c.mu.Lock()
	cu, ok := c.cached[node]
	valid := ok && cu.gen == c.gen[node]
	c.mu.Unlock()
	if !valid {
		t.Fatal("the decision dropped the cached usage")
	}
	got, err := e.scores.nodeUsage(ctx, shape, node, "")
	if err != nil {
		t.Fatal(err)
	}
	if got != cu.usage {
		t.Error("usage derived the node again instead of using the cache")
	}
	want, err := e.scores.freshUsage(ctx, shape, node, "")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("cached usage after the decision\n%v\nderived\n%v", got.FreeDevices(), want.FreeDevices())
	}
	if fmt.Sprint(want.FreeDevices()) != fmt.Sprint(seqInts(8, 8)) {
		t.Errorf("free devices %v, want 8-15", want.FreeDevices())
	}

	// Devices 3 and 8: 3 is held already (holder-partly). The cache goes; usage derives again.
	e.scores.usage.remember(node, "uid-overlap", "default/overlap", rec(3, 8))
	c.mu.Lock()
	cu, ok = c.cached[node]
	valid = ok && cu.gen == c.gen[node]
	c.mu.Unlock()
	if valid {
		t.Error("a decision that overlaps the cached usage kept the cache")
	}
	got, err = e.scores.nodeUsage(ctx, shape, node, "")
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := e.scores.freshUsage(ctx, shape, node, ""); !reflect.DeepEqual(got, want) {
		t.Errorf("usage %v, derived %v", got.FreeDevices(), want.FreeDevices())
	}
}

// TestAnOpeningCountsWhileItsBindWaitsForTheLease: the first bind to an empty node waits for the
// node's Lease. Meanwhile the next pod must see that node taken, so that it follows the first
// instead of opening another empty node of the same type (they would all tie).
func TestAnOpeningCountsWhileItsBindWaitsForTheLease(t *testing.T) {
	e, client, ctx := startExtender(t, append(cluster(), testkit.MakeNode().Name("inf-empty-2").InstanceType(inf2).Obj())...)
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	client.PrependReactor("create", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		once.Do(func() { close(entered); <-release })
		return false, nil, nil
	})
	opener := createPod(t, ctx, client, testkit.MakePod().Name("opener").NeuronCores(1).Obj())
	waitFor(t, 5*time.Second, "the informer to show pod opener", func() bool {
		_, ok, _ := e.pods.GetStore().GetByKey("default/opener")
		return ok
	})
	next := testkit.MakePod().Name("next").NeuronCores(1).Obj()
	names := []string{"trn-empty", "inf-empty", "inf-empty-2"}
	if list := relativeScores(names, e.Prioritize(ctx, next, names), 2); len(list) != 2 {
		t.Fatalf("before the bind: answer %v, want both empty inf2 nodes, tied", list)
	}

	done := make(chan error, 1)
	go func() { done <- e.Bind(ctx, "default", "opener", opener.UID, "inf-empty") }()
	<-entered
	scores, whole := e.prioritize(ctx, next, names)
	if list := relativeScores(names, scores, whole); len(list) != 1 || list[0].Host != "inf-empty" {
		t.Errorf("while opener's bind waits for the Lease: answer %v (scores %v, whole node %d), want inf-empty alone", list, scores, whole)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	scores, whole = e.prioritize(ctx, next, names)
	if list := relativeScores(names, scores, whole); len(list) != 1 || list[0].Host != "inf-empty" {
		t.Errorf("after opener's bind: answer %v, want inf-empty alone", list)
	}
	e.scores.usage.mu.Lock()
	n := len(e.scores.usage.recent["inf-empty"][opener.UID])
	e.scores.usage.mu.Unlock()
	if n > 1 {
		t.Errorf("opener counts %d times on inf-empty: the tentative decision outlived the real one", n)
	}
}
