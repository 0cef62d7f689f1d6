package autoscaler

import (
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kube-neuron/kube-neuron/internal/autoscaler/plan"
	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

var defaultLeads = leads{block: DefaultCapacityBlockDrainLead, ultraServer: DefaultUltraServerCapacityBlockDrainLead, startup: DefaultNodeStartupEstimate}

func TestUsableReservations(t *testing.T) {
	now := t0
	for _, tc := range []struct {
		name string
		r    Reservation
		want bool
	}{
		{"ODCR without an end", Reservation{ID: "cr-1"}, true},
		{"started block that ends late enough", Reservation{ID: "cr-1", Start: now.Add(-time.Hour), End: now.Add(51 * time.Minute)}, true},
		{"starts now", Reservation{ID: "cr-1", Start: now, End: now.Add(time.Hour)}, true},
		{"scheduled: starts later", Reservation{ID: "cr-1", Start: now.Add(time.Second), End: now.Add(5 * time.Hour)}, false},
		{"ended", Reservation{ID: "cr-1", Start: now.Add(-2 * time.Hour), End: now.Add(-time.Minute)}, false},
		// 40m lead + 10m startup: a pod planned now would start when the drain begins.
		{"ends within lead and startup", Reservation{ID: "cr-1", End: now.Add(50 * time.Minute)}, false},
		{"ends within the lead", Reservation{ID: "cr-1", End: now.Add(30 * time.Minute)}, false},
		// 70m lead for UltraServer blocks: what an instance block keeps, an UltraServer block does not.
		{"instance block ending in 75m", Reservation{ID: "cr-1", End: now.Add(75 * time.Minute)}, true},
		{"UltraServer block ending in 75m", Reservation{ID: "cr-1", UltraServerType: "u-trn2x64", End: now.Add(75 * time.Minute)}, false},
		{"UltraServer block ending in 81m", Reservation{ID: "cr-1", UltraServerType: "u-trn2x64", End: now.Add(81 * time.Minute)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := usableReservations([]Reservation{tc.r}, now, defaultLeads)
			if (len(got) == 1) != tc.want {
				t.Errorf("usable = %v, want %v", len(got) == 1, tc.want)
			}
		})
	}
}

func TestPlanReservations(t *testing.T) {
	rs := []Reservation{
		{ID: "cr-a", InstanceType: "trn1.32xlarge", Total: 4, Available: 3},
		{ID: "cr-us", InstanceType: "trn2u.48xlarge", Total: 8, Available: 8, CapacityBlock: true, UltraServerType: "u-trn2x64"},
		{ID: "cr-x", InstanceType: "trn9.huge", Available: 1},
	}
	got, unknown := planReservations(rs, topology.DefaultCatalog())
	want := []plan.Reservation{{ID: "cr-a", InstanceType: "trn1.32xlarge", Available: 3}, {ID: "cr-us", InstanceType: "trn2u.48xlarge", Available: 8, UltraServer: true}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("plan reservations %+v, want %+v", got, want)
	}
	if len(unknown) != 1 || unknown[0].ID != "cr-x" {
		t.Errorf("unknown %+v, want cr-x", unknown)
	}
}

// reservingPlan is plan.Plan that records its options and launches every new node into the
// reservation id (the planner's choice of reservation is the plan package's to test).
func reservingPlan(got *plan.Options, id string) planFunc {
	return func(pods []plan.PodDemand, launching []plan.NodeOption, o plan.Options) (plan.ScaleUp, []plan.Decision) {
		*got = o
		o.Reservations, o.ReservedOnly = nil, false
		up, dec := plan.Plan(pods, launching, o)
		for k := range up.Nodes {
			if !up.Nodes[k].Launching {
				up.Nodes[k].Reservation = id
			}
		}
		return up, dec
	}
}

var blockEnd = t0.Add(3 * time.Hour)

func trn1Reservations() []Reservation {
	return []Reservation{
		{ID: "cr-odcr", InstanceType: "trn1.32xlarge", AvailabilityZone: "us-west-2a", Total: 2, Available: 2},
		{ID: "cr-block", InstanceType: "trn1.32xlarge", AvailabilityZone: "us-west-2a", Total: 1, Available: 1, CapacityBlock: true, Start: t0.Add(-time.Hour), End: blockEnd},
		{ID: "cr-ending", InstanceType: "trn1.32xlarge", Total: 1, Available: 1, CapacityBlock: true, End: t0.Add(45 * time.Minute)},
		{ID: "cr-later", InstanceType: "trn1.32xlarge", Total: 1, Available: 1, CapacityBlock: true, Start: t0.Add(time.Hour), End: t0.Add(5 * time.Hour)},
		{ID: "cr-unknown", InstanceType: "trn9.huge", Total: 1, Available: 1},
		{ID: "cr-us", InstanceType: "trn2u.48xlarge", Total: 4, Available: 4, CapacityBlock: true, UltraServerType: "u-trn2x64", End: blockEnd},
	}
}

// TestControllerLaunchesIntoAReservation: the usable reservations reach the plan, with
// ReservedOnly when the on-demand fallback is off; the node the plan puts into a reservation is
// launched into it, labelled, and annotated with the block's end.
func TestControllerLaunchesIntoAReservation(t *testing.T) {
	e := newEnv(t, devicePlugin, pendingPod(testPod("a").Neuron(4).Selector(labels.InstanceFamily, "trn1")))
	e.provider.reservations = trn1Reservations()
	c, _ := e.controller(func(o *ControllerOptions) { o.ReservedOnly = true })
	var got plan.Options
	c.plan = reservingPlan(&got, "cr-block")
	round(t, c)
	want := []plan.Reservation{
		{ID: "cr-odcr", InstanceType: "trn1.32xlarge", Available: 2},
		{ID: "cr-block", InstanceType: "trn1.32xlarge", Available: 1},
		{ID: "cr-us", InstanceType: "trn2u.48xlarge", Available: 4, UltraServer: true},
	}
	if !reflect.DeepEqual(got.Reservations, want) || !got.ReservedOnly {
		t.Errorf("plan options: reservations %+v reservedOnly %v, want %+v and true", got.Reservations, got.ReservedOnly, want)
	}
	if !c.unknownReservations["cr-unknown/trn9.huge"] {
		t.Error("the reservation of an unknown type is not noted as logged")
	}
	launches := e.provider.launched()
	if len(launches) != 1 {
		t.Fatalf("launches %+v, want one", launches)
	}
	r := launches[0]
	if r.Reservation != "cr-block" || r.Labels[labels.CapacityReservationID] != "cr-block" || r.Labels[labels.CapacityType] != labels.CapacityTypeReserved {
		t.Errorf("launched into %q with labels %v, want cr-block, reserved", r.Reservation, r.Labels)
	}
	if got, want := r.Annotations[labels.CapacityReservationEndAnnotation], "2026-03-01T15:00:00Z"; got != want {
		t.Errorf("end annotation %q, want %q", got, want)
	}

	// On demand: no reservation, no end, capacity type on-demand; the fallback is on by default.
	e2 := newEnv(t, devicePlugin, pendingPod(testPod("a").Neuron(4).Selector(labels.InstanceFamily, "trn1")))
	e2.provider.reservations = trn1Reservations()
	c2, _ := e2.controller()
	c2.plan = reservingPlan(&got, "")
	round(t, c2)
	if got.ReservedOnly {
		t.Error("ReservedOnly with the on-demand fallback on")
	}
	if l := e2.provider.launched(); len(l) != 1 || l[0].Reservation != "" || l[0].Labels[labels.CapacityType] != labels.CapacityTypeOnDemand ||
		l[0].Labels[labels.CapacityReservationID] != "" || l[0].Annotations[labels.CapacityReservationEndAnnotation] != "" {
		t.Errorf("on-demand launch %+v", l)
	}
}

// TestControllerPlansWithoutReservationsWhenListingFails: the round goes on without them, the
// error is counted, and the on-demand fallback setting still holds.
func TestControllerPlansWithoutReservationsWhenListingFails(t *testing.T) {
	e := newEnv(t, devicePlugin, pendingPod(testPod("a").Neuron(4).Selector(labels.InstanceFamily, "trn1")))
	e.provider.reservationsErr = errors.New("throttled")
	c, _ := e.controller(func(o *ControllerOptions) { o.ReservedOnly = true })
	var got plan.Options
	planned := false
	c.plan = func(pods []plan.PodDemand, launching []plan.NodeOption, o plan.Options) (plan.ScaleUp, []plan.Decision) {
		got, planned = o, true
		dec := make([]plan.Decision, len(pods))
		for i, d := range pods {
			dec[i] = plan.Decision{Pod: d.Key(), Node: -1, Reason: plan.ReasonNotTriggerScaleUp, Message: "no reservation"}
		}
		return plan.ScaleUp{}, dec
	}
	round(t, c)
	if !planned || len(got.Reservations) != 0 || !got.ReservedOnly {
		t.Errorf("planned %v with reservations %+v reservedOnly %v, want a plan without reservations and reservedOnly", planned, got.Reservations, got.ReservedOnly)
	}
	if n := metricValue(t, c.metrics.providerErrors.WithLabelValues("reservations")); n != 1 {
		t.Errorf("provider errors metric %v, want 1", n)
	}
}

// TestControllerLabelsAReservedNodeOnRelease: a node launched into a reservation registers
// without the capacity labels (on EC2 the launch template cannot know them); its release adds
// them, in the patch that removes the launching taint. A label the Node has stays as it is.
func TestControllerLabelsAReservedNodeOnRelease(t *testing.T) {
	e := newEnv(t, devicePlugin, pendingPod(testPod("a").Neuron(4).Selector(labels.InstanceFamily, "trn1")))
	e.provider.reservations = trn1Reservations()
	c, _ := e.controller()
	var opts plan.Options
	c.plan = reservingPlan(&opts, "cr-odcr")
	round(t, c)
	node := e.provider.launched()[0].Name
	n := heldNode(node, "trn1.32xlarge", t0, true)
	e.putNode(c, n)
	e.client.ClearActions()
	round(t, c)
	got, err := e.client.CoreV1().Nodes().Get(t.Context(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Labels[labels.CapacityReservationID] != "cr-odcr" || got.Labels[labels.CapacityType] != labels.CapacityTypeReserved {
		t.Errorf("labels %v, want the capacity labels of cr-odcr", got.Labels)
	}
	if taints := e.taints(node); !slices.Equal(taints, releasedTaints) {
		t.Errorf("taints %v, want %v", taints, releasedTaints)
	}
	patches := 0
	for _, a := range e.client.Actions() {
		if a.GetVerb() == "patch" && a.GetResource().Resource == "nodes" {
			patches++
		}
	}
	if patches != 1 {
		t.Errorf("%d node patches, want the release's one", patches)
	}

	if _, has := got.Annotations[labels.CapacityReservationEndAnnotation]; has {
		t.Errorf("annotations %v: an ODCR without an end has no end annotation", got.Annotations)
	}

	// A Node with a capacity type of its own keeps it; the missing id is added, and the end of
	// its Capacity Block.
	e2 := newEnv(t, devicePlugin, pendingPod(testPod("a").Neuron(4).Selector(labels.InstanceFamily, "trn1")))
	e2.provider.reservations = trn1Reservations()
	c2, _ := e2.controller()
	c2.plan = reservingPlan(&opts, "cr-block")
	round(t, c2)
	node = e2.provider.launched()[0].Name
	n = heldNode(node, "trn1.32xlarge", t0, true)
	n.Labels[labels.CapacityType] = "custom"
	e2.putNode(c2, n)
	round(t, c2)
	got, _ = e2.client.CoreV1().Nodes().Get(t.Context(), node, metav1.GetOptions{})
	if got.Labels[labels.CapacityReservationID] != "cr-block" || got.Labels[labels.CapacityType] != "custom" {
		t.Errorf("labels %v, want the id added and capacity-type custom kept", got.Labels)
	}
	if end := got.Annotations[labels.CapacityReservationEndAnnotation]; end != "2026-03-01T15:00:00Z" {
		t.Errorf("end annotation %q, want the block's end", end)
	}
}

func TestAddOps(t *testing.T) {
	add := map[string]string{labels.CapacityType: "reserved", labels.CapacityReservationID: "cr-1"}
	none := &corev1.Node{}
	if got := addOps(none.Labels, "/metadata/labels", add); len(got) != 1 || got[0]["path"] != "/metadata/labels" {
		t.Errorf("ops on a node without labels %v, want one add of the map", got)
	}
	some := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{labels.CapacityType: "on-demand"}}}
	got := addOps(some.Labels, "/metadata/labels", add)
	if len(got) != 1 || got[0]["path"] != "/metadata/labels/kube-neuron.io~1capacity-reservation-id" || got[0]["value"] != "cr-1" {
		t.Errorf("ops %v, want the id only, its key escaped", got)
	}
}

// TestControllerLaunchesAnUltraServerIntoItsBlock: every node of an UltraServer the plan puts
// into an UltraServer Capacity Block is launched into it, with the block's end.
func TestControllerLaunchesAnUltraServerIntoItsBlock(t *testing.T) {
	objs := []runtime.Object{daemonSet("dra", map[string]string{"app": plan.DRADriverName}), plan.DefaultDeviceClass(), us4Template()}
	for i := range 4 {
		objs = append(objs, us4Replica(i))
	}
	e := newEnv(t, objs...)
	e.provider.reservations = trn1Reservations()
	c, _ := e.controller()
	var got plan.Options
	c.plan = reservingPlan(&got, "cr-us")
	round(t, c)
	launches := e.provider.launched()
	if len(launches) != 4 {
		t.Fatalf("launched %d nodes, want the 4 of one UltraServer", len(launches))
	}
	for _, r := range launches {
		if r.Reservation != "cr-us" || r.Labels[labels.CapacityReservationID] != "cr-us" || r.Annotations[labels.CapacityReservationEndAnnotation] != "2026-03-01T15:00:00Z" {
			t.Errorf("node %s launched into %q with labels %v annotations %v, want cr-us and its end", r.Name, r.Reservation, r.Labels, r.Annotations)
		}
	}
}

func TestMissingCapacity(t *testing.T) {
	byID := map[string]Reservation{"cr-1": {ID: "cr-1", End: blockEnd}, "cr-2": {ID: "cr-2"}}
	reserved := func(id string) Instance {
		return Instance{Labels: map[string]string{labels.CapacityReservationID: id, labels.CapacityType: labels.CapacityTypeReserved}}
	}
	bare := &corev1.Node{}
	for _, tc := range []struct {
		name              string
		node              *corev1.Node
		in                Instance
		wantLabels, wantA map[string]string
	}{
		{"EC2: the end from the listed reservation", bare, reserved("cr-1"),
			map[string]string{labels.CapacityReservationID: "cr-1", labels.CapacityType: labels.CapacityTypeReserved},
			map[string]string{labels.CapacityReservationEndAnnotation: "2026-03-01T15:00:00Z"}},
		{"an ODCR: no end", bare, reserved("cr-2"),
			map[string]string{labels.CapacityReservationID: "cr-2", labels.CapacityType: labels.CapacityTypeReserved}, nil},
		{"on demand", bare, Instance{Labels: map[string]string{labels.CapacityType: labels.CapacityTypeOnDemand}},
			map[string]string{labels.CapacityType: labels.CapacityTypeOnDemand}, nil},
		{"the Node has them", blockNodeOn("n", "cr-1", blockEnd), reserved("cr-1"), nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := missingCapacity(tc.node, tc.in, byID)
			if !reflect.DeepEqual(got.labels, tc.wantLabels) || !reflect.DeepEqual(got.annotations, tc.wantA) {
				t.Errorf("missing %+v, want labels %v annotations %v", got, tc.wantLabels, tc.wantA)
			}
		})
	}
}
