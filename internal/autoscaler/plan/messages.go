package plan

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// constraintList names what restricts the pod's instance types.
func constraintList(d PodDemand) []string {
	var out []string
	if len(d.Pod.Spec.NodeSelector) > 0 {
		out = append(out, "nodeSelector")
	}
	if a := d.Pod.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		out = append(out, "node affinity")
	}
	for _, r := range d.DRA {
		if r.InstanceTypes != nil {
			out = append(out, "ResourceClaim's instanceType selector")
			break
		}
	}
	return out
}

func constraintNames(d PodDemand) string {
	l := constraintList(d)
	if len(l) == 0 {
		return "requests"
	}
	return joinOr(l, "and")
}

// plural is "1 device", "2 devices".
func plural(n int, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return fmt.Sprintf("%d %ss", n, unit)
}

func pluralS(singular bool) string {
	if singular {
		return "s"
	}
	return ""
}

// FormatSizes writes accepted counts: "1, 4, 8 or 16 devices", "1 to 4, 16, 32 or 64 cores".
func FormatSizes(sizes []int, u topology.Unit) string {
	var parts []string
	for i := 0; i < len(sizes); {
		j := i
		for j+1 < len(sizes) && sizes[j+1] == sizes[j]+1 {
			j++
		}
		if j-i >= 2 {
			parts = append(parts, fmt.Sprintf("%d to %d", sizes[i], sizes[j]))
		} else {
			for k := i; k <= j; k++ {
				parts = append(parts, strconv.Itoa(sizes[k]))
			}
		}
		i = j + 1
	}
	unit := u.String() + "s"
	if len(sizes) == 1 && sizes[0] == 1 {
		unit = u.String()
	}
	return joinOr(parts, "or") + " " + unit
}

// joinOr joins "a, b or c".
func joinOr(parts []string, conj string) string {
	if len(parts) <= 1 {
		return strings.Join(parts, "")
	}
	return strings.Join(parts[:len(parts)-1], ", ") + " " + conj + " " + parts[len(parts)-1]
}

// priceString is "$21.5/h" or "price unknown".
func priceString(t topology.InstanceType) string {
	if !t.PriceKnown() {
		return "price unknown"
	}
	return "$" + strconv.FormatFloat(*t.PriceUSDPerHour, 'f', -1, 64) + "/h"
}

// sortByPrice orders types by price, unknown prices last, then by name.
func sortByPrice(ts []topology.InstanceType) {
	sort.SliceStable(ts, func(i, j int) bool {
		a, b := ts[i], ts[j]
		if a.PriceKnown() != b.PriceKnown() {
			return a.PriceKnown()
		}
		if a.PriceKnown() && *a.PriceUSDPerHour != *b.PriceUSDPerHour {
			return *a.PriceUSDPerHour < *b.PriceUSDPerHour
		}
		return a.Name < b.Name
	})
}

func maxDevices(ts []topology.InstanceType) int {
	n := 0
	for _, t := range ts {
		n = max(n, t.Devices)
	}
	return n
}

// Families lists the families of ts, each once, in the order of ts.
func Families(ts []topology.InstanceType) []string {
	var out []string
	for _, t := range ts {
		if !slices.Contains(out, t.Family) {
			out = append(out, t.Family)
		}
	}
	return out
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
