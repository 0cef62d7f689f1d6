package neuron

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kube-neuron/kube-neuron/internal/topology"
)

func readStats(t *testing.T, root string) *Stats {
	t.Helper()
	st, err := (&Sysfs{Root: root}).ReadStats(context.Background())
	if err != nil {
		t.Fatalf("ReadStats: %v", err)
	}
	return st
}

// TestSimulateStatsZero reads a fresh tree of every family through ReadStats: every device
// present, power valid at 0, every counter 0; with CoreStats (slow, so on small types) every
// status is there too.
func TestSimulateStatsZero(t *testing.T) {
	for _, it := range topology.DefaultCatalog().Types() {
		for _, coreStats := range []bool{false, true} {
			if coreStats && it.Devices > 1 {
				continue
			}
			name := it.Name
			before := time.Now().Truncate(time.Second)
			s := simulate(t, SimOptions{InstanceType: it, CoreStats: coreStats})
			st := readStats(t, s.Root())
			if len(st.Devices) != it.Devices {
				t.Fatalf("%s: %d devices, want %d", name, len(st.Devices), it.Devices)
			}
			for i, d := range st.Devices {
				if d.Index != i || !d.Power.Valid || d.Power.Avg != 0 || d.Power.Max != 0 || d.Power.At.Before(before) {
					t.Errorf("%s device %d: index %d power %+v, want valid 0 at or after %v", name, i, d.Index, d.Power, before)
				}
				if d.MemECCUncorrected+d.MemECCRepairableUncorrected+d.SRAMECCUncorrected != 0 {
					t.Errorf("%s device %d: ECC counters not 0: %+v", name, i, d)
				}
				if len(d.Cores) != it.PhysicalCoresPerDevice {
					t.Fatalf("%s device %d: %d cores, want %d", name, i, len(d.Cores), it.PhysicalCoresPerDevice)
				}
				for _, c := range d.Cores {
					if c.MemoryUsedBytes != 0 || c.TimeInUse != 0 {
						t.Errorf("%s device %d core %d: %+v, want zeros", name, i, c.Index, c)
					}
					wantStatuses := 0
					if coreStats {
						wantStatuses = len(ExecutionStatuses())
					}
					if len(c.Executions) != wantStatuses {
						t.Errorf("%s device %d core %d: %d statuses, want %d", name, i, c.Index, len(c.Executions), wantStatuses)
					}
					for st, n := range c.Executions {
						if n != 0 {
							t.Errorf("%s device %d core %d: %s = %d, want 0", name, i, c.Index, st, n)
						}
					}
				}
			}
		}
	}
}

