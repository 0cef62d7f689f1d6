//go:build e2e

// Package dra measures how fast the real kube-scheduler binds pods whose ResourceClaims ask for
// Neuron devices from the ResourceSlices neuron-dra-driver publishes, with and without a
// matchAttribute constraint on the devicegroup ids. See README.md.
package dra

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/kube-neuron/kube-neuron/internal/dra"
	"github.com/kube-neuron/kube-neuron/internal/lab"
	"github.com/kube-neuron/kube-neuron/test/bench/benchutil"
)

const (
	requestName = "neurons"

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
	begin := time.Now()
	l := benchutil.StartLab(b, "kn-bench-dra-", s.keep)
	ctx, client, dir := l.Ctx, l.Client, l.Dir
	f, err := buildFleet(ctx, dir, s.nodes)
	if err != nil {
		b.Fatal(err)
	}
	e := &env{s: s, cp: l.CP, client: client, fleet: f}
	if err := f.createNodes(ctx, client); err != nil {
		b.Fatal(err)
	}
	if err := createDeviceClass(ctx, client); err != nil {
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
		benchutil.WriteReport(b, s.out, formatReport(s, i, results))
	}
	b.StopTimer()
	if b.N*s.rounds > 1 {
		benchutil.WriteReport(b, s.out, formatSummary(s, all))
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
	w, err := benchutil.WatchBindings(runCtx, e.client, name, r.pods)
	if err != nil {
		return r, err
	}

	cpu0 := benchutil.CPUSeconds(e.cp)
	start := time.Now()
	if err := e.cp.StartScheduler(ctx, name, []byte("profiles:\n- schedulerName: "+name+"\n")); err != nil {
		return r, err
	}
	defer func() {
		if serr := benchutil.StopProcess(e.cp, name); serr != nil && err == nil {
			err = serr
		}
	}()
	schedCPU0 := benchutil.CPUSeconds(e.cp)[name] // its start-up left out: backlogs differ in size
	first, last, err := w.Wait(ctx, e.cp.LogPath(name))
	if err != nil {
		return r, err
	}
	cpu1 := benchutil.CPUSeconds(e.cp)
	r.wall, r.drain = last.Sub(start), last.Sub(first)
	r.cpu = benchutil.CPUDelta(cpu1, cpu0)
	delete(r.cpu, name)
	r.cpu[schedName] = cpu1[name] - schedCPU0
	if r.metrics, err = schedulerMetrics(ctx, e.cp, name); err != nil {
		return r, fmt.Errorf("scraping the scheduler's /metrics: %w", err)
	}
	if r.aligned, r.nodesUsed, err = checkAllocations(ctx, e.client, e.fleet, name, c, r.pods); err != nil {
		return r, err
	}
	if err := benchutil.StopProcess(e.cp, name); err != nil {
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
	_, err := client.ResourceV1().ResourceClaimTemplates(benchutil.Namespace).Create(ctx, &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       resourceapi.ResourceClaimTemplateSpec{Spec: claimSpec(c)},
	}, metav1.CreateOptions{})
	return err
}

// createPods creates the backlog: n pods for scheduler sched, each with a claim from the
// template of the same name and a tiny CPU request.
func createPods(ctx context.Context, client kubernetes.Interface, sched string, n int) error {
	cpu := resource.MustParse("10m")
	return benchutil.CreateBacklog(ctx, client, sched, n, func(pod *corev1.Pod) {
		pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: requestName, ResourceClaimTemplateName: ptr.To(sched)}}
		pod.Spec.Containers[0].Resources = corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: cpu},
			Claims:   []corev1.ResourceClaim{{Name: requestName}},
		}
	})
}

