package neuron

import (
	"context"
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// statsTree writes a device tree by hand: files maps a path relative to neuron<device> to its
// content.
type statsTree struct {
	t    *testing.T
	root string
}

func newStatsTree(t *testing.T) *statsTree {
	return &statsTree{t: t, root: t.TempDir()}
}

func (s *statsTree) device(i, cores int, files map[string]string) {
	s.t.Helper()
	dir := filepath.Join(s.root, devicesDir, fmt.Sprintf("neuron%d", i))
	writeFile(s.t, filepath.Join(dir, coreCountFile), strconv.Itoa(cores))
	for rel, content := range files {
		writeFile(s.t, filepath.Join(dir, rel), content)
	}
}

func (s *statsTree) read() (*Stats, error) {
	return (&Sysfs{Root: s.root}).ReadStats(context.Background())
}

func zeroCores(n int) []CoreStats {
	cores := make([]CoreStats, n)
	for k := range cores {
		cores[k] = CoreStats{Index: k, Executions: map[string]uint64{}}
	}
	return cores
}

func TestReadStatsAllFiles(t *testing.T) {
	tree := newStatsTree(t)
	files := map[string]string{
		"stats/power/utilization":                                     "POWER_STATUS_VALID,1712345678,40.00,80.00,62.50\n",
		"stats/hardware/mem_ecc_uncorrected/total":                    "3\n",
		"stats/hardware/mem_ecc_uncorrected/present":                  "1\n",
		"stats/hardware/mem_ecc_repairable_uncorrected/total":         "5\n",
		"stats/hardware/sram_ecc_uncorrected/total":                   "7\n",
		"neuron_core1/stats/memory_usage/device_mem/tensors/total":    "1000\n",
		"neuron_core1/stats/memory_usage/device_mem/tensors/peak":     "9999\n",
		"neuron_core1/stats/memory_usage/device_mem/model_code/total": "24\n",
		"neuron_core1/stats/memory_usage/host_mem/tensors/total":      "123456\n", // host memory: not counted
		"neuron_core1/stats/status/success/total":                     "10\n",
		"neuron_core1/stats/status/success/present":                   "1\n",
		"neuron_core1/stats/status/timeout/total":                     "2\n",
		"neuron_core1/stats/other_info/nc_time_in_use/total":          "2500000\n",
		"neuron_core1/stats/other_info/nc_time_in_use/present":        "100\n",
	}
	for _, c := range MemoryCategories() {
		files["neuron_core0/stats/memory_usage/device_mem/"+c+"/total"] = "1"
	}
	for _, st := range ExecutionStatuses() {
		files["neuron_core0/stats/status/"+st+"/total"] = "4"
	}
	tree.device(0, 2, files)
	got, err := tree.read()
	if err != nil {
		t.Fatal(err)
	}
	allStatuses := map[string]uint64{}
	for _, st := range ExecutionStatuses() {
		allStatuses[st] = 4
	}
	want := &Stats{Devices: []DeviceStats{{
		Index:                       0,
		Power:                       PowerUtilization{Valid: true, At: time.Unix(1712345678, 0), Min: 40, Max: 80, Avg: 62.5},
		MemECCUncorrected:           3,
		MemECCRepairableUncorrected: 5,
		SRAMECCUncorrected:          7,
		Cores: []CoreStats{
			{Index: 0, MemoryUsedBytes: uint64(len(MemoryCategories())), Executions: allStatuses},
			{Index: 1, MemoryUsedBytes: 1024, TimeInUse: 2500 * time.Millisecond, Executions: map[string]uint64{"success": 10, "timeout": 2}},
		},
	}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ReadStats =\n%+v\nwant\n%+v", got, want)
	}
}

// TestReadStatsAbsent: a device with only core_count (an older driver, another family) reads as
// zeros and invalid power; a tree without the device directory reads as no devices.
func TestReadStatsAbsent(t *testing.T) {
	tree := newStatsTree(t)
	if got, err := tree.read(); err != nil || got == nil || len(got.Devices) != 0 || got.Devices == nil {
		t.Fatalf("no devices directory: ReadStats = %+v, %v; want no devices", got, err)
	}
	tree.device(0, 2, nil)
	tree.device(1, 2, map[string]string{"neuron_core0/stats/memory_usage/device_mem/tensors/present": "5"}) // no total
	writeFile(t, filepath.Join(tree.root, devicesDir, "neuron_extra", "core_count"), "2")                   // not a device
	got, err := tree.read()
	if err != nil {
		t.Fatal(err)
	}
	want := &Stats{Devices: []DeviceStats{{Index: 0, Cores: zeroCores(2)}, {Index: 1, Cores: zeroCores(2)}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ReadStats =\n%+v\nwant\n%+v", got, want)
	}
}

// TestReadStatsEightCores: trn2's devices have 8 physical cores; each reads its own directory.
func TestReadStatsEightCores(t *testing.T) {
	tree := newStatsTree(t)
	files := map[string]string{}
	for k := range 8 {
		files[fmt.Sprintf("neuron_core%d/stats/memory_usage/device_mem/tensors/total", k)] = strconv.Itoa(100 * (k + 1))
		files[fmt.Sprintf("neuron_core%d/stats/other_info/nc_time_in_use/total", k)] = strconv.Itoa(k)
		files[fmt.Sprintf("neuron_core%d/stats/status/success/total", k)] = strconv.Itoa(10 + k)
	}
	files["neuron_core8/stats/status/success/total"] = "99" // beyond core_count: not read
	tree.device(0, 8, nil)
	tree.device(1, 8, files)
	got, err := tree.read()
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Devices) != 2 || len(got.Devices[1].Cores) != 8 {
		t.Fatalf("ReadStats = %+v, want 2 devices with 8 cores", got)
	}
	for k, c := range got.Devices[1].Cores {
		want := CoreStats{Index: k, MemoryUsedBytes: uint64(100 * (k + 1)), TimeInUse: time.Duration(k) * time.Microsecond, Executions: map[string]uint64{"success": uint64(10 + k)}}
		if !reflect.DeepEqual(c, want) {
			t.Errorf("core %d = %+v, want %+v", k, c, want)
		}
	}
}

func TestReadStatsMalformed(t *testing.T) {
	tests := []struct {
		file, content, wantErr string
	}{
		{"stats/power/utilization", "POWER_STATUS_VALID,1712345678,40.00,80.00", "expected <status>,<unix-seconds>"},
		{"stats/power/utilization", "POWER_STATUS_BUSY,1712345678,40.00,80.00,62.50", "expected status POWER_STATUS_VALID"},
		{"stats/power/utilization", "POWER_STATUS_VALID,-1,40.00,80.00,62.50", "unix seconds"},
		{"stats/power/utilization", "POWER_STATUS_VALID,1712345678,40.00,180.00,62.50", "maximum power as a percentage"},
		{"stats/power/utilization", "POWER_STATUS_VALID,1712345678,40.00,80.00,abc", "average power"},
		{"stats/hardware/mem_ecc_repairable_uncorrected/total", "many", "expected a decimal event count"},
		{"stats/hardware/sram_ecc_uncorrected/total", "-1", "expected a decimal event count"},
		{"neuron_core1/stats/memory_usage/device_mem/tensors/total", "1.5", "expected a decimal number of bytes"},
		{"neuron_core0/stats/status/success/total", "", "expected a decimal execution count"},
		{"neuron_core0/stats/other_info/nc_time_in_use/total", "1e6", "expected a decimal number of microseconds"},
		{"neuron_core0/stats/other_info/nc_time_in_use/total", strconv.FormatUint(math.MaxUint64, 10), "more than the"},
		{"core_count", "0", "expected a decimal core count"},
	}
	for _, tt := range tests {
		t.Run(tt.file+"="+tt.content, func(t *testing.T) {
			tree := newStatsTree(t)
			tree.device(0, 2, nil)
			tree.device(1, 2, map[string]string{tt.file: tt.content})
			got, err := tree.read()
			path := filepath.Join(tree.root, devicesDir, "neuron1", tt.file)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), path) {
				t.Errorf("ReadStats = %+v, %v; want an error naming %s containing %q", got, err, path, tt.wantErr)
			}
		})
	}
}

