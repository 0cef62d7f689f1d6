package extender

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/testkit"
)

// newClock returns a fake clock for Options.Now: time moves only when the test steps it.
func newClock() *testingclock.FakeClock {
	return testingclock.NewFakeClock(time.Unix(1_800_000_000, 0))
}

var leasesResource = coordinationv1.SchemeGroupVersion.WithResource("leases")

// emulateLeaseConcurrency makes the fake clientset's Leases behave as the API server's do (the
// fake tracker neither sets resourceVersions nor checks them): every write sets a new
// resourceVersion, and an update whose resourceVersion is not the stored one is a conflict.
// It keeps every write (creates and updates) in order.
func emulateLeaseConcurrency(client *fake.Clientset) *leaseWrites {
	w := &leaseWrites{}
	client.PrependReactor("create", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		l := a.(k8stesting.CreateAction).GetObject().(*coordinationv1.Lease).DeepCopy()
		w.mu.Lock()
		w.rv++
		l.ResourceVersion = strconv.Itoa(w.rv)
		w.mu.Unlock()
		if err := client.Tracker().Create(leasesResource, l, a.GetNamespace()); err != nil {
			return true, nil, err
		}
		w.mu.Lock()
		w.updates = append(w.updates, l)
		w.mu.Unlock()
		return true, l, nil
	})
	client.PrependReactor("update", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		l := a.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease).DeepCopy()
		obj, err := client.Tracker().Get(leasesResource, a.GetNamespace(), l.Name)
		if err != nil {
			return true, nil, err
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if obj.(*coordinationv1.Lease).ResourceVersion != l.ResourceVersion {
			return true, nil, apierrors.NewConflict(leasesResource.GroupResource(), l.Name, errObjectModified)
		}
		w.rv++
		l.ResourceVersion = strconv.Itoa(w.rv)
		if err := client.Tracker().Update(leasesResource, l, a.GetNamespace()); err != nil {
			return true, nil, err
		}
		w.updates = append(w.updates, l)
		return true, l, nil
	})
	return w
}

var errObjectModified = errors.New("the object has been modified; please apply your changes to the latest version and try again")

type leaseWrites struct {
	mu      sync.Mutex
	rv      int
	updates []*coordinationv1.Lease
}

func (w *leaseWrites) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.updates)
}

// replicas starts n extenders (identities r0, r1, ...) on one fake API server with the cluster's
// nodes, each with its own context (cancelling one is a crash: no release).
func replicas(t *testing.T, n int, clk *testingclock.FakeClock) ([]*Extender, []context.CancelFunc, *fake.Clientset, *leaseWrites) {
	t.Helper()
	client := fake.NewClientset(cluster()...)
	emulateBinding(client)
	writes := emulateLeaseConcurrency(client)
	var out []*Extender
	var cancels []context.CancelFunc
	for i := range n {
		_, ctx := ktesting.NewTestContext(t)
		ctx, cancel := context.WithCancel(ctx)
		t.Cleanup(cancel)
		o := Options{Client: client, LeaseNamespace: "kube-system", Identity: "r" + strconv.Itoa(i)}
		if clk != nil {
			o.Now = clk.Now
		}
		e, err := New(o)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Start(ctx); err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
		cancels = append(cancels, cancel)
	}
	return out, cancels, client, writes
}

