//go:build e2e

// Package dra measures how fast the real kube-scheduler binds pods whose ResourceClaims ask for
// Neuron devices from the ResourceSlices neuron-dra-driver publishes, with and without a
// matchAttribute constraint on the devicegroup ids. See README.md.
package dra

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/kube-neuron/kube-neuron/internal/dra"
	"github.com/kube-neuron/kube-neuron/internal/lab"
	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/test/bench/benchutil"
	"github.com/kube-neuron/kube-neuron/test/e2e/framework"
)

const (
	benchNamespace = "bench"
	runLabel       = "kube-neuron.io/bench-run"
	requestName    = "neurons"

	// stallTimeout fails a run when no pod was bound for this long.
	stallTimeout = 2 * time.Minute
	// fillLimit keeps every backlog at most this share of the fleet's capacity for its claim
	// size, so that no pod stays pending because the fleet is full.
	fillLimit = 0.75
)

// config is one kind of claim.
type config struct {
	name       string
	count      int    // devices per claim
	matchGroup int    // N of the matchAttribute resource.aws.com/devicegroupN_id constraint; 0: none
	layout     layout // order of the devices in the slices
	fragmented bool   // neurondevice0 of every node is taken by a one-device claim before the run
}

// slices describes the configuration's ResourceSlices.
func (c config) slices() string {
	if c.fragmented {
		return string(c.layout) + ", neurondevice0 taken"
	}
	return string(c.layout)
}

// plain is the configuration without the constraint on the same slices.
func (c config) plain() config {
	for _, p := range configs {
		if p.matchGroup == 0 && p.count == c.count && p.layout == c.layout && p.fragmented == c.fragmented {
			return p
		}
	}
	return config{}
}

func (c config) constraint() string {
	if c.matchGroup == 0 {
		return "-"
	}
	return fmt.Sprintf("matchAttribute devicegroup%d_id", c.matchGroup)
}

// configs are the known configurations, in the default order.
var configs = []config{
	{name: "count4-plain", count: 4, layout: layoutOrdered},
	{name: "count4-match", count: 4, matchGroup: 4, layout: layoutOrdered},
	{name: "count8-plain", count: 8, layout: layoutOrdered},
	{name: "count8-match", count: 8, matchGroup: 8, layout: layoutOrdered},
	{name: "count1", count: 1, layout: layoutOrdered},
	// Diagnostics: the same devices in a random order in each slice.
	{name: "count4-plain-shuffled", count: 4, layout: layoutShuffled},
	{name: "count4-match-shuffled", count: 4, matchGroup: 4, layout: layoutShuffled},
	// Diagnostics: our slices on nodes where a one-device claim holds neurondevice0.
	{name: "count4-plain-fragmented", count: 4, layout: layoutOrdered, fragmented: true},
	{name: "count4-match-fragmented", count: 4, matchGroup: 4, layout: layoutOrdered, fragmented: true},
}

const baseline = "count4-plain"

type settings struct {
	nodes, pods int
	rounds      int    // rounds per benchmark iteration, odd ones in reverse order
	out         string // file for the report, "" to print only
	keep        bool   // keep the lab directory
	configs     []config
}

func loadSettings(b *testing.B) settings {
	s := settings{
		nodes: benchutil.EnvInt(b, "BENCH_NODES", 100),
		pods:  benchutil.EnvInt(b, "BENCH_PODS", 300),
		// Two rounds, the second in reverse order, so that a drift of the machine's load weighs
		// on every configuration alike. Rounds, not -benchtime: the testing package runs a
		// benchmark with b.N = 1 before b.N = n, which would set up a second control plane.
		rounds: benchutil.EnvInt(b, "BENCH_ROUNDS", 2),
		out:    os.Getenv("BENCH_OUT"),
		keep:   os.Getenv("BENCH_KEEP") != "",
	}
	v := os.Getenv("BENCH_CONFIGS")
	if v == "" {
		s.configs = configs
		return s
	}
	for _, name := range strings.Split(v, ",") {
		name = strings.TrimSpace(name)
		i := slices.IndexFunc(configs, func(c config) bool { return c.name == name })
		if i < 0 {
			var known []string
			for _, c := range configs {
				known = append(known, c.name)
			}
			b.Fatalf("BENCH_CONFIGS: unknown configuration %q (known: %s)", name, strings.Join(known, ", "))
		}
		s.configs = append(s.configs, configs[i])
	}
	return s
}

