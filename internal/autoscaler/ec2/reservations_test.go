package ec2_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kube-neuron/kube-neuron/internal/autoscaler"
	"github.com/kube-neuron/kube-neuron/internal/autoscaler/ec2"
	"github.com/kube-neuron/kube-neuron/internal/autoscaler/ec2/fakeec2"
	"github.com/kube-neuron/kube-neuron/internal/labels"
)

const (
	crODCR  = "cr-0000000000000000a" // trn1 ODCR in us-west-2b
	crBlock = "cr-0000000000000000b" // trn1 Capacity Block in us-west-2a
	crUltra = "cr-0000000000000000c" // trn2u UltraServer Capacity Block in us-west-2b
	crSched = "cr-0000000000000000d" // scheduled trn1 block
	crZoneC = "cr-0000000000000000e" // ODCR in a zone without a configured subnet
	trn2u   = "trn2u.48xlarge"
)

var blockEnd = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// reserved is setup with the reservations seeded and selected by id.
func reserved(t *testing.T, ids ...string) env {
	t.Helper()
	var terms []ec2.ReservationSelector
	for _, id := range ids {
		terms = append(terms, ec2.ReservationSelector{ID: id})
	}
	e := setup(t, func(o *ec2.Options) { o.CapacityReservations = terms })
	seed(e.fake)
	return e
}

func seed(f *fakeec2.Server) {
	f.AddCapacityReservation(fakeec2.CapacityReservation{ID: crODCR, InstanceType: trn1, AvailabilityZone: "us-west-2b", Total: 2, Tags: map[string]string{"team": "ml", "pool": "a"}})
	f.AddCapacityReservation(fakeec2.CapacityReservation{ID: crBlock, InstanceType: trn1, AvailabilityZone: "us-west-2a", Total: 1, CapacityBlock: true,
		CapacityBlockID: "cb-0000000000000000b", Start: blockEnd.Add(-48 * time.Hour), End: blockEnd, Tags: map[string]string{"team": "ml"}})
	f.AddCapacityReservation(fakeec2.CapacityReservation{ID: crUltra, InstanceType: trn2u, AvailabilityZone: "us-west-2b", Total: 4, CapacityBlock: true,
		CapacityBlockID: "cb-0000000000000000c", UltraServerType: "u-trn2x64", End: blockEnd})
	f.AddCapacityReservation(fakeec2.CapacityReservation{ID: crSched, InstanceType: trn1, AvailabilityZone: "us-west-2a", Total: 2, CapacityBlock: true,
		State: "scheduled", Start: time.Now().Add(-time.Hour), End: blockEnd, Tags: map[string]string{"team": "ml"}})
	f.AddCapacityReservation(fakeec2.CapacityReservation{ID: crZoneC, InstanceType: trn1, AvailabilityZone: "us-west-2c", Total: 1})
	f.AddCapacityReservation(fakeec2.CapacityReservation{ID: "cr-0000000000000000f", InstanceType: trn1, AvailabilityZone: "us-west-2a", Total: 1, State: "expired", Tags: map[string]string{"team": "ml"}})
}

func byID(rs []autoscaler.Reservation) map[string]autoscaler.Reservation {
	out := map[string]autoscaler.Reservation{}
	for _, r := range rs {
		out[r.ID] = r
	}
	return out
}

func (e env) reservations(t *testing.T) map[string]autoscaler.Reservation {
	t.Helper()
	rs, err := e.p.Reservations(e.ctx)
	if err != nil {
		t.Fatalf("Reservations: %v", err)
	}
	m := byID(rs)
	if len(m) != len(rs) {
		t.Errorf("Reservations listed a reservation twice: %v", rs)
	}
	return m
}

func reservedRequest(instanceType, reservation string, pods ...string) autoscaler.NodeRequest {
	r := request(instanceType, pods...).obj()
	r.Reservation = reservation
	r.Labels[labels.CapacityReservationID] = reservation // as NodePlan.Labels() gives them
	r.Labels[labels.CapacityType] = labels.CapacityTypeReserved
	return r
}

