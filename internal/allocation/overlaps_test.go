package allocation

import (
	"testing"
	"time"
)

func TestOverlapsSettle(t *testing.T) {
	var o Overlaps
	t0 := time.Unix(1000, 0)
	if o.Settling("a", false, t0) {
		t.Fatal("no overlap: settling")
	}
	if !o.Settling("a", true, t0) || !o.Settling("a", true, t0.Add(OverlapSettle-time.Millisecond)) {
		t.Fatal("an overlap within OverlapSettle of first seeing it: want settling")
	}
	if o.Settling("a", true, t0.Add(OverlapSettle)) {
		t.Fatal("an overlap OverlapSettle after first seeing it: want the node served again")
	}
	if !o.Settling("b", true, t0.Add(OverlapSettle)) {
		t.Fatal("another node's first overlap: want settling")
	}
	// Once corrected, a new overlap settles from the start again.
	o.Settling("a", false, t0.Add(OverlapSettle))
	if !o.Settling("a", true, t0.Add(2*OverlapSettle)) {
		t.Fatal("a new overlap after a correction: want settling")
	}
}
