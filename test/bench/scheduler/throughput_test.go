//go:build e2e

// Package scheduler measures scheduling throughput through a real kube-scheduler on one fleet
// of fake nodes: without an extender (plain), with a do-nothing extender (nothing), with
// neuron-scheduler-extender (ours) and neuron-kube-scheduler, the NeuronTopology plugin compiled
// into kube-scheduler (plugin). See README.md.
package scheduler

import (
	"bytes"
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
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/extender"
	"github.com/kube-neuron/kube-neuron/internal/kubeclient"
	"github.com/kube-neuron/kube-neuron/internal/lab"
	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/topology"
	"github.com/kube-neuron/kube-neuron/test/bench/benchutil"
)

const (
	kindPlain   = "plain"
	kindNothing = "nothing"
	kindOurs    = "ours"
	kindPlugin  = "plugin"
	// kindOursNoPrio is ours without the prioritize verb (a diagnostic: the scheduler's own
	// scores spread the pods, so binds rarely wait for each other on one node).
	kindOursNoPrio = "ours-noprio"
	// kindPlainPacked is plain kube-scheduler whose NodeResourcesFit scores MostAllocated on
	// the Neuron resources (a diagnostic: packing as the plugin does, without topology).
	kindPlainPacked = "plain-packed"
	// kindPluginBase is another neuron-kube-scheduler binary, BENCH_PLUGIN_BASE (a diagnostic:
	// a change to the plugin measured side by side with the binary before it).
	kindPluginBase = "plugin-base"
	// kindPluginAdaptive is the plugin with the scheduler's adaptive share of nodes to check
	// per pod, plain's (a diagnostic: what my-scheduler's percentageOfNodesToScore buys).
	kindPluginAdaptive = "plugin-adaptive"
	// kindPluginSampled is the plugin without narrowing (candidateNodes 0): every pod checked on
	// my-scheduler's 10 % sample (a diagnostic: what narrowing buys).
	kindPluginSampled = "plugin-sampled"

	leaseNamespace = metav1.NamespaceSystem
)

// knownKinds are the schedulers BENCH_SCHEDULERS may name, in the order reports list them.
var knownKinds = []string{kindPlain, kindNothing, kindOurs, kindPlugin, kindOursNoPrio, kindPlainPacked, kindPluginBase, kindPluginAdaptive, kindPluginSampled}

type settings struct {
	nodes, pods   int
	extenderQPS   int    // client QPS of both extenders (burst twice that)
	out           string // file for the report, "" to print only
	cpuProfile    string // CPU profile of the test process during the ours run (cpuProfilePath for the others)
	apiProfiles   string // directory for CPU profiles of the kube-apiserver, one per run
	schedProfiles string // directory for CPU profiles of the scheduler under test, one per run
	pluginBase    string // neuron-kube-scheduler binary of plugin-base
	keep          bool   // keep the lab directory
	kinds         []string
}

func loadSettings(b *testing.B) settings {
	s := settings{
		nodes:         benchutil.EnvInt(b, "BENCH_NODES", 500),
		pods:          benchutil.EnvInt(b, "BENCH_PODS", 2000),
		extenderQPS:   benchutil.EnvInt(b, "BENCH_EXTENDER_QPS", 200), // neuron-scheduler-extender's own setting
		out:           os.Getenv("BENCH_OUT"),
		cpuProfile:    os.Getenv("BENCH_CPUPROFILE"),
		apiProfiles:   os.Getenv("BENCH_APISERVER_PROFILES"),
		schedProfiles: os.Getenv("BENCH_SCHEDULER_PROFILES"),
		pluginBase:    os.Getenv("BENCH_PLUGIN_BASE"),
		keep:          os.Getenv("BENCH_KEEP") != "",
		kinds:         kinds(b),
	}
	if slices.Contains(s.kinds, kindPluginBase) && !filepath.IsAbs(s.pluginBase) {
		b.Fatalf("plugin-base runs the neuron-kube-scheduler binary BENCH_PLUGIN_BASE names, an absolute path (hack/build-scheduler.sh prints its directory): got %q", s.pluginBase)
	}
	return s
}

