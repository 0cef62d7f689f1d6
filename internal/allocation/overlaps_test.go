package allocation

import (
	"math"
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

func TestTenths(t *testing.T) {
	for _, tc := range []struct {
		in   float64
		want int64
	}{
		{-50, 0}, {-0.1, 0}, {0, 0}, {9.99, 0}, {10, 1}, {55, 5}, {99.9, 9}, {100, 10}, {150, 10},
	} {
		if got := Tenths(tc.in); got != tc.want {
			t.Errorf("Tenths(%v) = %d, want %d", tc.in, got, tc.want)
		}
	}
	for _, s := range []float64{math.Inf(1), math.Inf(-1), math.NaN(), math.MaxFloat64, -math.MaxFloat64} {
		if got := Tenths(s); got < 0 || got > 10 {
			t.Errorf("Tenths(%v) = %d out of 0-10", s, got)
		}
	}
}
