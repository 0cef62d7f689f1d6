package nodemetrics

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kube-neuron/kube-neuron/internal/neuron"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestCollector(t *testing.T) {
	sh := shapeOf(t, "inf2.xlarge", 0)
	var mu sync.Mutex
	snap := Snapshot{Node: "n1", InstanceType: "inf2.xlarge", Shape: sh, Stats: inf2Stats(),
		Holders: []Holder{{Namespace: "ns", Pod: "a", Container: "main", Cores: []int{1}}}}
	snapshot := func() Snapshot {
		mu.Lock()
		defer mu.Unlock()
		return snap
	}
	sampler := NewSampler()
	t0 := time.Unix(1000, 0)
	sampler.Sample(t0, inUse(0, 0))
	sampler.Sample(t0.Add(10*time.Second), inUse(2*time.Second, 5*time.Second))
	c := NewCollector(snapshot, sampler)

	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v, %v", problems, err)
	}
	// inUse names device 3; this node's device is 0: utilisation reads 0 for it. Point the
	// sampler at device 0 to see the rates.
	sampler.Sample(t0.Add(20*time.Second), inUseDevice0(2*time.Second, 5*time.Second))
	sampler.Sample(t0.Add(30*time.Second), inUseDevice0(3*time.Second, 10*time.Second))

	want := `
# HELP neuron_core_utilization_ratio ` + helpOf(CoreUtilization) + `
# TYPE neuron_core_utilization_ratio gauge
neuron_core_utilization_ratio{container="",instance_type="inf2.xlarge",namespace="",neuron_core="0",neuron_device="0",node="n1",pod=""} 0.1
neuron_core_utilization_ratio{container="main",instance_type="inf2.xlarge",namespace="ns",neuron_core="1",neuron_device="0",node="n1",pod="a"} 0.5
# HELP neuron_device_ecc_errors_total ` + helpOf(DeviceECCErrors) + `
# TYPE neuron_device_ecc_errors_total counter
neuron_device_ecc_errors_total{container="main",counter="mem_ecc_repairable_uncorrected",instance_type="inf2.xlarge",namespace="ns",neuron_device="0",node="n1",pod="a"} 2
neuron_device_ecc_errors_total{container="main",counter="mem_ecc_uncorrected",instance_type="inf2.xlarge",namespace="ns",neuron_device="0",node="n1",pod="a"} 1
neuron_device_ecc_errors_total{container="main",counter="sram_ecc_uncorrected",instance_type="inf2.xlarge",namespace="ns",neuron_device="0",node="n1",pod="a"} 3
# HELP neuron_node_devices ` + helpOf(NodeDevices) + `
# TYPE neuron_node_devices gauge
neuron_node_devices{instance_type="inf2.xlarge",node="n1",state="free"} 0
neuron_node_devices{instance_type="inf2.xlarge",node="n1",state="unhealthy"} 0
neuron_node_devices{instance_type="inf2.xlarge",node="n1",state="used"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), CoreUtilization, DeviceECCErrors, NodeDevices); err != nil {
		t.Error(err)
	}

	// Scrapes do not move utilisation; the snapshot is read at every scrape.
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), CoreUtilization, DeviceECCErrors, NodeDevices); err != nil {
		t.Errorf("second scrape: %v", err)
	}
	mu.Lock()
	snap.Holders = nil
	mu.Unlock()
	if n := testutil.CollectAndCount(c, DeviceECCErrors); n != 3 {
		t.Errorf("%d ECC series after the holder left, want 3", n)
	}
	if n := testutil.CollectAndCount(c); n != 3+1+1+4+5+3+1 { // ecc, healthy, power, core 0 (one status), core 1 (two), node devices, free blocks
		t.Errorf("%d series in all", n)
	}
}

// TestCollectorDescribesEveryFamily: every family is described once, and a snapshot without a
// shape gives no series and no error.
func TestCollectorDescribesEveryFamily(t *testing.T) {
	c := NewCollector(func() Snapshot { return Snapshot{} }, nil)
	ch := make(chan *prometheus.Desc, 100)
	c.Describe(ch)
	close(ch)
	seen := map[string]bool{}
	for d := range ch {
		seen[d.String()] = true
	}
	if len(seen) != len(metrics) || len(metrics) != 9 {
		t.Errorf("%d descriptions for %d families, want 9", len(seen), len(metrics))
	}
	if n := testutil.CollectAndCount(c); n != 0 {
		t.Errorf("%d series without a shape", n)
	}
}

func helpOf(name string) string {
	for _, m := range metrics {
		if m.name == name {
			return m.help
		}
	}
	return ""
}

func inUseDevice0(times ...time.Duration) *neuron.Stats {
	s := inUse(times...)
	s.Devices[0].Index = 0
	return s
}
