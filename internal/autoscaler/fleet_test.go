package autoscaler

import (
	"slices"
	"testing"
	"time"
)

// TestFleetRecords: a record is made on first use, changes phase, and is dropped once idle; a
// Deleted node stays known.
func TestFleetRecords(t *testing.T) {
	f := newFleet()
	f.update("a", func(r *nodeRecord) { r.startLaunching(t0, &Instance{Name: "a"}) })
	f.update("a", func(r *nodeRecord) { r.addPlanned([]string{"default/x", "default/y", "default/x"}) })
	if r := f.get("a"); r.phase != phaseLaunching || !r.since.Equal(t0) || !slices.Equal(r.added, []string{"default/x", "default/y"}) {
		t.Errorf("record %+v, want Launching since t0 with x and y added once each", r)
	}
	f.update("a", func(r *nodeRecord) { r.emptySince = t0 })
	f.update("a", func(r *nodeRecord) { r.to(phaseRegistered) })
	if r := f.get("a"); r.phase != phaseRegistered || r.launched != nil || r.added != nil || !r.emptySince.Equal(t0) {
		t.Errorf("record %+v, want Registered, nothing of Launching, its condition kept", r)
	}
	f.forgetGone(map[string]bool{}, func(r *nodeRecord) { r.emptySince = time.Time{} })
	f.update("a", func(r *nodeRecord) { r.to(phaseNone) })
	if len(f.nodes) != 0 {
		t.Errorf("records %v, want none once idle", f.nodes)
	}
	f.update("b", func(r *nodeRecord) { r.to(phaseDeleted) })
	if got := f.in(phaseDeleted); !slices.Equal(got, []string{"b"}) {
		t.Errorf("deleted %v, want b", got)
	}
}

// TestFleetRename: a launching node the provider lists under a new name keeps its launch and
// its pods, merged with those planned onto the new name; its conditions stay with the old name.
func TestFleetRename(t *testing.T) {
	f := newFleet()
	f.update("req", func(r *nodeRecord) {
		r.startLaunching(t0, &Instance{Name: "req", ProviderID: "aws:///i-1"})
		r.addPlanned([]string{"default/x"})
		r.cordoned = true
	})
	f.update("ip-10-0-0-1", func(r *nodeRecord) {
		r.startLaunching(t0.Add(time.Minute), nil)
		r.addPlanned([]string{"default/y"})
	})
	f.rename("req", "ip-10-0-0-1")
	r := f.get("ip-10-0-0-1")
	if r.phase != phaseLaunching || !r.since.Equal(t0) || r.launched == nil || r.launched.Name != "ip-10-0-0-1" || !slices.Equal(r.added, []string{"default/x", "default/y"}) {
		t.Errorf("renamed record %+v (launched %+v), want Launching since t0, launched as ip-10-0-0-1, with x and y", r, r.launched)
	}
	if old := f.get("req"); old.phase != phaseNone || !old.cordoned {
		t.Errorf("old record %+v, want no phase, still cordoned", old)
	}
	if got := f.in(phaseLaunching); !slices.Equal(got, []string{"ip-10-0-0-1"}) {
		t.Errorf("launching %v, want ip-10-0-0-1 only", got)
	}
}