// kinds are the schedulers to run, in order: BENCH_SCHEDULERS (comma-separated) or
// plain,nothing,ours,plugin.
func kinds(b *testing.B) []string {
	v := os.Getenv("BENCH_SCHEDULERS")
	if v == "" {
		return []string{kindPlain, kindNothing, kindOurs, kindPlugin}
	}
	var out []string
	for _, k := range strings.Split(v, ",") {
		k = strings.TrimSpace(k)
		if !slices.Contains(knownKinds, k) {
			b.Fatalf("BENCH_SCHEDULERS: unknown scheduler %q (%s)", k, strings.Join(knownKinds, ", "))
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
// The control plane's speed drifts from one run to the next, so a single run of each, even in
// alternating order, favours some; mirrored, a steady drift weighs on every scheduler alike.
// The drift is not always steady (the first and last runs of an iteration are often the
// slowest), so iteration i starts from the i-th scheduler (A B C C B A, B C A A C B, C A B B A
// C): over as many iterations as schedulers, each takes every pair of positions once. With two
// schedulers that is A B B A, then B A A B.
func runOrder(kinds []string, i int) []string {
	var first []string
	if len(kinds) > 0 {
		k := i % len(kinds)
		first = slices.Concat(kinds[k:], kinds[:k])
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
	s         settings
	cp        *lab.ControlPlane
	client    kubernetes.Interface
	pluginBin string           // neuron-kube-scheduler, when plugin runs
	cores     map[string]int64 // the aws.amazon.com/neuroncore capacity of each node
}

// result is one scheduler's run.
type result struct {
	kind      string
	pods      int
	wall      time.Duration // scheduler process start to last binding
	drain     time.Duration // first binding to last binding
	nodesUsed int
	partUsed  int                // nodes used that hold fewer one-core pods than they have cores
	cpu       map[string]float64 // CPU seconds per process during the run
	verbs     map[string]callStat
	api       map[string]callStat // the extender's API requests
	limiter   time.Duration       // time the extender's requests waited in its client rate limiter
	metrics   map[string]float64  // our extender's /metrics after the run
	sched     map[string]float64  // the scheduler under test's /metrics after the run
	nodeGap   time.Duration       // median time between two bindings to the same node
	active    float64             // mean number of nodes receiving bindings per 250 ms window
}

// rate is the drain rate: pods bound per second between the first and the last binding.
func (r result) rate() float64 { return benchutil.Rate(r.pods, r.drain) }

// BenchmarkSchedulingThroughput drains a backlog of pods through four kube-scheduler processes
// in turn, on the same nodes: plain, with a do-nothing extender, with ours, and
// neuron-kube-scheduler (the plugin).
//
//	go test -tags e2e -run '^$' -bench SchedulingThroughput -benchtime 1x ./test/bench/scheduler/
func BenchmarkSchedulingThroughput(b *testing.B) {
	s := loadSettings(b)
	var pluginBin string
	if slices.ContainsFunc(s.kinds, runsPluginBinary) {
		var err error
		if pluginBin, err = pluginBinary(); err != nil {
			b.Fatal(err)
		}
	}
	begin := time.Now()
	l := benchutil.StartLab(b, "kn-bench-", s.keep)
	ctx, client, dir := l.Ctx, l.Client, l.Dir
	e := &env{s: s, cp: l.CP, client: client, pluginBin: pluginBin}
	if err := createNodes(ctx, client, s.nodes); err != nil {
		b.Fatal(err)
	}
	cores, err := nodeCores(ctx, client)
	if err != nil {
		b.Fatal(err)
	}
	e.cores = cores
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
		benchutil.WriteReport(b, s.out, formatReport(s, results))
	}
	b.StopTimer()
	n := float64(b.N)
	for _, k := range s.kinds {
		b.ReportMetric(sums[k]/n, "pods/s-"+k)
	}
	// Ratios of the means, for the schedulers that ran.
	for _, q := range [][2]string{
		{kindOurs, kindNothing}, {kindNothing, kindPlain}, {kindOurs, kindPlain},
		{kindPlugin, kindPlain}, {kindPlugin, kindOurs}, {kindPlainPacked, kindPlain}, {kindPlugin, kindPlainPacked}, {kindPlugin, kindPluginBase},
		{kindPluginAdaptive, kindPlain}, {kindPlugin, kindPluginAdaptive},
		{kindPluginSampled, kindPlain}, {kindPlugin, kindPluginSampled},
	} {
		if slices.Contains(s.kinds, q[0]) && sums[q[1]] > 0 {
			b.ReportMetric(sums[q[0]]/sums[q[1]], "ratio-"+q[0]+"/"+q[1])
		}
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
	x, schedConfig, err := e.startExtender(ctx, runCtx, kind, name)
	if x != nil && x.shutdown != nil {
		defer x.shutdown()
	}
	if err != nil {
		return r, err
	}

	// The backlog, then a watch that timestamps bindings.
	if err := createPods(ctx, e.client, name, e.s.pods); err != nil {
		return r, err
	}
	w, err := benchutil.WatchBindings(runCtx, e.client, name, e.s.pods)
	if err != nil {
		return r, err
	}

	var x0 instruments
	if x != nil {
		x0 = x.snapshot()
	}
	stopCPUProfile, err := e.startCPUProfile(kind)
	if err != nil {
		return r, err
	}
	defer stopCPUProfile()
	cpu0 := benchutil.CPUSeconds(e.cp)
	start := time.Now()
	if err := e.startScheduler(ctx, kind, name, schedConfig); err != nil {
		return r, err
	}
	defer func() {
		if serr := benchutil.StopProcess(e.cp, name); serr != nil && err == nil {
			err = serr
		}
	}()
	profiles := e.startProfiles(runCtx, kind, name)
	first, last, err := w.Wait(ctx, e.cp.LogPath(name))
	if err != nil {
		return r, err
	}
	for _, profiled := range profiles {
		if err := <-profiled; err != nil {
			return r, err
		}
	}
	if r.sched, err = e.schedulerMetrics(ctx, name); err != nil {
		return r, err
	}
	cpu1 := benchutil.CPUSeconds(e.cp)
	stopCPUProfile()
	r.wall, r.drain = last.Sub(start), last.Sub(first)
	r.nodeGap, r.active = shape(w.Bindings())
	r.cpu = benchutil.CPUDelta(cpu1, cpu0)
	delete(r.cpu, name)
	r.cpu["scheduler under test"] = cpu1[name] // since its start, startup included
	if x != nil {
		x.since(x0, &r)
	}
	if isOurs(kind) {
		if r.metrics, err = benchutil.Scrape(ctx, nil, x.url+"/metrics"); err != nil {
			return r, err
		}
	}
	if err := e.checkRun(ctx, name, &r); err != nil {
		return r, err
	}
	if err := benchutil.StopProcess(e.cp, name); err != nil {
		return r, err
	}
	cancel()
	return r, benchutil.DeletePods(ctx, e.client, name)
}

// runExtender is a run's extender: the URL it serves, its instruments and, for ours, how to
// shut it down.
type runExtender struct {
	url      string
	verbs    *verbStats
	counter  *apiCounter
	limiter  *timedLimiter
	shutdown func()
}

// instruments is a snapshot of an extender's instruments.
type instruments struct {
	verbs, api map[string]callStat
	waited     int64
}

func (x *runExtender) snapshot() instruments {
	return instruments{verbs: x.verbs.snapshot(), api: x.counter.snapshot(), waited: x.limiter.waited.Load()}
}

// since records in r what the instruments counted since x0.
func (x *runExtender) since(x0 instruments, r *result) {
	r.verbs = diffStats(x.verbs.snapshot(), x0.verbs)
	r.api = diffStats(x.counter.snapshot(), x0.api)
	r.limiter = time.Duration(x.limiter.waited.Load() - x0.waited)
}

// packedSchedulerConfig is the profile of plain-packed: kube-scheduler's NodeResourcesFit
// scoring MostAllocated on the Neuron resources, so that it packs pods onto few nodes as the
// plugin's best-fit does.
func packedSchedulerConfig(name string) string {
	return `profiles:
- schedulerName: ` + name + `
  pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: MostAllocated
        resources:
        - name: aws.amazon.com/neuroncore
          weight: 1
        - name: aws.amazon.com/neuron
          weight: 1
        - name: aws.amazon.com/neurondevice
          weight: 1
`
}

// startScheduler starts the scheduler under test: kube-scheduler, or neuron-kube-scheduler for
// the plugin.
func (e *env) startScheduler(ctx context.Context, kind, name string, config []byte) error {
	switch {
	case runsPluginBinary(kind):
		return e.cp.StartSchedulerBinary(ctx, name, e.pluginBin, config)
	case kind == kindPluginBase:
		return e.cp.StartSchedulerBinary(ctx, name, e.s.pluginBase, config)
	}
	return e.cp.StartScheduler(ctx, name, config)
}

// startExtender starts the kind's extender, none for plain and plugin, and returns the
// configuration of the scheduler called name (that calls it). Ours runs until runCtx ends;
// call shutdown, when set, even on an error.
func (e *env) startExtender(ctx, runCtx context.Context, kind, name string) (*runExtender, []byte, error) {
	schedConfig := []byte("profiles:\n- schedulerName: " + name + "\n")
	switch {
	case kind == kindPlain:
		return nil, schedConfig, nil
	case kind == kindPlainPacked:
		return nil, []byte(packedSchedulerConfig(name)), nil
	case isPlugin(kind):
		schedConfig, err := pluginConfig(name, kind)
		return nil, schedConfig, err
	}
	cfg, counter, limiter := instrumentedClientConfig(e.cp.RESTConfig(), e.s.extenderQPS)
	x := &runExtender{verbs: newVerbStats(), counter: counter, limiter: limiter}
	// Both extenders talk to the API server as the components do (kubeclient.New).
	client, err := kubernetes.NewForConfig(kubeclient.Protobuf(cfg))
	if err != nil {
		return x, nil, err
	}
	var h = nothingHandler(client)
	if isOurs(kind) {
		ext, err := extender.New(extender.Options{Client: client, LeaseNamespace: leaseNamespace})
		if err != nil {
			return x, nil, err
		}
		if err := ext.Start(runCtx); err != nil {
			return x, nil, err
		}
		// As on SIGTERM: release the bind Leases, so that the next iteration's extender
		// (a new holder) takes the nodes at once rather than after they expire.
		x.shutdown = func() {
			sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
			defer scancel()
			ext.Shutdown(sctx)
		}
		h = ext.Handler(runCtx)
	}
	if x.url, err = serveHTTP(runCtx, x.verbs.wrap(h)); err != nil {
		return x, nil, err
	}
	schedConfig, err = withSchedulerName(lab.ExtenderSchedulerConfig(x.url), name, kind == kindOursNoPrio)
	return x, schedConfig, err
}

// startCPUProfile profiles the test process (which holds the extender) during an extender's
// run when BENCH_CPUPROFILE is set; stop stops it, once, and may be called again.
func (e *env) startCPUProfile(kind string) (stop func(), err error) {
	if e.s.cpuProfile == "" || !hasExtender(kind) {
		return func() {}, nil
	}
	f, err := os.Create(cpuProfilePath(e.s.cpuProfile, kind))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, err
	}
	var once sync.Once
	return func() { once.Do(func() { pprof.StopCPUProfile(); _ = f.Close() }) }, nil
}

// startProfiles takes the CPU profiles of the kube-apiserver and of the scheduler under test
// that BENCH_APISERVER_PROFILES and BENCH_SCHEDULER_PROFILES ask for; each channel gets the
// outcome of one.
func (e *env) startProfiles(ctx context.Context, kind, name string) []chan error {
	var profiles []chan error
	if e.s.apiProfiles != "" {
		profiled := make(chan error, 1)
		go func() {
			profiled <- e.apiserverProfile(ctx, filepath.Join(e.s.apiProfiles, "apiserver-"+kind+".prof"))
		}()
		profiles = append(profiles, profiled)
	}
	if e.s.schedProfiles != "" {
		profiled := make(chan error, 1)
		go func() {
			profiled <- e.schedulerProfile(ctx, name, filepath.Join(e.s.schedProfiles, "scheduler-"+kind+".prof"))
		}()
		profiles = append(profiles, profiled)
	}
	return profiles
}

// checkRun counts the nodes the run's pods were bound to and, for ours and the plugin, checks
// their records.
func (e *env) checkRun(ctx context.Context, name string, r *result) error {
	pods, err := e.client.CoreV1().Pods(benchutil.Namespace).List(ctx, benchutil.RunPods(name))
	if err != nil {
		return err
	}
	perNode := map[string]int64{}
	for _, p := range pods.Items {
		perNode[p.Spec.NodeName]++
	}
	r.nodesUsed, r.partUsed = len(perNode), partUsed(perNode, e.cores)
	if isOurs(r.kind) || isPlugin(r.kind) {
		return checkRecords(r.kind, pods.Items, e.s.pods)
	}
	return nil
}

// apiserverProfile writes a CPU profile of the kube-apiserver taken from its /debug/pprof
// (profiling is on by default) over the first seconds of the drain.
func (e *env) apiserverProfile(ctx context.Context, path string) error {
	return e.profile(ctx, "the kube-apiserver", e.client.CoreV1().RESTClient(), path)
}

// schedulerProfile writes a CPU profile of the scheduler under test taken from its
// /debug/pprof over the first seconds of the drain.
func (e *env) schedulerProfile(ctx context.Context, name, path string) error {
	client, err := e.schedulerClient(name)
	if err != nil {
		return fmt.Errorf("profiling %s: %w", name, err)
	}
	return e.profile(ctx, name, client, path)
}

// schedulerMetrics reads the /metrics of the scheduler under test (its secure port, as
// schedulerProfile).
func (e *env) schedulerMetrics(ctx context.Context, name string) (map[string]float64, error) {
	client, err := e.schedulerClient(name)
	if err != nil {
		return nil, fmt.Errorf("metrics of %s: %w", name, err)
	}
	raw, err := client.Get().AbsPath("/metrics").Timeout(30 * time.Second).DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("metrics of %s: %w", name, err)
	}
	return benchutil.ParseMetrics(bytes.NewReader(raw))
}

// schedulerClient is a client of the secure port of the scheduler called name, with the admin
// client certificate (delegated authentication and authorization); the scheduler's serving
// certificate is its own self-signed one on loopback, so it is not verified.
func (e *env) schedulerClient(name string) (rest.Interface, error) {
	url, ok := e.cp.SchedulerURL(name)
	if !ok {
		return nil, errors.New("the lab does not know its port")
	}
	cfg := e.cp.RESTConfig()
	cfg.Host, cfg.NegotiatedSerializer = url, scheme.Codecs.WithoutConversion()
	cfg.TLSClientConfig = rest.TLSClientConfig{Insecure: true, CertFile: cfg.CertFile, KeyFile: cfg.KeyFile, CertData: cfg.CertData, KeyData: cfg.KeyData}
	return rest.UnversionedRESTClientFor(cfg)
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

func isPlugin(kind string) bool { return runsPluginBinary(kind) || kind == kindPluginBase }

// runsPluginBinary reports whether the kind runs this tree's neuron-kube-scheduler.
func runsPluginBinary(kind string) bool {
	return kind == kindPlugin || kind == kindPluginAdaptive || kind == kindPluginSampled
}

// hasExtender reports whether the kind's scheduler calls an extender (held by the test process).
func hasExtender(kind string) bool { return kind == kindNothing || isOurs(kind) }

// withSchedulerName sets the first profile's schedulerName of a KubeSchedulerConfiguration
// and, with noPrioritize, drops the extenders' prioritize verb.
func withSchedulerName(config []byte, name string, noPrioritize bool) ([]byte, error) {
	return editConfig(config, name, func(m, _ map[string]any) {
		if !noPrioritize {
			return
		}
		exts, _ := m["extenders"].([]any)
		for _, x := range exts {
			if x, ok := x.(map[string]any); ok {
				delete(x, "prioritizeVerb")
			}
		}
	})
}

// editConfig sets the first profile's schedulerName of a KubeSchedulerConfiguration and lets
// edit change the configuration m and that profile.
func editConfig(config []byte, name string, edit func(m, profile map[string]any)) ([]byte, error) {
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
	edit(m, p)
	return yaml.Marshal(m)
}

// nodeCores returns the aws.amazon.com/neuroncore capacity of every node.
func nodeCores(ctx context.Context, client kubernetes.Interface) (map[string]int64, error) {
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := make(map[string]int64, len(nodes.Items))
	for _, n := range nodes.Items {
		q := n.Status.Capacity[topology.ResourceNeuronCore]
		out[n.Name] = q.Value()
	}
	return out, nil
}

// partUsed counts the nodes holding fewer of the run's one-core pods than they have cores
// (pods per node): those a tighter packing would have left empty or filled.
func partUsed(pods map[string]int64, cores map[string]int64) int {
	n := 0
	for node, count := range pods {
		if count < cores[node] {
			n++
		}
	}
	return n
}

// createNodes creates n plain Node objects, half trn1.32xlarge and half inf2.48xlarge, tainted
// like the lab's Neuron nodes, Ready, with the device plugin's resources.
func createNodes(ctx context.Context, client kubernetes.Interface, n int) error {
	cat := topology.DefaultCatalog()
	return benchutil.CreateNodes(ctx, client, n, func(i int) (benchutil.Node, error) {
		typ := "trn1.32xlarge"
		if i%2 == 1 {
			typ = "inf2.48xlarge"
		}
		it, err := cat.Get(typ)
		if err != nil {
			return benchutil.Node{}, err
		}
		devices := int64(it.Devices)
		cores := devices * int64(it.PhysicalCoresPerDevice)
		return benchutil.Node{
			Name: fmt.Sprintf("%s-%04d", strings.ReplaceAll(typ, ".", "-"), i), InstanceType: typ, Family: it.Family,
			Mode: labels.AllocationModeDevicePlugin, Why: "fake node of the scheduler benchmark",
			Capacity: corev1.ResourceList{
				corev1.ResourceCPU:            resource.MustParse("128"),
				corev1.ResourceMemory:         resource.MustParse("512Gi"),
				corev1.ResourcePods:           resource.MustParse("110"),
				topology.ResourceNeuron:       *resource.NewQuantity(devices, resource.DecimalSI),
				topology.ResourceNeuronDevice: *resource.NewQuantity(devices, resource.DecimalSI),
				topology.ResourceNeuronCore:   *resource.NewQuantity(cores, resource.DecimalSI),
			},
		}, nil
	})
}

// createPods creates the backlog: n pods for scheduler sched, each asking for one NeuronCore.
func createPods(ctx context.Context, client kubernetes.Interface, sched string, n int) error {
	one := resource.MustParse("1")
	return benchutil.CreateBacklog(ctx, client, sched, n, func(pod *corev1.Pod) {
		pod.Spec.Containers[0].Resources = corev1.ResourceRequirements{
			Limits:   corev1.ResourceList{topology.ResourceNeuronCore: one},
			Requests: corev1.ResourceList{topology.ResourceNeuronCore: one},
		}
	})
}

// shape describes how bindings spread over nodes in time: the median gap between two bindings
// to the same node (binds to one node are serialized by our extender), and the mean number of
// nodes receiving bindings in a 250 ms window.
func shape(seen map[string]benchutil.Binding) (gap time.Duration, active float64) {
	perNode := map[string][]time.Time{}
	var first, last time.Time
	for _, b := range seen {
		perNode[b.Node] = append(perNode[b.Node], b.At)
		if first.IsZero() || b.At.Before(first) {
			first = b.At
		}
		if b.At.After(last) {
			last = b.At
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

// checkRecords checks a run of ours or the plugin: every pod bound with a record naming its
// node and asking what it got, and no core (or, for device requests, no device) given to two
// pods on a node.
func checkRecords(kind string, pods []corev1.Pod, want int) error {
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
		return fmt.Errorf("%s: %d problems with the allocation records:\n  %s", kind, len(problems), strings.Join(problems, "\n  "))
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
	sb.WriteString("| scheduler | pods | seconds (start to last bind) | seconds (first to last bind) | pods/s | ratio to plain | ratio to do-nothing | nodes used | of them part-used | nodes bound to per 250 ms | median gap between binds to one node (ms) |\n")
	sb.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range results {
		fmt.Fprintf(&sb, "| %s | %d | %.2f | %.2f | %.1f | %s | %s | %d | %d | %.1f | %.0f |\n", r.kind, r.pods, r.wall.Seconds(), r.drain.Seconds(), r.rate(),
			ratio(r.rate(), rates[kindPlain]), ratio(r.rate(), rates[kindNothing]), r.nodesUsed, r.partUsed, r.active, float64(r.nodeGap.Microseconds())/1000)
	}
	sb.WriteString("\nIteration (mean pods/s of each scheduler's runs):")
	for _, k := range knownKinds {
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
	for _, k := range []string{kindOurs, kindPlugin, kindPlainPacked, kindPluginBase, kindPluginAdaptive, kindPluginSampled} {
		if _, ok := rates[k]; ok && rates[kindPlain] > 0 {
			fmt.Fprintf(&sb, " %s / plain %s;", k, ratio(rates[k], rates[kindPlain]))
		}
	}
	sb.WriteString("\n")

	runs := make([]benchutil.CPURun, len(results))
	for i, r := range results {
		runs[i] = benchutil.CPURun{Name: r.kind, CPU: r.cpu, Pods: r.pods}
	}
	sb.WriteString(benchutil.CPUTable("CPU per pod while draining (ms; 2 cores give 2000 ms per second; the test process holds the extender and the binding watch):", runs))
	sb.WriteString("| total CPU / wall (cores busy) |")
	for _, r := range results {
		fmt.Fprintf(&sb, " %.2f |", benchutil.TotalCPU(r.cpu)/r.wall.Seconds())
	}
	sb.WriteString("\n")

	sb.WriteString(formatSchedulerMetrics(results))
	sb.WriteString(formatExtenders(byKind))
	return sb.String()
}

// schedulerRows are the rows of formatSchedulerMetrics: a histogram of the kube-scheduler's
// /metrics and the labels of its series to add up.
var schedulerRows = []struct {
	what, metric string
	want         []string
}{
	{"scheduling algorithm (Filter to Score)", "scheduler_scheduling_algorithm_duration_seconds", nil},
	{"PreFilter", "scheduler_framework_extension_point_duration_seconds", []string{`extension_point="PreFilter"`}},
	{"Filter", "scheduler_framework_extension_point_duration_seconds", []string{`extension_point="Filter"`}},
	{"PreScore", "scheduler_framework_extension_point_duration_seconds", []string{`extension_point="PreScore"`}},
	{"Score", "scheduler_framework_extension_point_duration_seconds", []string{`extension_point="Score"`}},
	{"Reserve", "scheduler_framework_extension_point_duration_seconds", []string{`extension_point="Reserve"`}},
	{"Bind", "scheduler_framework_extension_point_duration_seconds", []string{`extension_point="Bind"`}},
	{"NodeResourcesFit Filter, one node (sampled)", "scheduler_plugin_execution_duration_seconds", []string{`plugin="NodeResourcesFit"`, `extension_point="Filter"`}},
	{"NeuronTopology Filter, one node (sampled)", "scheduler_plugin_execution_duration_seconds", []string{`plugin="NeuronTopology"`, `extension_point="Filter"`}},
	{"NeuronTopology Score, one node (sampled)", "scheduler_plugin_execution_duration_seconds", []string{`plugin="NeuronTopology"`, `extension_point="Score"`}},
}

// formatSchedulerMetrics renders the mean durations the scheduler under test measured itself,
// per run: the scheduling algorithm and each extension point per pod, and a few plugins' single
// calls (the scheduler samples those).
func formatSchedulerMetrics(results []result) string {
	var sb strings.Builder
	sb.WriteString("\nThe scheduler under test, from its /metrics (mean ms; extension points per pod, a plugin's per call):\n\n| |")
	for _, r := range results {
		sb.WriteString(" " + r.kind + " |")
	}
	sb.WriteString("\n|---|" + strings.Repeat("---:|", len(results)) + "\n")
	for _, row := range schedulerRows {
		line := "| " + row.what + " |"
		any := false
		for _, r := range results {
			mean, n := benchutil.HistogramMean(r.sched, row.metric, row.want...)
			if n == 0 {
				line += " - |"
				continue
			}
			any = true
			line += fmt.Sprintf(" %.3f |", float64(mean.Nanoseconds())/1e6)
		}
		if any {
			sb.WriteString(line + "\n")
		}
	}
	return sb.String()
}

// formatExtenders renders, for the extenders' last runs, where their time goes: per verb
// (server side), per API request (client side) and, for ours, its own /metrics.
func formatExtenders(byKind map[string]result) string {
	var sb strings.Builder
	for _, kind := range []string{kindNothing, kindOurs, kindOursNoPrio} {
		if r, ok := byKind[kind]; ok && r.verbs != nil {
			sb.WriteString(formatExtenderCalls(kind, r))
		}
	}
	for _, kind := range []string{kindOurs, kindOursNoPrio} {
		r, ok := byKind[kind]
		if !ok || r.metrics == nil {
			continue
		}
		fm, fn := benchutil.HistogramMean(r.metrics, "neuron_scheduler_extender_filter_duration_seconds")
		bm, bn := benchutil.HistogramMean(r.metrics, "neuron_scheduler_extender_bind_duration_seconds")
		fmt.Fprintf(&sb, "\n%s, from its /metrics: filter %.0f calls, mean %.2f ms (p50 %s, p99 %s); bind %.0f calls, mean %.2f ms (p50 %s, p99 %s); bind retries %.0f\n",
			kind, fn, float64(fm.Microseconds())/1000,
			benchutil.HistogramQuantile(r.metrics, "neuron_scheduler_extender_filter_duration_seconds", 0.5),
			benchutil.HistogramQuantile(r.metrics, "neuron_scheduler_extender_filter_duration_seconds", 0.99),
			bn, float64(bm.Microseconds())/1000,
			benchutil.HistogramQuantile(r.metrics, "neuron_scheduler_extender_bind_duration_seconds", 0.5),
			benchutil.HistogramQuantile(r.metrics, "neuron_scheduler_extender_bind_duration_seconds", 0.99),
			r.metrics["neuron_scheduler_extender_bind_retries_total"])
	}
	return sb.String()
}

// formatExtenderCalls renders an extender's calls: per verb, per API request, and what a
// bind's time is made of.
func formatExtenderCalls(kind string, r result) string {
	var sb strings.Builder
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
			kind, benchutil.Millis(bind.mean()), benchutil.Millis(perBind), benchutil.Millis(bind.mean()-perBind))
	}
	return sb.String()
}
