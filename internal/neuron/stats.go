package neuron

import (
	"context"
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

// Paths of the driver's usage counters, relative to a device directory (neuronN) or, for the
// per-core ones, to its neuron_core<K> directory; see the package documentation.
const (
	powerUtilizationFile    = "stats/power/utilization"
	memECCRepairableDir     = "mem_ecc_repairable_uncorrected" // under stats/hardware, not a health counter
	statsCoreDirPrefix      = "neuron_core"
	statsDeviceMemDir       = "stats/memory_usage/device_mem"
	statsStatusDir          = "stats/status"
	statsTimeInUseDir       = "stats/other_info/nc_time_in_use"
	statsTimeInUseFile      = statsTimeInUseDir + "/" + counterTotalFile
	powerStatusValid        = "POWER_STATUS_VALID"
	powerStatusNoData       = "POWER_STATUS_NO_DATA"
	powerStatusInvalid      = "POWER_STATUS_INVALID"
	maxStatsDirEntryNameLen = 64 // longer directory names under device_mem or status are not the driver's
)

// Stats is what the Neuron driver's usage counters say about the devices present now.
type Stats struct {
	Devices []DeviceStats // present devices, ascending Index
}

// DeviceStats is one device's counters.
type DeviceStats struct {
	Index int // N of neuronN
	Power PowerUtilization

	// stats/hardware/<name>/total: ECC events since the driver was loaded (absent = 0).
	MemECCUncorrected, MemECCRepairableUncorrected, SRAMECCUncorrected uint64

	Cores []CoreStats // physical cores 0..core_count-1, ascending Index
}

// PowerUtilization is stats/power/utilization: the device's power over the driver's last
// one-minute window, in percent of its maximum (0 to 100). Valid is false when the file is
// absent or the driver's status is not POWER_STATUS_VALID (too few samples, or invalid); At and
// the values are then what the file says (zero when absent).
type PowerUtilization struct {
	Valid         bool
	At            time.Time // end of the window (the driver's unix seconds)
	Min, Max, Avg float64   // percent
}

// CoreStats is one physical NeuronCore's counters (neuron_core<K>). Absent files read as zero.
type CoreStats struct {
	Index           int               // physical core within the device
	MemoryUsedBytes uint64            // sum of stats/memory_usage/device_mem/*/total (bytes in use now)
	TimeInUse       time.Duration     // stats/other_info/nc_time_in_use/total (only rises)
	Executions      map[string]uint64 // stats/status/<status>/total, only the statuses present
}

// MemoryCategories returns the device_mem categories the driver documents (ReadStats sums
// every category directory it finds, these and any a newer driver adds).
func MemoryCategories() []string {
	return []string{"collectives", "constants", "dma_rings", "driver_memory", "model_code", "model_shared_scratchpad",
		"nonshared_scratchpad", "notifications", "runtime_memory", "tensors", "uncategorized"}
}

// ExecutionStatuses returns the stats/status counters the driver documents (ReadStats reports
// every status directory it finds, these and any a newer driver adds).
func ExecutionStatuses() []string {
	return []string{"success", "failure", "timeout", "hw_error", "exec_bad_input", "infer_failed_to_queue",
		"infer_completed_with_error", "infer_completed_with_num_error", "resource_error", "resource_nc_error",
		"generic_error", "invalid_error", "oob_error", "unsupported_neff_version"}
}

// ReadStats reads the usage counters of every device present now. A device that disappears
// while it is read is left out; a file that exists but does not hold what the driver writes
// is an error naming it.
func (s *Sysfs) ReadStats(ctx context.Context) (*Stats, error) {
	dir := s.path(devicesDir)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return &Stats{Devices: []DeviceStats{}}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing Neuron devices: %w", err)
	}
	var indexes []int
	for _, e := range entries {
		if i, ok := parseDeviceDirName(e.Name()); ok {
			indexes = append(indexes, i)
		}
	}
	slices.Sort(indexes)
	stats := &Stats{Devices: []DeviceStats{}}
	for _, i := range indexes {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("reading Neuron device stats: %w", err)
		}
		d, ok, err := s.readDeviceStats(i)
		if err != nil {
			return nil, err
		}
		if ok {
			stats.Devices = append(stats.Devices, d)
		}
	}
	return stats, nil
}

