package topology

import (
	"slices"
	"strings"
	"testing"
)

func TestParseList(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
		err  string
	}{
		{"", []int{}, ""},
		{"0-3,8", []int{0, 1, 2, 3, 8}, ""},
		{" 8 , 0-1 ,1", []int{0, 1, 8}, ""},
		{"5", []int{5}, ""},
		{"3-1", nil, "goes backwards"},
		{"a", nil, "not a non-negative integer"},
		{"1,,2", nil, "empty item"},
		{"-1", nil, "not a non-negative integer"},
		{"+1", nil, "not a non-negative integer"},
		{"0-99999", nil, "larger than"},
	} {
		got, err := ParseList(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseList(%q) error %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("ParseList(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	if got := FormatList([]int{8, 0, 1, 2, 3, 10, 11}); got != "0-3,8,10,11" {
		t.Errorf("FormatList = %q", got)
	}
	if got := JoinIDs([]int{3, 1, 2}); got != "1,2,3" {
		t.Errorf("JoinIDs = %q", got)
	}
}

func FuzzParseList(f *testing.F) {
	for _, s := range []string{"0-3,8", "", "1,2,3", "15-0", " 4 ", "0-4095", "9999999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ids, err := ParseList(s)
		if err != nil {
			return
		}
		if !slices.IsSorted(ids) || len(slices.Compact(slices.Clone(ids))) != len(ids) {
			t.Fatalf("ParseList(%q) = %v: not ascending and unique", s, ids)
		}
		again, err := ParseList(FormatList(ids))
		if err != nil || !slices.Equal(again, ids) {
			t.Fatalf("round trip of %v through %q gave %v, %v", ids, FormatList(ids), again, err)
		}
	})
}
