//go:build e2e

package benchutil

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Scrape reads the Prometheus text exposition at url with client (http.DefaultClient when nil)
// into "name{labels}" -> value.
func Scrape(ctx context.Context, client *http.Client, url string) (map[string]float64, error) {
	if client == nil {
		client = http.DefaultClient
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return nil, fmt.Errorf("GET %s: %s %q", url, resp.Status, body)
	}
	return ParseMetrics(resp.Body)
}

// ParseMetrics reads a Prometheus text exposition into "name{labels}" -> value.
func ParseMetrics(r io.Reader) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[line[:i]] = v
	}
	return out, sc.Err()
}

// SumSeries adds up the series of metric name (with its suffix, e.g. "_sum") whose labels
// include every `k="v"` of want (label values without commas); with no want, every series.
func SumSeries(m map[string]float64, name string, want ...string) float64 {
	total := 0.0
	for k, v := range m {
		base, labels, _ := strings.Cut(k, "{")
		if base != name {
			continue
		}
		have := strings.Split(strings.TrimSuffix(labels, "}"), ",")
		if slices.ContainsFunc(want, func(w string) bool { return !slices.Contains(have, w) }) {
			continue
		}
		total += v
	}
	return total
}

// HistogramMean is the mean of a histogram's observations over the series matching want (see
// SumSeries), and their number.
func HistogramMean(m map[string]float64, name string, want ...string) (time.Duration, float64) {
	n := SumSeries(m, name+"_count", want...)
	if n == 0 {
		return 0, 0
	}
	return time.Duration(SumSeries(m, name+"_sum", want...) / n * float64(time.Second)), n
}

// HistogramQuantile bounds a quantile of an unlabelled histogram from its cumulative buckets:
// "<= <upper bound of the bucket that reaches it>", or "> <largest finite bound>".
func HistogramQuantile(m map[string]float64, name string, q float64) string {
	type bucket struct{ le, n float64 }
	var bs []bucket
	prefix := name + `_bucket{le="`
	for k, v := range m {
		if !strings.HasPrefix(k, prefix) {
			continue
		}
		le, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimPrefix(k, prefix), `"}`), 64)
		if err != nil || math.IsInf(le, 0) {
			continue
		}
		bs = append(bs, bucket{le, v})
	}
	total := m[name+"_count"]
	if total == 0 || len(bs) == 0 {
		return "-"
	}
	sort.Slice(bs, func(i, j int) bool { return bs[i].le < bs[j].le })
	for _, b := range bs {
		if b.n >= q*total {
			return "<= " + time.Duration(b.le*float64(time.Second)).String()
		}
	}
	return "> " + time.Duration(bs[len(bs)-1].le*float64(time.Second)).String()
}
