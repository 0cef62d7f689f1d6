package topology

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// maxListID bounds the ids ParseList accepts, so a typo cannot ask for a huge allocation.
const maxListID = 4095

// ParseList parses an id list like "0-3,8" (ranges inclusive, spaces allowed around items).
// The result is ascending without duplicates; "" gives an empty list.
func ParseList(s string) ([]int, error) {
	var out []int
	if strings.TrimSpace(s) == "" {
		return []int{}, nil
	}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			return nil, fmt.Errorf("id list %q has an empty item: write ids and ranges like 0-3,8", s)
		}
		lo, hi, isRange := strings.Cut(item, "-")
		a, err := parseID(lo, s)
		if err != nil {
			return nil, err
		}
		b := a
		if isRange {
			if b, err = parseID(hi, s); err != nil {
				return nil, err
			}
			if b < a {
				return nil, fmt.Errorf("id list %q: range %s goes backwards: write the lower id first", s, item)
			}
		}
		for id := a; id <= b; id++ {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

func parseID(s, list string) (int, error) {
	s = strings.TrimSpace(s)
	id, err := strconv.Atoi(s)
	if err != nil || id < 0 || (s != "" && s[0] == '+') {
		return 0, fmt.Errorf("id list %q: %q is not a non-negative integer: write ids and ranges like 0-3,8", list, s)
	}
	if id > maxListID {
		return 0, fmt.Errorf("id list %q: id %d is larger than %d", list, id, maxListID)
	}
	return id, nil
}

// FormatList writes ids (any order) as a compact list with ranges, like "0-3,8".
func FormatList(ids []int) string {
	sorted := slices.Compact(slices.Sorted(slices.Values(ids)))
	var parts []string
	for i := 0; i < len(sorted); {
		j := i
		for j+1 < len(sorted) && sorted[j+1] == sorted[j]+1 {
			j++
		}
		switch {
		case j == i:
			parts = append(parts, strconv.Itoa(sorted[i]))
		case j == i+1:
			parts = append(parts, strconv.Itoa(sorted[i]), strconv.Itoa(sorted[j]))
		default:
			parts = append(parts, fmt.Sprintf("%d-%d", sorted[i], sorted[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// JoinIDs writes ids as an ascending comma list without ranges ("0,1,2,3"), the form of
// AWS_NEURON_IDS and NEURON_RT_VISIBLE_CORES.
func JoinIDs(ids []int) string {
	sorted := slices.Sorted(slices.Values(ids))
	parts := make([]string, len(sorted))
	for i, id := range sorted {
		parts[i] = strconv.Itoa(id)
	}
	return strings.Join(parts, ",")
}