func TestReservationsBySelector(t *testing.T) {
	for _, tc := range []struct {
		name  string
		terms []ec2.ReservationSelector
		want  []string
	}{
		{"none configured", nil, nil},
		{"by id", []ec2.ReservationSelector{{ID: crODCR}, {ID: crUltra}}, []string{crODCR, crUltra}},
		{"by tags, all of a term's", []ec2.ReservationSelector{{Tags: map[string]string{"team": "ml", "pool": "a"}}}, []string{crODCR}},
		{"union of terms, each once, expired left out", []ec2.ReservationSelector{{Tags: map[string]string{"team": "ml"}}, {ID: crODCR}}, []string{crODCR, crBlock, crSched}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := setup(t, func(o *ec2.Options) { o.CapacityReservations = tc.terms })
			seed(e.fake)
			got := e.reservations(t)
			ids := slices.Sorted(func(yield func(string) bool) {
				for id := range got {
					if !yield(id) {
						return
					}
				}
			})
			if !slices.Equal(ids, tc.want) {
				t.Errorf("reservations %v, want %v", ids, tc.want)
			}
			if tc.terms == nil && e.fake.Calls("DescribeCapacityReservations") != 0 {
				t.Errorf("described reservations although none is configured")
			}
		})
	}
}

func TestReservationsFields(t *testing.T) {
	e := reserved(t, crODCR, crBlock, crUltra, crSched)
	got := e.reservations(t)
	if r := got[crODCR]; r.InstanceType != trn1 || r.AvailabilityZone != "us-west-2b" || r.Total != 2 || r.Available != 2 || r.CapacityBlock || r.UltraServerType != "" || !r.End.IsZero() {
		t.Errorf("ODCR %+v", r)
	}
	if r := got[crBlock]; !r.CapacityBlock || r.UltraServerType != "" || !r.End.Equal(blockEnd) || !r.Start.Equal(blockEnd.Add(-48*time.Hour)) || r.Available != 1 {
		t.Errorf("instance block %+v", r)
	}
	if r := got[crUltra]; !r.CapacityBlock || r.UltraServerType != "u-trn2x64" || r.Total != 4 {
		t.Errorf("UltraServer block %+v, want UltraServerType u-trn2x64", r)
	}
	// Scheduled: reported, with a start in the future although its start date has passed.
	if r := got[crSched]; !r.Start.After(time.Now()) {
		t.Errorf("scheduled block %+v, want a start in the future", r)
	}
	if n := e.fake.Calls("DescribeCapacityBlocks"); n != 1 {
		t.Errorf("%d DescribeCapacityBlocks calls, want one for all blocks", n)
	}
}

func TestReservationsPaginate(t *testing.T) {
	e := setup(t, func(o *ec2.Options) {
		o.CapacityReservations = []ec2.ReservationSelector{{Tags: map[string]string{"pool": "big"}}}
	})
	ec2.SetPageSize(e.p, 5)
	for i := range 12 {
		e.fake.AddCapacityReservation(fakeec2.CapacityReservation{ID: fmt.Sprintf("cr-%017x", i+1), InstanceType: trn1, AvailabilityZone: "us-west-2a", Total: 1, Tags: map[string]string{"pool": "big"}})
	}
	if got := e.reservations(t); len(got) != 12 {
		t.Errorf("%d reservations, want 12", len(got))
	}
	if n := e.fake.Calls("DescribeCapacityReservations"); n != 3 {
		t.Errorf("%d DescribeCapacityReservations calls, want 3 pages of 5", n)
	}
}

func TestReservationsUnknownID(t *testing.T) {
	e := reserved(t, crODCR, "cr-0123456789abcdef0")
	_, err := e.p.Reservations(e.ctx)
	if err == nil || !strings.Contains(err.Error(), "cr-0123456789abcdef0") || !strings.Contains(err.Error(), "autoscaler.ec2.capacityReservations") {
		t.Fatalf("error %v, want one naming the unknown id and the setting", err)
	}
}

func TestLaunchIntoODCR(t *testing.T) {
	e := reserved(t, crODCR)
	e.reservations(t)
	r := reservedRequest(trn1, crODCR, "team-a/train-0")
	got := e.launch(t, r)
	fi := e.fakeInstance(t, got.ProviderID)
	// The reservation is in us-west-2b: subnet-b, although subnet-a comes first.
	if fi.SubnetID != "subnet-b" || fi.CapacityReservationID != crODCR || fi.CapacityBlock {
		t.Errorf("launched %+v, want subnet-b, targeted at %s, no capacity-block market", fi, crODCR)
	}
	for k, v := range map[string]string{
		labels.CapacityReservationID: crODCR, labels.CapacityType: labels.CapacityTypeReserved,
		ec2.NodeTemplateLabelPrefix + labels.CapacityReservationID: crODCR, ec2.NodeTemplateLabelPrefix + labels.CapacityType: labels.CapacityTypeReserved,
	} {
		if fi.Tags[k] != v {
			t.Errorf("tag %s = %q, want %q", k, fi.Tags[k], v)
		}
	}
	if _, ok := fi.Tags[labels.CapacityReservationEndAnnotation]; ok {
		t.Errorf("an ODCR without an end got the end tag")
	}
	// Idempotent: the same request again launches nothing more.
	if again := e.launch(t, r); again.ProviderID != got.ProviderID {
		t.Errorf("relaunch gave %s, want %s", again.ProviderID, got.ProviderID)
	}
	if n := len(e.fake.Instances()); n != 1 {
		t.Errorf("%d instances, want 1", n)
	}
	if a := e.reservations(t)[crODCR].Available; a != 1 {
		t.Errorf("Available = %d after one launch into 2, want 1", a)
	}
	// A restarted autoscaler reads the capacity labels back.
	ins := e.instances(t)
	if len(ins) != 1 || ins[0].Labels[labels.CapacityReservationID] != crODCR || ins[0].Labels[labels.CapacityType] != labels.CapacityTypeReserved {
		t.Errorf("Instances = %+v, want the capacity labels", ins)
	}
	// Without a preceding Reservations call (a restart) the launch describes the reservation.
	e2 := reserved(t, crODCR)
	if in := e2.launch(t, reservedRequest(trn1, crODCR, "team-a/train-1")); e2.fakeInstance(t, in.ProviderID).CapacityReservationID != crODCR {
		t.Errorf("launch without a Reservations round did not target %s", crODCR)
	}
}

