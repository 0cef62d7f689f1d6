package topology

import (
	"fmt"
	"slices"
	"testing"
)

func TestCoresAndDevicesNeeded(t *testing.T) {
	tests := []struct {
		typ     string
		lnc     int
		req     Request
		cores   int
		devices int
	}{
		{"inf1.6xlarge", 0, Request{UnitCore, 9}, 9, 3}, // the seed log: cores 0-8 on devices 0,1,2
		{"inf1.6xlarge", 0, Request{UnitCore, 4}, 4, 1},
		{"inf1.6xlarge", 0, Request{UnitDevice, 2}, 8, 2},
		{"trn1.32xlarge", 0, Request{UnitCore, 1}, 1, 1},
		{"trn1.32xlarge", 0, Request{UnitCore, 8}, 8, 4},
		{"trn1.32xlarge", 0, Request{UnitDevice, 4}, 8, 4},
		{"trn2.48xlarge", 0, Request{UnitDevice, 16}, 64, 16}, // LNC 2: 4 logical cores a device
		{"trn2.48xlarge", 0, Request{UnitCore, 5}, 5, 2},
		{"trn2.48xlarge", 1, Request{UnitDevice, 16}, 128, 16},
		{"trn2.48xlarge", 1, Request{UnitCore, 8}, 8, 1},
		{"trn2.48xlarge", 1, Request{UnitCore, 9}, 9, 2},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s/lnc%d/%s", tc.typ, tc.lnc, tc.req), func(t *testing.T) {
			s := shapeOf(t, tc.typ, tc.lnc)
			if got := s.CoresNeeded(tc.req); got != tc.cores {
				t.Errorf("CoresNeeded = %d, want %d", got, tc.cores)
			}
			if got := s.DevicesNeeded(tc.req); got != tc.devices {
				t.Errorf("DevicesNeeded = %d, want %d", got, tc.devices)
			}
		})
	}
}

// TestDevicesNeededIsWhatPlaceTakes: on an empty node, every valid core request is placed on
// exactly DevicesNeeded devices and takes CoresNeeded cores; so is every valid device request.
func TestDevicesNeededIsWhatPlaceTakes(t *testing.T) {
	for _, it := range DefaultCatalog().Types() {
		s := shapeOf(t, it.Name, 0)
		for _, unit := range []Unit{UnitDevice, UnitCore} {
			sizes := s.DeviceSizes()
			if unit == UnitCore {
				sizes = s.CoreSizes()
			}
			for _, n := range sizes {
				r := Request{Unit: unit, Count: n}
				fit, err := BestFit.Place(NewUsage(s), r)
				if err != nil {
					t.Fatalf("%s: %s: %v", it.Name, r, err)
				}
				if len(fit.Devices) != s.DevicesNeeded(r) || len(fit.Cores) != s.CoresNeeded(r) {
					t.Errorf("%s: %s took %d devices and %d cores; DevicesNeeded %d, CoresNeeded %d",
						it.Name, r, len(fit.Devices), len(fit.Cores), s.DevicesNeeded(r), s.CoresNeeded(r))
				}
			}
		}
	}
}

func TestDeviceSets(t *testing.T) {
	tests := []struct {
		typ  string
		n    int
		want [][]int
	}{
		{"trn1.32xlarge", 4, [][]int{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15}}},
		{"trn1.32xlarge", 8, [][]int{{0, 1, 2, 3, 4, 5, 6, 7}, {8, 9, 10, 11, 12, 13, 14, 15}}},
		{"trn1.32xlarge", 16, [][]int{rangeInts(0, 15)}},
		{"trn1.32xlarge", 2, nil},
		{"trn1.32xlarge", 0, nil},
		{"trn1.32xlarge", 17, nil},
		{"inf1.6xlarge", 3, [][]int{{0, 1, 2}, {1, 2, 3}}}, // chain: no wrap-around
		{"inf2.24xlarge", 5, [][]int{{0, 1, 2, 3, 4}, {0, 1, 2, 3, 5}, {0, 1, 2, 4, 5}, {0, 1, 3, 4, 5}, {0, 2, 3, 4, 5}, {1, 2, 3, 4, 5}}},
		{"inf2.xlarge", 1, [][]int{{0}}},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s/%d", tc.typ, tc.n), func(t *testing.T) {
			got := shapeOf(t, tc.typ, 0).DeviceSets(tc.n)
			if !slices.EqualFunc(got, tc.want, slices.Equal) {
				t.Errorf("DeviceSets(%d) = %v, want %v", tc.n, got, tc.want)
			}
		})
	}
}

// TestDeviceSetsAreTheValidSets: for every type and count, DeviceSets lists valid sets only, and
// as many as there are (ring: one per start; switched: every subset).
func TestDeviceSetsAreTheValidSets(t *testing.T) {
	binomial := func(n, k int) int {
		r := 1
		for i := 1; i <= k; i++ {
			r = r * (n - k + i) / i
		}
		return r
	}
	for _, it := range DefaultCatalog().Types() {
		s := shapeOf(t, it.Name, 0)
		total := s.Devices()
		for n := 1; n <= total; n++ {
			sets := s.DeviceSets(n)
			if (len(sets) > 0) != slices.Contains(s.DeviceSizes(), n) {
				t.Errorf("%s: %d sets of %d devices, but DeviceSizes is %v", it.Name, len(sets), n, s.DeviceSizes())
			}
			for _, set := range sets {
				if len(set) != n || !slices.IsSorted(set) || !s.IsValidDeviceSet(set) {
					t.Errorf("%s: DeviceSets(%d) holds %v", it.Name, n, set)
				}
			}
			if len(sets) == 0 {
				continue
			}
			want := 0
			switch {
			case n == total:
				want = 1
			case s.Kind() == KindTorus:
				want = total / n
			case s.Kind() == KindRing:
				want = total
			case s.Kind() == KindChain:
				want = total - n + 1
			case s.Kind() == KindSwitched, s.Kind() == KindSingle:
				want = binomial(total, n)
			}
			if n == 1 {
				want = total
			}
			if len(sets) != want {
				t.Errorf("%s: %d sets of %d devices, want %d", it.Name, len(sets), n, want)
			}
		}
	}
}
