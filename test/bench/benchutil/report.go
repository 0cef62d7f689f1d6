//go:build e2e

package benchutil

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// Millis is d in milliseconds.
func Millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// CPURun is one column of CPUTable: a run's CPU seconds per process and its pods.
type CPURun struct {
	Name string
	CPU  map[string]float64
	Pods int
}

// CPUTable renders the CPU per pod of every process (ms), one column per run, and a total row,
// after the intro line. The table ends with a newline; rows appended right after it join it.
func CPUTable(intro string, runs []CPURun) string {
	procs := map[string]bool{}
	for _, r := range runs {
		for p := range r.CPU {
			procs[p] = true
		}
	}
	names := slices.Sorted(maps.Keys(procs))
	var sb strings.Builder
	sb.WriteString("\n" + intro + "\n\n| process |")
	for _, r := range runs {
		sb.WriteString(" " + r.Name + " |")
	}
	sb.WriteString("\n|---|" + strings.Repeat("---:|", len(runs)) + "\n")
	for _, p := range append(names, "total") {
		fmt.Fprintf(&sb, "| %s |", p)
		for _, r := range runs {
			v := r.CPU[p]
			if p == "total" {
				v = TotalCPU(r.CPU)
			}
			fmt.Fprintf(&sb, " %.2f |", v*1000/float64(r.Pods))
		}
		sb.WriteString("\n")
	}
	return sb.String()
}

// TotalCPU adds up the CPU seconds of every process.
func TotalCPU(cpu map[string]float64) float64 {
	total := 0.0
	for _, c := range cpu {
		total += c
	}
	return total
}

// CPUDelta is the CPU seconds each process of after used since before.
func CPUDelta(after, before map[string]float64) map[string]float64 {
	out := make(map[string]float64, len(after))
	for p, v := range after {
		out[p] = v - before[p]
	}
	return out
}

// WriteReport prints a report and appends it to the file out (BENCH_OUT) unless out is "".
func WriteReport(b *testing.B, out, report string) {
	fmt.Print(report)
	if out == "" {
		return
	}
	f, err := os.OpenFile(out, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err == nil {
		_, err = f.WriteString(report)
		err = errors.Join(err, f.Close())
	}
	if err != nil {
		b.Errorf("writing BENCH_OUT: %v", err)
	}
}