func TestLaunchIntoCapacityBlock(t *testing.T) {
	e := reserved(t, crBlock)
	e.reservations(t)
	got := e.launch(t, reservedRequest(trn1, crBlock, "team-a/train-0"))
	fi := e.fakeInstance(t, got.ProviderID)
	// The fake refuses a Capacity Block launch without the capacity-block market type.
	if fi.SubnetID != "subnet-a" || fi.CapacityReservationID != crBlock || !fi.CapacityBlock {
		t.Errorf("launched %+v, want subnet-a, %s, the capacity-block market", fi, crBlock)
	}
	end := blockEnd.Format(time.RFC3339)
	if got.Annotations[labels.CapacityReservationEndAnnotation] != end {
		t.Errorf("Annotations %v, want the end %s", got.Annotations, end)
	}
	ins := e.instances(t)
	if len(ins) != 1 || ins[0].Annotations[labels.CapacityReservationEndAnnotation] != end || ins[0].Annotations[ec2.CapacityBlockIDAnnotation] != "cb-0000000000000000b" {
		t.Errorf("Instances = %+v, want the end and the Capacity Block id", ins)
	}
}

func TestLaunchIntoReservationErrors(t *testing.T) {
	t.Run("no subnet in the zone", func(t *testing.T) {
		e := reserved(t, crZoneC)
		_, err := e.p.Launch(e.ctx, reservedRequest(trn1, crZoneC, "a/b"))
		for _, w := range []string{"us-west-2c", "subnet-a (us-west-2a)", "subnet-b (us-west-2b)"} {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("error %v lacks %q", err, w)
			}
		}
		if n := e.fake.Calls("RunInstances"); n != 0 {
			t.Errorf("%d RunInstances calls, want none", n)
		}
	})
	t.Run("wrong instance type", func(t *testing.T) {
		e := reserved(t, crODCR)
		_, err := e.p.Launch(e.ctx, reservedRequest("trn1.2xlarge", crODCR, "a/b"))
		if err == nil || !strings.Contains(err.Error(), "holds trn1.32xlarge instances") {
			t.Errorf("error %v, want one naming the reservation's type", err)
		}
	})
	t.Run("full", func(t *testing.T) {
		e := reserved(t, crBlock)
		e.launch(t, reservedRequest(trn1, crBlock, "a/b"))
		_, err := e.p.Launch(e.ctx, reservedRequest(trn1, crBlock, "a/c"))
		var ce *ec2.CapacityError
		if !errors.As(err, &ce) || ce.Reservation != crBlock || !strings.Contains(err.Error(), "ReservationCapacityExceeded") {
			t.Fatalf("error %v, want a *CapacityError of %s", err, crBlock)
		}
		if n := e.fake.Calls("RunInstances"); n != 2 {
			t.Errorf("%d RunInstances calls, want 2 (no retry in another subnet)", n)
		}
	})
}

func TestTerminateFreesTheSlot(t *testing.T) {
	e := reserved(t, crBlock)
	r := reservedRequest(trn1, crBlock, "a/b")
	e.launch(t, r)
	if a := e.reservations(t)[crBlock].Available; a != 0 {
		t.Fatalf("Available = %d, want 0", a)
	}
	if err := e.p.Delete(e.ctx, r.Name); err != nil {
		t.Fatal(err)
	}
	if a := e.reservations(t)[crBlock].Available; a != 1 {
		t.Errorf("Available = %d after terminating, want 1", a)
	}
	if _, err := e.p.Launch(e.ctx, reservedRequest(trn1, crBlock, "a/c")); err != nil {
		t.Errorf("launching into the freed slot: %v", err)
	}
}

