//go:build e2e

// Package scheduler measures scheduling throughput through a real kube-scheduler on one fleet
// of fake nodes: without an extender (plain), with a do-nothing extender (nothing) and with
// neuron-scheduler-extender (ours). See README.md.
package scheduler

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/extender"
	"github.com/kube-neuron/kube-neuron/internal/kubeclient"
	"github.com/kube-neuron/kube-neuron/internal/lab"
	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/topology"
	"github.com/kube-neuron/kube-neuron/test/bench/benchutil"
	"github.com/kube-neuron/kube-neuron/test/e2e/framework"
)

const (
	kindPlain   = "plain"
	kindNothing = "nothing"
	kindOurs    = "ours"
	// kindOursNoPrio is ours without the prioritize verb (a diagnostic: the scheduler's own
	// scores spread the pods, so binds rarely wait for each other on one node).
	kindOursNoPrio = "ours-noprio"

	benchNamespace = "bench"
	runLabel       = "kube-neuron.io/bench-run"
	leaseNamespace = metav1.NamespaceSystem

	// stallTimeout fails a run when no pod was bound for this long.
	stallTimeout = 2 * time.Minute
)

type settings struct {
	nodes, pods   int
	extenderQPS   int    // client QPS of both extenders (burst twice that)
	out           string // file for the report, "" to print only
	cpuProfile    string // CPU profile of the test process during the ours run (cpuProfilePath for the others)
	apiProfiles   string // directory for CPU profiles of the kube-apiserver, one per run
	schedProfiles string // directory for CPU profiles of the scheduler under test, one per run
	keep          bool   // keep the lab directory
	kinds         []string
}

func loadSettings(b *testing.B) settings {
	return settings{
		nodes:         benchutil.EnvInt(b, "BENCH_NODES", 500),
		pods:          benchutil.EnvInt(b, "BENCH_PODS", 2000),
		extenderQPS:   benchutil.EnvInt(b, "BENCH_EXTENDER_QPS", 200), // neuron-scheduler-extender's own setting
		out:           os.Getenv("BENCH_OUT"),
		cpuProfile:    os.Getenv("BENCH_CPUPROFILE"),
		apiProfiles:   os.Getenv("BENCH_APISERVER_PROFILES"),
		schedProfiles: os.Getenv("BENCH_SCHEDULER_PROFILES"),
		keep:          os.Getenv("BENCH_KEEP") != "",
		kinds:         kinds(b),
	}
}

// kinds are the schedulers to run, in order: BENCH_SCHEDULERS (comma-separated) or
// plain,nothing,ours.
func kinds(b *testing.B) []string {
	v := os.Getenv("BENCH_SCHEDULERS")
	if v == "" {
		return []string{kindPlain, kindNothing, kindOurs}
	}
	var out []string
	for _, k := range strings.Split(v, ",") {
		k = strings.TrimSpace(k)
		if !slices.Contains([]string{kindPlain, kindNothing, kindOurs, kindOursNoPrio}, k) {
			b.Fatalf("BENCH_SCHEDULERS: unknown scheduler %q (plain, nothing, ours, ours-noprio)", k)
		}
		out = append(out, k)
	}
	return out
}

// iteration numbers the iterations of every BenchmarkSchedulingThroughput call in this process
// (the testing package calls it with b.N = 1 and then with the count asked for), so that the
// order of the runs keeps alternating from one call, and control plane, to the next.
var iteration int

// runOrder is the order of the runs of iteration i: every scheduler twice, mirrored (A B B A).
// The control plane slows down from one run to the next (etcd's history grows: about 2 % per
// run on the 2-core machine), so a single run of each, even in alternating order, favours
// whichever ran first; mirrored, a steady drift weighs on every scheduler alike. Every other
// iteration starts from the other end, so that the first run on a fresh control plane goes to
// each in turn.
func runOrder(kinds []string, i int) []string {
	first := slices.Clone(kinds)
	if i%2 == 1 {
		slices.Reverse(first)
	}
	second := slices.Clone(first)
	slices.Reverse(second)
	return append(first, second...)
}

