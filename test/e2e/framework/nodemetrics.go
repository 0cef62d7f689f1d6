package framework

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Sample is one series scraped from a node agent.
type Sample struct {
	Labels map[string]string
	Value  float64
}

// ScrapeNodeMetrics reads the node agent's /metrics on its loopback port and returns the series by name.
func ScrapeNodeMetrics(ctx context.Context, node string) (map[string][]Sample, error) {
	addr := L.MetricsAddress(node)
	if addr == "" {
		return nil, fmt.Errorf("the lab runs no agent with metrics for node %s", node)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s/metrics: %s", addr, resp.Status)
	}
	out, err := parseSamples(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parsing %s/metrics: %w", addr, err)
	}
	return out, nil
}

// parseSamples reads a Prometheus text exposition into its series by name.
func parseSamples(r io.Reader) (map[string][]Sample, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, err
	}
	out := map[string][]Sample{}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			s := Sample{Labels: map[string]string{}}
			for _, l := range m.GetLabel() {
				s.Labels[l.GetName()] = l.GetValue()
			}
			switch {
			case m.GetGauge() != nil:
				s.Value = m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				s.Value = m.GetCounter().GetValue()
			}
			out[name] = append(out[name], s)
		}
	}
	return out, nil
}

// HolderSets returns, per value of label id (neuron_core or neuron_device), the holders
// ("namespace/pod/container"; "//" when free) of the metric's series on the node.
func HolderSets(series []Sample, node, id string) (map[int][]string, error) {
	out := map[int][]string{}
	for _, s := range series {
		if s.Labels["node"] != node {
			return nil, fmt.Errorf("series %v: node %q, want %q", s.Labels, s.Labels["node"], node)
		}
		i, err := strconv.Atoi(s.Labels[id])
		if err != nil {
			return nil, fmt.Errorf("series %v: %s: %w", s.Labels, id, err)
		}
		h := s.Labels["namespace"] + "/" + s.Labels["pod"] + "/" + s.Labels["container"]
		if !slices.Contains(out[i], h) {
			out[i] = append(out[i], h)
		}
	}
	for _, hs := range out {
		sort.Strings(hs)
	}
	return out, nil
}

// WantHolders turns per-holder ids into per-id sorted holders; ids in 0..n-1 no holder names
// are free ("//").
func WantHolders(n int, held map[string][]int) map[int][]string {
	out := map[int][]string{}
	for h, ids := range held {
		for _, i := range ids {
			if !slices.Contains(out[i], h) {
				out[i] = append(out[i], h)
			}
		}
	}
	for i := range n {
		if len(out[i]) == 0 {
			out[i] = []string{"//"}
		}
		sort.Strings(out[i])
	}
	return out
}

// DiffHolders describes where got and want differ ("" when equal).
func DiffHolders(what string, got, want map[int][]string) string {
	var diffs []string
	for _, i := range slices.Sorted(maps.Keys(want)) {
		if !slices.Equal(got[i], want[i]) {
			diffs = append(diffs, fmt.Sprintf("%s %d: %v, want %v", what, i, got[i], want[i]))
		}
	}
	for i := range got {
		if _, ok := want[i]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s %d: %v, want no series", what, i, got[i]))
		}
	}
	return strings.Join(diffs, "; ")
}

// BusyOnlyWhereHeld reports whether the cores with utilisation above 0 are exactly the held
// ones.
func BusyOnlyWhereHeld(series []Sample, held map[int]bool) (bool, string, error) {
	var wrong []string
	seen := map[int]bool{}
	for _, s := range series {
		c, err := strconv.Atoi(s.Labels["neuron_core"])
		if err != nil {
			return false, "", fmt.Errorf("series %v: %w", s.Labels, err)
		}
		seen[c] = true
		if (s.Value > 0) != held[c] {
			wrong = append(wrong, fmt.Sprintf("core %d (held %v): %g", c, held[c], s.Value))
		}
	}
	for c := range held {
		if !seen[c] {
			wrong = append(wrong, fmt.Sprintf("core %d: no series", c))
		}
	}
	slices.Sort(wrong)
	return len(wrong) == 0, strings.Join(wrong, "; "), nil
}
