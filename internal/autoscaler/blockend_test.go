package autoscaler

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/kube-neuron/kube-neuron/internal/autoscaler/plan"
	"github.com/kube-neuron/kube-neuron/internal/labels"
)

func TestDrainRule(t *testing.T) {
	end := t0.Add(2 * time.Hour)
	block := blockNode{reservation: "cr-1", end: end, lead: 40 * time.Minute}
	us := blockNode{reservation: "cr-2", end: end, lead: 70 * time.Minute, ultraServer: true}
	short := blockNode{reservation: "cr-3", end: end, lead: 4 * time.Minute}
	for _, tc := range []struct {
		name      string
		b         blockNode
		now       time.Time
		remaining int
		want      drainAction
	}{
		{"before the lead", block, end.Add(-41 * time.Minute), 2, drainNone},
		{"before the lead, empty", block, end.Add(-41 * time.Minute), 0, drainNone},
		{"at the lead", block, end.Add(-40 * time.Minute), 2, drainEvict},
		{"drained empty", block, end.Add(-39 * time.Minute), 0, drainRemove},
		// Halfway between the drain (end-40m) and EC2's termination (end-30m).
		{"just before the deadline", block, end.Add(-35*time.Minute - time.Second), 1, drainEvict},
		{"at the deadline", block, end.Add(-35 * time.Minute), 1, drainRemove},
		{"UltraServer block before its lead", us, end.Add(-71 * time.Minute), 1, drainNone},
		{"UltraServer block at its lead", us, end.Add(-70 * time.Minute), 1, drainEvict},
		{"UltraServer block at its deadline", us, end.Add(-65 * time.Minute), 1, drainRemove},
		// A lead shorter than EC2's termination: halfway between the drain and the end.
		{"short lead", short, end.Add(-3 * time.Minute), 1, drainEvict},
		{"short lead deadline", short, end.Add(-2 * time.Minute), 1, drainRemove},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := drainRule(tc.b, tc.now, tc.remaining); got != tc.want {
				t.Errorf("drainRule = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestNodeBlock(t *testing.T) {
	end := t0.Add(2 * time.Hour)
	byID := map[string]Reservation{
		"cr-1":  {ID: "cr-1", End: end.Add(time.Hour)},
		"cr-us": {ID: "cr-us", UltraServerType: "u-trn2x64", End: end},
		"cr-od": {ID: "cr-od"},
	}
	node := func(id, endAnnotation string) *corev1.Node {
		n := launchedNode("n", "trn1.32xlarge", t0)
		if id != "" {
			n.Labels[labels.CapacityReservationID] = id
		}
		if endAnnotation != "" {
			n.Annotations = map[string]string{labels.CapacityReservationEndAnnotation: endAnnotation}
		}
		return n
	}
	for _, tc := range []struct {
		name    string
		node    *corev1.Node
		in      *Instance
		ok      bool
		end     time.Time
		lead    time.Duration
		reserve string
	}{
		{"the listed reservation's end first (an extended block)", node("cr-1", end.Format(time.RFC3339)), nil, true, end.Add(time.Hour), 40 * time.Minute, "cr-1"},
		{"the Node's annotation when the reservation is not listed", node("cr-gone", end.Format(time.RFC3339)), &Instance{
			Annotations: map[string]string{labels.CapacityReservationEndAnnotation: end.Add(time.Hour).Format(time.RFC3339)}}, true, end, 40 * time.Minute, "cr-gone"},
		{"the Instance's annotation", node("", ""), &Instance{Labels: map[string]string{labels.CapacityReservationID: "cr-x"},
			Annotations: map[string]string{labels.CapacityReservationEndAnnotation: end.Format(time.RFC3339)}}, true, end, 40 * time.Minute, "cr-x"},
		{"the reservation's end", node("cr-1", ""), nil, true, end.Add(time.Hour), 40 * time.Minute, "cr-1"},
		{"an UltraServer block's lead", node("cr-us", ""), nil, true, end, 70 * time.Minute, "cr-us"},
		{"a reservation without an end", node("cr-od", ""), nil, false, time.Time{}, 0, ""},
		{"on demand", node("", ""), nil, false, time.Time{}, 0, ""},
		{"a reservation not listed", node("cr-gone", ""), nil, false, time.Time{}, 0, ""},
		{"an invalid annotation", node("cr-1", "soon"), nil, true, end.Add(time.Hour), 40 * time.Minute, "cr-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, ok := nodeBlock(tc.node, tc.in, byID, defaultLeads)
			if ok != tc.ok || !b.end.Equal(tc.end) || b.lead != tc.lead || (ok && b.reservation != tc.reserve) {
				t.Errorf("nodeBlock = %+v %v, want end %v lead %v reservation %s ok %v", b, ok, tc.end, tc.lead, tc.reserve, tc.ok)
			}
		})
	}
}

var podsGVR = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// evictions makes the fake API server answer evictions as the real one does: the pod is deleted,
// unless a PodDisruptionBudget refuses (refused(name): 429 Too Many Requests). It returns the
// pods evicted, in order.
func (e *env) evictions(refused func(name string) bool) func() []string {
	var evicted []string
	e.client.PrependReactor("create", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		ev := a.(clienttesting.CreateAction).GetObject().(*policyv1.Eviction)
		if refused(ev.Name) {
			return true, nil, apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 10)
		}
		evicted = append(evicted, ev.Name)
		return true, nil, e.client.Tracker().Delete(podsGVR, ev.Namespace, ev.Name)
	})
	return func() []string {
		e.client.Lock()
		defer e.client.Unlock()
		return slices.Clone(evicted)
	}
}