// podsFor is the backlog of a configuration: BENCH_PODS, at most fillLimit of the claims of
// that size the fleet holds.
func (s settings) podsFor(c config, devicesPerNode int) int {
	free := devicesPerNode
	if c.fragmented {
		free--
	}
	return min(s.pods, int(fillLimit*float64(s.nodes*(free/c.count))))
}

// env is what every run shares.
type env struct {
	s      settings
	cp     *lab.ControlPlane
	client kubernetes.Interface
	fleet  *fleet
}

// BenchmarkDRASchedulingThroughput drains a backlog of pods with one ResourceClaim each through
// a fresh kube-scheduler per configuration, on one fleet of trn2.48xlarge nodes with our
// ResourceSlices.
//
//	go test -tags e2e -run '^$' -bench DRASchedulingThroughput -benchtime 1x ./test/bench/dra/
func BenchmarkDRASchedulingThroughput(b *testing.B) {
	s := loadSettings(b)
	binDir, err := framework.BinDir()
	if err != nil {
		b.Fatal(err)
	}
	dir, err := os.MkdirTemp("/tmp", "kn-bench-dra-")
	if err != nil {
		b.Fatal(err)
	}
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
	f, err := buildFleet(ctx, dir, s.nodes)
	if err != nil {
		b.Fatal(err)
	}
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
	e := &env{s: s, cp: cp, client: client, fleet: f}
	if err := f.createNodes(ctx, client); err != nil {
		b.Fatal(err)
	}
	if err := createDeviceClass(ctx, client); err != nil {
		b.Fatal(err)
	}
	if err := benchutil.CreateNamespace(ctx, client, benchNamespace); err != nil {
		b.Fatal(err)
	}
	fmt.Fprintf(os.Stderr, "bench: control plane and %d %s nodes ready in %v (%s)\n", s.nodes, instanceType, time.Since(begin).Round(time.Millisecond), dir)

	all := map[string][]result{}
	b.ResetTimer()
	for i := range b.N * s.rounds {
		order := slices.Clone(s.configs)
		if i%2 == 1 {
			slices.Reverse(order)
		}
		results := make([]result, len(s.configs))
		for _, c := range order {
			r, err := e.run(ctx, c, i)
			if err != nil {
				b.Fatalf("%s run %d: %v", c.name, i, err)
			}
			fmt.Fprintf(os.Stderr, "bench: %-24s %d pods drained at %.1f pods/s (%.2f s from scheduler start)\n", c.name, r.pods, r.rate(), r.wall.Seconds())
			results[slices.IndexFunc(s.configs, func(x config) bool { return x.name == c.name })] = r
			all[c.name] = append(all[c.name], r)
		}
		e.write(b, formatReport(s, i, results))
	}
	b.StopTimer()
	if b.N*s.rounds > 1 {
		e.write(b, formatSummary(s, all))
	}
	for _, c := range s.configs {
		b.ReportMetric(meanRate(all[c.name]), "pods/s-"+c.name)
		if p := c.plain(); c.matchGroup > 0 && meanRate(all[p.name]) > 0 {
			b.ReportMetric(meanRate(all[c.name])/meanRate(all[p.name]), "ratio-"+c.name+"/"+p.name)
			b.ReportMetric(meanSchedCPU(all[c.name])/meanSchedCPU(all[p.name]), "schedCPU-ratio-"+c.name+"/"+p.name)
		}
	}
	b.ReportMetric(0, "ns/op") // the wall time of an iteration says nothing
}

