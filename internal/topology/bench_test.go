package topology

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

var benchCases = []struct {
	instance string
	lnc      int
	req      Request
}{
	{"trn1.32xlarge", 0, Request{Unit: UnitDevice, Count: 4}},
	{"trn1.32xlarge", 0, Request{Unit: UnitCore, Count: 2}},
	{"trn2.48xlarge", 1, Request{Unit: UnitCore, Count: 3}},
	{"inf1.24xlarge", 0, Request{Unit: UnitDevice, Count: 3}},
	{"inf1.24xlarge", 0, Request{Unit: UnitCore, Count: 6}},
}

// benchUsage is a 16-device node about half used, in a scattered pattern that leaves devices
// 8-11 free: devices 1, 2 whole, odd cores of 5-7, core 0 of 12-15.
func benchUsage(tb testing.TB, instance string, lnc int) *Usage {
	s := shapeOf(tb, instance, lnc)
	u := NewUsage(s)
	_ = u.MarkDevices([]int{1, 2})
	for d := 5; d <= 7; d++ {
		_ = u.MarkCores([]int{d*s.CoresPerDevice + 1})
	}
	for d := 12; d <= 15; d++ {
		_ = u.MarkCores([]int{d * s.CoresPerDevice})
	}
	return u
}

// BenchmarkPlace measures one placement decision on a 16-device node that is about half used,
// placing into a reused Fit as a scheduler does for every candidate node.
func BenchmarkPlace(b *testing.B) {
	for _, tc := range benchCases {
		u := benchUsage(b, tc.instance, tc.lnc)
		for _, p := range Policies {
			b.Run(fmt.Sprintf("%s/%s/%s", tc.instance, tc.req, p), func(b *testing.B) {
				b.ReportAllocs()
				var fit Fit
				cpu := startCPU(b)
				for b.Loop() {
					if err := p.PlaceInto(u, tc.req, &fit); err != nil {
						b.Fatal(err)
					}
				}
				cpu.report(b)
			})
		}
	}
}

// BenchmarkPlaceOld is BenchmarkPlace for the previous algorithm, to compare in one run.
func BenchmarkPlaceOld(b *testing.B) {
	for _, tc := range benchCases {
		u := benchUsage(b, tc.instance, tc.lnc)
		for _, p := range Policies {
			b.Run(fmt.Sprintf("%s/%s/%s", tc.instance, tc.req, p), func(b *testing.B) {
				b.ReportAllocs()
				cpu := startCPU(b)
				for b.Loop() {
					if _, err := placeOld(p, u, tc.req); err != nil {
						b.Fatal(err)
					}
				}
				cpu.report(b)
			})
		}
	}
}

// BenchmarkNoFit measures a decision on a half-used node that the request does not fit:
// PlaceInto builds the error with its message, TryPlace only reports the outcome.
func BenchmarkNoFit(b *testing.B) {
	u := benchUsage(b, "trn2.48xlarge", 1)
	r := Request{Unit: UnitDevice, Count: 8}
	for _, p := range Policies {
		b.Run(fmt.Sprintf("PlaceInto/%s", p), func(b *testing.B) {
			b.ReportAllocs()
			var fit Fit
			cpu := startCPU(b)
			for b.Loop() {
				if err := p.PlaceInto(u, r, &fit); err == nil {
					b.Fatal("placed")
				}
			}
			cpu.report(b)
		})
		b.Run(fmt.Sprintf("TryPlace/%s", p), func(b *testing.B) {
			b.ReportAllocs()
			var fit Fit
			var pl Placer
			cpu := startCPU(b)
			for b.Loop() {
				if pl.TryPlace(p, u, r, &fit) != NoFreeSet {
					b.Fatal("placed")
				}
			}
			cpu.report(b)
		})
	}
}

// cpuClock measures the CPU time of a benchmark's loop on its own thread, which a machine busy
// with other work inflates far less than the wall-clock ns/op.
type cpuClock struct{ start time.Duration }

// startCPU pins the benchmark to its thread (until report) and starts the clock.
func startCPU(b *testing.B) cpuClock {
	runtime.LockOSThread()
	return cpuClock{start: threadCPUTime()}
}

// report adds the CPU time per iteration as the metric cpu-ns/op.
func (c cpuClock) report(b *testing.B) {
	end := threadCPUTime()
	runtime.UnlockOSThread()
	if c.start >= 0 && end >= 0 && b.N > 0 {
		b.ReportMetric(float64(end-c.start)/float64(b.N), "cpu-ns/op")
	}
}
