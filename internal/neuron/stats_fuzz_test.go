package neuron

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func FuzzParsePowerUtilization(f *testing.F) {
	for _, s := range []string{
		"POWER_STATUS_VALID,1712345678,40.00,80.00,62.50\n", "POWER_STATUS_NO_DATA,1712345678,0.00,0.00,0.00",
		"POWER_STATUS_INVALID,0,0,0,0", "POWER_STATUS_VALID,1,100.00,100,99.9", "POWER_STATUS_VALID,1,100.01,1,1",
		"", ",,,,", "POWER_STATUS_VALID,1,1,1", "POWER_STATUS_VALID,-1,1,1,1", "POWER_STATUS_VALID,1,1e1,1,1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got, err := parsePowerUtilization([]byte(in))
		if err != nil {
			if err.Error() == "" || got != (PowerUtilization{}) {
				t.Fatalf("parsePowerUtilization(%q) = %+v with error %q", in, got, err)
			}
			return
		}
		for _, v := range []float64{got.Min, got.Max, got.Avg} {
			if !(v >= 0 && v <= 100) {
				t.Fatalf("parsePowerUtilization(%q) = %+v: a value outside 0..100", in, got)
			}
		}
		fields := strings.Split(strings.TrimSpace(in), ",")
		if got.Valid != (fields[0] == powerStatusValid) {
			t.Fatalf("parsePowerUtilization(%q).Valid = %v for status %q", in, got.Valid, fields[0])
		}
		if sec, err := strconv.ParseInt(fields[1], 10, 64); err != nil || got.At.Unix() != sec || sec < 0 {
			t.Fatalf("parsePowerUtilization(%q).At = %v, want unix %s", in, got.At, fields[1])
		}
	})
}

func FuzzParseStatValue(f *testing.F) {
	for _, s := range []string{"0", "7\n", " 42 ", "18446744073709551615", "18446744073709551616", "-1", "", "0x10", "1_000", "1.5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got, err := parseStatValue([]byte(in), "count")
		want, perr := strconv.ParseUint(strings.TrimSpace(in), 10, 64)
		if err != nil {
			if got != 0 || !strings.Contains(err.Error(), "expected a decimal count") {
				t.Fatalf("parseStatValue(%q) = %d, %v", in, got, err)
			}
			if perr == nil && isDigits(strings.TrimSpace(in)) {
				t.Fatalf("parseStatValue(%q) rejected a decimal strconv accepts (%d)", in, want)
			}
			return
		}
		if perr != nil || got != want {
			t.Fatalf("parseStatValue(%q) = %d, strconv says %d, %v", in, got, want, perr)
		}
	})
}

// FuzzReadStatsTree writes fuzzed power, ECC and per-core files into a one-device tree and
// checks that ReadStats fails exactly when a parser rejects a file, naming it, and otherwise
// returns what the parsers say.
func FuzzReadStatsTree(f *testing.F) {
	f.Add("POWER_STATUS_VALID,1712345678,40.00,80.00,62.50\n", "3\n", "1024", "2500000")
	f.Add("POWER_STATUS_NO_DATA,0,0.00,0.00,0.00", "", "x", "1")
	f.Add("garbage", "1", "2", "3")
	f.Add("POWER_STATUS_VALID,1,1,1,1", "18446744073709551615", "18446744073709551615", "9223372036854775")
	root := f.TempDir()
	dir := filepath.Join(root, devicesDir, "neuron0")
	files := map[string]string{
		"power":  filepath.Join(dir, powerUtilizationFile),
		"ecc":    filepath.Join(dir, hardwareStatsDir, memECCRepairableDir, counterTotalFile),
		"memory": filepath.Join(dir, "neuron_core1", statsDeviceMemDir, "tensors", counterTotalFile),
		"time":   filepath.Join(dir, "neuron_core1", statsTimeInUseFile),
	}
	writeFile(f, filepath.Join(dir, coreCountFile), "2")
	for _, p := range files {
		writeFile(f, p, "0")
	}
	f.Fuzz(func(t *testing.T, power, ecc, memory, inUse string) {
		contents := map[string]string{"power": power, "ecc": ecc, "memory": memory, "time": inUse}
		for _, c := range contents {
			if len(c) > maxAttributeSize {
				return // no sysfs attribute is that large; readAttribute refuses it
			}
		}
		for k, p := range files {
			if err := os.WriteFile(p, []byte(contents[k]), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		stats, err := (&Sysfs{Root: root}).ReadStats(context.Background())
		wantPower, perr := parsePowerUtilization([]byte(power))
		wantECC, eerr := parseStatValue([]byte(ecc), "n")
		wantMemory, merr := parseStatValue([]byte(memory), "n")
		wantUs, terr := parseStatValue([]byte(inUse), "n")
		if terr == nil && wantUs > math.MaxInt64/1000 {
			terr = errors.New("too long")
		}
		if err != nil {
			if perr == nil && eerr == nil && merr == nil && terr == nil {
				t.Fatalf("ReadStats failed on input every parser accepts: %v", err)
			}
			if !strings.Contains(err.Error(), dir) {
				t.Fatalf("ReadStats error %q does not name the file", err)
			}
			return
		}
		if perr != nil || eerr != nil || merr != nil || terr != nil {
			t.Fatalf("ReadStats accepted input a parser rejects: %v, %v, %v, %v", perr, eerr, merr, terr)
		}
		d := stats.Devices[0]
		if d.Power != wantPower || d.MemECCRepairableUncorrected != wantECC || d.Cores[1].MemoryUsedBytes != wantMemory || d.Cores[1].TimeInUse != time.Duration(wantUs)*time.Microsecond {
			t.Fatalf("ReadStats = %+v, want power %+v, ECC %d, memory %d, %d µs", d, wantPower, wantECC, wantMemory, wantUs)
		}
	})
}
