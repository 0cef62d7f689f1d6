package topology

import (
	"fmt"
	"slices"
	"testing"
)

func TestFreeBlocks(t *testing.T) {
	ringCounts := func(runs ...int) []BlockCount { // inf2.48xlarge: every size 12..1, free runs cut into sets
		out := []BlockCount{}
		for size := 12; size >= 1; size-- {
			n := 0
			for _, r := range runs {
				n += r / size
			}
			out = append(out, BlockCount{size, n})
		}
		return out
	}
	switchedCounts := func(free int) []BlockCount {
		out := []BlockCount{}
		for size := 16; size >= 1; size-- {
			out = append(out, BlockCount{size, free / size})
		}
		return out
	}
	tests := []struct {
		name, instanceType string
		devices, cores     []int
		want               []BlockCount
	}{
		{"torus empty", "trn1.32xlarge", nil, nil, []BlockCount{{16, 1}, {8, 2}, {4, 4}, {1, 16}}},
		{"torus one device used", "trn1.32xlarge", []int{5}, nil, []BlockCount{{16, 0}, {8, 1}, {4, 3}, {1, 15}}},
		{"torus one core used counts the device as used", "trn1.32xlarge", nil, []int{1}, []BlockCount{{16, 0}, {8, 1}, {4, 3}, {1, 15}}},
		{"torus full", "trn1.32xlarge", seq(0, 16), nil, []BlockCount{{16, 0}, {8, 0}, {4, 0}, {1, 0}}},
		{"ring empty", "inf2.48xlarge", nil, nil, ringCounts(12)},
		{"ring cut twice", "inf2.48xlarge", []int{0, 6}, nil, ringCounts(5, 5)},
		{"ring segment wraps around", "inf2.48xlarge", []int{3}, nil, ringCounts(11)},
		{"ring uneven runs", "inf2.48xlarge", []int{2, 3}, []int{20}, ringCounts(6, 3)},
		{"chain", "inf1.6xlarge", []int{1}, nil, []BlockCount{{4, 0}, {3, 0}, {2, 1}, {1, 3}}},
		{"trn2 devices and cores used", "trn2.48xlarge", []int{0, 1}, []int{9 * 4, 9*4 + 3}, []BlockCount{{16, 0}, {8, 0}, {4, 2}, {1, 13}}},
		{"switched", "trn3.48xlarge", []int{0, 7, 15}, nil, switchedCounts(13)},
		{"single device", "inf2.xlarge", nil, []int{0}, []BlockCount{{1, 0}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := NewUsage(shapeOf(t, tt.instanceType, 0))
			if tt.devices != nil {
				if err := u.MarkDevices(tt.devices); err != nil {
					t.Fatal(err)
				}
			}
			if tt.cores != nil {
				if err := u.MarkCores(tt.cores); err != nil {
					t.Fatal(err)
				}
			}
			before := u.Clone()
			got := u.FreeBlocks()
			if !slices.Equal(got, tt.want) {
				t.Errorf("FreeBlocks = %v, want %v", got, tt.want)
			}
			if fmt.Sprint(u.used) != fmt.Sprint(before.used) {
				t.Errorf("FreeBlocks changed the usage")
			}
		})
	}
}

// TestFreeBlocksMatchesPlace: a size has a free block exactly when the engine can place a
// device request of that size.
func TestFreeBlocksMatchesPlace(t *testing.T) {
	for _, name := range []string{"trn1.32xlarge", "inf2.48xlarge", "inf1.6xlarge", "trn2.48xlarge", "trn3.48xlarge"} {
		s := shapeOf(t, name, 0)
		for used := range s.Devices() + 1 {
			u := NewUsage(s)
			for d := 0; d < used; d++ {
				if err := u.MarkDevices([]int{(d * 5) % s.Devices()}); err != nil {
					t.Fatal(err)
				}
			}
			for _, b := range u.FreeBlocks() {
				_, err := FirstFit.Place(u, Request{Unit: UnitDevice, Count: b.Devices})
				if (err == nil) != (b.Count > 0) {
					t.Errorf("%s with %d devices used: %d free blocks of %d, but Place says %v", name, used, b.Count, b.Devices, err)
				}
			}
		}
	}
}
