package neuron

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Files of a counter directory besides counterTotalFile.
const (
	counterPresentFile = "present" // the last change (memory: the last allocation or free)
	counterPeakFile    = "peak"    // memory only: the highest total
	simMemoryCategory  = "tensors" // the category SetCoreMemory accounts to
)

// formatPower is a stats/power/utilization line with min, max and average at percent.
func formatPower(at time.Time, percent float64) string {
	return fmt.Sprintf("%s,%d,%.2f,%.2f,%.2f\n", powerStatusValid, at.Unix(), percent, percent, percent)
}

// treeWriter writes the files of a tree no reader sees yet, making each directory once.
type treeWriter struct {
	root string
	made map[string]bool
}

func newTreeWriter(root string) *treeWriter { return &treeWriter{root: root, made: map[string]bool{}} }

func (w *treeWriter) write(rel string, data []byte) error {
	path := filepath.Join(w.root, rel)
	if dir := filepath.Dir(path); !w.made[dir] {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		w.made[dir] = true
	}
	return os.WriteFile(path, data, 0o644)
}

// writeCoreStats writes, with SimOptions.CoreStats, the zero usage counters of every physical
// core of a device: per memory category total, present and peak; per execution status total
// and present; nc_time_in_use total and present.
func (s *Simulator) writeCoreStats(w *treeWriter) error {
	zero := []byte("0\n")
	for k := range s.t.PhysicalCoresPerDevice {
		core := statsCoreDirPrefix + strconv.Itoa(k)
		var files []string
		for _, c := range MemoryCategories() {
			for _, f := range []string{counterTotalFile, counterPresentFile, counterPeakFile} {
				files = append(files, filepath.Join(statsDeviceMemDir, c, f))
			}
		}
		for _, st := range ExecutionStatuses() {
			for _, f := range []string{counterTotalFile, counterPresentFile} {
				files = append(files, filepath.Join(statsStatusDir, st, f))
			}
		}
		files = append(files, filepath.Join(statsTimeInUseDir, counterTotalFile), filepath.Join(statsTimeInUseDir, counterPresentFile))
		for _, f := range files {
			if err := w.write(filepath.Join(core, f), zero); err != nil {
				return err
			}
		}
	}
	return nil
}

// SetPower sets a device's stats/power/utilization to a valid sample taken now with minimum,
// maximum and average percent (0 to 100).
func (s *Simulator) SetPower(device int, percent float64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkDevice(device); err != nil {
		return fmt.Errorf("setting the power: %w", err)
	}
	if math.IsNaN(percent) || percent < 0 || percent > 100 {
		return fmt.Errorf("setting the power of device %d: %v %% is outside 0 to 100", device, percent)
	}
	if err := writeFileAtomic(filepath.Join(s.deviceDir(device), powerUtilizationFile), []byte(formatPower(s.now(), percent))); err != nil {
		return fmt.Errorf("setting the power: %w", s.liveErr(device, err))
	}
	return nil
}

// SetCoreMemory sets the device memory a physical core has in use (accounted to the tensors
// category; the other categories keep their values): total becomes bytes, present the size of
// the change and peak the highest total seen.
func (s *Simulator) SetCoreMemory(device, core int, bytes uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkCore(device, core); err != nil {
		return fmt.Errorf("setting core memory: %w", err)
	}
	dir := filepath.Join(s.coreDir(device, core), statsDeviceMemDir, simMemoryCategory)
	cur, err := readStatValue(filepath.Join(dir, counterTotalFile), "number of bytes")
	if err != nil {
		return fmt.Errorf("setting the memory of device %d core %d: %w", device, core, err)
	}
	if cur == bytes {
		return nil
	}
	peak, err := readStatValue(filepath.Join(dir, counterPeakFile), "number of bytes")
	if err != nil {
		return fmt.Errorf("setting the memory of device %d core %d: %w", device, core, err)
	}
	change := bytes - cur
	if cur > bytes {
		change = cur - bytes
	}
	writes := []struct {
		file string
		v    uint64
	}{{counterPresentFile, change}, {counterTotalFile, bytes}}
	if bytes > peak {
		writes = append(writes, struct {
			file string
			v    uint64
		}{counterPeakFile, bytes})
	}
	for _, f := range writes {
		rel := filepath.Join(statsCoreDirPrefix+strconv.Itoa(core), statsDeviceMemDir, simMemoryCategory, f.file)
		if err := s.writeCoreFile(device, rel, f.v); err != nil {
			return fmt.Errorf("setting the memory of core %d: %w", core, s.liveErr(device, err))
		}
	}
	return nil
}