// waitClaimsCreated waits until the resourceclaim controller has created the claim of every pod
// of the run and recorded it in the pod's status (the scheduler looks the claim up there), so the
// scheduler starts on a complete backlog.
func waitClaimsCreated(ctx context.Context, client kubernetes.Interface, sched string, n int) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		pods, err := client.CoreV1().Pods(benchutil.Namespace).List(ctx, benchutil.RunPods(sched))
		if err != nil {
			return err
		}
		claims, err := client.ResourceV1().ResourceClaims(benchutil.Namespace).List(ctx, metav1.ListOptions{})
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
	if err := benchutil.DeletePods(ctx, client, sched); err != nil {
		return err
	}
	if err := client.ResourceV1().ResourceClaimTemplates(benchutil.Namespace).Delete(ctx, sched, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting the claim template %s: %w", sched, err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		claims, err := client.ResourceV1().ResourceClaims(benchutil.Namespace).List(ctx, metav1.ListOptions{})
		if err == nil && len(claims.Items) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			left := -1
			if err == nil {
				left = len(claims.Items)
			}
			return fmt.Errorf("the claims of %s are not gone after 2 minutes (%d left; %v)", sched, left, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// checkAllocations checks the run: every claim allocated to the node of its pod with count
// devices of our driver, no device of a node in two claims, and for a matchAttribute claim one
// devicegroup id. It returns the share of claims that got one aligned block (deviceIds
// k*count..k*count+count-1) and the number of nodes used.
func checkAllocations(ctx context.Context, client kubernetes.Interface, f *fleet, sched string, c config, want int) (aligned float64, nodesUsed int, err error) {
	pods, err := client.CoreV1().Pods(benchutil.Namespace).List(ctx, benchutil.RunPods(sched))
	if err != nil {
		return 0, 0, err
	}
	claims, err := client.ResourceV1().ResourceClaims(benchutil.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, 0, err
	}
	a := &allocationCheck{f: f, c: c, byName: map[string]*resourceapi.ResourceClaim{}, owner: map[string]string{}, nodes: map[string]bool{},
		group: resourceapi.QualifiedName(fmt.Sprintf("resource.aws.com/devicegroup%d_id", c.matchGroup))}
	for i := range claims.Items {
		a.byName[claims.Items[i].Name] = &claims.Items[i]
	}
	if c.fragmented {
		for _, n := range f.nodes {
			a.owner[n+"/"+dra.DeviceName(0)] = "the filler claim"
		}
	}
	for i := range pods.Items {
		a.pod(&pods.Items[i])
	}
	if len(pods.Items) != want {
		a.problems = append(a.problems, fmt.Sprintf("%d pods, want %d", len(pods.Items), want))
	}
	if len(a.problems) > 0 {
		problems := a.problems
		if len(problems) > 10 {
			problems = append(problems[:10], fmt.Sprintf("... %d more", len(problems)-10))
		}
		return 0, 0, fmt.Errorf("%d problems with the allocations:\n  %s", len(a.problems), strings.Join(problems, "\n  "))
	}
	return float64(a.aligned) / float64(want), len(a.nodes), nil
}

// allocationCheck is checkAllocations' state over the run's pods.
type allocationCheck struct {
	f        *fleet
	c        config
	group    resourceapi.QualifiedName
	byName   map[string]*resourceapi.ResourceClaim
	owner    map[string]string // node/device -> claim
	nodes    map[string]bool
	aligned  int
	problems []string
}

// pod checks the claim of one pod.
func (a *allocationCheck) pod(p *corev1.Pod) {
	if p.Spec.NodeName == "" {
		a.problems = append(a.problems, p.Name+" not bound")
		return
	}
	a.nodes[p.Spec.NodeName] = true
	if len(p.Status.ResourceClaimStatuses) != 1 || p.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
		a.problems = append(a.problems, p.Name+": no claim in its status")
		return
	}
	cl := a.byName[*p.Status.ResourceClaimStatuses[0].ResourceClaimName]
	if cl == nil || cl.Status.Allocation == nil {
		a.problems = append(a.problems, p.Name+": claim missing or not allocated")
		return
	}
	results := cl.Status.Allocation.Devices.Results
	if len(results) != a.c.count {
		a.problems = append(a.problems, fmt.Sprintf("%s: %d devices allocated, want %d", cl.Name, len(results), a.c.count))
		return
	}
	var ids []int
	groups := map[string]bool{}
	for _, res := range results {
		id, ok := a.device(cl.Name, p.Spec.NodeName, res)
		if !ok {
			continue
		}
		ids = append(ids, id)
		if a.c.matchGroup > 0 {
			groups[a.f.stringAttr(res.Pool, id, a.group)] = true
		}
	}
	if a.c.matchGroup > 0 && len(groups) != 1 {
		a.problems = append(a.problems, fmt.Sprintf("%s: devices %v span %d %s values", cl.Name, ids, len(groups), a.group))
	}
	slices.Sort(ids)
	if len(ids) == a.c.count && ids[0]%a.c.count == 0 && ids[a.c.count-1] == ids[0]+a.c.count-1 {
		a.aligned++
	}
}

// device checks one device given to claim on node and returns its id; a device of another
// driver or pool, or given to two claims, is a problem.
func (a *allocationCheck) device(claim, node string, res resourceapi.DeviceRequestAllocationResult) (int, bool) {
	if res.Driver != dra.DriverName || res.Pool != node {
		a.problems = append(a.problems, fmt.Sprintf("%s: device %s/%s/%s, want one of driver %s in pool %s", claim, res.Driver, res.Pool, res.Device, dra.DriverName, node))
		return 0, false
	}
	id, ok := dra.ParseDeviceName(res.Device)
	if !ok {
		a.problems = append(a.problems, fmt.Sprintf("%s: unexpected device %s", claim, res.Device))
		return 0, false
	}
	k := res.Pool + "/" + res.Device
	if o, ok := a.owner[k]; ok {
		a.problems = append(a.problems, fmt.Sprintf("device %s given to %s and %s", k, o, claim))
	}
	a.owner[k] = claim
	return id, true
}