// TestReadStatsSkipsForeignEntries: entries under device_mem and status that cannot be the
// driver's (files, names with other characters) are not read.
func TestReadStatsSkipsForeignEntries(t *testing.T) {
	tree := newStatsTree(t)
	tree.device(0, 1, map[string]string{
		"neuron_core0/stats/memory_usage/device_mem/tensors/total": "8",
		"neuron_core0/stats/memory_usage/device_mem/README":        "not a counter",
		"neuron_core0/stats/status/Bad Name/total":                 "junk",
		"neuron_core0/stats/status/success/total":                  "1",
	})
	got, err := tree.read()
	if err != nil {
		t.Fatal(err)
	}
	c := got.Devices[0].Cores[0]
	if c.MemoryUsedBytes != 8 || !maps.Equal(c.Executions, map[string]uint64{"success": 1}) {
		t.Errorf("core = %+v, want 8 bytes and 1 success", c)
	}
}

func TestReadStatsMemorySaturates(t *testing.T) {
	tree := newStatsTree(t)
	tree.device(0, 1, map[string]string{
		"neuron_core0/stats/memory_usage/device_mem/tensors/total":   strconv.FormatUint(math.MaxUint64, 10),
		"neuron_core0/stats/memory_usage/device_mem/constants/total": "1",
	})
	got, err := tree.read()
	if err != nil || got.Devices[0].Cores[0].MemoryUsedBytes != math.MaxUint64 {
		t.Fatalf("ReadStats = %+v, %v; want memory saturated at the maximum", got, err)
	}
}