// AddCoreTime adds d (whole microseconds) to a physical core's nc_time_in_use total.
func (s *Simulator) AddCoreTime(device, core int, d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("adding core time on device %d core %d: %v is negative: nc_time_in_use only rises", device, core, d)
	}
	return s.addCoreCounter(device, core, statsTimeInUseFile, uint64(d/time.Microsecond), "number of microseconds")
}

// AddExecutions adds n to a physical core's stats/status/<status> total; status is one of
// ExecutionStatuses.
func (s *Simulator) AddExecutions(device, core int, status string, n uint64) error {
	if !slices.Contains(ExecutionStatuses(), status) {
		return fmt.Errorf("adding executions on device %d core %d: unknown status %q: use one of %v", device, core, status, ExecutionStatuses())
	}
	return s.addCoreCounter(device, core, filepath.Join(statsStatusDir, status, counterTotalFile), n, "execution count")
}

// writeCoreFile replaces the counter file rel (relative to the device directory) with v; the
// first write of a counter makes its directories, below the device directory only.
func (s *Simulator) writeCoreFile(device int, rel string, v uint64) error {
	path := filepath.Join(s.deviceDir(device), rel)
	data := []byte(strconv.FormatUint(v, 10) + "\n")
	err := writeFileAtomic(path, data)
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := s.mkdirBelowDevice(device, filepath.Dir(rel)); err != nil {
		return err
	}
	return writeFileAtomic(path, data)
}

// mkdirBelowDevice makes the directories of rel under a device's directory, one level at a time
// from the device directory, which must exist: a device removed meanwhile is not brought back.
func (s *Simulator) mkdirBelowDevice(device int, rel string) error {
	dir := s.deviceDir(device)
	for _, part := range strings.Split(filepath.Clean(rel), string(filepath.Separator)) {
		dir = filepath.Join(dir, part)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
	}
	return nil
}

// addCoreCounter raises the counter file rel of a physical core by n, reading its value from
// the tree first (so a device reset by another Simulator restarts from 0).
func (s *Simulator) addCoreCounter(device, core int, rel string, n uint64, what string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkCore(device, core); err != nil {
		return fmt.Errorf("raising a core counter: %w", err)
	}
	if n == 0 {
		return nil
	}
	coreRel := filepath.Join(statsCoreDirPrefix+strconv.Itoa(core), rel)
	path := filepath.Join(s.deviceDir(device), coreRel)
	cur, err := readStatValue(path, what)
	if err != nil {
		return fmt.Errorf("raising a counter of device %d core %d: %w", device, core, err)
	}
	if n > math.MaxUint64-cur {
		return fmt.Errorf("raising %s: it would overflow (now %d, adding %d)", path, cur, n)
	}
	if err := s.writeCoreFile(device, coreRel, cur+n); err != nil {
		return fmt.Errorf("raising a counter of core %d: %w", core, s.liveErr(device, err))
	}
	return nil
}

// checkCore checks a device and physical core index.
func (s *Simulator) checkCore(device, core int) error {
	if err := s.checkDevice(device); err != nil {
		return err
	}
	if core < 0 || core >= s.t.PhysicalCoresPerDevice {
		return fmt.Errorf("core %d does not exist: %s devices have physical cores 0 to %d", core, s.t.Name, s.t.PhysicalCoresPerDevice-1)
	}
	return nil
}

func (s *Simulator) coreDir(device, core int) string {
	return filepath.Join(s.deviceDir(device), statsCoreDirPrefix+strconv.Itoa(core))
}

// ErrDeviceRemoved is returned (wrapped) by the Simulator's methods that change a device that is
// removed (by this Simulator or another one on the same tree).
var ErrDeviceRemoved = errors.New("the device is removed: restore it first")

// liveErr turns a failed write into a device's files into an error wrapping ErrDeviceRemoved
// when the device is removed, so callers that skip removed devices can tell.
func (s *Simulator) liveErr(device int, err error) error {
	if removed, _ := s.isRemoved(device); removed {
		return fmt.Errorf("device %d: %w", device, ErrDeviceRemoved)
	}
	return fmt.Errorf("device %d: %w", device, err)
}
