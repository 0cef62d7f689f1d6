//go:build e2e

package dra

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"k8s.io/client-go/rest"

	"github.com/kube-neuron/kube-neuron/internal/lab"
	"github.com/kube-neuron/kube-neuron/test/bench/benchutil"
)

// result is one configuration's run.
type result struct {
	config
	pods      int
	wall      time.Duration      // scheduler process start to last binding
	drain     time.Duration      // first binding to last binding
	cpu       map[string]float64 // CPU seconds per process during the run
	metrics   map[string]float64 // the scheduler's /metrics after the run
	aligned   float64            // share of claims that got one aligned block of deviceIds
	nodesUsed int
}

// rate is the drain rate: pods bound per second between the first and the last binding.
func (r result) rate() float64 { return benchutil.Rate(r.pods, r.drain) }

// schedName is the scheduler under test in the CPU table.
const schedName = "kube-scheduler under test"

// schedulerMetrics scrapes the /metrics endpoint of the control plane's scheduler process
// called name, on the secure port its command line names, as the lab's admin (the scheduler
// authorizes /metrics through the apiserver).
func schedulerMetrics(ctx context.Context, cp *lab.ControlPlane, name string) (map[string]float64, error) {
	pid := benchutil.PIDOf(cp, name)
	if pid == 0 {
		return nil, fmt.Errorf("no process %s", name)
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return nil, err
	}
	port := ""
	for _, arg := range strings.Split(string(cmdline), "\x00") {
		if v, ok := strings.CutPrefix(arg, "--secure-port="); ok {
			port = v
		}
	}
	if port == "" {
		return nil, fmt.Errorf("%s (pid %d) has no --secure-port", name, pid)
	}
	tlsConfig, err := rest.TLSConfigFor(cp.RESTConfig())
	if err != nil {
		return nil, err
	}
	tlsConfig.RootCAs = nil
	tlsConfig.InsecureSkipVerify = true // the scheduler's self-signed serving certificate, on loopback
	tr := &http.Transport{TLSClientConfig: tlsConfig}
	defer tr.CloseIdleConnections()
	return benchutil.Scrape(ctx, &http.Client{Transport: tr, Timeout: 10 * time.Second}, "https://127.0.0.1:"+port+"/metrics")
}

// formatReport renders one round: the throughput table, the scheduler's own view and the CPU
// per process.
func formatReport(s settings, iter int, results []result) string {
	var sb strings.Builder
	rates := map[string]float64{}
	for _, r := range results {
		rates[r.name] = r.rate()
	}
	ratio := func(a float64, b string) string {
		if rates[b] == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f", a/rates[b])
	}
	fmt.Fprintf(&sb, "\n### DRA scheduling throughput (round %d): %d %s nodes with our ResourceSlices (16 devices each)\n\n", iter, s.nodes, instanceType)
	sb.WriteString("| configuration | devices per claim | constraint | slices | pods | seconds (first to last bind) | pods/s | ratio to the plain claim on the same slices | ratio to " + baseline + " | seconds (scheduler start to last bind) | claims on one aligned block | nodes used |\n")
	sb.WriteString("|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range results {
		toPlain := "-"
		if p := r.plain(); r.matchGroup > 0 && p.name != "" {
			toPlain = ratio(r.rate(), p.name)
		}
		fmt.Fprintf(&sb, "| %s | %d | %s | %s | %d | %.2f | %.1f | %s | %s | %.2f | %.0f %% | %d |\n",
			r.name, r.count, r.constraint(), r.slices(), r.pods, r.drain.Seconds(), r.rate(), toPlain, ratio(r.rate(), baseline), r.wall.Seconds(), r.aligned*100, r.nodesUsed)
	}

	// The scheduler's own view: its scheduling cycle (Filter over every node, the allocator in
	// DynamicResources) and the attempts.
	sb.WriteString("\nThe scheduler's /metrics (means; the plugin metric is sampled in 10 % of the cycles, one observation per node):\n\n")
	sb.WriteString("| configuration | attempts scheduled / unschedulable / error | scheduling attempt ms | Filter (all nodes) ms | DynamicResources Filter µs per node | DynamicResources PreFilter µs | PreBind ms | scheduler CPU ms/pod |\n")
	sb.WriteString("|---|---|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range results {
		m := r.metrics
		att, _ := benchutil.HistogramMean(m, "scheduler_scheduling_attempt_duration_seconds", `result="scheduled"`)
		filter, _ := benchutil.HistogramMean(m, "scheduler_framework_extension_point_duration_seconds", `extension_point="Filter"`)
		dra, _ := benchutil.HistogramMean(m, "scheduler_plugin_execution_duration_seconds", `plugin="DynamicResources"`, `extension_point="Filter"`)
		pre, _ := benchutil.HistogramMean(m, "scheduler_plugin_execution_duration_seconds", `plugin="DynamicResources"`, `extension_point="PreFilter"`)
		prebind, _ := benchutil.HistogramMean(m, "scheduler_framework_extension_point_duration_seconds", `extension_point="PreBind"`)
		fmt.Fprintf(&sb, "| %s | %.0f / %.0f / %.0f | %.2f | %.2f | %.1f | %.1f | %.2f | %.2f |\n", r.name,
			benchutil.SumSeries(m, "scheduler_schedule_attempts_total", `result="scheduled"`),
			benchutil.SumSeries(m, "scheduler_schedule_attempts_total", `result="unschedulable"`),
			benchutil.SumSeries(m, "scheduler_schedule_attempts_total", `result="error"`),
			benchutil.Millis(att), benchutil.Millis(filter), us(dra), us(pre), benchutil.Millis(prebind), r.cpu[schedName]*1000/float64(r.pods))
	}

	runs := make([]benchutil.CPURun, len(results))
	for i, r := range results {
		runs[i] = benchutil.CPURun{Name: r.name, CPU: r.cpu, Pods: r.pods}
	}
	sb.WriteString(benchutil.CPUTable("CPU per pod while draining (ms; the scheduler under test from its /healthz answering ok; 2 cores give 2000 ms per second):", runs))
	return sb.String()
}