// meanRates is each scheduler's rate over an iteration: the mean of its runs'.
func meanRates(results []result) map[string]float64 {
	sum, n := map[string]float64{}, map[string]int{}
	for _, r := range results {
		sum[r.kind] += r.rate()
		n[r.kind]++
	}
	for k := range sum {
		sum[k] /= float64(n[k])
	}
	return sum
}

// env is what every run shares.
type env struct {
	s      settings
	cp     *lab.ControlPlane
	client kubernetes.Interface
}

// result is one scheduler's run.
type result struct {
	kind      string
	pods      int
	wall      time.Duration // scheduler process start to last binding
	drain     time.Duration // first binding to last binding
	nodesUsed int
	cpu       map[string]float64 // CPU seconds per process during the run
	verbs     map[string]callStat
	api       map[string]callStat // the extender's API requests
	limiter   time.Duration       // time the extender's requests waited in its client rate limiter
	metrics   map[string]float64  // our extender's /metrics after the run
	nodeGap   time.Duration       // median time between two bindings to the same node
	active    float64             // mean number of nodes receiving bindings per 250 ms window
}

// rate is the drain rate: pods bound per second between the first and the last binding.
func (r result) rate() float64 {
	if r.drain <= 0 {
		return 0
	}
	return float64(r.pods-1) / r.drain.Seconds()
}