func holderOn(t *testing.T, client *fake.Clientset, node string) string {
	t.Helper()
	l, err := client.CoordinationV1().Leases("kube-system").Get(context.Background(), LeaseName(node), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return holderOf(l)
}

// assertDisjoint checks that no device of node is held by two pods.
func assertDisjoint(t *testing.T, client *fake.Clientset, node string) int {
	t.Helper()
	pods, err := client.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	held := map[int]string{}
	n := 0
	for i := range pods.Items {
		r, err := allocation.RecordOf(&pods.Items[i])
		if err != nil || r == nil || r.Node != node {
			continue
		}
		n++
		for _, c := range r.Containers {
			for _, d := range c.Devices {
				if other, ok := held[d]; ok {
					t.Errorf("device %d of %s given to %s and %s", d, node, other, pods.Items[i].Name)
				}
				held[d] = pods.Items[i].Name
			}
		}
	}
	return n
}

// TestHolderBindsWithoutWritingTheLease: while a replica holds a node's Lease its binds cost no
// Lease write; after ownWindow the next bind renews it once.
func TestHolderBindsWithoutWritingTheLease(t *testing.T) {
	clk := newClock()
	r, _, client, writes := replicas(t, 1, clk)
	ctx := context.Background()
	for i := range 4 {
		p := createPod(t, ctx, client, testkit.MakePod().Name("p"+strconv.Itoa(i)).Neuron(1).Obj())
		if err := r[0].Bind(ctx, p.Namespace, p.Name, p.UID, "trn-empty"); err != nil {
			t.Fatal(err)
		}
	}
	if n := writes.count(); n != 1 {
		t.Errorf("4 binds wrote the Lease %d times, want 1 (creating it, held)", n)
	}
	clk.Step(ownWindow + time.Millisecond)
	p := createPod(t, ctx, client, testkit.MakePod().Name("later").Neuron(1).Obj())
	if err := r[0].Bind(ctx, p.Namespace, p.Name, p.UID, "trn-empty"); err != nil {
		t.Fatal(err)
	}
	if n := writes.count(); n != 2 {
		t.Errorf("the bind after the window wrote the Lease %d times in all, want 2 (a renewal)", n)
	}
	if h := holderOn(t, client, "trn-empty"); h != "r0" {
		t.Errorf("holder %q", h)
	}
	if n := assertDisjoint(t, client, "trn-empty"); n != 5 {
		t.Errorf("%d pods with records, want 5", n)
	}
}

// TestHandoverBetweenReplicas: a replica asked to bind to a node another replica holds asks for
// the Lease, the holder releases it, and the new holder's decision takes the first one's
// devices into account although its informer may not have shown them when it was asked.
func TestHandoverBetweenReplicas(t *testing.T) {
	r, _, client, writes := replicas(t, 2, nil)
	ctx := context.Background()
	var pods []string
	for i := range 4 {
		p := createPod(t, ctx, client, testkit.MakePod().Name("p"+strconv.Itoa(i)).Neuron(4).Obj())
		pods = append(pods, p.Name)
		// Alternate replicas: every bind is a handover.
		if err := r[i%2].Bind(ctx, p.Namespace, p.Name, p.UID, "trn-empty"); err != nil {
			t.Fatalf("bind %s on r%d: %v", p.Name, i%2, err)
		}
		if h := holderOn(t, client, "trn-empty"); h != "r"+strconv.Itoa(i%2) {
			t.Errorf("after bind %d the holder is %q", i, h)
		}
	}
	if n := assertDisjoint(t, client, "trn-empty"); n != len(pods) {
		t.Errorf("%d pods with records, want %d", n, len(pods))
	}
	writes.mu.Lock()
	defer writes.mu.Unlock()
	var released int
	for _, l := range writes.updates {
		if holderOf(l) == "" {
			released++
		}
	}
	if released != 3 {
		t.Errorf("%d releases, want 3 (one per handover)", released)
	}
}

// TestConcurrentBindsFromTwoReplicas: binds to one node from two replicas at once never share a
// device.
func TestConcurrentBindsFromTwoReplicas(t *testing.T) {
	r, _, client, _ := replicas(t, 2, nil)
	ctx := context.Background()
	const n = 16
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		p := createPod(t, ctx, client, testkit.MakePod().Name("c"+strconv.Itoa(i)).Neuron(1).Obj())
		wg.Go(func() { errs[i] = r[i%2].Bind(ctx, p.Namespace, p.Name, p.UID, "trn-empty") })
	}
	wg.Wait()
	bound := 0
	for i, err := range errs {
		if err == nil {
			bound++
		} else {
			t.Logf("bind c%d: %v", i, err)
		}
	}
	if bound < n/2 {
		t.Errorf("only %d of %d binds succeeded", bound, n)
	}
	if got := assertDisjoint(t, client, "trn-empty"); got != bound {
		t.Errorf("%d pods with records, %d binds succeeded", got, bound)
	}
}