// write prints a report and appends it to BENCH_OUT.
func (e *env) write(b *testing.B, report string) {
	fmt.Print(report)
	if e.s.out == "" {
		return
	}
	f, err := os.OpenFile(e.s.out, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err == nil {
		_, err = f.WriteString(report)
		err = errors.Join(err, f.Close())
	}
	if err != nil {
		b.Errorf("writing BENCH_OUT: %v", err)
	}
}

// run publishes the configuration's slice layout, creates its claim template and backlog, waits
// until the resourceclaim controller created every claim, starts a kube-scheduler for it, waits
// until every pod is bound, checks the allocations and cleans up (pods deleted, claims gone).
func (e *env) run(ctx context.Context, c config, iter int) (r result, err error) {
	name := fmt.Sprintf("bench-%s-%d", c.name, iter)
	r = result{config: c, pods: e.s.podsFor(c, e.fleet.devices)}
	if r.pods < 1 {
		return r, fmt.Errorf("%d nodes hold no claim of %d devices", e.s.nodes, c.count)
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()

	if err := e.fleet.publish(ctx, e.client, c.layout); err != nil {
		return r, err
	}
	if err := e.fleet.fragment(ctx, e.client, c.fragmented); err != nil {
		return r, err
	}
	if err := createClaimTemplate(ctx, e.client, name, c); err != nil {
		return r, err
	}
	if err := createPods(ctx, e.client, name, r.pods); err != nil {
		return r, err
	}
	if err := waitClaimsCreated(ctx, e.client, name, r.pods); err != nil {
		return r, err
	}
	w, err := watchBindings(runCtx, e.client, name, r.pods)
	if err != nil {
		return r, err
	}

	cpu0 := cpuSeconds(e.cp)
	start := time.Now()
	if err := e.cp.StartScheduler(ctx, name, []byte("profiles:\n- schedulerName: "+name+"\n")); err != nil {
		return r, err
	}
	defer func() {
		if serr := stopProcess(e.cp, name); serr != nil && err == nil {
			err = serr
		}
	}()
	schedCPU0 := cpuSeconds(e.cp)[name] // its start-up left out: backlogs differ in size
	first, last, err := w.wait(ctx, e.cp.LogPath(name))
	if err != nil {
		return r, err
	}
	cpu1 := cpuSeconds(e.cp)
	r.wall, r.drain = last.Sub(start), last.Sub(first)
	r.cpu = map[string]float64{}
	for p, v := range cpu1 {
		if p == name {
			r.cpu[schedName] = v - schedCPU0
			continue
		}
		r.cpu[p] = v - cpu0[p]
	}
	if r.metrics, err = schedulerMetrics(ctx, e.cp, name); err != nil {
		return r, fmt.Errorf("scraping the scheduler's /metrics: %w", err)
	}
	if r.aligned, r.nodesUsed, err = checkAllocations(ctx, e.client, e.fleet, name, c, r.pods); err != nil {
		return r, err
	}
	if err := stopProcess(e.cp, name); err != nil {
		return r, err
	}
	cancel()
	return r, cleanup(ctx, e.client, name)
}

// claimSpec is the configuration's claim: count devices of our class on a trn2.48xlarge (the
// seed's selector), with the constraint.
func claimSpec(c config) resourceapi.ResourceClaimSpec {
	spec := resourceapi.DeviceClaim{
		Requests: []resourceapi.DeviceRequest{{
			Name: requestName,
			Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: dra.DriverName,
				AllocationMode:  resourceapi.DeviceAllocationModeExactCount,
				Count:           int64(c.count),
				Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
					Expression: "device.attributes['" + dra.DriverName + "'].instanceType == '" + instanceType + "'",
				}}},
			},
		}},
	}
	if c.matchGroup > 0 {
		spec.Constraints = []resourceapi.DeviceConstraint{{
			Requests:       []string{requestName},
			MatchAttribute: ptr.To(resourceapi.FullyQualifiedName(fmt.Sprintf("resource.aws.com/devicegroup%d_id", c.matchGroup))),
		}}
	}
	return resourceapi.ResourceClaimSpec{Devices: spec}
}

// createClaimTemplate creates the configuration's ResourceClaimTemplate, named like the run.
func createClaimTemplate(ctx context.Context, client kubernetes.Interface, name string, c config) error {
	_, err := client.ResourceV1().ResourceClaimTemplates(benchNamespace).Create(ctx, &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       resourceapi.ResourceClaimTemplateSpec{Spec: claimSpec(c)},
	}, metav1.CreateOptions{})
	return err
}