// readDeviceStats reads neuron<i>; ok is false when the device is not (or no longer) there.
func (s *Sysfs) readDeviceStats(i int) (d DeviceStats, ok bool, err error) {
	dir := s.path(devicesDir, fmt.Sprintf("neuron%d", i))
	if info, err := os.Stat(dir); err != nil || !info.IsDir() {
		return DeviceStats{}, false, nil
	}
	path := filepath.Join(dir, coreCountFile)
	data, ok, err := readAttribute(path)
	if err != nil {
		return DeviceStats{}, false, err
	}
	if !ok {
		if statsDeviceGone(dir) {
			return DeviceStats{}, false, nil
		}
		return DeviceStats{}, false, fmt.Errorf("%s does not exist, but the Neuron driver creates it for every device: the device is being removed or --sysfs-root points at the wrong place", path)
	}
	cores, err := parseCoreCount(data)
	if err != nil {
		return DeviceStats{}, false, fmt.Errorf("%s: %w", path, err)
	}

	d = DeviceStats{Index: i, Cores: make([]CoreStats, cores)}
	path = filepath.Join(dir, powerUtilizationFile)
	if data, ok, err = readAttribute(path); err != nil {
		return DeviceStats{}, false, err
	}
	if ok {
		if d.Power, err = parsePowerUtilization(data); err != nil {
			return DeviceStats{}, false, fmt.Errorf("%s: %w", path, err)
		}
	}
	for _, c := range []struct {
		name string
		dst  *uint64
	}{
		{MemECC.String(), &d.MemECCUncorrected},
		{memECCRepairableDir, &d.MemECCRepairableUncorrected},
		{SRAMECC.String(), &d.SRAMECCUncorrected},
	} {
		if *c.dst, err = readStatValue(filepath.Join(dir, hardwareStatsDir, c.name, counterTotalFile), "event count"); err != nil {
			return DeviceStats{}, false, err
		}
	}
	for k := range cores {
		if d.Cores[k], err = readCoreStats(filepath.Join(dir, fmt.Sprintf("%s%d", statsCoreDirPrefix, k)), k); err != nil {
			return DeviceStats{}, false, err
		}
	}
	if statsDeviceGone(dir) { // removed while it was read: what was read may be zeros of absent files
		return DeviceStats{}, false, nil
	}
	return d, true, nil
}

// statsDeviceGone reports whether a device directory no longer exists.
func statsDeviceGone(dir string) bool {
	_, err := os.Stat(dir)
	return errors.Is(err, fs.ErrNotExist)
}

// readCoreStats reads one neuron_core<K> directory; an absent directory reads as zeros.
func readCoreStats(dir string, k int) (CoreStats, error) {
	c := CoreStats{Index: k, Executions: map[string]uint64{}}
	memory, err := readStatDir(filepath.Join(dir, statsDeviceMemDir), "number of bytes")
	if err != nil {
		return CoreStats{}, err
	}
	for _, v := range memory {
		c.MemoryUsedBytes = statsAddSaturating(c.MemoryUsedBytes, v)
	}
	if c.Executions, err = readStatDir(filepath.Join(dir, statsStatusDir), "execution count"); err != nil {
		return CoreStats{}, err
	}
	path := filepath.Join(dir, statsTimeInUseFile)
	us, err := readStatValue(path, "number of microseconds")
	if err != nil {
		return CoreStats{}, err
	}
	if us > math.MaxInt64/uint64(time.Microsecond) {
		return CoreStats{}, fmt.Errorf("%s: %d microseconds is more than the %d a core can have been in use since the driver was loaded", path, us, math.MaxInt64/uint64(time.Microsecond))
	}
	c.TimeInUse = time.Duration(us) * time.Microsecond
	return c, nil
}

