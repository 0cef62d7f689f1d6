package topology

import "testing"

func TestAllocationOverlaps(t *testing.T) {
	for _, tc := range []struct {
		a, b []int
		want bool
	}{
		{[]int{0, 1}, []int{2, 3}, false},
		{[]int{0, 1}, []int{1, 2}, true},
		{[]int{4, 9}, []int{0, 5, 9}, true},
		{[]int{1, 3, 5}, []int{0, 2, 4, 6}, false},
		{nil, []int{0}, false},
	} {
		a, b := Allocation{Cores: tc.a}, Allocation{Cores: tc.b}
		if got := a.Overlaps(b); got != tc.want {
			t.Errorf("%v overlaps %v = %v, want %v", tc.a, tc.b, got, tc.want)
		}
		if got := b.Overlaps(a); got != tc.want {
			t.Errorf("%v overlaps %v = %v, want %v", tc.b, tc.a, got, tc.want)
		}
	}
}