// createPods creates the backlog: n pods for scheduler sched, each with a claim from the
// template of the same name, the Neuron toleration and a tiny CPU request.
func createPods(ctx context.Context, client kubernetes.Interface, sched string, n int) error {
	cpu := resource.MustParse("10m")
	return benchutil.Parallel(n, 8, func(i int) error {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%05d", sched, i), Namespace: benchNamespace, Labels: map[string]string{runLabel: sched}},
			Spec: corev1.PodSpec{
				SchedulerName:                 sched,
				TerminationGracePeriodSeconds: ptr.To[int64](0),
				Tolerations:                   []corev1.Toleration{{Key: labels.NeuronTaintKey, Operator: corev1.TolerationOpEqual, Value: labels.NeuronTaintValue, Effect: corev1.TaintEffectNoSchedule}},
				ResourceClaims:                []corev1.PodResourceClaim{{Name: requestName, ResourceClaimTemplateName: ptr.To(sched)}},
				Containers: []corev1.Container{{
					Name:  "main",
					Image: "registry.k8s.io/pause:3.10",
					Resources: corev1.ResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceCPU: cpu},
						Claims:   []corev1.ResourceClaim{{Name: requestName}},
					},
				}},
			},
		}
		_, err := client.CoreV1().Pods(benchNamespace).Create(ctx, pod, metav1.CreateOptions{})
		return err
	})
}

