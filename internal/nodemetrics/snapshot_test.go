package nodemetrics

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kube-neuron/kube-neuron/internal/neuron"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

func shapeOf(t testing.TB, name string, lnc int) *topology.Shape {
	t.Helper()
	it, err := topology.DefaultCatalog().Get(name)
	if err != nil {
		t.Fatal(err)
	}
	s, err := topology.NewShape(it, lnc)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// render prints series as exposition-format lines, label pairs in the family's order, sorted.
func render(ss []series) []string {
	out := []string{}
	for _, s := range ss {
		i := slices.IndexFunc(metrics, func(m metric) bool { return m.name == s.name })
		pairs := []string{}
		for j, l := range metrics[i].labels {
			pairs = append(pairs, fmt.Sprintf("%s=%q", l, s.labels[j]))
		}
		out = append(out, fmt.Sprintf("%s{%s} %g", s.name, strings.Join(pairs, ","), s.value))
	}
	slices.Sort(out)
	return out
}

// only keeps the lines of the given families.
func only(lines []string, names ...string) []string {
	out := []string{}
	for _, l := range lines {
		if slices.Contains(names, l[:strings.IndexByte(l, '{')]) {
			out = append(out, l)
		}
	}
	return out
}

// inf2Stats is one inf2.xlarge device (2 physical cores) with distinct values everywhere.
func inf2Stats() *neuron.Stats {
	return &neuron.Stats{Devices: []neuron.DeviceStats{{
		Index:                       0,
		Power:                       neuron.PowerUtilization{Valid: true, At: time.Unix(100, 0), Min: 10, Max: 90, Avg: 50},
		MemECCUncorrected:           1,
		MemECCRepairableUncorrected: 2,
		SRAMECCUncorrected:          3,
		Cores: []neuron.CoreStats{
			{Index: 0, MemoryUsedBytes: 1000, TimeInUse: 4 * time.Second, Executions: map[string]uint64{"success": 7}},
			{Index: 1, MemoryUsedBytes: 2000, TimeInUse: 6 * time.Second, Executions: map[string]uint64{"success": 8, "timeout": 1}},
		},
	}}}
}

const inf2Labels = `node="n1",instance_type="inf2.xlarge",neuron_device="0"`

// deviceLines are the device series of inf2Stats for one holder (ns, pod, container).
func deviceLines(ns, pod, ctr string) []string {
	h := fmt.Sprintf(`%s,namespace=%q,pod=%q,container=%q`, inf2Labels, ns, pod, ctr)
	return []string{
		`neuron_device_ecc_errors_total{` + h + `,counter="mem_ecc_repairable_uncorrected"} 2`,
		`neuron_device_ecc_errors_total{` + h + `,counter="mem_ecc_uncorrected"} 1`,
		`neuron_device_ecc_errors_total{` + h + `,counter="sram_ecc_uncorrected"} 3`,
		`neuron_device_healthy{` + h + `,reason=""} 1`,
		`neuron_device_power_utilization_ratio{` + h + `} 0.5`,
	}
}

// coreLines are the core series of inf2Stats's core c (LNC 1) for one holder.
func coreLines(c int, ns, pod, ctr string) []string {
	h := fmt.Sprintf(`%s,namespace=%q,pod=%q,container=%q,neuron_core="%d"`, inf2Labels, ns, pod, ctr, c)
	if c == 0 {
		return []string{
			`neuron_core_executions_total{` + h + `,status="success"} 7`,
			`neuron_core_memory_used_bytes{` + h + `} 1000`,
			`neuron_core_time_in_use_seconds_total{` + h + `} 4`,
			`neuron_core_utilization_ratio{` + h + `} 0`,
		}
	}
	return []string{
		`neuron_core_executions_total{` + h + `,status="success"} 8`,
		`neuron_core_executions_total{` + h + `,status="timeout"} 1`,
		`neuron_core_memory_used_bytes{` + h + `} 2000`,
		`neuron_core_time_in_use_seconds_total{` + h + `} 6`,
		`neuron_core_utilization_ratio{` + h + `} 0`,
	}
}

func sorted(parts ...[]string) []string {
	return slices.Sorted(slices.Values(slices.Concat(parts...)))
}

func TestBuildSeriesHolders(t *testing.T) {
	a := Holder{Namespace: "ns", Pod: "a", Container: "main", Devices: []int{0}}
	b := Holder{Namespace: "ns", Pod: "b", Container: "side", Cores: []int{1}}
	c := Holder{Namespace: "other", Pod: "c", Container: "x", Devices: []int{0}}
	tests := []struct {
		name    string
		holders []Holder
		want    []string
	}{
		{"free device has empty holder labels", nil,
			sorted(deviceLines("", "", ""), coreLines(0, "", "", ""), coreLines(1, "", "", ""))},
		{"device holder holds every core", []Holder{a},
			sorted(deviceLines("ns", "a", "main"), coreLines(0, "ns", "a", "main"), coreLines(1, "ns", "a", "main"))},
		{"device held through a core", []Holder{b},
			sorted(deviceLines("ns", "b", "side"), coreLines(0, "", "", ""), coreLines(1, "ns", "b", "side"))},
		{"shared device repeats per holder, sorted", []Holder{a, c},
			sorted(deviceLines("ns", "a", "main"), deviceLines("other", "c", "x"),
				coreLines(0, "ns", "a", "main"), coreLines(0, "other", "c", "x"),
				coreLines(1, "ns", "a", "main"), coreLines(1, "other", "c", "x"))},
		{"a holder listed twice gives one series", []Holder{a, a, {Namespace: "ns", Pod: "a", Container: "main", Cores: []int{0}}},
			sorted(deviceLines("ns", "a", "main"), coreLines(0, "ns", "a", "main"), coreLines(1, "ns", "a", "main"))},
		{"ids outside the node are ignored", []Holder{{Namespace: "ns", Pod: "z", Container: "z", Devices: []int{-1, 3}, Cores: []int{2}}},
			sorted(deviceLines("", "", ""), coreLines(0, "", "", ""), coreLines(1, "", "", ""))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			snap := Snapshot{Node: "n1", InstanceType: "inf2.xlarge", Shape: shapeOf(t, "inf2.xlarge", 0), Stats: inf2Stats(), Holders: tt.holders}
			got := only(render(buildSeries(snap, nil)), DeviceHealthy, DevicePowerUtilization, DeviceECCErrors, CoreMemoryUsed, CoreTimeInUse, CoreUtilization, CoreExecutions)
			if !slices.Equal(got, tt.want) {
				t.Errorf("series:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

func TestBuildSeriesHealth(t *testing.T) {
	sh := shapeOf(t, "inf2.xlarge", 0)
	held := []Holder{{Namespace: "ns", Pod: "a", Container: "main", Devices: []int{0}}}
	t.Run("gone device has only its healthy series", func(t *testing.T) {
		snap := Snapshot{Node: "n1", InstanceType: "inf2.xlarge", Shape: sh, Stats: inf2Stats(), Holders: held, Reasons: []string{neuron.ReasonGone}}
		got := only(render(buildSeries(snap, nil)), DeviceHealthy, DevicePowerUtilization, DeviceECCErrors, CoreMemoryUsed, CoreTimeInUse, CoreUtilization, CoreExecutions)
		want := []string{`neuron_device_healthy{` + inf2Labels + `,namespace="ns",pod="a",container="main",reason="gone"} 0`}
		if !slices.Equal(got, want) {
			t.Errorf("series:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	})
	t.Run("device with uncorrected errors keeps its counters", func(t *testing.T) {
		snap := Snapshot{Node: "n1", InstanceType: "inf2.xlarge", Shape: sh, Stats: inf2Stats(), Reasons: []string{neuron.ReasonECCUncorrected}}
		got := render(buildSeries(snap, nil))
		for _, want := range []string{
			`neuron_device_healthy{` + inf2Labels + `,namespace="",pod="",container="",reason="ecc-uncorrected"} 0`,
			`neuron_device_ecc_errors_total{` + inf2Labels + `,namespace="",pod="",container="",counter="mem_ecc_uncorrected"} 1`,
			`neuron_node_devices{node="n1",instance_type="inf2.xlarge",state="unhealthy"} 1`,
			`neuron_node_devices{node="n1",instance_type="inf2.xlarge",state="free"} 0`,
			`neuron_node_free_blocks{node="n1",instance_type="inf2.xlarge",devices="1"} 0`,
		} {
			if !slices.Contains(got, want) {
				t.Errorf("missing %s in\n%s", want, strings.Join(got, "\n"))
			}
		}
	})
	t.Run("power without valid data is absent", func(t *testing.T) {
		stats := inf2Stats()
		stats.Devices[0].Power = neuron.PowerUtilization{At: time.Unix(100, 0)}
		snap := Snapshot{Node: "n1", InstanceType: "inf2.xlarge", Shape: sh, Stats: stats}
		if got := only(render(buildSeries(snap, nil)), DevicePowerUtilization); len(got) != 0 {
			t.Errorf("power series %v, want none", got)
		}
	})
	t.Run("without stats only health and node series", func(t *testing.T) {
		snap := Snapshot{Node: "n1", InstanceType: "inf2.xlarge", Shape: sh, Holders: held}
		got := render(buildSeries(snap, nil))
		want := []string{
			`neuron_device_healthy{` + inf2Labels + `,namespace="ns",pod="a",container="main",reason=""} 1`,
			`neuron_node_devices{node="n1",instance_type="inf2.xlarge",state="free"} 0`,
			`neuron_node_devices{node="n1",instance_type="inf2.xlarge",state="unhealthy"} 0`,
			`neuron_node_devices{node="n1",instance_type="inf2.xlarge",state="used"} 1`,
			`neuron_node_free_blocks{node="n1",instance_type="inf2.xlarge",devices="1"} 0`,
		}
		if !slices.Equal(got, want) {
			t.Errorf("series:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	})
	t.Run("without a shape nothing", func(t *testing.T) {
		if got := buildSeries(Snapshot{Node: "n1", Stats: inf2Stats()}, nil); len(got) != 0 {
			t.Errorf("series %v, want none", got)
		}
	})
}

// trn2Stats gives every physical core of trn2.48xlarge (16 devices, 8 physical cores) distinct
// values: memory 1000*device+k, time in use device+k seconds, k+1 successes.
func trn2Stats() *neuron.Stats {
	s := &neuron.Stats{}
	for d := range 16 {
		ds := neuron.DeviceStats{Index: d}
		for k := range 8 {
			ds.Cores = append(ds.Cores, neuron.CoreStats{
				Index: k, MemoryUsedBytes: uint64(1000*d + k), TimeInUse: time.Duration(d+k) * time.Second,
				Executions: map[string]uint64{"success": uint64(k + 1)},
			})
		}
		s.Devices = append(s.Devices, ds)
	}
	return s
}

// TestBuildSeriesLNC2: on trn2.48xlarge at LNC 2, NeuronCore 5 is device 1's second NeuronCore,
// physical cores 2 and 3: memory and executions summed, time and utilisation averaged.
func TestBuildSeriesLNC2(t *testing.T) {
	sh := shapeOf(t, "trn2.48xlarge", 2)
	snap := Snapshot{Node: "n1", InstanceType: "trn2.48xlarge", Shape: sh, Stats: trn2Stats(),
		Holders: []Holder{{Namespace: "ns", Pod: "p", Container: "c", Cores: []int{5}}}}
	util := map[physicalCore]float64{{1, 2}: 0.5, {1, 3}: 1, {1, 4}: 0.25}
	got := only(render(buildSeries(snap, util)), CoreMemoryUsed, CoreTimeInUse, CoreUtilization, CoreExecutions)
	if len(got) != 16*4*4 {
		t.Errorf("%d core series, want 4 per NeuronCore (64 NeuronCores)", len(got))
	}
	h := `node="n1",instance_type="trn2.48xlarge",neuron_device="1",namespace="ns",pod="p",container="c",neuron_core="5"`
	free := `node="n1",instance_type="trn2.48xlarge",neuron_device="1",namespace="",pod="",container="",neuron_core="6"`
	for _, want := range []string{
		`neuron_core_memory_used_bytes{` + h + `} 2005`, // 1002 + 1003
		`neuron_core_time_in_use_seconds_total{` + h + `} 3.5`,
		`neuron_core_utilization_ratio{` + h + `} 0.75`,
		`neuron_core_executions_total{` + h + `,status="success"} 7`,     // 3 + 4
		`neuron_core_utilization_ratio{` + free + `} 0.125`,              // (0.25 + 0) / 2
		`neuron_core_memory_used_bytes{` + free + `} 2009`,               // 1004 + 1005
		`neuron_core_executions_total{` + free + `,status="success"} 11`, // 5 + 6
	} {
		if !slices.Contains(got, want) {
			t.Errorf("missing %s", want)
		}
	}
	// The holder of core 5 holds device 1 (and not device 0).
	dev := only(render(buildSeries(snap, util)), DeviceHealthy)
	for _, want := range []string{
		`neuron_device_healthy{node="n1",instance_type="trn2.48xlarge",neuron_device="1",namespace="ns",pod="p",container="c",reason=""} 1`,
		`neuron_device_healthy{node="n1",instance_type="trn2.48xlarge",neuron_device="0",namespace="",pod="",container="",reason=""} 1`,
	} {
		if !slices.Contains(dev, want) {
			t.Errorf("missing %s in\n%s", want, strings.Join(dev, "\n"))
		}
	}
}

func TestBuildSeriesNode(t *testing.T) {
	sh := shapeOf(t, "trn2.48xlarge", 2)
	reasons := make([]string, 16)
	reasons[15] = neuron.ReasonECCUncorrected
	engine := topology.NewUsage(sh)
	if err := engine.MarkDevices([]int{9}); err != nil { // in use by the engine, no holder known
		t.Fatal(err)
	}
	tests := []struct {
		name string
		used *topology.Usage
		want []string
	}{
		{"from holders", nil, []string{
			`neuron_node_devices{node="n1",instance_type="trn2.48xlarge",state="free"} 13`,
			`neuron_node_devices{node="n1",instance_type="trn2.48xlarge",state="unhealthy"} 1`,
			`neuron_node_devices{node="n1",instance_type="trn2.48xlarge",state="used"} 2`,
			`neuron_node_free_blocks{node="n1",instance_type="trn2.48xlarge",devices="1"} 13`,
			`neuron_node_free_blocks{node="n1",instance_type="trn2.48xlarge",devices="16"} 0`,
			`neuron_node_free_blocks{node="n1",instance_type="trn2.48xlarge",devices="4"} 1`,
			`neuron_node_free_blocks{node="n1",instance_type="trn2.48xlarge",devices="8"} 0`,
		}},
		{"engine usage and holders", engine, []string{
			`neuron_node_devices{node="n1",instance_type="trn2.48xlarge",state="free"} 12`,
			`neuron_node_devices{node="n1",instance_type="trn2.48xlarge",state="unhealthy"} 1`,
			`neuron_node_devices{node="n1",instance_type="trn2.48xlarge",state="used"} 3`,
			`neuron_node_free_blocks{node="n1",instance_type="trn2.48xlarge",devices="1"} 12`,
			`neuron_node_free_blocks{node="n1",instance_type="trn2.48xlarge",devices="16"} 0`,
			`neuron_node_free_blocks{node="n1",instance_type="trn2.48xlarge",devices="4"} 0`,
			`neuron_node_free_blocks{node="n1",instance_type="trn2.48xlarge",devices="8"} 0`,
		}},
		{"usage of another shape is ignored", topology.NewUsage(shapeOf(t, "trn2.48xlarge", 1)), nil},
	}
	tests[2].want = tests[0].want
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			snap := Snapshot{Node: "n1", InstanceType: "trn2.48xlarge", Shape: sh, Reasons: reasons, Used: tt.used,
				Holders: []Holder{{Namespace: "ns", Pod: "a", Devices: []int{0}}, {Namespace: "ns", Pod: "b", Cores: []int{5 * 4}}}}
			got := only(render(buildSeries(snap, nil)), NodeDevices, NodeFreeBlocks)
			if !slices.Equal(got, tt.want) {
				t.Errorf("series:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
	if !engine.DeviceFree(15) || engine.DeviceFree(9) || !engine.DeviceFree(0) {
		t.Errorf("buildSeries changed the engine's usage: used %v", engine.UsedDevices())
	}
}