// BenchmarkSchedulingThroughput drains a backlog of pods through three kube-scheduler processes
// in turn, on the same nodes: plain, with a do-nothing extender, with ours.
//
//	go test -tags e2e -run '^$' -bench SchedulingThroughput -benchtime 1x ./test/bench/scheduler/
func BenchmarkSchedulingThroughput(b *testing.B) {
	s := loadSettings(b)
	binDir, err := framework.BinDir()
	if err != nil {
		b.Fatal(err)
	}
	dir, err := os.MkdirTemp("/tmp", "kn-bench-")
	if err != nil {
		b.Fatal(err)
	}
	// The extender logs every bind: keep that cost, but in a file.
	logFile, err := os.Create(filepath.Join(dir, "bench-klog.log"))
	if err != nil {
		b.Fatal(err)
	}
	klog.LogToStderr(false)
	klog.SetOutput(logFile)
	defer func() {
		klog.Flush()
		klog.LogToStderr(true)
		_ = logFile.Close()
	}()
	ctx := klog.NewContext(context.Background(), klog.Background())

	begin := time.Now()
	cp, err := lab.StartControlPlane(ctx, lab.ControlPlaneOptions{BinDir: binDir, Dir: dir})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := cp.Stop(); err != nil {
			b.Errorf("stopping the control plane: %v", err)
		}
		if b.Failed() || s.keep {
			fmt.Fprintf(os.Stderr, "bench: lab directory kept: %s (logs in %s/logs)\n", dir, dir)
		} else {
			_ = os.RemoveAll(dir)
		}
	}()
	client, err := kubernetes.NewForConfig(cp.RESTConfig())
	if err != nil {
		b.Fatal(err)
	}
	e := &env{s: s, cp: cp, client: client}
	if err := createNodes(ctx, client, s.nodes); err != nil {
		b.Fatal(err)
	}
	if err := benchutil.CreateNamespace(ctx, client, benchNamespace); err != nil {
		b.Fatal(err)
	}
	fmt.Fprintf(os.Stderr, "bench: control plane and %d nodes ready in %v (%s)\n", s.nodes, time.Since(begin).Round(time.Millisecond), dir)

	sums := map[string]float64{}
	b.ResetTimer()
	for range b.N {
		i := iteration
		iteration++
		var results []result
		for j, kind := range runOrder(s.kinds, i) {
			r, err := e.run(ctx, kind, fmt.Sprintf("%d-%d", i, j))
			if err != nil {
				b.Fatalf("%s run %d of iteration %d: %v", kind, j+1, i+1, err)
			}
			fmt.Fprintf(os.Stderr, "bench: %-8s %d pods drained at %.1f pods/s (%.2f s from scheduler start)\n", kind, r.pods, r.rate(), r.wall.Seconds())
			results = append(results, r)
		}
		for kind, rate := range meanRates(results) {
			sums[kind] += rate
		}
		report := formatReport(s, results)
		fmt.Print(report)
		if s.out != "" {
			f, err := os.OpenFile(s.out, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
			if err == nil {
				_, err = f.WriteString(report)
				err = errors.Join(err, f.Close())
			}
			if err != nil {
				b.Errorf("writing BENCH_OUT: %v", err)
			}
		}
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(sums[kindPlain]/n, "pods/s-plain")
	b.ReportMetric(sums[kindNothing]/n, "pods/s-nothing")
	b.ReportMetric(sums[kindOurs]/n, "pods/s-ours")
	if slices.Contains(s.kinds, kindOursNoPrio) {
		b.ReportMetric(sums[kindOursNoPrio]/n, "pods/s-ours-noprio")
	}
	if sums[kindNothing] > 0 {
		b.ReportMetric(sums[kindOurs]/sums[kindNothing], "ratio-ours/nothing")
	}
	if sums[kindPlain] > 0 {
		b.ReportMetric(sums[kindNothing]/sums[kindPlain], "ratio-nothing/plain")
		b.ReportMetric(sums[kindOurs]/sums[kindPlain], "ratio-ours/plain")
	}
	b.ReportMetric(0, "ns/op") // the wall time of an iteration says nothing
}

// run creates the backlog, starts the kind's scheduler (and extender), waits until every pod is
// bound, and cleans up.
func (e *env) run(ctx context.Context, kind, id string) (r result, err error) {
	name := fmt.Sprintf("bench-%s-%s", kind, id)
	r = result{kind: kind, pods: e.s.pods}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()

	// The extender (ours starts before the backlog exists, as a long-running one would).
	var (
		url     string
		verbs   *verbStats
		counter *apiCounter
		limiter *timedLimiter
	)
	schedConfig := []byte("profiles:\n- schedulerName: " + name + "\n")
	if kind != kindPlain {
		cfg, c, l := instrumentedClientConfig(e.cp.RESTConfig(), e.s.extenderQPS)
		counter, limiter, verbs = c, l, newVerbStats()
		// Both extenders talk to the API server as the components do (kubeclient.New).
		client, err := kubernetes.NewForConfig(kubeclient.Protobuf(cfg))
		if err != nil {
			return r, err
		}
		var h = nothingHandler(client)
		if isOurs(kind) {
			ext, err := extender.New(extender.Options{Client: client, LeaseNamespace: leaseNamespace})
			if err != nil {
				return r, err
			}
			if err := ext.Start(runCtx); err != nil {
				return r, err
			}
			// As on SIGTERM: release the bind Leases, so that the next iteration's extender
			// (a new holder) takes the nodes at once rather than after they expire.
			defer func() {
				sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
				defer scancel()
				ext.Shutdown(sctx)
			}()
			h = ext.Handler(runCtx)
		}
		if url, err = serveHTTP(runCtx, verbs.wrap(h)); err != nil {
			return r, err
		}
		if schedConfig, err = withSchedulerName(lab.ExtenderSchedulerConfig(url), name, kind == kindOursNoPrio); err != nil {
			return r, err
		}
	}

	// The backlog, then a watch that timestamps bindings.
	if err := createPods(ctx, e.client, name, e.s.pods); err != nil {
		return r, err
	}
	w, err := watchBindings(runCtx, e.client, name, e.s.pods)
	if err != nil {
		return r, err
	}

	var verbs0 map[string]callStat
	var api0 map[string]callStat
	var limiter0 int64
	if verbs != nil {
		verbs0, api0, limiter0 = verbs.snapshot(), counter.snapshot(), limiter.waited.Load()
	}
	if e.s.cpuProfile != "" && kind != kindPlain {
		f, err := os.Create(cpuProfilePath(e.s.cpuProfile, kind))
		if err != nil {
			return r, err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			_ = f.Close()
			return r, err
		}
		defer func() { pprof.StopCPUProfile(); _ = f.Close() }()
	}
	cpu0 := cpuSeconds(e.cp)
	start := time.Now()
	if err := e.cp.StartScheduler(ctx, name, schedConfig); err != nil {
		return r, err
	}
	defer func() {
		if serr := stopProcess(e.cp, name); serr != nil && err == nil {
			err = serr
		}
	}()
	var profiles []chan error
	if e.s.apiProfiles != "" {
		profiled := make(chan error, 1)
		go func() {
			profiled <- e.apiserverProfile(runCtx, filepath.Join(e.s.apiProfiles, "apiserver-"+kind+".prof"))
		}()
		profiles = append(profiles, profiled)
	}
	if e.s.schedProfiles != "" {
		profiled := make(chan error, 1)
		go func() {
			profiled <- e.schedulerProfile(runCtx, name, filepath.Join(e.s.schedProfiles, "scheduler-"+kind+".prof"))
		}()
		profiles = append(profiles, profiled)
	}
	first, last, err := w.wait(ctx, e.cp.LogPath(name))
	if err != nil {
		return r, err
	}
	for _, profiled := range profiles {
		if err := <-profiled; err != nil {
			return r, err
		}
	}
	cpu1 := cpuSeconds(e.cp)
	if e.s.cpuProfile != "" && kind != kindPlain {
		pprof.StopCPUProfile()
	}
	r.wall, r.drain = last.Sub(start), last.Sub(first)
	r.nodeGap, r.active = w.shape()
	r.cpu = map[string]float64{}
	for p, v := range cpu1 {
		if p == name {
			p = "scheduler under test"
			r.cpu[p] = v // since its start, startup included
			continue
		}
		r.cpu[p] = v - cpu0[p]
	}
	if verbs != nil {
		r.verbs = diffStats(verbs.snapshot(), verbs0)
		r.api = diffStats(counter.snapshot(), api0)
		r.limiter = time.Duration(limiter.waited.Load() - limiter0)
	}
	if isOurs(kind) {
		if r.metrics, err = scrapeMetrics(ctx, url+"/metrics"); err != nil {
			return r, err
		}
	}

	pods, err := e.client.CoreV1().Pods(benchNamespace).List(ctx, metav1.ListOptions{LabelSelector: runLabel + "=" + name})
	if err != nil {
		return r, err
	}
	nodes := map[string]bool{}
	for _, p := range pods.Items {
		nodes[p.Spec.NodeName] = true
	}
	r.nodesUsed = len(nodes)
	if isOurs(kind) {
		if err := checkRecords(pods.Items, e.s.pods); err != nil {
			return r, err
		}
	}
	if err := stopProcess(e.cp, name); err != nil {
		return r, err
	}
	cancel()
	return r, deletePods(ctx, e.client, name)
}

// apiserverProfile writes a CPU profile of the kube-apiserver taken from its /debug/pprof
// (profiling is on by default) over the first seconds of the drain.
func (e *env) apiserverProfile(ctx context.Context, path string) error {
	return e.profile(ctx, "the kube-apiserver", e.client.CoreV1().RESTClient(), path)
}

// schedulerProfile writes a CPU profile of the scheduler under test taken from its
// /debug/pprof over the first seconds of the drain. The request carries the admin client
// certificate (delegated authentication and authorization); the scheduler's serving
// certificate is its own self-signed one on loopback, so it is not verified.
func (e *env) schedulerProfile(ctx context.Context, name, path string) error {
	url, ok := e.cp.SchedulerURL(name)
	if !ok {
		return fmt.Errorf("profiling %s: the lab does not know its port", name)
	}
	cfg := e.cp.RESTConfig()
	cfg.Host, cfg.NegotiatedSerializer = url, scheme.Codecs.WithoutConversion()
	cfg.TLSClientConfig = rest.TLSClientConfig{Insecure: true, CertFile: cfg.CertFile, KeyFile: cfg.KeyFile, CertData: cfg.CertData, KeyData: cfg.KeyData}
	client, err := rest.UnversionedRESTClientFor(cfg)
	if err != nil {
		return fmt.Errorf("profiling %s: %w", name, err)
	}
	return e.profile(ctx, name, client, path)
}

// profile writes a CPU profile taken from a component's /debug/pprof/profile (profiling is on
// by default) over the first seconds of the drain.
func (e *env) profile(ctx context.Context, what string, client rest.Interface, path string) error {
	seconds := max(1, e.s.pods/250) // shorter than the drain at any throughput here
	raw, err := client.Get().AbsPath("/debug/pprof/profile").
		Param("seconds", strconv.Itoa(seconds)).Timeout(time.Duration(seconds+30) * time.Second).DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("profiling %s: %w", what, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, raw, 0o644)
}

// cpuProfilePath is where the test process's CPU profile of a run goes: BENCH_CPUPROFILE for
// ours, with -<kind> before the extension for the other extenders.
func cpuProfilePath(path, kind string) string {
	if kind == kindOurs {
		return path
	}
	ext := filepath.Ext(path)
	return strings.TrimSuffix(path, ext) + "-" + kind + ext
}

func isOurs(kind string) bool { return kind == kindOurs || kind == kindOursNoPrio }

// withSchedulerName sets the first profile's schedulerName of a KubeSchedulerConfiguration
// and, with noPrioritize, drops the extenders' prioritize verb.
func withSchedulerName(config []byte, name string, noPrioritize bool) ([]byte, error) {
	var m map[string]any
	if err := yaml.Unmarshal(config, &m); err != nil {
		return nil, err
	}
	profiles, _ := m["profiles"].([]any)
	if len(profiles) == 0 {
		return nil, errors.New("the configuration has no profile")
	}
	p, ok := profiles[0].(map[string]any)
	if !ok {
		return nil, errors.New("the first profile is not a map")
	}
	p["schedulerName"] = name
	if noPrioritize {
		exts, _ := m["extenders"].([]any)
		for _, x := range exts {
			if x, ok := x.(map[string]any); ok {
				delete(x, "prioritizeVerb")
			}
		}
	}
	return yaml.Marshal(m)
}

// stopProcess stops the control plane's process called name (a scheduler under test) by its
// pid: SIGTERM, then SIGKILL after 5 s. It is a no-op when the process already exited.
func stopProcess(cp *lab.ControlPlane, name string) error {
	pid := 0
	for _, p := range cp.Processes() {
		if p.Name == name {
			pid = p.PID
		}
	}
	if pid == 0 {
		return nil
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(5 * time.Second)
	killed := false
	for {
		running := slices.ContainsFunc(cp.Processes(), func(s lab.State) bool { return s.PID == pid })
		if !running {
			return nil
		}
		if time.Now().After(deadline) {
			if killed {
				return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", name, pid)
			}
			_ = syscall.Kill(pid, syscall.SIGKILL)
			killed, deadline = true, time.Now().Add(10*time.Second)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// createNodes creates n plain Node objects, half trn1.32xlarge and half inf2.48xlarge, tainted
// like the lab's Neuron nodes, Ready, with the device plugin's resources.
func createNodes(ctx context.Context, client kubernetes.Interface, n int) error {
	cat := topology.DefaultCatalog()
	return benchutil.Parallel(n, 16, func(i int) error {
		typ := "trn1.32xlarge"
		if i%2 == 1 {
			typ = "inf2.48xlarge"
		}
		it, err := cat.Get(typ)
		if err != nil {
			return err
		}
		devices := int64(it.Devices)
		cores := devices * int64(it.PhysicalCoresPerDevice)
		name := fmt.Sprintf("%s-%04d", strings.ReplaceAll(typ, ".", "-"), i)
		capacity := corev1.ResourceList{
			corev1.ResourceCPU:            resource.MustParse("128"),
			corev1.ResourceMemory:         resource.MustParse("512Gi"),
			corev1.ResourcePods:           resource.MustParse("110"),
			topology.ResourceNeuron:       *resource.NewQuantity(devices, resource.DecimalSI),
			topology.ResourceNeuronDevice: *resource.NewQuantity(devices, resource.DecimalSI),
			topology.ResourceNeuronCore:   *resource.NewQuantity(cores, resource.DecimalSI),
		}
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
				labels.InstanceType:   typ,
				labels.InstanceFamily: it.Family,
				labels.Hostname:       name,
				labels.AllocationMode: labels.AllocationModeDevicePlugin,
				"kubernetes.io/os":    "linux",
				"kubernetes.io/arch":  "amd64",
			}},
			Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: labels.NeuronTaintKey, Value: labels.NeuronTaintValue, Effect: corev1.TaintEffectNoSchedule}}},
		}
		created, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("creating node %s: %w", name, err)
		}
		now := metav1.Now()
		created.Status = corev1.NodeStatus{
			Capacity:    capacity,
			Allocatable: capacity.DeepCopy(),
			Conditions: []corev1.NodeCondition{{
				Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
				Message: "fake node of the scheduler benchmark", LastHeartbeatTime: now, LastTransitionTime: now,
			}},
		}
		if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("setting the status of node %s: %w", name, err)
		}
		return nil
	})
}