// waitClaimsCreated waits until the resourceclaim controller has created the claim of every pod
// of the run and recorded it in the pod's status (the scheduler looks the claim up there), so the
// scheduler starts on a complete backlog.
func waitClaimsCreated(ctx context.Context, client kubernetes.Interface, sched string, n int) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		pods, err := client.CoreV1().Pods(benchNamespace).List(ctx, metav1.ListOptions{LabelSelector: runLabel + "=" + sched})
		if err != nil {
			return err
		}
		claims, err := client.ResourceV1().ResourceClaims(benchNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		ready := 0
		for _, p := range pods.Items {
			if len(p.Status.ResourceClaimStatuses) == 1 && p.Status.ResourceClaimStatuses[0].ResourceClaimName != nil {
				ready++
			}
		}
		if ready == n && len(claims.Items) == n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after 2 minutes %d of %d pods have their claim recorded, %d claims exist", ready, n, len(claims.Items))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// cleanup deletes the run's pods at once (no kubelet finishes a graceful deletion) and its claim
// template, and waits until the pods and their claims are gone: the resourceclaim controller
// deallocates and deletes the claims of deleted pods, so the next run starts on free devices.
func cleanup(ctx context.Context, client kubernetes.Interface, sched string) error {
	sel := metav1.ListOptions{LabelSelector: runLabel + "=" + sched}
	if err := client.CoreV1().Pods(benchNamespace).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, sel); err != nil {
		return fmt.Errorf("deleting the pods of %s: %w", sched, err)
	}
	if err := client.ResourceV1().ResourceClaimTemplates(benchNamespace).Delete(ctx, sched, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting the claim template %s: %w", sched, err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		pods, perr := client.CoreV1().Pods(benchNamespace).List(ctx, sel)
		claims, cerr := client.ResourceV1().ResourceClaims(benchNamespace).List(ctx, metav1.ListOptions{})
		if perr == nil && cerr == nil && len(pods.Items) == 0 && len(claims.Items) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			np, nc := -1, -1
			if perr == nil {
				np = len(pods.Items)
			}
			if cerr == nil {
				nc = len(claims.Items)
			}
			return fmt.Errorf("the pods and claims of %s are not gone after 2 minutes (%d pods, %d claims left; %v)", sched, np, nc, errors.Join(perr, cerr))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// checkAllocations checks the run: every claim allocated to the node of its pod with count
// devices of our driver, no device of a node in two claims, and for a matchAttribute claim one
// devicegroup id. It returns the share of claims that got one aligned block (deviceIds
// k*count..k*count+count-1) and the number of nodes used.
func checkAllocations(ctx context.Context, client kubernetes.Interface, f *fleet, sched string, c config, want int) (aligned float64, nodesUsed int, err error) {
	pods, err := client.CoreV1().Pods(benchNamespace).List(ctx, metav1.ListOptions{LabelSelector: runLabel + "=" + sched})
	if err != nil {
		return 0, 0, err
	}
	claims, err := client.ResourceV1().ResourceClaims(benchNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, 0, err
	}
	byName := map[string]*resourceapi.ResourceClaim{}
	for i := range claims.Items {
		byName[claims.Items[i].Name] = &claims.Items[i]
	}
	group := resourceapi.QualifiedName(fmt.Sprintf("resource.aws.com/devicegroup%d_id", c.matchGroup))
	owner := map[string]string{} // node/device -> claim
	if c.fragmented {
		for _, n := range f.nodes {
			owner[n+"/"+dra.DeviceName(0)] = "the filler claim"
		}
	}
	nodes := map[string]bool{}
	var problems []string
	nAligned := 0
	for _, p := range pods.Items {
		if p.Spec.NodeName == "" {
			problems = append(problems, p.Name+" not bound")
			continue
		}
		nodes[p.Spec.NodeName] = true
		if len(p.Status.ResourceClaimStatuses) != 1 || p.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
			problems = append(problems, p.Name+": no claim in its status")
			continue
		}
		cl := byName[*p.Status.ResourceClaimStatuses[0].ResourceClaimName]
		if cl == nil || cl.Status.Allocation == nil {
			problems = append(problems, p.Name+": claim missing or not allocated")
			continue
		}
		results := cl.Status.Allocation.Devices.Results
		if len(results) != c.count {
			problems = append(problems, fmt.Sprintf("%s: %d devices allocated, want %d", cl.Name, len(results), c.count))
			continue
		}
		var ids []int
		groups := map[string]bool{}
		for _, res := range results {
			if res.Driver != dra.DriverName || res.Pool != p.Spec.NodeName {
				problems = append(problems, fmt.Sprintf("%s: device %s/%s/%s, want one of driver %s in pool %s", cl.Name, res.Driver, res.Pool, res.Device, dra.DriverName, p.Spec.NodeName))
				continue
			}
			id, ok := dra.ParseDeviceName(res.Device)
			if !ok {
				problems = append(problems, fmt.Sprintf("%s: unexpected device %s", cl.Name, res.Device))
				continue
			}
			ids = append(ids, id)
			k := res.Pool + "/" + res.Device
			if o, ok := owner[k]; ok {
				problems = append(problems, fmt.Sprintf("device %s given to %s and %s", k, o, cl.Name))
			}
			owner[k] = cl.Name
			if c.matchGroup > 0 {
				groups[f.stringAttr(res.Pool, id, group)] = true
			}
		}
		if c.matchGroup > 0 && len(groups) != 1 {
			problems = append(problems, fmt.Sprintf("%s: devices %v span %d %s values", cl.Name, ids, len(groups), group))
		}
		slices.Sort(ids)
		if len(ids) == c.count && ids[0]%c.count == 0 && ids[c.count-1] == ids[0]+c.count-1 {
			nAligned++
		}
	}
	if len(pods.Items) != want {
		problems = append(problems, fmt.Sprintf("%d pods, want %d", len(pods.Items), want))
	}
	if len(problems) > 0 {
		if len(problems) > 10 {
			problems = append(problems[:10], fmt.Sprintf("... %d more", len(problems)-10))
		}
		return 0, 0, fmt.Errorf("%d problems with the allocations:\n  %s", len(problems), strings.Join(problems, "\n  "))
	}
	return float64(nAligned) / float64(want), len(nodes), nil
}

// stopProcess stops the control plane's process called name (a scheduler under test) by its
// pid: SIGTERM, then SIGKILL after 5 s. It is a no-op when the process already exited.
func stopProcess(cp *lab.ControlPlane, name string) error {
	pid := pidOf(cp, name)
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

func pidOf(cp *lab.ControlPlane, name string) int {
	for _, p := range cp.Processes() {
		if p.Name == name {
			return p.PID
		}
	}
	return 0
}