// meanRate is the mean drain rate of a configuration's runs.
func meanRate(rs []result) float64 {
	if len(rs) == 0 {
		return 0
	}
	total := 0.0
	for _, r := range rs {
		total += r.rate()
	}
	return total / float64(len(rs))
}

// meanSchedCPU is the mean CPU of the scheduler under test per pod (ms) of a configuration's
// runs.
func meanSchedCPU(rs []result) float64 {
	total := 0.0
	for _, r := range rs {
		total += r.cpu[schedName] * 1000 / float64(r.pods)
	}
	return total / float64(max(len(rs), 1))
}

// formatSummary renders the means over the rounds: the drain rate (and its range), the
// scheduler's CPU per pod and the DynamicResources Filter time per node.
func formatSummary(s settings, all map[string][]result) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n### DRA scheduling throughput, mean of %d rounds: %d %s nodes\n\n", len(all[s.configs[0].name]), s.nodes, instanceType)
	sb.WriteString("| configuration | pods | pods/s (min-max) | ratio to the plain claim on the same slices | scheduler CPU ms/pod | ratio to the plain claim | DynamicResources Filter µs per node | claims on one aligned block |\n")
	sb.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|\n")
	cpu := meanSchedCPU
	for _, c := range s.configs {
		rs := all[c.name]
		lo, hi := rs[0].rate(), rs[0].rate()
		filter, aligned := 0.0, 0.0
		for _, r := range rs {
			lo, hi = min(lo, r.rate()), max(hi, r.rate())
			d, _ := benchutil.HistogramMean(r.metrics, "scheduler_plugin_execution_duration_seconds", `plugin="DynamicResources"`, `extension_point="Filter"`)
			filter += us(d) / float64(len(rs))
			aligned += r.aligned * 100 / float64(len(rs))
		}
		rateRatio, cpuRatio := "-", "-"
		if p := c.plain(); c.matchGroup > 0 && len(all[p.name]) > 0 {
			rateRatio = fmt.Sprintf("%.2f", meanRate(rs)/meanRate(all[p.name]))
			cpuRatio = fmt.Sprintf("%.2f", cpu(rs)/cpu(all[p.name]))
		}
		fmt.Fprintf(&sb, "| %s | %d | %.1f (%.1f-%.1f) | %s | %.1f | %s | %.0f | %.0f %% |\n",
			c.name, rs[0].pods, meanRate(rs), lo, hi, rateRatio, cpu(rs), cpuRatio, filter, aligned)
	}
	return sb.String()
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 }
