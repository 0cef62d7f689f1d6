package cli

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/kube-neuron/kube-neuron/internal/neuron"
	"github.com/kube-neuron/kube-neuron/internal/nodemetrics"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// TestTopReadsTheAgentsExporter renders what the agents' own collector exports for a trn2 node
// at LNC 2 (a two-container pod, a claim shared by two pods, a gone device) in the text format
// and reads it back with top: the exporter and top agree on names, labels and ids.
func TestTopReadsTheAgentsExporter(t *testing.T) {
	it, err := topology.DefaultCatalog().Get("trn2.48xlarge")
	if err != nil {
		t.Fatal(err)
	}
	shape, err := topology.NewShape(it, 2)
	if err != nil {
		t.Fatal(err)
	}
	stats := func(busy time.Duration) *neuron.Stats {
		s := &neuron.Stats{}
		for d := range it.Devices {
			if d == 9 {
				continue // gone
			}
			ds := neuron.DeviceStats{Index: d}
			for k := range it.PhysicalCoresPerDevice {
				ds.Cores = append(ds.Cores, neuron.CoreStats{Index: k, MemoryUsedBytes: 1 << 30, TimeInUse: busy})
			}
			s.Devices = append(s.Devices, ds)
		}
		return s
	}
	reasons := make([]string, it.Devices)
	reasons[9] = neuron.ReasonGone
	snap := nodemetrics.Snapshot{Node: "trn2-a", InstanceType: "trn2.48xlarge", Shape: shape, Stats: stats(0), Reasons: reasons,
		Holders: []nodemetrics.Holder{
			{Namespace: "ml", Pod: "p", Container: "a", Devices: []int{0}},
			{Namespace: "ml", Pod: "p", Container: "b", Cores: []int{4, 5}},
			{Namespace: "ml", Pod: "s1", Container: "main", Devices: []int{2}},
			{Namespace: "ml", Pod: "s2", Container: "main", Devices: []int{2}},
		}}
	sampler := nodemetrics.NewSampler()
	t0 := time.Unix(1000, 0)
	sampler.Sample(t0, stats(0))
	sampler.Sample(t0.Add(10*time.Second), stats(5*time.Second))
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(nodemetrics.NewCollector(func() nodemetrics.Snapshot { return snap }, sampler))
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	for _, f := range families {
		if _, err := expfmt.MetricFamilyToText(&text, f); err != nil {
			t.Fatal(err)
		}
	}

	m := newTopMetrics()
	nodes, skipped, err := m.add(text.Bytes())
	if err != nil || skipped != 0 || !reflect.DeepEqual(nodes, []string{"trn2-a"}) {
		t.Fatalf("nodes %v, skipped %d, err %v", nodes, skipped, err)
	}
	got := m.pods("")
	want := []TopPod{
		{Namespace: "ml", Pod: "p", Container: "a", Node: "trn2-a", Devices: []int{0}, Cores: ids(0, 3), MemoryUsedBytes: 8 << 30, Utilization: 0.5, sampled: true},
		{Namespace: "ml", Pod: "p", Container: "b", Node: "trn2-a", Devices: []int{1}, Cores: []int{4, 5}, MemoryUsedBytes: 4 << 30, Utilization: 0.5, sampled: true},
		{Namespace: "ml", Pod: "s1", Container: "main", Node: "trn2-a", Devices: []int{2}, Cores: ids(8, 11), MemoryUsedBytes: 8 << 30, Utilization: 0.5, sampled: true},
		{Namespace: "ml", Pod: "s2", Container: "main", Node: "trn2-a", Devices: []int{2}, Cores: ids(8, 11), MemoryUsedBytes: 8 << 30, Utilization: 0.5, sampled: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("pods:\n got %+v\nwant %+v", got, want)
	}
	n := m.nodeRows()
	if len(n) != 1 || n[0].DevicesUsed != 3 || n[0].DevicesUnhealthy != 1 || n[0].DevicesFree != 12 || n[0].CoresUsed != 10 || n[0].Cores != 60 ||
		n[0].Utilization != 0.5 || !reflect.DeepEqual(n[0].Unhealthy, []TopUnhealthy{{Device: 9, Reason: neuron.ReasonGone}}) {
		t.Errorf("node: %+v", n)
	}
}