// readStatDir reads <dir>/<name>/total for every subdirectory name that has one (the driver's
// category or status names: lower case letters, digits and underscores; other entries are not
// the driver's and are skipped). An absent dir gives an empty map.
func readStatDir(dir, what string) (map[string]uint64, error) {
	out := map[string]uint64{}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading Neuron sysfs: %w", err)
	}
	for _, e := range entries {
		if !e.IsDir() || !isStatName(e.Name()) {
			continue
		}
		path := filepath.Join(dir, e.Name(), counterTotalFile)
		data, ok, err := readAttribute(path)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		if out[e.Name()], err = parseStatValue(data, what); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	return out, nil
}

// readStatValue reads one counter's total; absent reads as 0.
func readStatValue(path, what string) (uint64, error) {
	data, ok, err := readAttribute(path)
	if err != nil || !ok {
		return 0, err
	}
	v, err := parseStatValue(data, what)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

// parseStatValue parses a counter file (total, present, peak): a decimal uint64 with
// surrounding whitespace. what names the unit for the error message.
func parseStatValue(data []byte, what string) (uint64, error) {
	s := strings.TrimSpace(string(data))
	if isDigits(s) {
		if n, err := strconv.ParseUint(s, 10, 64); err == nil {
			return n, nil
		}
	}
	return 0, fmt.Errorf("expected a decimal %s (0 to %d), got %s", what, uint64(math.MaxUint64), quote(s))
}

// parsePowerUtilization parses stats/power/utilization: one line
// <status>,<unix-seconds>,<min>,<max>,<avg> with status POWER_STATUS_VALID,
// POWER_STATUS_NO_DATA or POWER_STATUS_INVALID and percentages 0 to 100 with at most two
// decimals (the driver prints basis points), surrounding whitespace ignored.
func parsePowerUtilization(data []byte) (PowerUtilization, error) {
	s := strings.TrimSpace(string(data))
	fields := strings.Split(s, ",")
	if len(fields) != 5 {
		return PowerUtilization{}, fmt.Errorf("expected <status>,<unix-seconds>,<min>,<max>,<avg> such as \"POWER_STATUS_VALID,1712345678,40.00,80.00,62.50\", got %s (%d fields)", quote(s), len(fields))
	}
	var p PowerUtilization
	switch fields[0] {
	case powerStatusValid:
		p.Valid = true
	case powerStatusNoData, powerStatusInvalid:
	default:
		return PowerUtilization{}, fmt.Errorf("expected status %s, %s or %s, got %s", powerStatusValid, powerStatusNoData, powerStatusInvalid, quote(fields[0]))
	}
	if !isDigits(fields[1]) || len(fields[1]) > 12 {
		return PowerUtilization{}, fmt.Errorf("expected the time as decimal unix seconds, got %s", quote(fields[1]))
	}
	sec, _ := strconv.ParseInt(fields[1], 10, 64)
	p.At = time.Unix(sec, 0)
	for i, dst := range []*float64{&p.Min, &p.Max, &p.Avg} {
		v, ok := parsePowerPercent(fields[2+i])
		if !ok {
			return PowerUtilization{}, fmt.Errorf("expected the %s power as a percentage from 0.00 to 100.00, got %s", [...]string{"minimum", "maximum", "average"}[i], quote(fields[2+i]))
		}
		*dst = v
	}
	return p, nil
}

// parsePowerPercent parses 0 to 100 with up to three integer digits and at most two decimals.
func parsePowerPercent(s string) (float64, bool) {
	whole, frac, hasFrac := strings.Cut(s, ".")
	if !isDigits(whole) || len(whole) > 3 || hasFrac && (!isDigits(frac) || len(frac) > 2) {
		return 0, false
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v > 100 {
		return 0, false
	}
	return v, true
}

func isStatName(s string) bool {
	if s == "" || len(s) > maxStatsDirEntryNameLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

func statsAddSaturating(a, b uint64) uint64 {
	if a > math.MaxUint64-b {
		return math.MaxUint64
	}
	return a + b
}