// blockNodeOn is a Ready node the autoscaler launched into Capacity Block id, which ends at end.
func blockNodeOn(name, id string, end time.Time) *corev1.Node {
	n := launchedNode(name, "trn1.32xlarge", t0.Add(-time.Hour))
	n.Labels[labels.CapacityReservationID] = id
	n.Labels[labels.CapacityType] = labels.CapacityTypeReserved
	n.Annotations = map[string]string{labels.CapacityReservationEndAnnotation: end.UTC().Format(time.RFC3339)}
	return n
}

// ownedPod is a running pod of a ReplicaSet on the node.
func ownedPod(name, node string) *corev1.Pod {
	p := boundPod(testPod(name).Neuron(4), node)
	p.UID = types.UID("uid-" + name)
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "rs", Controller: ptr.To(true)}}
	return p
}

// TestControllerDrainsANodeBeforeItsBlockEnds: at the lead the node is cordoned, the node and
// its pods get an event, and the pods are evicted but DaemonSet and mirror pods; a pod a
// PodDisruptionBudget protects is retried every round, across a restart of the controller,
// and the node is removed at the deadline with it. A node of the same block that the
// autoscaler did not launch is left alone.
func TestControllerDrainsANodeBeforeItsBlockEnds(t *testing.T) {
	end := t0.Add(time.Hour)
	const node = "neuron-cb-1"
	mirror := boundPod(testPod("static").DefaultedContainer("c", "cpu", 1), node)
	mirror.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "x"}
	other := blockNodeOn("not-ours", "cr-block", end)
	delete(other.Labels, LaunchedByLabel)
	e := newEnv(t, blockNodeOn(node, "cr-block", end), ownedPod("work", node), ownedPod("guarded", node), dsPod("plugin-x", node), mirror,
		other, ownedPod("elsewhere", "not-ours"))
	e.provider.instances[node] = Instance{Name: node, Type: "trn1.32xlarge"}
	e.provider.reservations = []Reservation{{ID: "cr-block", InstanceType: "trn1.32xlarge", Total: 2, CapacityBlock: true, End: end}}
	evicted := e.evictions(func(name string) bool { return name == "guarded" })
	c, rec := e.controller()

	// 21 minutes before the drain: nothing.
	round(t, c)
	if e.unschedulable(node) || len(evicted()) != 0 || len(events(rec)) != 0 {
		t.Fatalf("before the lead: cordoned %v, evicted %v", e.unschedulable(node), evicted())
	}

	// The lead (end - 40m): cordon, events, evictions.
	e.clock.Add(20 * time.Minute)
	round(t, c)
	if !e.unschedulable(node) {
		t.Error("the node is not cordoned")
	}
	if got := evicted(); !slices.Equal(got, []string{"work"}) {
		t.Errorf("evicted %v, want work (guarded refused, DaemonSet and mirror pods stay)", got)
	}
	ev := events(rec)
	for _, want := range []string{
		"Warning CapacityBlockEnding node neuron-cb-1 runs on Capacity Block cr-block, which ends at 2026-03-01T13:00:00Z: cordoned, its pods are evicted",
		"Warning CapacityBlockEnding node neuron-cb-1 runs on Capacity Block cr-block, which ends at 2026-03-01T13:00:00Z: the node is drained before then, and the pod will be evicted",
	} {
		if !hasEvent(ev, want) {
			t.Errorf("events %q, want one starting %q", ev, want)
		}
	}
	if n := len(slices.DeleteFunc(slices.Clone(ev), func(s string) bool { return !strings.Contains(s, "the pod will be evicted") })); n != 2 {
		t.Errorf("%d pod events, want one on each of work and guarded: %q", n, ev)
	}
	if n := metricValue(t, c.metrics.evictions.WithLabelValues("evicted")); n != 1 {
		t.Errorf("evicted metric %v, want 1", n)
	}
	if n := metricValue(t, c.metrics.evictions.WithLabelValues("refused")); n != 1 {
		t.Errorf("refused metric %v, want 1", n)
	}
	if len(e.provider.deleted) != 0 {
		t.Fatalf("removed %v with a pod left before the deadline", e.provider.deleted)
	}
	if n, _ := e.client.CoreV1().Nodes().Get(context.Background(), "not-ours", metav1.GetOptions{}); n.Spec.Unschedulable {
		t.Error("a node the autoscaler did not launch was cordoned")
	}

	// The budget still refuses: retried next round, not forced.
	waitFor(t, func() bool { _, err := c.pods.Pods("default").Get("work"); return err != nil })
	waitFor(t, func() bool { n, _ := c.nodes.Get(node); return n != nil && n.Spec.Unschedulable })
	e.client.ClearActions()
	e.clock.Add(2 * time.Minute)
	round(t, c)
	if !slices.ContainsFunc(e.client.Actions(), func(a clienttesting.Action) bool { return a.GetSubresource() == "eviction" }) {
		t.Error("the refused eviction was not tried again")
	}
	if len(e.provider.deleted) != 0 {
		t.Fatalf("removed %v before the deadline", e.provider.deleted)
	}

	// A restarted controller goes on from the cluster's state: still not before the deadline.
	restarted, rec2 := e.controller()
	e.client.ClearActions()
	round(t, restarted)
	if !slices.ContainsFunc(e.client.Actions(), func(a clienttesting.Action) bool { return a.GetSubresource() == "eviction" }) {
		t.Error("the restarted controller did not evict")
	}
	if len(e.provider.deleted) != 0 {
		t.Fatalf("the restarted controller removed %v before the deadline", e.provider.deleted)
	}
	events(rec2)

	// The deadline (end - 35m): removed with the guarded pod.
	e.clock.Add(3 * time.Minute)
	round(t, restarted)
	if !slices.Equal(e.provider.deleted, []string{node}) {
		t.Fatalf("removed %v at the deadline, want %s", e.provider.deleted, node)
	}
	if _, err := e.client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the Node object is still there: %v", err)
	}
	if ev := events(rec2); !hasEvent(ev, "Normal CapacityBlockEnding node neuron-cb-1 on Capacity Block cr-block (ends at 2026-03-01T13:00:00Z) removed: the drain deadline came with 1 pods left on it") {
		t.Errorf("events %q", ev)
	}
	if n := metricValue(t, restarted.metrics.drained); n != 1 {
		t.Errorf("drained metric %v, want 1", n)
	}
	if restarted.fleet.get(node).phase != phaseDeleted {
		t.Error("the removed node is not Deleted in the fleet")
	}
}

