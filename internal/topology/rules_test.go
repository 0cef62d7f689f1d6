package topology

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func shapeOf(t testing.TB, name string, lnc int) *Shape {
	t.Helper()
	it, err := DefaultCatalog().Get(name)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewShape(it, lnc)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func accepted(s *Shape, unit Unit) []int {
	var out []int
	limit := s.Devices() + 2
	if unit == UnitCore {
		limit = s.Cores() + 2
	}
	for n := 0; n <= limit; n++ {
		if s.Validate(Request{Unit: unit, Count: n}) == nil {
			out = append(out, n)
		}
	}
	return out
}

func rangeInts(lo, hi int) []int {
	var out []int
	for i := lo; i <= hi; i++ {
		out = append(out, i)
	}
	return out
}

// TestAcceptedCounts states DESIGN section 3's count rules for every instance type.
func TestAcceptedCounts(t *testing.T) {
	tests := []struct {
		name    string
		lnc     int
		devices []int
		cores   []int
	}{
		{"inf1.xlarge", 0, []int{1}, rangeInts(1, 4)},
		{"inf1.2xlarge", 0, []int{1}, rangeInts(1, 4)},
		{"inf1.6xlarge", 0, rangeInts(1, 4), rangeInts(1, 16)},
		{"inf1.24xlarge", 0, rangeInts(1, 16), rangeInts(1, 64)},
		{"inf2.xlarge", 0, []int{1}, []int{1, 2}},
		{"inf2.8xlarge", 0, []int{1}, []int{1, 2}},
		{"inf2.24xlarge", 0, rangeInts(1, 6), rangeInts(1, 12)},
		{"inf2.48xlarge", 0, rangeInts(1, 12), rangeInts(1, 24)},
		{"trn1.2xlarge", 0, []int{1}, []int{1, 2}},
		{"trn1.32xlarge", 0, []int{1, 4, 8, 16}, []int{1, 2, 8, 16, 32}},
		{"trn1n.32xlarge", 0, []int{1, 4, 8, 16}, []int{1, 2, 8, 16, 32}},
		{"trn2.3xlarge", 0, []int{1}, []int{1, 2, 3, 4}},
		{"trn2.3xlarge", 1, []int{1}, rangeInts(1, 8)},
		{"trn2.48xlarge", 0, []int{1, 4, 8, 16}, []int{1, 2, 3, 4, 16, 32, 64}},
		{"trn2.48xlarge", 2, []int{1, 4, 8, 16}, []int{1, 2, 3, 4, 16, 32, 64}},
		{"trn2.48xlarge", 1, []int{1, 4, 8, 16}, []int{1, 2, 3, 4, 5, 6, 7, 8, 32, 64, 128}},
		{"trn2u.48xlarge", 0, []int{1, 4, 8, 16}, []int{1, 2, 3, 4, 16, 32, 64}},
		{"trn3.48xlarge", 0, rangeInts(1, 16), rangeInts(1, 64)},
	}
	seen := map[string]bool{}
	for _, tc := range tests {
		seen[tc.name] = true
		s := shapeOf(t, tc.name, tc.lnc)
		t.Run(tc.name, func(t *testing.T) {
			if got := accepted(s, UnitDevice); !slices.Equal(got, tc.devices) {
				t.Errorf("device counts accepted = %v, want %v", got, tc.devices)
			}
			if got := accepted(s, UnitCore); !slices.Equal(got, tc.cores) {
				t.Errorf("core counts accepted (LNC %d) = %v, want %v", s.LNC, got, tc.cores)
			}
			if got := s.DeviceSizes(); !slices.Equal(got, tc.devices) {
				t.Errorf("DeviceSizes() = %v, want %v", got, tc.devices)
			}
			if got := s.CoreSizes(); !slices.Equal(got, tc.cores) {
				t.Errorf("CoreSizes() = %v, want %v", got, tc.cores)
			}
		})
	}
	for _, name := range DefaultCatalog().Names() {
		if !seen[name] {
			t.Errorf("instance type %s has no row in this table", name)
		}
	}
}

func TestSeedMessagesVerbatim(t *testing.T) {
	s := shapeOf(t, "trn1.32xlarge", 0)
	err := s.Validate(Request{Unit: UnitDevice, Count: 7})
	want := "Instance type trn1.32xlarge does not support requests for device: 7. Please request a different number of devices."
	if err == nil || err.Error() != want {
		t.Errorf("device 7: got %v, want %q", err, want)
	}
	var uc *UnsupportedCountError
	if !errors.As(err, &uc) {
		t.Errorf("device 7: error %T is not an *UnsupportedCountError", err)
	}
	err = s.Validate(Request{Unit: UnitCore, Count: 6})
	want = "Instance type trn1.32xlarge does not support requests for core: 6. Please request a different number of cores."
	if err == nil || err.Error() != want {
		t.Errorf("core 6: got %v, want %q", err, want)
	}
	// The same rule through Place, on an empty node.
	if _, err := BestFit.Place(NewUsage(s), Request{Unit: UnitDevice, Count: 7}); !errors.As(err, &uc) {
		t.Errorf("Place(7 devices) error = %v, want UnsupportedCountError", err)
	}
	if err := s.Validate(Request{Unit: UnitDevice, Count: 0}); err == nil || errors.As(err, &uc) {
		t.Errorf("Validate(0) = %v, want a plain error", err)
	}
}

func TestLNC(t *testing.T) {
	cat := DefaultCatalog()
	for _, name := range []string{"trn1.2xlarge", "trn1.32xlarge", "inf2.48xlarge", "inf1.xlarge"} {
		it, _ := cat.Lookup(name)
		_, err := NewShape(it, 2)
		want := "LNC value is not configurable for instance type " + name
		if err == nil || err.Error() != want {
			t.Errorf("%s LNC 2: got %v, want %q", name, err, want)
		}
		if _, err := NewShape(it, 1); err != nil {
			t.Errorf("%s LNC 1 (its only value): %v", name, err)
		}
	}
	for _, name := range []string{"trn2.3xlarge", "trn2.48xlarge", "trn2u.48xlarge", "trn3.48xlarge"} {
		for lnc, cpd := range map[int]int{1: 8, 2: 4} {
			s := shapeOf(t, name, lnc)
			if s.CoresPerDevice != cpd {
				t.Errorf("%s LNC %d: %d cores per device, want %d", name, lnc, s.CoresPerDevice, cpd)
			}
		}
		it, _ := cat.Lookup(name)
		if _, err := NewShape(it, 3); err == nil || !strings.Contains(err.Error(), "use 1 or 2") {
			t.Errorf("%s LNC 3: got %v", name, err)
		}
	}
	if s := shapeOf(t, "trn2.48xlarge", 0); s.Cores() != 64 || s.LNC != 2 {
		t.Errorf("trn2.48xlarge default: %d cores at LNC %d, want 64 at LNC 2", s.Cores(), s.LNC)
	}
}

func TestValidDeviceSets(t *testing.T) {
	tests := []struct {
		name    string
		devices []int
		want    bool
	}{
		{"inf2.48xlarge", []int{0, 1, 2}, true},
		{"inf2.48xlarge", []int{0, 2, 4}, false},
		{"inf2.48xlarge", []int{11, 0}, true}, // the ring wraps
		{"inf2.48xlarge", []int{10, 11, 0, 1}, true},
		{"inf2.48xlarge", []int{0, 1}, true},
		{"inf2.48xlarge", []int{0, 2}, false},
		{"inf1.6xlarge", []int{3, 0}, false}, // a chain does not wrap
		{"inf1.6xlarge", []int{1, 2, 3}, true},
		{"inf1.24xlarge", []int{15, 0}, true},
		{"trn1.32xlarge", []int{0, 1, 2, 3}, true},
		{"trn1.32xlarge", []int{4, 5, 6, 7}, true},
		{"trn1.32xlarge", []int{12, 13, 14, 15}, true},
		{"trn1.32xlarge", []int{1, 2, 3, 4}, false},
		{"trn1.32xlarge", []int{0, 4, 8, 12}, false}, // a torus column: connected, but not an allowed block
		{"trn1.32xlarge", []int{1, 2}, false},
		{"trn1.32xlarge", []int{9, 10, 13, 14}, false},
		{"trn1.32xlarge", rangeInts(0, 7), true},
		{"trn1.32xlarge", rangeInts(8, 15), true},
		{"trn1.32xlarge", rangeInts(4, 11), false},
		{"trn1.32xlarge", rangeInts(0, 15), true},
		{"trn1.32xlarge", []int{5}, true},
		{"trn2.48xlarge", []int{8, 9, 10, 11}, true},
		{"trn2u.48xlarge", []int{2, 3, 4, 5}, false},
		{"trn3.48xlarge", []int{0, 5, 9}, true},
		{"trn1.32xlarge", []int{0, 0, 1, 2}, false},
		{"trn1.32xlarge", []int{16}, false},
	}
	for _, tc := range tests {
		s := shapeOf(t, tc.name, 0)
		if got := s.IsValidDeviceSet(tc.devices); got != tc.want {
			t.Errorf("%s %v: valid = %v, want %v", tc.name, tc.devices, got, tc.want)
		}
	}
}

type placeCase struct {
	name          string
	instance      string
	lnc           int
	inUseDevices  []int
	inUseCores    []int
	req           Request
	policy        Policy
	wantDevices   []int
	wantCores     []int
	wantErrSubstr string
}

func runPlace(t *testing.T, tc placeCase) {
	t.Helper()
	s := shapeOf(t, tc.instance, tc.lnc)
	u := NewUsage(s)
	if err := u.MarkDevices(tc.inUseDevices); err != nil {
		t.Fatal(err)
	}
	if err := u.MarkCores(tc.inUseCores); err != nil {
		t.Fatal(err)
	}
	fit, err := tc.policy.Place(u, tc.req)
	if tc.wantErrSubstr != "" {
		if err == nil || !strings.Contains(err.Error(), tc.wantErrSubstr) {
			t.Fatalf("got %v, %v; want error containing %q", fit.Allocation, err, tc.wantErrSubstr)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(fit.Devices, tc.wantDevices) {
		t.Errorf("devices = %v, want %v", fit.Devices, tc.wantDevices)
	}
	if tc.wantCores != nil && !slices.Equal(fit.Cores, tc.wantCores) {
		t.Errorf("cores = %v, want %v", fit.Cores, tc.wantCores)
	}
}

func TestPlace(t *testing.T) {
	dev := func(n int) Request { return Request{Unit: UnitDevice, Count: n} }
	core := func(n int) Request { return Request{Unit: UnitCore, Count: n} }
	tests := []placeCase{
		// The seed log: 9 cores on a 4-device, 16-core node go to cores 0-8 on devices 0, 1, 2.
		{name: "seed 9 cores", instance: "inf1.6xlarge", req: core(9), policy: BestFit, wantDevices: []int{0, 1, 2}, wantCores: rangeInts(0, 8)},
		{name: "seed 9 cores first-fit", instance: "inf1.6xlarge", req: core(9), policy: FirstFit, wantDevices: []int{0, 1, 2}, wantCores: rangeInts(0, 8)},
		// With cores 0-1 in use, 3 cores go to one device (4-6), not across two (2-4).
		{name: "3 cores stay on one device", instance: "inf1.6xlarge", inUseCores: []int{0, 1}, req: core(3), policy: BestFit, wantDevices: []int{1}, wantCores: []int{4, 5, 6}},
		{name: "3 cores stay on one device first-fit", instance: "inf1.6xlarge", inUseCores: []int{0, 1}, req: core(3), policy: FirstFit, wantDevices: []int{1}, wantCores: []int{4, 5, 6}},
		// Best fit fills the partly used device first.
		{name: "2 cores fill the partly used device", instance: "inf1.6xlarge", inUseCores: []int{0, 1}, req: core(2), policy: BestFit, wantDevices: []int{0}, wantCores: []int{2, 3}},
		{name: "tightest partly used device", instance: "inf1.24xlarge", inUseCores: []int{4, 8, 9}, req: core(2), policy: BestFit, wantDevices: []int{2}, wantCores: []int{10, 11}},
		{name: "first-fit lowest core", instance: "inf1.24xlarge", inUseCores: []int{4, 8, 9}, req: core(2), policy: FirstFit, wantDevices: []int{0}, wantCores: []int{0, 1}},
		// Ring: wrap-around, and the smallest free segment that fits.
		{name: "ring wraps", instance: "inf2.48xlarge", inUseDevices: rangeInts(1, 10), req: dev(2), policy: BestFit, wantDevices: []int{0, 11}},
		{name: "ring best segment", instance: "inf2.48xlarge", inUseDevices: []int{3, 6, 7, 8, 9, 10, 11}, req: dev(2), policy: BestFit, wantDevices: []int{4, 5}},
		{name: "ring first-fit", instance: "inf2.48xlarge", inUseDevices: []int{3, 6, 7, 8, 9, 10, 11}, req: dev(2), policy: FirstFit, wantDevices: []int{0, 1}},
		{name: "ring end of segment", instance: "inf2.48xlarge", inUseDevices: []int{0}, req: dev(1), policy: BestFit, wantDevices: []int{1}},
		{name: "chain does not wrap", instance: "inf1.6xlarge", inUseDevices: []int{1, 2}, req: dev(2), policy: BestFit, wantErrSubstr: "free devices: 0,3"},
		{name: "ring cannot take non-contiguous", instance: "inf2.24xlarge", inUseDevices: []int{1, 3, 5}, req: dev(2), policy: FirstFit, wantErrSubstr: "contiguous along the ring"},
		// Torus: aligned blocks; best fit keeps the free half whole.
		{name: "torus 4 in the used half", instance: "trn1.32xlarge", inUseDevices: []int{1}, req: dev(4), policy: BestFit, wantDevices: []int{4, 5, 6, 7}},
		{name: "torus 4 first-fit", instance: "trn1.32xlarge", inUseDevices: []int{9}, req: dev(4), policy: FirstFit, wantDevices: []int{0, 1, 2, 3}},
		{name: "torus 4 best-fit next to used", instance: "trn1.32xlarge", inUseDevices: []int{9}, req: dev(4), policy: BestFit, wantDevices: []int{12, 13, 14, 15}},
		{name: "torus 1 in the used row", instance: "trn1.32xlarge", inUseDevices: []int{13}, req: dev(1), policy: BestFit, wantDevices: []int{12}},
		{name: "torus 8 blocked", instance: "trn1.32xlarge", inUseDevices: []int{0, 8}, req: dev(8), policy: BestFit, wantErrSubstr: "8-device sets must be one of 0-7, 8-15"},
		{name: "torus 16 needs empty node", instance: "trn2.48xlarge", inUseCores: []int{63}, req: dev(16), policy: BestFit, wantErrSubstr: "free devices: 0-14"},
		{name: "torus 8 cores on 4 devices", instance: "trn1.32xlarge", inUseCores: []int{0}, req: core(8), policy: BestFit, wantDevices: []int{4, 5, 6, 7}, wantCores: rangeInts(8, 15)},
		{name: "trn2 16 cores at LNC 2", instance: "trn2.48xlarge", req: core(16), policy: BestFit, wantDevices: []int{0, 1, 2, 3}, wantCores: rangeInts(0, 15)},
		{name: "trn2 3 cores at LNC 1", instance: "trn2.48xlarge", lnc: 1, inUseCores: []int{0, 1, 2, 3, 4}, req: core(3), policy: BestFit, wantDevices: []int{0}, wantCores: []int{5, 6, 7}},
		// A device with a core in use is never given whole; a device given whole has no free core.
		{name: "partly used device not given whole", instance: "trn1.2xlarge", inUseCores: []int{1}, req: dev(1), policy: BestFit, wantErrSubstr: "free devices: none"},
		{name: "whole device has no free core", instance: "trn1.2xlarge", inUseDevices: []int{0}, req: core(1), policy: BestFit, wantErrSubstr: "free cores: none"},
		{name: "core next to partly used", instance: "trn1.32xlarge", inUseCores: []int{0}, req: dev(1), policy: BestFit, wantDevices: []int{1}},
		// Switched: any count, any subset.
		{name: "switched 7", instance: "trn3.48xlarge", inUseDevices: []int{1, 4}, req: dev(7), policy: BestFit, wantDevices: []int{0, 2, 3, 5, 6, 7, 8}},
		{name: "switched cores", instance: "trn3.48xlarge", inUseCores: []int{0}, req: core(3), policy: BestFit, wantDevices: []int{0}, wantCores: []int{1, 2, 3}},
		// All devices or cores is always valid.
		{name: "all cores", instance: "trn1.32xlarge", req: core(32), policy: BestFit, wantDevices: rangeInts(0, 15), wantCores: rangeInts(0, 31)},
		{name: "all devices of a ring", instance: "inf2.48xlarge", req: dev(12), policy: FirstFit, wantDevices: rangeInts(0, 11), wantCores: rangeInts(0, 23)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { runPlace(t, tc) })
	}
}

func TestNodeScoreTightestFirst(t *testing.T) {
	req := Request{Unit: UnitDevice, Count: 1}
	fitOn := func(name string, inUse []int) Fit {
		s := shapeOf(t, name, 0)
		u := NewUsage(s)
		if err := u.MarkDevices(inUse); err != nil {
			t.Fatal(err)
		}
		f, err := BestFit.Place(u, req)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	emptyTrn1 := fitOn("trn1.32xlarge", nil)
	partRow := fitOn("trn1.32xlarge", []int{0, 1, 2})
	partHalf := fitOn("trn1.32xlarge", rangeInts(0, 3))
	small := fitOn("inf2.xlarge", nil)
	if !(partRow.Score > partHalf.Score && partHalf.Score > emptyTrn1.Score) {
		t.Errorf("scores: partly used row %.2f, partly used half %.2f, empty node %.2f: want that order", partRow.Score, partHalf.Score, emptyTrn1.Score)
	}
	if !(small.Score > emptyTrn1.Score) {
		t.Errorf("a 1-device node (%.2f) should score above an empty 16-device node (%.2f) for 1 device", small.Score, emptyTrn1.Score)
	}
	if partRow.Damage != 1 || emptyTrn1.Damage != 16 || partHalf.Damage != 4 {
		t.Errorf("damage: %v %v %v, want 1, 4, 16", partRow.Damage, partHalf.Damage, emptyTrn1.Damage)
	}
	for _, f := range []Fit{emptyTrn1, partRow, partHalf, small} {
		if f.Score < 0 || f.Score > 100 {
			t.Errorf("score %v outside 0-100", f.Score)
		}
	}
	// Among equal damage, the fuller node first.
	a := fitOn("trn1.32xlarge", []int{0, 1, 2, 4, 5, 6, 7})
	b := fitOn("trn1.32xlarge", []int{0, 1, 2})
	if !(a.Score > b.Score) {
		t.Errorf("fuller node %.3f should score above emptier %.3f at equal damage", a.Score, b.Score)
	}
	ff, _ := FirstFit.Place(NewUsage(shapeOf(t, "trn1.32xlarge", 0)), req)
	if ff.Score != 0 {
		t.Errorf("first-fit score = %v, want 0", ff.Score)
	}
}
