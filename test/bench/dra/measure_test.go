//go:build e2e

package dra

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

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
func (r result) rate() float64 {
	if r.drain <= 0 {
		return 0
	}
	return float64(r.pods-1) / r.drain.Seconds()
}

// bindWatch timestamps the first time each pod of a run is seen bound.
type bindWatch struct {
	want  int
	mu    sync.Mutex
	first time.Time
	last  time.Time
	seen  map[string]bool
	done  chan struct{}
}

func watchBindings(ctx context.Context, client kubernetes.Interface, sched string, want int) (*bindWatch, error) {
	w := &bindWatch{want: want, seen: map[string]bool{}, done: make(chan struct{})}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(benchNamespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = runLabel + "=" + sched }))
	inf := factory.Core().V1().Pods().Informer()
	observe := func(obj any) {
		pod, ok := obj.(*corev1.Pod)
		if !ok || pod.Spec.NodeName == "" {
			return
		}
		now := time.Now()
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.seen[pod.Name] {
			return
		}
		w.seen[pod.Name] = true
		if w.first.IsZero() {
			w.first = now
		}
		w.last = now
		if len(w.seen) == w.want {
			close(w.done)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    observe,
		UpdateFunc: func(_, obj any) { observe(obj) },
	}); err != nil {
		return nil, err
	}
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return nil, fmt.Errorf("the %v cache of the binding watch did not sync", typ)
		}
	}
	if n := len(inf.GetStore().List()); n != want {
		return nil, fmt.Errorf("the backlog has %d pods, want %d", n, want)
	}
	return w, nil
}

// wait returns the first and last binding time once every pod is bound; it fails when no pod
// was bound for stallTimeout, with the tail of the scheduler's log.
func (w *bindWatch) wait(ctx context.Context, schedLog string) (first, last time.Time, err error) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	progress, count := time.Now(), 0
	for {
		select {
		case <-w.done:
			w.mu.Lock()
			defer w.mu.Unlock()
			return w.first, w.last, nil
		case <-ctx.Done():
			return first, last, ctx.Err()
		case <-tick.C:
			w.mu.Lock()
			n := len(w.seen)
			w.mu.Unlock()
			if n != count {
				progress, count = time.Now(), n
			} else if time.Since(progress) > stallTimeout {
				return first, last, fmt.Errorf("only %d of %d pods bound, none for %v; scheduler log %s:\n%s",
					n, w.want, stallTimeout, schedLog, lab.LogTail(schedLog, 30))
			}
		}
	}
}

// schedName is the scheduler under test in the CPU table.
const schedName = "kube-scheduler under test"

// cpuSeconds returns the CPU time (user+system) of the control plane's processes by name and of
// this test process, from /proc.
func cpuSeconds(cp *lab.ControlPlane) map[string]float64 {
	out := map[string]float64{}
	for _, p := range cp.Processes() {
		if s, err := benchutil.ProcCPU(p.PID); err == nil {
			out[p.Name] = s
		}
	}
	if s, err := benchutil.ProcCPU(os.Getpid()); err == nil {
		out["test process"] = s
	}
	return out
}

// schedulerMetrics scrapes the /metrics endpoint of the control plane's scheduler process
// called name, on the secure port its command line names, as the lab's admin (the scheduler
// authorizes /metrics through the apiserver).
func schedulerMetrics(ctx context.Context, cp *lab.ControlPlane, name string) (map[string]float64, error) {
	pid := pidOf(cp, name)
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
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://127.0.0.1:"+port+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return nil, fmt.Errorf("GET /metrics of %s: %s %q", name, resp.Status, body)
	}
	return benchutil.ParseMetrics(resp.Body)
}

// sumSeries adds up the series of metric name (with suffix, e.g. "_sum") whose labels include
// every `k="v"` of want (the scheduler's label values have no commas).
func sumSeries(m map[string]float64, name string, want ...string) float64 {
	total := 0.0
	for k, v := range m {
		base, labels, _ := strings.Cut(k, "{")
		if base != name {
			continue
		}
		have := strings.Split(strings.TrimSuffix(labels, "}"), ",")
		if slices.ContainsFunc(want, func(w string) bool { return !slices.Contains(have, w) }) {
			continue
		}
		total += v
	}
	return total
}

// histMean is the mean of a histogram's observations over the series matching want, and their
// number.
func histMean(m map[string]float64, name string, want ...string) (time.Duration, float64) {
	n := sumSeries(m, name+"_count", want...)
	if n == 0 {
		return 0, 0
	}
	return time.Duration(sumSeries(m, name+"_sum", want...) / n * float64(time.Second)), n
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
		att, _ := histMean(m, "scheduler_scheduling_attempt_duration_seconds", `result="scheduled"`)
		filter, _ := histMean(m, "scheduler_framework_extension_point_duration_seconds", `extension_point="Filter"`)
		dra, _ := histMean(m, "scheduler_plugin_execution_duration_seconds", `plugin="DynamicResources"`, `extension_point="Filter"`)
		pre, _ := histMean(m, "scheduler_plugin_execution_duration_seconds", `plugin="DynamicResources"`, `extension_point="PreFilter"`)
		prebind, _ := histMean(m, "scheduler_framework_extension_point_duration_seconds", `extension_point="PreBind"`)
		fmt.Fprintf(&sb, "| %s | %.0f / %.0f / %.0f | %.2f | %.2f | %.1f | %.1f | %.2f | %.2f |\n", r.name,
			sumSeries(m, "scheduler_schedule_attempts_total", `result="scheduled"`),
			sumSeries(m, "scheduler_schedule_attempts_total", `result="unschedulable"`),
			sumSeries(m, "scheduler_schedule_attempts_total", `result="error"`),
			ms(att), ms(filter), us(dra), us(pre), ms(prebind), r.cpu[schedName]*1000/float64(r.pods))
	}

	// CPU per process, in ms per pod.
	procs := map[string]bool{}
	for _, r := range results {
		for p := range r.cpu {
			procs[p] = true
		}
	}
	names := make([]string, 0, len(procs))
	for p := range procs {
		names = append(names, p)
	}
	sort.Strings(names)
	sb.WriteString("\nCPU per pod while draining (ms; the scheduler under test from its /healthz answering ok; 2 cores give 2000 ms per second):\n\n| process |")
	for _, r := range results {
		sb.WriteString(" " + r.name + " |")
	}
	sb.WriteString("\n|---|" + strings.Repeat("---:|", len(results)) + "\n")
	for _, p := range append(names, "total") {
		fmt.Fprintf(&sb, "| %s |", p)
		for _, r := range results {
			v := r.cpu[p]
			if p == "total" {
				v = 0
				for _, c := range r.cpu {
					v += c
				}
			}
			fmt.Fprintf(&sb, " %.2f |", v*1000/float64(r.pods))
		}
		sb.WriteString("\n")
	}
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
			d, _ := histMean(r.metrics, "scheduler_plugin_execution_duration_seconds", `plugin="DynamicResources"`, `extension_point="Filter"`)
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

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 }