// TestControllerRemovesADrainedNode: once the last pod is evicted the node is removed, before
// the deadline; the pods' new nodes are planned without the ending block.
func TestControllerRemovesADrainedNode(t *testing.T) {
	end := t0.Add(40 * time.Minute)
	const node = "neuron-cb-2"
	e := newEnv(t, devicePlugin, blockNodeOn(node, "cr-block", end), ownedPod("work", node), dsPod("plugin-x", node))
	e.provider.instances[node] = Instance{Name: node, Type: "trn1.32xlarge"}
	e.provider.reservations = []Reservation{{ID: "cr-block", InstanceType: "trn1.32xlarge", Total: 1, CapacityBlock: true, End: end}}
	evicted := e.evictions(func(string) bool { return false })
	c, _ := e.controller()
	round(t, c)
	if got := evicted(); !slices.Equal(got, []string{"work"}) || len(e.provider.deleted) != 0 {
		t.Fatalf("evicted %v, removed %v: want work evicted, the node kept until it is gone", got, e.provider.deleted)
	}
	waitFor(t, func() bool { _, err := c.pods.Pods("default").Get("work"); return err != nil })
	// Its ReplicaSet creates it again; the scheduler finds no room.
	e.createPod(c, pendingPod(testPod("work-2").Neuron(4).Selector(labels.InstanceFamily, "trn1")))
	var opts []string
	c.plan = func(pods []plan.PodDemand, launching []plan.NodeOption, o plan.Options) (plan.ScaleUp, []plan.Decision) {
		for _, r := range o.Reservations {
			opts = append(opts, r.ID)
		}
		return plan.Plan(pods, launching, o)
	}
	round(t, c)
	if !slices.Equal(e.provider.deleted, []string{node}) {
		t.Errorf("removed %v, want %s once its pod was evicted", e.provider.deleted, node)
	}
	if len(opts) != 0 {
		t.Errorf("the plan was offered reservations %v, want none: the block ends before a new node could start", opts)
	}
	if l := e.provider.launched(); len(l) != 1 || l[0].Reservation != "" {
		t.Errorf("launches %+v, want one on-demand node for the evicted pod's replacement", l)
	}
}

// TestControllerDrainDryRun: a dry run tells and does nothing.
func TestControllerDrainDryRun(t *testing.T) {
	end := t0.Add(30 * time.Minute)
	const node = "neuron-cb-3"
	e := newEnv(t, blockNodeOn(node, "cr-block", end), ownedPod("work", node))
	e.provider.instances[node] = Instance{Name: node, Type: "trn1.32xlarge"}
	evicted := e.evictions(func(string) bool { return false })
	c, rec := e.controller(func(o *ControllerOptions) { o.DryRun = true })
	round(t, c)
	if e.unschedulable(node) || len(evicted()) != 0 || len(e.provider.deleted) != 0 {
		t.Errorf("dry run: cordoned %v, evicted %v, removed %v", e.unschedulable(node), evicted(), e.provider.deleted)
	}
	if ev := events(rec); !hasEvent(ev, "Warning CapacityBlockEnding dry run: node neuron-cb-3 runs on Capacity Block cr-block") {
		t.Errorf("events %q", ev)
	}
}