// TestTakeoverAfterExpiry: a holder that crashed (no release) loses the node once another
// replica has seen its Lease unchanged for the Lease's duration, not before; the new holder
// then counts the crashed one's decisions.
func TestTakeoverAfterExpiry(t *testing.T) {
	clk := newClock()
	r, cancels, client, _ := replicas(t, 2, clk)
	ctx := context.Background()
	p := createPod(t, ctx, client, testkit.MakePod().Name("first").Neuron(8).Obj())
	if err := r[0].Bind(ctx, p.Namespace, p.Name, p.UID, "trn-empty"); err != nil {
		t.Fatal(err)
	}
	cancels[0]() // r0 crashes while holding the Lease
	q := createPod(t, ctx, client, testkit.MakePod().Name("second").Neuron(8).Obj())
	done := make(chan error, 1)
	go func() { done <- r[1].Bind(ctx, q.Namespace, q.Name, q.UID, "trn-empty") }()
	// r1 asks r0 for the Lease only once it has judged the Lease not expired; the clock stands
	// still until the test steps it, so r1 cannot judge otherwise meanwhile.
	waitFor(t, 5*time.Second, "r1 to ask r0 for the Lease", func() bool {
		l, err := client.CoordinationV1().Leases("kube-system").Get(ctx, LeaseName("trn-empty"), metav1.GetOptions{})
		return err == nil && l.Annotations[handoverAnnotation] == "r1"
	})
	select {
	case err := <-done:
		t.Fatalf("r1 bound before r0's Lease expired (err %v)", err)
	default:
	}
	if h := holderOn(t, client, "trn-empty"); h != "r0" {
		t.Fatalf("holder %q before expiry", h)
	}
	clk.Step(leaseDuration + time.Second)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("r1 did not take the expired Lease")
	}
	if h := holderOn(t, client, "trn-empty"); h != "r1" {
		t.Errorf("holder %q after expiry", h)
	}
	if n := assertDisjoint(t, client, "trn-empty"); n != 2 {
		t.Errorf("%d pods with records, want 2", n)
	}
}

// TestShutdownReleases: a replica that stops releases its Leases, so another takes the node at
// once.
func TestShutdownReleases(t *testing.T) {
	clk := newClock()
	r, _, client, _ := replicas(t, 2, clk)
	ctx := context.Background()
	p := createPod(t, ctx, client, testkit.MakePod().Name("first").Neuron(4).Obj())
	if err := r[0].Bind(ctx, p.Namespace, p.Name, p.UID, "trn-empty"); err != nil {
		t.Fatal(err)
	}
	r[0].Shutdown(ctx)
	if h := holderOn(t, client, "trn-empty"); h != "" {
		t.Fatalf("holder %q after shutdown, want none", h)
	}
	q := createPod(t, ctx, client, testkit.MakePod().Name("second").Neuron(4).Obj())
	if err := r[1].Bind(ctx, q.Namespace, q.Name, q.UID, "trn-empty"); err != nil { // the clock does not move: no expiry
		t.Fatal(err)
	}
	if n := assertDisjoint(t, client, "trn-empty"); n != 2 {
		t.Errorf("%d pods with records, want 2", n)
	}
}

// TestLateDecisionIsNotPosted: a decision whose Binding would be posted after the replica's hold
// (plus postTimeout) ended is dropped, not posted: another replica may own the node by then.
func TestLateDecisionIsNotPosted(t *testing.T) {
	clk := newClock()
	r, _, client, _ := replicas(t, 1, clk)
	ctx := context.Background()
	p := createPod(t, ctx, client, testkit.MakePod().Name("late").Neuron(4).Obj())
	post, err := r[0].decide(ctx, p.Namespace, p.Name, p.UID, "trn-empty")
	if err != nil {
		t.Fatal(err)
	}
	clk.Step(ownWindow + postTimeout + time.Millisecond)
	if err := post(ctx); err == nil {
		t.Fatal("a late decision was posted")
	}
	for _, a := range client.Actions() {
		if a.GetVerb() == "create" && a.GetSubresource() == "binding" {
			t.Fatal("a Binding was sent for the late decision")
		}
	}
	r[0].scores.usage.mu.Lock()
	left := len(r[0].scores.usage.recent["trn-empty"][p.UID])
	r[0].scores.usage.mu.Unlock()
	if left != 0 {
		t.Error("the late decision still counts in the usage")
	}
	if n := r[0].owner.inflightBinds("trn-empty"); n != 0 {
		t.Errorf("%d Bindings in flight", n)
	}
	// Deciding again renews the Lease and binds.
	if err := r[0].Bind(ctx, p.Namespace, p.Name, p.UID, "trn-empty"); err != nil {
		t.Fatal(err)
	}
}