// TestSimulateStatsRoundTrip moves every counter and reads it back through ReadStats.
func TestSimulateStatsRoundTrip(t *testing.T) {
	s := simulate(t, SimOptions{InstanceType: catalogType(t, "trn2.48xlarge")})
	at := time.Unix(1_800_000_000, 0)
	s.now = func() time.Time { return at }
	const gib = 1 << 30
	steps := []error{
		s.SetPower(3, 42.5),
		s.SetCoreMemory(3, 1, 3*gib),
		s.SetCoreMemory(3, 1, 2*gib), // total 2 GiB, peak stays 3 GiB
		s.AddCoreTime(3, 1, 1500*time.Millisecond),
		s.AddCoreTime(3, 1, 500*time.Millisecond+999*time.Nanosecond), // sub-microsecond part dropped
		s.AddExecutions(3, 1, "success", 7),
		s.AddExecutions(3, 1, "success", 3),
		s.AddExecutions(3, 7, "hw_error", 2),
		s.InjectError(3, MemECCRepairable, 4),
		s.InjectError(3, MemECC, 1),
	}
	for i, err := range steps {
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	d := readStats(t, s.Root()).Devices[3]
	if !d.Power.Valid || d.Power.Avg != 42.5 || d.Power.Min != 42.5 || d.Power.Max != 42.5 || !d.Power.At.Equal(at) {
		t.Errorf("power = %+v, want valid 42.5 at %v", d.Power, at)
	}
	if d.MemECCRepairableUncorrected != 4 || d.MemECCUncorrected != 1 || d.SRAMECCUncorrected != 0 {
		t.Errorf("ECC = %d repairable, %d mem, %d sram, want 4, 1, 0", d.MemECCRepairableUncorrected, d.MemECCUncorrected, d.SRAMECCUncorrected)
	}
	c := d.Cores[1]
	if c.MemoryUsedBytes != 2*gib || c.TimeInUse != 2*time.Second || c.Executions["success"] != 10 || len(c.Executions) != 1 {
		t.Errorf("core 1 = %+v, want 2 GiB, 2s, success 10", c)
	}
	if got := d.Cores[7].Executions; len(got) != 1 || got["hw_error"] != 2 {
		t.Errorf("core 7 executions = %v, want hw_error 2", got)
	}
	peak := readFile(t, filepath.Join(s.coreDir(3, 1), statsDeviceMemDir, simMemoryCategory, counterPeakFile))
	present := readFile(t, filepath.Join(s.coreDir(3, 1), statsDeviceMemDir, simMemoryCategory, counterPresentFile))
	if peak != "3221225472\n" || present != "1073741824\n" {
		t.Errorf("tensors peak %q present %q, want 3 GiB and the 1 GiB free", peak, present)
	}
	if c := readStats(t, s.Root()).Devices[2].Cores[1]; c.MemoryUsedBytes != 0 || c.TimeInUse != 0 {
		t.Errorf("device 2 core 1 moved: %+v", c)
	}
	// The repairable counter does not count as an uncorrectable error.
	if got := discover(t, s.Root()).Devices[3].ErrorCount(); got != 1 {
		t.Errorf("ErrorCount = %d, want 1 (the repairable events do not count)", got)
	}
	if err := s.SetCoreMemory(3, 1, 0); err != nil {
		t.Fatal(err)
	}
	if got := readStats(t, s.Root()).Devices[3].Cores[1].MemoryUsedBytes; got != 0 {
		t.Errorf("after freeing: %d bytes, want 0", got)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestSimulateStatsErrors(t *testing.T) {
	s := simulate(t, SimOptions{InstanceType: catalogType(t, "inf2.xlarge")}) // 1 device, 2 cores
	for name, c := range map[string]struct {
		err  error
		want string
	}{
		"power above 100":  {s.SetPower(0, 100.5), "outside 0 to 100"},
		"power negative":   {s.SetPower(0, -1), "outside 0 to 100"},
		"device":           {s.SetPower(1, 1), "devices 0 to 0"},
		"core":             {s.SetCoreMemory(0, 2, 1), "physical cores 0 to 1"},
		"negative time":    {s.AddCoreTime(0, 0, -time.Second), "negative"},
		"unknown status":   {s.AddExecutions(0, 0, "great", 1), `unknown status "great"`},
		"negative core":    {s.AddExecutions(0, -1, "success", 1), "core -1 does not exist"},
		"unknown counter":  {s.InjectError(0, Counter(9), 1), "unknown counter"},
		"time of core out": {s.AddCoreTime(0, 9, time.Second), "core 9 does not exist"},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", name, c.err, c.want)
		}
	}
}

// TestSimulateStatsRemovedDevice checks that no change brings back part of a removed device,
// and that a restored device comes back with fresh usage counters.
func TestSimulateStatsRemovedDevice(t *testing.T) {
	s := simulate(t, SimOptions{InstanceType: catalogType(t, "trn1.32xlarge")})
	if err := s.AddCoreTime(2, 0, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveDevice(2); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"power":      s.SetPower(2, 10),
		"memory":     s.SetCoreMemory(2, 0, 1),
		"time":       s.AddCoreTime(2, 0, time.Second),
		"executions": s.AddExecutions(2, 1, "timeout", 1),
		"error":      s.InjectError(2, MemECCRepairable, 1),
	} {
		if !errors.Is(err, ErrDeviceRemoved) {
			t.Errorf("%s on a removed device: error %v, want ErrDeviceRemoved", name, err)
		}
	}
	if _, err := os.Stat(s.deviceDir(2)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the removed device's directory is back: %v", err)
	}
	if err := s.RestoreDevice(2); err != nil {
		t.Fatal(err)
	}
	d := readStats(t, s.Root()).Devices[2]
	if !d.Power.Valid || d.Cores[0].TimeInUse != 0 {
		t.Errorf("restored device: %+v, want power valid and time 0", d)
	}
}

// TestOpenSimulator acts on a tree through a second Simulator, as neuron-lab fault does on a
// running lab's tree, and checks that both see each other's changes.
func TestOpenSimulator(t *testing.T) {
	lab := simulate(t, SimOptions{InstanceType: catalogType(t, "trn2.48xlarge"), LNC: 2})
	other, err := OpenSimulator(lab.Root())
	if err != nil {
		t.Fatal(err)
	}
	if other.InstanceType().Name != "trn2.48xlarge" || other.LNC() != 2 || lab.LNC() != 2 {
		t.Errorf("opened type %q LNC %d (the writer's %d), want trn2.48xlarge at LNC 2", other.InstanceType().Name, other.LNC(), lab.LNC())
	}
	if err := lab.InjectError(4, MemECC, 2); err != nil {
		t.Fatal(err)
	}
	if err := other.InjectError(4, MemECC, 1); err != nil { // reads the 2 first
		t.Fatal(err)
	}
	if got := discover(t, lab.Root()).Devices[4].MemECCUncorrected; got != 3 {
		t.Errorf("mem ECC = %d, want 3", got)
	}
	if err := lab.AddCoreTime(4, 0, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := other.RemoveDevice(4); err != nil {
		t.Fatal(err)
	}
	if err := lab.AddCoreTime(4, 0, time.Second); !errors.Is(err, ErrDeviceRemoved) {
		t.Errorf("the lab's Simulator wrote into a device the other removed: %v", err)
	}
	if err := lab.RemoveDevice(4); err == nil || !strings.Contains(err.Error(), "already removed") {
		t.Errorf("removing again from the lab's Simulator: %v", err)
	}
	// A reset: counters back to 0, the device present, usage fresh.
	if err := other.ClearErrors(4); err != nil {
		t.Fatal(err)
	}
	if err := other.RestoreDevice(4); err != nil {
		t.Fatal(err)
	}
	n := discover(t, lab.Root())
	if len(n.Devices) != 16 || n.Devices[4].ErrorCount() != 0 || n.LNC != 2 {
		t.Errorf("after clear and restore: %d devices, ErrorCount %d, LNC %d", len(n.Devices), n.Devices[4].ErrorCount(), n.LNC)
	}
	if got := readStats(t, lab.Root()).Devices[4].Cores[0].TimeInUse; got != 0 {
		t.Errorf("time in use after the reset = %v, want 0", got)
	}

	for name, root := range map[string]string{
		"empty dir": t.TempDir(),
		"missing":   filepath.Join(t.TempDir(), "nothing"),
	} {
		if _, err := OpenSimulator(root); err == nil || !strings.Contains(err.Error(), "holds no simulated Neuron tree") {
			t.Errorf("%s: error %v, want one saying the root holds no simulated tree", name, err)
		}
	}
	bad := t.TempDir()
	writeFile(t, filepath.Join(bad, simMarkerFile), "{not json")
	if _, err := OpenSimulator(bad); err == nil {
		t.Error("a malformed marker opened")
	}
}