// createPods creates the backlog: n pods for scheduler sched, each asking for one NeuronCore.
func createPods(ctx context.Context, client kubernetes.Interface, sched string, n int) error {
	one := resource.MustParse("1")
	return benchutil.Parallel(n, 8, func(i int) error {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%05d", sched, i), Namespace: benchNamespace, Labels: map[string]string{runLabel: sched}},
			Spec: corev1.PodSpec{
				SchedulerName:                 sched,
				TerminationGracePeriodSeconds: ptr.To[int64](0),
				Tolerations:                   []corev1.Toleration{{Key: labels.NeuronTaintKey, Operator: corev1.TolerationOpEqual, Value: labels.NeuronTaintValue, Effect: corev1.TaintEffectNoSchedule}},
				Containers: []corev1.Container{{
					Name:  "main",
					Image: "registry.k8s.io/pause:3.10",
					Resources: corev1.ResourceRequirements{
						Limits:   corev1.ResourceList{topology.ResourceNeuronCore: one},
						Requests: corev1.ResourceList{topology.ResourceNeuronCore: one},
					},
				}},
			},
		}
		_, err := client.CoreV1().Pods(benchNamespace).Create(ctx, pod, metav1.CreateOptions{})
		return err
	})
}

// deletePods deletes the run's pods at once (no kubelet finishes a graceful deletion) and waits
// until they are gone.
func deletePods(ctx context.Context, client kubernetes.Interface, sched string) error {
	sel := metav1.ListOptions{LabelSelector: runLabel + "=" + sched}
	if err := client.CoreV1().Pods(benchNamespace).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, sel); err != nil {
		return fmt.Errorf("deleting the pods of %s: %w", sched, err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		l, err := client.CoreV1().Pods(benchNamespace).List(ctx, sel)
		if err == nil && len(l.Items) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the pods of %s are not gone after 2 minutes (%d left, %v)", sched, len(l.Items), err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// bindWatch timestamps the first time each pod of a run is seen bound.
type bindWatch struct {
	want int
	mu   sync.Mutex
	seen map[string]binding
	done chan struct{}
	last time.Time // latest binding seen
}

type binding struct {
	at   time.Time
	node string
}

func watchBindings(ctx context.Context, client kubernetes.Interface, sched string, want int) (*bindWatch, error) {
	w := &bindWatch{want: want, seen: map[string]binding{}, done: make(chan struct{})}
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
		if _, ok := w.seen[pod.Name]; ok {
			return
		}
		w.seen[pod.Name] = binding{at: now, node: pod.Spec.NodeName}
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

// shape describes how bindings spread over nodes in time: the median gap between two bindings
// to the same node (binds to one node are serialized by our extender), and the mean number of
// nodes receiving bindings in a 250 ms window.
func (w *bindWatch) shape() (gap time.Duration, active float64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	perNode := map[string][]time.Time{}
	var first, last time.Time
	for _, b := range w.seen {
		perNode[b.node] = append(perNode[b.node], b.at)
		if first.IsZero() || b.at.Before(first) {
			first = b.at
		}
		if b.at.After(last) {
			last = b.at
		}
	}
	var gaps []time.Duration
	const window = 250 * time.Millisecond
	nw := int(last.Sub(first)/window) + 1
	windows := make([]map[string]bool, nw)
	for node, ts := range perNode {
		slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
		for i, t := range ts {
			if i > 0 {
				gaps = append(gaps, t.Sub(ts[i-1]))
			}
			k := int(t.Sub(first) / window)
			if windows[k] == nil {
				windows[k] = map[string]bool{}
			}
			windows[k][node] = true
		}
	}
	if len(gaps) > 0 {
		slices.Sort(gaps)
		gap = gaps[len(gaps)/2]
	}
	n := 0
	for _, m := range windows {
		n += len(m)
	}
	return gap, float64(n) / float64(nw)
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
			for _, b := range w.seen {
				if first.IsZero() || b.at.Before(first) {
					first = b.at
				}
			}
			return first, w.last, nil
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

// checkRecords checks our run: every pod bound with a record naming its node and asking what it
// got, and no core (or, for device requests, no device) given to two pods on a node.
func checkRecords(pods []corev1.Pod, want int) error {
	if len(pods) != want {
		return fmt.Errorf("%d pods, want %d", len(pods), want)
	}
	owner := map[string]string{} // node/kind/id -> pod
	var problems []string
	claim := func(node, kind string, id int, pod string) {
		k := node + "/" + kind + "/" + strconv.Itoa(id)
		if o, ok := owner[k]; ok {
			problems = append(problems, fmt.Sprintf("%s %d of node %s given to %s and %s", kind, id, node, o, pod))
			return
		}
		owner[k] = pod
	}
	for i := range pods {
		p := &pods[i]
		if p.Spec.NodeName == "" {
			problems = append(problems, p.Name+" not bound")
			continue
		}
		rec, err := allocation.RecordOf(p)
		if err != nil || rec == nil {
			problems = append(problems, fmt.Sprintf("%s: no allocation record (%v)", p.Name, err))
			continue
		}
		if rec.Node != p.Spec.NodeName {
			problems = append(problems, fmt.Sprintf("%s: bound to %s, record names %s", p.Name, p.Spec.NodeName, rec.Node))
		}
		if len(rec.Containers) != 1 || rec.Containers[0].Count() != 1 {
			problems = append(problems, fmt.Sprintf("%s: record %s, want one container with one core", p.Name, rec.Encode()))
		}
		for _, c := range rec.Containers {
			for _, id := range c.Cores {
				claim(rec.Node, "core", id, p.Name)
			}
			if c.Resource != topology.ResourceNeuronCore {
				for _, id := range c.Devices {
					claim(rec.Node, "device", id, p.Name)
				}
			}
		}
	}
	if len(problems) > 0 {
		if len(problems) > 10 {
			problems = append(problems[:10], fmt.Sprintf("... %d more", len(problems)-10))
		}
		return fmt.Errorf("ours: %d problems with the allocation records:\n  %s", len(problems), strings.Join(problems, "\n  "))
	}
	return nil
}

// formatReport renders one iteration: the throughput table, CPU per process and, for the
// extenders, where their time goes.
func formatReport(s settings, results []result) string {
	var sb strings.Builder
	byKind := map[string]result{} // the last run of each
	for _, r := range results {
		byKind[r.kind] = r
	}
	rates := meanRates(results)
	ratio := func(a, b float64) string {
		if b == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f", a/b)
	}
	fmt.Fprintf(&sb, "\n### Scheduling throughput: %d nodes, backlog of %d pods (extender client QPS %d, burst %d)\n\n",
		s.nodes, s.pods, s.extenderQPS, 2*s.extenderQPS)
	sb.WriteString("Schedulers in the order they ran; the ratios are to the mean rate of the other scheduler's runs in this iteration.\n\n")
	sb.WriteString("| scheduler | pods | seconds (start to last bind) | seconds (first to last bind) | pods/s | ratio to plain | ratio to do-nothing | nodes used | nodes bound to per 250 ms | median gap between binds to one node (ms) |\n")
	sb.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range results {
		fmt.Fprintf(&sb, "| %s | %d | %.2f | %.2f | %.1f | %s | %s | %d | %.1f | %.0f |\n", r.kind, r.pods, r.wall.Seconds(), r.drain.Seconds(), r.rate(),
			ratio(r.rate(), rates[kindPlain]), ratio(r.rate(), rates[kindNothing]), r.nodesUsed, r.active, float64(r.nodeGap.Microseconds())/1000)
	}
	sb.WriteString("\nIteration (mean pods/s of each scheduler's runs):")
	for _, k := range []string{kindPlain, kindNothing, kindOurs, kindOursNoPrio} {
		if v, ok := rates[k]; ok {
			fmt.Fprintf(&sb, " %s %.1f;", k, v)
		}
	}
	for _, k := range []string{kindOurs, kindOursNoPrio} {
		if _, ok := rates[k]; ok && rates[kindNothing] > 0 {
			fmt.Fprintf(&sb, " %s / do-nothing %s;", k, ratio(rates[k], rates[kindNothing]))
		}
	}
	if rates[kindPlain] > 0 && rates[kindNothing] > 0 {
		fmt.Fprintf(&sb, " do-nothing / plain %s;", ratio(rates[kindNothing], rates[kindPlain]))
	}
	sb.WriteString("\n")

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
	sb.WriteString("\nCPU per pod while draining (ms; 2 cores give 2000 ms per second; the test process holds the extender and the binding watch):\n\n| process |")
	for _, r := range results {
		sb.WriteString(" " + r.kind + " |")
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
	sb.WriteString("| total CPU / wall (cores busy) |")
	for _, r := range results {
		v := 0.0
		for _, c := range r.cpu {
			v += c
		}
		fmt.Fprintf(&sb, " %.2f |", v/r.wall.Seconds())
	}
	sb.WriteString("\n")

	// The extenders, per verb and per API request.
	for _, kind := range []string{kindNothing, kindOurs, kindOursNoPrio} {
		r, ok := byKind[kind]
		if !ok || r.verbs == nil {
			continue
		}
		fmt.Fprintf(&sb, "\n%s extender (its last run), server side (handler time, JSON included):\n\n| verb | calls | calls/pod | mean ms | total s |\n|---|---:|---:|---:|---:|\n", kind)
		for _, v := range []string{"filter", "prioritize", "bind"} {
			c := r.verbs[v]
			fmt.Fprintf(&sb, "| %s | %d | %.2f | %.2f | %.2f |\n", v, c.N, float64(c.N)/float64(r.pods), float64(c.mean().Microseconds())/1000, c.Total.Seconds())
		}
		fmt.Fprintf(&sb, "\n%s extender, API requests during the run (client side, rate-limiter wait total %.2f s):\n\n| request | count | per pod | mean ms |\n|---|---:|---:|---:|\n", kind, r.limiter.Seconds())
		keys := make([]string, 0, len(r.api))
		total := int64(0)
		for k, c := range r.api {
			keys = append(keys, k)
			if !strings.HasPrefix(k, "watch ") {
				total += c.N
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			c := r.api[k]
			fmt.Fprintf(&sb, "| %s | %d | %.2f | %.2f |\n", k, c.N, float64(c.N)/float64(r.pods), float64(c.mean().Microseconds())/1000)
		}
		fmt.Fprintf(&sb, "| all | %d | %.2f | |\n", total, float64(total)/float64(r.pods))
		// A bind's time: its API requests one after the other, the rest is waiting (for the
		// node's lock, for the informer to show the node's previous decision) and CPU.
		var apiTime time.Duration
		for k, c := range r.api {
			if !strings.HasPrefix(k, "watch ") && !strings.HasPrefix(k, "list ") {
				apiTime += c.Total
			}
		}
		if bind := r.verbs["bind"]; bind.N > 0 {
			perBind := apiTime / time.Duration(bind.N)
			fmt.Fprintf(&sb, "\n%s: a bind takes %.1f ms: %.1f ms in API requests, %.1f ms waiting (node lock, last decision in the cache) or computing\n",
				kind, ms(bind.mean()), ms(perBind), ms(bind.mean()-perBind))
		}
	}
	for _, kind := range []string{kindOurs, kindOursNoPrio} {
		r, ok := byKind[kind]
		if !ok || r.metrics == nil {
			continue
		}
		fm, fn := histogramMean(r.metrics, "neuron_scheduler_extender_filter_duration_seconds")
		bm, bn := histogramMean(r.metrics, "neuron_scheduler_extender_bind_duration_seconds")
		fmt.Fprintf(&sb, "\n%s, from its /metrics: filter %.0f calls, mean %.2f ms (p50 %s, p99 %s); bind %.0f calls, mean %.2f ms (p50 %s, p99 %s); bind retries %.0f\n",
			kind, fn, float64(fm.Microseconds())/1000,
			histogramQuantile(r.metrics, "neuron_scheduler_extender_filter_duration_seconds", 0.5),
			histogramQuantile(r.metrics, "neuron_scheduler_extender_filter_duration_seconds", 0.99),
			bn, float64(bm.Microseconds())/1000,
			histogramQuantile(r.metrics, "neuron_scheduler_extender_bind_duration_seconds", 0.5),
			histogramQuantile(r.metrics, "neuron_scheduler_extender_bind_duration_seconds", 0.99),
			r.metrics["neuron_scheduler_extender_bind_retries_total"])
	}
	return sb.String()
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
