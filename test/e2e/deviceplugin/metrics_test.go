//go:build e2e

package deviceplugin

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"

	"github.com/kube-neuron/kube-neuron/test/e2e/framework"
)

// sample is one scraped series.
type sample struct {
	labels map[string]string
	value  float64
}

// scrape reads the node agent's /metrics on its loopback port and returns the series by name.
func scrape(ctx context.Context, node string) (map[string][]sample, error) {
	addr := framework.L.MetricsAddress(node)
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
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parsing %s/metrics: %w", addr, err)
	}
	out := map[string][]sample{}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			s := sample{labels: map[string]string{}}
			for _, l := range m.GetLabel() {
				s.labels[l.GetName()] = l.GetValue()
			}
			switch {
			case m.GetGauge() != nil:
				s.value = m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				s.value = m.GetCounter().GetValue()
			}
			out[name] = append(out[name], s)
		}
	}
	return out, nil
}

// holderSets returns, per value of label id (neuron_core or neuron_device), the holders
// ("namespace/pod/container"; "//" when free) of the metric's series on the node.
func holderSets(series []sample, node, id string) (map[int][]string, error) {
	out := map[int][]string{}
	for _, s := range series {
		if s.labels["node"] != node {
			return nil, fmt.Errorf("series %v: node %q, want %q", s.labels, s.labels["node"], node)
		}
		i, err := strconv.Atoi(s.labels[id])
		if err != nil {
			return nil, fmt.Errorf("series %v: %s: %w", s.labels, id, err)
		}
		h := s.labels["namespace"] + "/" + s.labels["pod"] + "/" + s.labels["container"]
		if !slices.Contains(out[i], h) {
			out[i] = append(out[i], h)
		}
	}
	for _, hs := range out {
		sort.Strings(hs)
	}
	return out, nil
}

// wantHolders turns per-holder ids into per-id sorted holders; ids in 0..n-1 no holder names
// are free ("//").
func wantHolders(n int, held map[string][]int) map[int][]string {
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

// diffHolders describes where got and want differ ("" when equal).
func diffHolders(what string, got, want map[int][]string) string {
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

// TestMetricsHolders: the device plugin's per-device and per-core series name the pod and
// container that hold each device and core (a device-plugin pod, a two-container pod with a
// device and cores of another device), and free devices and cores have empty holders.
func TestMetricsHolders(t *testing.T) {
	const node = "trn2-a"
	ctx := framework.Context(t)
	shape := shapeOf(t, node)
	read := func(ctx context.Context) (map[int][]string, map[int][]string, error) {
		m, err := scrape(ctx, node)
		if err != nil {
			return nil, nil, err
		}
		cores, err := holderSets(m["neuron_core_memory_used_bytes"], node, "neuron_core")
		if err != nil {
			return nil, nil, err
		}
		devices, err := holderSets(m["neuron_device_ecc_errors_total"], node, "neuron_device")
		return cores, devices, err
	}
	// The pods of tests before this one may still be leaving the node.
	framework.WaitFor(t, ctx, time.Minute, "every device of "+node+" to be free in its metrics", func(ctx context.Context) (bool, string, error) {
		cores, devices, err := read(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		d := diffHolders("core", cores, wantHolders(shape.Cores(), nil)) + diffHolders("; device", devices, wantHolders(shape.Devices(), nil))
		return d == "", d, nil
	})

	ns := framework.CreateNamespace(t, ctx)
	createPod(t, ctx, ns, podSpec{name: "devices", node: node, containers: []ctr{{"app", neuronRes, 4}}})
	createPod(t, ctx, ns, podSpec{name: "two", node: node, containers: []ctr{{"whole", deviceRes, 1}, {"part", coreRes, 2}}})
	heldCores, heldDevices := map[string][]int{}, map[string][]int{}
	for _, name := range []string{"devices", "two"} {
		pod := framework.WaitForPod(t, ctx, ns, name, corev1.PodRunning, 60*time.Second)
		for c, r := range running(t, pod) {
			h := ns + "/" + name + "/" + c
			heldDevices[h], heldCores[h] = r[0], r[1]
		}
	}
	if part := heldCores[ns+"/two/part"]; len(part) != 2 || len(part) == len(shape.CoresOf(shape.DeviceOf(part[0]))) {
		t.Fatalf("container part runs with cores %v: want 2 of one device's %d", part, shape.CoresPerDevice)
	}
	wantCores, wantDevices := wantHolders(shape.Cores(), heldCores), wantHolders(shape.Devices(), heldDevices)
	framework.WaitFor(t, ctx, 30*time.Second, "the metrics of "+node+" to name the pods on their devices and cores", func(ctx context.Context) (bool, string, error) {
		cores, devices, err := read(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		d := diffHolders("core", cores, wantCores) + diffHolders("; device", devices, wantDevices)
		return d == "", d, nil
	})
	// The lab's busy loop moves nc_time_in_use of held cores only: utilisation is above 0 on
	// exactly the held cores.
	held := map[int]bool{}
	for _, cs := range heldCores {
		for _, c := range cs {
			held[c] = true
		}
	}
	framework.WaitFor(t, ctx, 30*time.Second, "the held cores of "+node+" (and only they) to show utilization", func(ctx context.Context) (bool, string, error) {
		m, err := scrape(ctx, node)
		if err != nil {
			return false, err.Error(), nil
		}
		return busyOnlyWhereHeld(m["neuron_core_utilization_ratio"], held)
	})
}

// busyOnlyWhereHeld reports whether the cores with utilisation above 0 are exactly the held
// ones.
func busyOnlyWhereHeld(series []sample, held map[int]bool) (bool, string, error) {
	var wrong []string
	seen := map[int]bool{}
	for _, s := range series {
		c, err := strconv.Atoi(s.labels["neuron_core"])
		if err != nil {
			return false, "", fmt.Errorf("series %v: %w", s.labels, err)
		}
		seen[c] = true
		if (s.value > 0) != held[c] {
			wrong = append(wrong, fmt.Sprintf("core %d (held %v): %g", c, held[c], s.value))
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