func ultraNodes(n int, reservation string) []autoscaler.NodeRequest {
	var out []autoscaler.NodeRequest
	for k := range n {
		r := reservedRequest(trn2u, reservation, fmt.Sprintf("team-a/worker-%d", k))
		r.Name = autoscaler.UltraServerNodeName(trn2u, "us1", k)
		out = append(out, r)
	}
	return out
}

func TestLaunchUltraServer(t *testing.T) {
	t.Run("into its block", func(t *testing.T) {
		e := reserved(t, crUltra)
		e.reservations(t)
		got, err := e.p.LaunchUltraServer(e.ctx, "us1", ultraNodes(4, crUltra))
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 4 {
			t.Fatalf("%d instances, want 4", len(got))
		}
		for _, in := range got {
			if fi := e.fakeInstance(t, in.ProviderID); fi.CapacityReservationID != crUltra || !fi.CapacityBlock || fi.SubnetID != "subnet-b" {
				t.Errorf("node %+v not in the block", fi)
			}
		}
		// Retried: the same four.
		again, err := e.p.LaunchUltraServer(e.ctx, "us1", ultraNodes(4, crUltra))
		if err != nil || !slices.Equal(providerIDs(again), providerIDs(got)) {
			t.Errorf("retry gave %v (%v), want %v", providerIDs(again), err, providerIDs(got))
		}
		for _, in := range e.instances(t) {
			if in.Annotations[ec2.CapacityBlockIDAnnotation] != "cb-0000000000000000c" {
				t.Errorf("instance %s lacks its Capacity Block id: %v", in.Name, in.Annotations)
			}
		}
	})
	t.Run("all or nothing", func(t *testing.T) {
		e := setup(t, func(o *ec2.Options) { o.CapacityReservations = []ec2.ReservationSelector{{ID: crUltra}} })
		e.fake.AddCapacityReservation(fakeec2.CapacityReservation{ID: crUltra, InstanceType: trn2u, AvailabilityZone: "us-west-2b", Total: 4, Available: 3,
			CapacityBlock: true, CapacityBlockID: "cb-1", UltraServerType: "u-trn2x64"})
		// DescribeInstances does not list the new nodes yet: they are terminated by id.
		e.fake.SetEventualConsistency(true)
		_, err := e.p.LaunchUltraServer(e.ctx, "us1", ultraNodes(4, crUltra))
		e.fake.SetEventualConsistency(false)
		var ce *ec2.CapacityError
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), "3 nodes launched before it were terminated") {
			t.Fatalf("error %v, want a *CapacityError after terminating 3 nodes", err)
		}
		if ins := e.instances(t); len(ins) != 0 {
			t.Errorf("%d instances left, want none", len(ins))
		}
		if a := e.reservations(t)[crUltra].Available; a != 3 {
			t.Errorf("Available = %d, want the 3 back", a)
		}
	})
	t.Run("without a reservation", func(t *testing.T) {
		e := setup(t)
		if _, err := e.p.LaunchUltraServer(e.ctx, "us1", ultraNodes(4, "")); !errors.Is(err, ec2.ErrUltraServer) {
			t.Errorf("error %v, want ErrUltraServer", err)
		}
	})
	t.Run("not an UltraServer block", func(t *testing.T) {
		e := reserved(t, crBlock)
		if _, err := e.p.LaunchUltraServer(e.ctx, "us1", ultraNodes(4, crBlock)); err == nil || !strings.Contains(err.Error(), "not an UltraServer Capacity Block") {
			t.Errorf("error %v", err)
		}
	})
}

func TestReservationPermissions(t *testing.T) {
	for _, tc := range []struct {
		action string
		call   func(env) error
	}{
		{"DescribeCapacityReservations", func(e env) error { _, err := e.p.Reservations(e.ctx); return err }},
		{"DescribeCapacityBlocks", func(e env) error { _, err := e.p.Reservations(e.ctx); return err }},
		{"DescribeSubnets", func(e env) error { _, err := e.p.Launch(e.ctx, reservedRequest(trn1, crODCR, "a/b")); return err }},
	} {
		t.Run(tc.action, func(t *testing.T) {
			e := reserved(t, crODCR, crUltra)
			e.fake.Deny(tc.action)
			err := tc.call(e)
			var pe *ec2.PermissionError
			if !errors.As(err, &pe) || pe.Operation != tc.action || !strings.Contains(err.Error(), "needs ec2:"+tc.action) {
				t.Fatalf("error %v, want a *PermissionError naming ec2:%s", err, tc.action)
			}
		})
	}
}