func TestReadStatsCanceled(t *testing.T) {
	tree := newStatsTree(t)
	tree.device(0, 1, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := (&Sysfs{Root: tree.root}).ReadStats(ctx); err == nil || !strings.Contains(err.Error(), "canceled") {
		t.Errorf("ReadStats with a canceled context: %v, want canceled", err)
	}
}

func TestParsePowerUtilization(t *testing.T) {
	tests := []struct {
		in      string
		want    PowerUtilization
		wantErr string
	}{
		{in: "POWER_STATUS_VALID,1712345678,40.00,80.00,62.50\n", want: PowerUtilization{true, time.Unix(1712345678, 0), 40, 80, 62.5}},
		{in: "POWER_STATUS_VALID,0,0,100,100.0", want: PowerUtilization{true, time.Unix(0, 0), 0, 100, 100}},
		{in: " POWER_STATUS_NO_DATA,1712345678,0.00,0.00,0.00 ", want: PowerUtilization{false, time.Unix(1712345678, 0), 0, 0, 0}},
		{in: "POWER_STATUS_INVALID,1712345678,0.00,0.00,0.00", want: PowerUtilization{false, time.Unix(1712345678, 0), 0, 0, 0}},
		{in: "", wantErr: "(1 fields)"},
		{in: "POWER_STATUS_VALID,1,2,3,4,5", wantErr: "(6 fields)"},
		{in: "POWER_STATUS_MAX,1,2,3,4", wantErr: "expected status"},
		{in: "power_status_valid,1,2,3,4", wantErr: "expected status"},
		{in: "POWER_STATUS_VALID, 1,2,3,4", wantErr: "unix seconds"},
		{in: "POWER_STATUS_VALID,1.5,2,3,4", wantErr: "unix seconds"},
		{in: "POWER_STATUS_VALID,1234567890123,2,3,4", wantErr: "unix seconds"},
		{in: "POWER_STATUS_VALID,1,100.01,3,4", wantErr: "minimum power"},
		{in: "POWER_STATUS_VALID,1,1.234,3,4", wantErr: "minimum power"},
		{in: "POWER_STATUS_VALID,1,1.,3,4", wantErr: "minimum power"},
		{in: "POWER_STATUS_VALID,1,.5,3,4", wantErr: "minimum power"},
		{in: "POWER_STATUS_VALID,1,1,-3,4", wantErr: "maximum power"},
		{in: "POWER_STATUS_VALID,1,1,1e2,4", wantErr: "maximum power"},
		{in: "POWER_STATUS_VALID,1,1,3,NaN", wantErr: "average power"},
		{in: "POWER_STATUS_VALID,1,1,3,1000", wantErr: "average power"},
	}
	for _, tt := range tests {
		t.Run(strconv.Quote(tt.in), func(t *testing.T) {
			got, err := parsePowerUtilization([]byte(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || !got.At.Equal(tt.want.At) || got.Valid != tt.want.Valid || got.Min != tt.want.Min || got.Max != tt.want.Max || got.Avg != tt.want.Avg {
				t.Errorf("= %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

// TestReadStatsSimulated reads simulated trees with the production reader: every device and
// physical core, the ECC counter the simulator injects, and a removed device left out.
func TestReadStatsSimulated(t *testing.T) {
	for _, name := range []string{"inf2.xlarge", "trn1.32xlarge", "trn2.48xlarge"} {
		t.Run(name, func(t *testing.T) {
			it := catalogType(t, name)
			s := simulate(t, SimOptions{InstanceType: it})
			if err := s.InjectError(it.Devices-1, MemECC, 2); err != nil {
				t.Fatal(err)
			}
			stats, err := (&Sysfs{Root: s.Root()}).ReadStats(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if len(stats.Devices) != it.Devices {
				t.Fatalf("%d devices, want %d", len(stats.Devices), it.Devices)
			}
			for i, d := range stats.Devices {
				if d.Index != i || len(d.Cores) != it.PhysicalCoresPerDevice {
					t.Errorf("device %d: index %d, %d cores, want %d", i, d.Index, len(d.Cores), it.PhysicalCoresPerDevice)
				}
			}
			if got := stats.Devices[it.Devices-1].MemECCUncorrected; got != 2 {
				t.Errorf("injected ECC count reads %d, want 2", got)
			}
			if it.Devices == 1 {
				return
			}
			if err := s.RemoveDevice(1); err != nil {
				t.Fatal(err)
			}
			stats, err = (&Sysfs{Root: s.Root()}).ReadStats(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if len(stats.Devices) != it.Devices-1 || stats.Devices[1].Index != 2 {
				t.Errorf("after removing device 1: %d devices, the second is %d", len(stats.Devices), stats.Devices[1].Index)
			}
		})
	}
}

// TestReadStatsConcurrentRemoval: a device removed and restored while ReadStats runs is either
// read or left out, never an error.
func TestReadStatsConcurrentRemoval(t *testing.T) {
	s := simulate(t, SimOptions{InstanceType: catalogType(t, "trn2.48xlarge")})
	r := &Sysfs{Root: s.Root()}
	const rounds = 25
	var wg sync.WaitGroup
	errs := make(chan error, 2*rounds)
	wg.Go(func() {
		for range rounds {
			if err := s.RemoveDevice(9); err != nil {
				errs <- err
			}
			if err := s.RestoreDevice(9); err != nil {
				errs <- err
			}
		}
	})
	for range rounds {
		stats, err := r.ReadStats(context.Background())
		if err != nil {
			t.Errorf("ReadStats during removals: %v", err)
			continue
		}
		if n := len(stats.Devices); n != 15 && n != 16 {
			t.Errorf("ReadStats during removals: %d devices", n)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
