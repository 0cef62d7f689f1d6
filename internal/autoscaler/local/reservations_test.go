package local

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kube-neuron/kube-neuron/internal/autoscaler"
	"github.com/kube-neuron/kube-neuron/internal/labels"
)

func TestParseReservations(t *testing.T) {
	end := time.Date(2026, 11, 27, 1, 0, 0, 0, time.UTC)
	tests := []struct {
		name, in string
		want     []Reservation
		err      string
	}{
		{name: "odcr and block", in: `[{"id":"cr-lab-1","instanceType":"trn1.32xlarge","count":2},
			{"id":"cr-lab-2","instanceType":"trn1.32xlarge","count":1,"endTime":"2026-11-27T02:00:00+01:00"}]`,
			want: []Reservation{{ID: "cr-lab-1", InstanceType: "trn1.32xlarge", Count: 2}, {ID: "cr-lab-2", InstanceType: "trn1.32xlarge", Count: 1, End: end}}},
		{name: "empty list", in: `[]`},
		{name: "null", in: `null`},
		{name: "empty file", in: ``, err: "empty: want a JSON list"},
		{name: "object", in: `{"id":"cr-1"}`, err: "not a JSON list of reservations"},
		{name: "unknown field", in: `[{"id":"cr-1","instanceType":"trn1.32xlarge","count":1,"az":"x"}]`, err: `unknown field "az"`},
		{name: "no id", in: `[{"instanceType":"trn1.32xlarge","count":1}]`, err: "reservation 0: id is required"},
		{name: "no type", in: `[{"id":"cr-1","count":1}]`, err: "reservation 0 (cr-1): instanceType is required"},
		{name: "zero count", in: `[{"id":"cr-1","instanceType":"trn1.32xlarge"}]`, err: "reservation 0 (cr-1): count 0: a reservation holds at least 1 instance"},
		{name: "negative count", in: `[{"id":"cr-1","instanceType":"trn1.32xlarge","count":-2}]`, err: "count -2"},
		{name: "count not a number", in: `[{"id":"cr-1","instanceType":"trn1.32xlarge","count":"2"}]`, err: "cannot unmarshal string"},
		{name: "bad end", in: `[{"id":"cr-1","instanceType":"trn1.32xlarge","count":1,"endTime":"tomorrow"}]`, err: `reservation 0 (cr-1): endTime "tomorrow" is not an RFC 3339 time`},
		{name: "duplicate id", in: `[{"id":"cr-1","instanceType":"trn1.32xlarge","count":1},{"id":"cr-1","instanceType":"inf2.48xlarge","count":1}]`, err: "reservation 1 (cr-1): id cr-1 is used twice"},
		{name: "trailing data", in: `[] []`, err: "unexpected data after the list"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseReservations([]byte(tt.in))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestLoadReservations(t *testing.T) {
	path := filepath.Join(t.TempDir(), "reservations.json")
	if _, err := LoadReservations(path); err == nil || !strings.Contains(err.Error(), "reading the local reservations") {
		t.Errorf("missing file: %v", err)
	}
	if err := os.WriteFile(path, []byte(`[{"id":"cr-1","instanceType":"trn1.32xlarge","count":0}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadReservations(path); err == nil || !strings.Contains(err.Error(), path+": reservation 0 (cr-1): count 0") {
		t.Errorf("bad file: %v, want the path and the entry", err)
	}
	if err := os.WriteFile(path, []byte(`[{"id":"cr-1","instanceType":"trn1.32xlarge","count":3}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	rs, err := LoadReservations(path)
	if err != nil || len(rs) != 1 || rs[0].Count != 3 {
		t.Errorf("LoadReservations: %+v, %v", rs, err)
	}
}

// FuzzParseReservations: any input parses to valid reservations or fails with an error.
func FuzzParseReservations(f *testing.F) {
	f.Add([]byte(`[{"id":"cr-lab-1","instanceType":"trn1.32xlarge","count":2,"endTime":"2026-11-27T01:00:00Z"}]`))
	f.Add([]byte(`[{"id":"a","instanceType":"b","count":1},{"id":"a","instanceType":"b","count":1}]`))
	f.Add([]byte(`null`))
	f.Add([]byte(`[{"count":1e9}]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		rs, err := ParseReservations(data)
		if err != nil {
			if rs != nil {
				t.Errorf("reservations %+v with error %v", rs, err)
			}
			return
		}
		ids := map[string]bool{}
		for _, r := range rs {
			if r.ID == "" || r.InstanceType == "" || r.Count < 1 || ids[r.ID] {
				t.Errorf("invalid reservation %+v accepted", r)
			}
			ids[r.ID] = true
		}
	})
}

func reservedRequest(name, typ, reservation string) autoscaler.NodeRequest {
	return autoscaler.NodeRequest{Name: name, Type: typ, Mode: labels.AllocationModeDevicePlugin, Reservation: reservation,
		Labels: map[string]string{labels.InstanceType: typ}}
}

func TestLaunchIntoReservations(t *testing.T) {
	ctx := t.Context()
	end := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	client := fake.NewClientset()
	p := New(Options{Client: client, Reservations: []Reservation{
		{ID: "cr-odcr", InstanceType: "trn1.32xlarge", Count: 2},
		{ID: "cr-block", InstanceType: "trn1.32xlarge", Count: 1, End: end},
		{ID: "cr-ended", InstanceType: "trn1.32xlarge", Count: 1, End: time.Now().Add(-time.Minute)},
	}})
	available := func() map[string]int {
		t.Helper()
		rs, err := p.Reservations(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int{}
		for _, r := range rs {
			out[r.ID] = r.Available
		}
		return out
	}
	rs, err := p.Reservations(ctx)
	if err != nil || len(rs) != 3 {
		t.Fatalf("Reservations: %+v, %v", rs, err)
	}
	if r := rs[0]; r.Total != 2 || r.Available != 2 || r.AvailabilityZone != "local" || r.CapacityBlock || !r.End.IsZero() || r.InstanceType != "trn1.32xlarge" {
		t.Errorf("ODCR %+v", r)
	}
	if r := rs[1]; !r.CapacityBlock || !r.End.Equal(end) || r.Available != 1 {
		t.Errorf("Capacity Block %+v", r)
	}

	// Into the ODCR: labelled reserved with its id, no end.
	req := reservedRequest("n1", "trn1.32xlarge", "cr-odcr")
	req.Annotations = map[string]string{labels.CapacityReservationEndAnnotation: "stale"}
	if _, err := p.Launch(ctx, req); err != nil {
		t.Fatal(err)
	}
	n, _ := client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if n.Labels[labels.CapacityReservationID] != "cr-odcr" || n.Labels[labels.CapacityType] != labels.CapacityTypeReserved {
		t.Errorf("node of the ODCR: labels %v", n.Labels)
	}
	if _, ok := n.Annotations[labels.CapacityReservationEndAnnotation]; ok {
		t.Errorf("node of the ODCR: annotations %v, want no end", n.Annotations)
	}
	// The same name again is the same node, not a second instance.
	if _, err := p.Launch(ctx, req); err != nil {
		t.Fatal(err)
	}
	if a := available()["cr-odcr"]; a != 1 {
		t.Errorf("cr-odcr has %d available after one node, want 1", a)
	}
	if _, err := p.Launch(ctx, reservedRequest("n2", "trn1.32xlarge", "cr-odcr")); err != nil {
		t.Fatal(err)
	}
	_, err = p.Launch(ctx, reservedRequest("n3", "trn1.32xlarge", "cr-odcr"))
	if err == nil || !strings.Contains(err.Error(), "capacity reservation cr-odcr is full: 2 of its 2 trn1.32xlarge instances run, 1 more asked for") {
		t.Errorf("third node into a reservation of 2: %v", err)
	}
	if _, err := client.CoreV1().Nodes().Get(ctx, "n3", metav1.GetOptions{}); err == nil {
		t.Error("the refused node was created")
	}
	if a := available()["cr-odcr"]; a != 0 {
		t.Errorf("cr-odcr has %d available when full", a)
	}
	// A node being deleted no longer counts; a deleted one frees its room.
	if err := p.Delete(ctx, "n2"); err != nil {
		t.Fatal(err)
	}
	if a := available()["cr-odcr"]; a != 1 {
		t.Errorf("cr-odcr has %d available after a node was deleted, want 1", a)
	}
	gone := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "leaving", Labels: map[string]string{labels.CapacityReservationID: "cr-odcr"},
		DeletionTimestamp: &metav1.Time{Time: time.Now()}, Finalizers: []string{"x"}}}
	if _, err := client.CoreV1().Nodes().Create(ctx, gone, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if a := available()["cr-odcr"]; a != 1 {
		t.Errorf("cr-odcr has %d available with a node being deleted, want 1", a)
	}

	// Into the Capacity Block: its end on the node.
	if _, err := p.Launch(ctx, reservedRequest("b1", "trn1.32xlarge", "cr-block")); err != nil {
		t.Fatal(err)
	}
	b, _ := client.CoreV1().Nodes().Get(ctx, "b1", metav1.GetOptions{})
	if b.Labels[labels.CapacityReservationID] != "cr-block" || b.Annotations[labels.CapacityReservationEndAnnotation] != end.Format(time.RFC3339) {
		t.Errorf("node of the block: labels %v annotations %v", b.Labels, b.Annotations)
	}

	for _, tt := range []struct {
		req autoscaler.NodeRequest
		err string
	}{
		{reservedRequest("x1", "trn1.32xlarge", "cr-nope"), `node x1: unknown capacity reservation "cr-nope" (configured: cr-odcr, cr-block, cr-ended)`},
		{reservedRequest("x2", "inf2.48xlarge", "cr-odcr"), "node x2: capacity reservation cr-odcr holds trn1.32xlarge instances, not inf2.48xlarge"},
		{reservedRequest("x3", "trn1.32xlarge", "cr-ended"), "node x3: capacity reservation cr-ended ended at"},
	} {
		if _, err := p.Launch(ctx, tt.req); err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("launch %s into %s: %v, want %q", tt.req.Name, tt.req.Reservation, err, tt.err)
		}
	}

	// On demand: labelled so, and a stray reservation label does not count against one.
	od := reservedRequest("od", "trn1.32xlarge", "")
	od.Labels[labels.CapacityReservationID] = "cr-odcr"
	if _, err := p.Launch(ctx, od); err != nil {
		t.Fatal(err)
	}
	o, _ := client.CoreV1().Nodes().Get(ctx, "od", metav1.GetOptions{})
	if o.Labels[labels.CapacityType] != labels.CapacityTypeOnDemand || o.Labels[labels.CapacityReservationID] != "" {
		t.Errorf("on-demand node labels %v", o.Labels)
	}
	if a := available()["cr-odcr"]; a != 1 {
		t.Errorf("cr-odcr has %d available after an on-demand launch, want 1", a)
	}
}

// TestConcurrentLaunchesNeverExceedTheReservation: of many launches at once into a reservation
// of 3, exactly 3 succeed.
func TestConcurrentLaunchesNeverExceedTheReservation(t *testing.T) {
	ctx := t.Context()
	client := fake.NewClientset()
	p := New(Options{Client: client, Reservations: []Reservation{{ID: "cr-1", InstanceType: "trn1.32xlarge", Count: 3}}})
	var wg sync.WaitGroup
	errs := make([]error, 12)
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = p.Launch(ctx, reservedRequest(fmt.Sprintf("n%d", i), "trn1.32xlarge", "cr-1"))
		})
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case !strings.Contains(err.Error(), "capacity reservation cr-1 is full"):
			t.Errorf("unexpected error %v", err)
		}
	}
	nodes, _ := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: labels.CapacityReservationID + "=cr-1"})
	if ok != 3 || len(nodes.Items) != 3 {
		t.Errorf("%d launches succeeded, %d nodes in the reservation; want 3 and 3", ok, len(nodes.Items))
	}
}

// TestLaunchUltraServerIntoReservation: an UltraServer's nodes go into the reservation all
// together, or none of them when it lacks room for all.
func TestLaunchUltraServerIntoReservation(t *testing.T) {
	ctx := t.Context()
	client := fake.NewClientset()
	p := New(Options{Client: client, Reservations: []Reservation{{ID: "cr-us", InstanceType: "trn2u.48xlarge", Count: 6, End: time.Now().Add(time.Hour)}}})
	rs, _ := p.Reservations(ctx)
	if len(rs) != 1 || rs[0].UltraServerType != "u-trn2x64" {
		t.Errorf("reservations %+v, want an UltraServer block of u-trn2x64", rs)
	}
	server := func(id string) []autoscaler.NodeRequest {
		var out []autoscaler.NodeRequest
		for k := range 4 {
			out = append(out, reservedRequest(autoscaler.UltraServerNodeName("trn2u.48xlarge", id, k), "trn2u.48xlarge", "cr-us"))
		}
		return out
	}
	ins, err := p.LaunchUltraServer(ctx, "aaaa", server("aaaa"))
	if err != nil || len(ins) != 4 {
		t.Fatalf("first UltraServer: %d nodes, %v", len(ins), err)
	}
	for _, in := range ins {
		if in.Labels[labels.CapacityReservationID] != "cr-us" || in.Labels[labels.CapacityType] != labels.CapacityTypeReserved || in.Annotations[labels.CapacityReservationEndAnnotation] == "" {
			t.Errorf("node %s labels %v annotations %v", in.Name, in.Labels, in.Annotations)
		}
	}
	// Launching it again asks for nothing new.
	if _, err := p.LaunchUltraServer(ctx, "aaaa", server("aaaa")); err != nil {
		t.Errorf("the same UltraServer again: %v", err)
	}
	_, err = p.LaunchUltraServer(ctx, "bbbb", server("bbbb"))
	if err == nil || !strings.Contains(err.Error(), "UltraServer bbbb: capacity reservation cr-us is full: 4 of its 6 trn2u.48xlarge instances run, 4 more asked for") {
		t.Errorf("second UltraServer into 2 left: %v", err)
	}
	nodes, _ := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if len(nodes.Items) != 4 {
		t.Errorf("%d nodes after a refused UltraServer, want 4", len(nodes.Items))
	}
}
