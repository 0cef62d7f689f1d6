package autoscaler

import (
	"context"
	"errors"
	"io"
	"maps"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	"github.com/kube-neuron/kube-neuron/internal/autoscaler/plan"
	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/testkit"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// fakeProvider keeps its nodes in memory, by node name: a launched node is launching until the
// test says otherwise.
type fakeProvider struct {
	mu        sync.Mutex
	instances map[string]Instance
	launches  []NodeRequest
	deleted   []string
	recorded  [][]string // SetPlannedPods calls' pods
	recordErr error      // SetPlannedPods fails with it
	launchErr error      // Launch fails with it
	// nodeName, when set, names the node launched for a request otherwise than the request
	// (as EC2 does: the private DNS name), and the instance carries RequestNameAnnotation.
	nodeName func(NodeRequest) string
	// reservations and reservationsErr are what Reservations returns.
	reservations    []Reservation
	reservationsErr error
}

var _ Provider = (*fakeProvider)(nil)

func newFakeProvider() *fakeProvider { return &fakeProvider{instances: map[string]Instance{}} }

func (p *fakeProvider) Name() string { return "fake" }

func (p *fakeProvider) Launch(_ context.Context, r NodeRequest) (Instance, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.launchErr != nil {
		return Instance{}, p.launchErr
	}
	for _, in := range p.instances {
		if in.Name == r.Name || in.Annotations[RequestNameAnnotation] == r.Name {
			return in, nil
		}
	}
	in := Instance{Name: r.Name, ProviderID: "fake:///" + r.Name, Type: r.Type, Launching: true, Labels: r.Labels, Annotations: r.Annotations}
	if p.nodeName != nil {
		in.Name = p.nodeName(r)
		in.Annotations = maps.Clone(r.Annotations)
		in.Annotations[RequestNameAnnotation] = r.Name
	}
	p.instances[in.Name] = in
	p.launches = append(p.launches, r)
	return in, nil
}

func (p *fakeProvider) Reservations(context.Context) ([]Reservation, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.reservations), p.reservationsErr
}

func (p *fakeProvider) LaunchUltraServer(ctx context.Context, _ string, nodes []NodeRequest) ([]Instance, error) {
	var out []Instance
	for _, r := range nodes {
		in, err := p.Launch(ctx, r)
		if err != nil {
			return nil, err
		}
		out = append(out, in)
	}
	return out, nil
}

// rename makes the provider list a node under another name from now on, as EC2 does once it
// reports the private DNS name RunInstances had not returned yet.
func (p *fakeProvider) rename(from, to string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	in := p.instances[from]
	delete(p.instances, from)
	in.Name = to
	p.instances[to] = in
}

// setLaunching sets whether the provider reports a node as launching.
func (p *fakeProvider) setLaunching(name string, launching bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	in := p.instances[name]
	in.Launching = launching
	p.instances[name] = in
}

func (p *fakeProvider) Instances(context.Context) ([]Instance, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []Instance
	for _, in := range p.instances {
		out = append(out, in)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (p *fakeProvider) Delete(_ context.Context, name string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.instances, name)
	p.deleted = append(p.deleted, name)
	return nil
}

func (p *fakeProvider) SetPlannedPods(_ context.Context, name string, pods []string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.recorded = append(p.recorded, slices.Clone(pods))
	if p.recordErr != nil {
		return p.recordErr
	}
	in, ok := p.instances[name]
	if !ok {
		return errors.New("no node " + name)
	}
	in.Annotations = maps.Clone(in.Annotations)
	if in.Annotations == nil {
		in.Annotations = map[string]string{}
	}
	in.Annotations[PlannedPodsAnnotation] = strings.Join(pods, ",")
	p.instances[name] = in
	return nil
}

func (p *fakeProvider) plannedPods(name string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.instances[name].Annotations[PlannedPodsAnnotation]
}

func (p *fakeProvider) records() [][]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.recorded)
}

func (p *fakeProvider) launched() []NodeRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.launches)
}

// clock is the controller's injected time.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// pendingPod marks a test pod as the scheduler leaves an unschedulable one.
func pendingPod(b *testkit.PodWrapper) *corev1.Pod {
	p := b.Obj()
	p.Status.Phase = corev1.PodPending
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable}}
	return p
}

// boundPod is a running pod on a node.
func boundPod(b *testkit.PodWrapper, node string) *corev1.Pod {
	p := b.Obj()
	p.Spec.NodeName = node
	p.Status.Phase = corev1.PodRunning
	return p
}

func daemonSet(name string, tmplLabels map[string]string) *appsv1.DaemonSet {
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: name}}
	ds.Spec.Template.Labels = tmplLabels
	return ds
}

var devicePlugin = daemonSet("neuron-device-plugin", nil)

// launchedNode is a Ready node the autoscaler launched, Ready since readySince.
func launchedNode(name, instanceType string, readySince time.Time) *corev1.Node {
	it, _ := topology.DefaultCatalog().Lookup(instanceType)
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), Labels: plan.NewNodeLabels(it, labels.AllocationModeDevicePlugin)}}
	n.Labels[LaunchedByLabel] = LaunchedByValue
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(readySince)}}
	n.Status.Allocatable = corev1.ResourceList{corev1.ResourceName(topology.ResourceNeuron): qty(it.Devices)}
	return n
}

// env is one test's cluster, provider and clock.
type env struct {
	t        *testing.T
	client   *fake.Clientset
	provider *fakeProvider
	clock    *clock
}

func newEnv(t *testing.T, objs ...runtime.Object) *env {
	return &env{t: t, client: fake.NewClientset(objs...), provider: newFakeProvider(), clock: &clock{t: t0}}
}

// controller starts a controller on the env's cluster, its caches synced; events go to the
// returned recorder.
func (e *env) controller(mutate ...func(*ControllerOptions)) (*Controller, *record.FakeRecorder) {
	e.t.Helper()
	o := ControllerOptions{Client: e.client, Provider: e.provider, BatchWindow: time.Second, ScaleDownAfter: 10 * time.Minute, Now: e.clock.Now}
	for _, m := range mutate {
		m(&o)
	}
	c, err := NewController(o)
	if err != nil {
		e.t.Fatal(err)
	}
	rec := record.NewFakeRecorder(1000)
	c.recorder = rec
	ctx, cancel := context.WithCancel(context.Background())
	factory, err := c.start(ctx)
	e.t.Cleanup(func() {
		cancel()
		factory.Shutdown()
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return c, rec
}

func round(t *testing.T, c *Controller) {
	t.Helper()
	if err := c.reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// events drains the recorder: "Type Reason message".
func events(rec *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func hasEvent(events []string, prefix string) bool {
	return slices.ContainsFunc(events, func(e string) bool { return strings.HasPrefix(e, prefix) })
}

func TestControllerLaunchesOneNode(t *testing.T) {
	e := newEnv(t, devicePlugin, pendingPod(testPod("a").Neuron(1)))
	c, rec := e.controller()
	round(t, c)
	got := e.provider.launched()
	if len(got) != 1 {
		t.Fatalf("launches %+v, want one", got)
	}
	r := got[0]
	want := NodeName("inf1.xlarge", []string{"default/a"})
	if r.Name != want || r.Type != "inf1.xlarge" || r.Mode != labels.AllocationModeDevicePlugin {
		t.Errorf("launched %s (%s, %s), want %s (inf1.xlarge, device-plugin)", r.Name, r.Type, r.Mode, want)
	}
	for k, v := range map[string]string{LaunchedByLabel: LaunchedByValue, labels.InstanceType: "inf1.xlarge", labels.InstanceFamily: "inf1", labels.AllocationMode: "device-plugin"} {
		if r.Labels[k] != v {
			t.Errorf("label %s=%q, want %q", k, r.Labels[k], v)
		}
	}
	if r.Annotations[PlannedPodsAnnotation] != "default/a" {
		t.Errorf("planned pods %q, want default/a", r.Annotations[PlannedPodsAnnotation])
	}
	// The launching taint holds pods off the node until the controller releases it.
	if !slices.Equal(r.Taints, []corev1.Taint{plan.NeuronTaint(), LaunchingTaint()}) {
		t.Errorf("taints %v, want the Neuron taint and the launching taint", r.Taints)
	}
	// The pod is nominated to its node, so that the scheduler keeps the node's room for it.
	// The annotation names it too: the scheduler clears a nomination, the extender keeps the pod
	// for the node while it is held by the annotation.
	if p, err := e.client.CoreV1().Pods("default").Get(t.Context(), "a", metav1.GetOptions{}); err != nil || p.Status.NominatedNodeName != want || p.Annotations[PlannedNodeAnnotation] != want {
		t.Errorf("pod a nominated to %q, annotated %q (%v), want %s", p.Status.NominatedNodeName, p.Annotations[PlannedNodeAnnotation], err, want)
	}
	wantEvent := "Normal TriggeredScaleUp pod triggered scale-up: a new inf1.xlarge node ($0.228/h): node " + want
	if ev := events(rec); !slices.Equal(ev, []string{wantEvent}) {
		t.Errorf("events %q, want %q", ev, wantEvent)
	}
	if n := metricValue(t, c.metrics.launched.WithLabelValues("inf1.xlarge")); n != 1 {
		t.Errorf("nodes launched metric %v, want 1", n)
	}
	if n := metricValue(t, c.metrics.pending); n != 1 {
		t.Errorf("pending pods metric %v, want 1", n)
	}
	if n := metricValue(t, c.metrics.duration); n != 1 {
		t.Errorf("decision duration has %v observations, want 1", n)
	}

	// Round two: the pod is still pending and its node launching.
	round(t, c)
	if got := e.provider.launched(); len(got) != 1 {
		t.Errorf("the second round launched %d nodes in all, want the first one only", len(got))
	}
	if ev := events(rec); !hasEvent(ev, "Normal TriggeredScaleUp node "+want+" (inf1.xlarge), already launching") {
		t.Errorf("events %q, want the pod told its node is launching", ev)
	}

	// A restarted controller lists the provider's nodes first: the pod stays on its node.
	restarted, rec2 := e.controller()
	round(t, restarted)
	if got := e.provider.launched(); len(got) != 1 {
		t.Errorf("after a restart %d nodes were launched in all, want 1", len(got))
	}
	if ev := events(rec2); !hasEvent(ev, "Normal TriggeredScaleUp node "+want+" (inf1.xlarge), already launching") {
		t.Errorf("events after the restart %q", ev)
	}
}

func TestControllerBatchPacksPods(t *testing.T) {
	e := newEnv(t, devicePlugin,
		pendingPod(testPod("a").Neuron(4).Selector(labels.InstanceFamily, "trn1")),
		pendingPod(testPod("b").Neuron(4).Selector(labels.InstanceFamily, "trn1")))
	c, rec := e.controller()
	round(t, c)
	got := e.provider.launched()
	if len(got) != 1 || got[0].Type != "trn1.32xlarge" || got[0].Annotations[PlannedPodsAnnotation] != "default/a,default/b" {
		t.Fatalf("launches %+v, want one trn1.32xlarge for default/a and default/b", got)
	}
	if got[0].Name != NodeName("trn1.32xlarge", []string{"default/a", "default/b"}) {
		t.Errorf("name %s is not NodeName of the type and pods", got[0].Name)
	}
	ev := events(rec)
	if len(ev) != 2 || !hasEvent(ev, "Normal TriggeredScaleUp pod triggered scale-up: a new trn1.32xlarge node ($21.5/h), together with 1 other pending pod") {
		t.Errorf("events %q", ev)
	}

	// A new pod that fits beside them goes on the launching node, and stays there.
	if _, err := e.client.CoreV1().Pods("default").Create(context.Background(), pendingPod(testPod("c").Neuron(4).Selector(labels.InstanceFamily, "trn1")), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { _, err := c.pods.Pods("default").Get("c"); return err == nil })
	round(t, c)
	round(t, c)
	if got := e.provider.launched(); len(got) != 1 {
		t.Errorf("launches %+v: the third pod fits on the launching node", got)
	}
}

// createPod creates a pod and waits until the controller's cache has it.
func (e *env) createPod(c *Controller, pod *corev1.Pod) {
	e.t.Helper()
	if _, err := e.client.CoreV1().Pods(pod.Namespace).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	waitFor(e.t, func() bool { _, err := c.pods.Pods(pod.Namespace).Get(pod.Name); return err == nil })
}

func TestControllerRecordsPodsAddedToALaunchingNode(t *testing.T) {
	trn1Pod := func(name string, devices int) *corev1.Pod {
		return pendingPod(testPod(name).Neuron(int64(devices)).Selector(labels.InstanceFamily, "trn1"))
	}
	e := newEnv(t, devicePlugin, trn1Pod("a", 4), trn1Pod("b", 4))
	c, _ := e.controller()
	round(t, c)
	got := e.provider.launched()
	if len(got) != 1 {
		t.Fatalf("launches %+v, want one trn1.32xlarge for a and b", got)
	}
	node := got[0].Name
	if r := e.provider.records(); len(r) != 0 {
		t.Errorf("SetPlannedPods calls %q for a node launched with its pods", r)
	}

	// c goes on the launching node (16 devices, 8 planned): the node's planned pods now name it.
	e.createPod(c, trn1Pod("c", 4))
	round(t, c)
	if got := e.provider.launched(); len(got) != 1 {
		t.Fatalf("launches %+v: c fits on the launching node", got)
	}
	if got := e.provider.plannedPods(node); got != "default/a,default/b,default/c" {
		t.Errorf("planned pods of %s = %q, want default/a,default/b,default/c", node, got)
	}
	round(t, c) // recorded: not written again
	if r := e.provider.records(); len(r) != 1 {
		t.Errorf("SetPlannedPods calls %q, want one", r)
	}

	// A restarted controller counts c on the node. d (8 devices) no longer fits beside a, b and
	// c: it gets a node of its own. Had c been forgotten, d (the larger pod, placed first) would
	// have taken c's room, and c a second node.
	restarted, rec := e.controller()
	e.createPod(restarted, trn1Pod("d", 8))
	round(t, restarted)
	got = e.provider.launched()
	if len(got) != 2 || got[1].Annotations[PlannedPodsAnnotation] != "default/d" {
		t.Fatalf("launches after the restart %+v, want a second node for default/d only", got)
	}
	wantEvent := "Normal TriggeredScaleUp node " + node + " (trn1.32xlarge), already launching, will take the pod: no new node"
	if ev := events(rec); len(slices.DeleteFunc(slices.Clone(ev), func(e string) bool { return e != wantEvent })) != 3 {
		t.Errorf("events after the restart %q, want %q for a, b and c", ev, wantEvent)
	}
	if r := e.provider.records(); len(r) != 1 {
		t.Errorf("SetPlannedPods calls %q: the restarted controller had nothing to add", r)
	}
}

func TestControllerRecordingPlannedPodsFails(t *testing.T) {
	e := newEnv(t, devicePlugin, pendingPod(testPod("a").Neuron(4).Selector(labels.InstanceFamily, "trn1")))
	c, rec := e.controller()
	round(t, c)
	events(rec)
	e.provider.recordErr = errors.New("the API is down")
	e.createPod(c, pendingPod(testPod("b").Neuron(4).Selector(labels.InstanceFamily, "trn1")))
	round(t, c)
	round(t, c)
	// The controller keeps b on the node in memory: no second node, no new kind of event, and
	// every round tries to record it again.
	if got := e.provider.launched(); len(got) != 1 {
		t.Errorf("launches %+v, want one", got)
	}
	for _, ev := range events(rec) {
		if !strings.HasPrefix(ev, "Normal TriggeredScaleUp node ") {
			t.Errorf("event %q", ev)
		}
	}
	want := []string{"default/a", "default/b"}
	if r := e.provider.records(); len(r) != 2 || !slices.Equal(r[0], want) || !slices.Equal(r[1], want) {
		t.Errorf("SetPlannedPods calls %q, want %q twice", r, want)
	}
	e.provider.recordErr = nil
	round(t, c)
	if got := e.provider.plannedPods(e.provider.launched()[0].Name); got != "default/a,default/b" {
		t.Errorf("planned pods %q once recording works again", got)
	}
}

func TestControllerRefusals(t *testing.T) {
	e := newEnv(t, pendingPod(testPod("plugin").Neuron(1)), pendingPod(testPod("taint").Neuron(1).Tolerations()))
	c, rec := e.controller()
	round(t, c)
	if got := e.provider.launched(); len(got) != 0 {
		t.Errorf("launches %+v, want none", got)
	}
	// One event per pod: the taint pod's two problems in one message.
	want := []string{
		"Warning NotTriggerScaleUp " + plan.MessageDevicePluginRequired,
		"Warning NotTriggerScaleUp 2 problems: (1) " + msgToleration + "; (2) " + plan.MessageDevicePluginRequired,
	}
	if ev := events(rec); !slices.Equal(ev, want) {
		t.Errorf("events\n%q\nwant\n%q", ev, want)
	}
	if n := metricValue(t, c.metrics.decisions.WithLabelValues(plan.ReasonNotTriggerScaleUp)); n != 2 {
		t.Errorf("decisions{NotTriggerScaleUp} %v, want 2 (one per pod)", n)
	}
	// The same messages are not repeated within five minutes, then they are.
	round(t, c)
	if ev := events(rec); len(ev) != 0 {
		t.Errorf("repeated events %q", ev)
	}
	e.clock.Add(eventInterval)
	round(t, c)
	if ev := events(rec); !slices.Equal(ev, want) {
		t.Errorf("events after five minutes %q, want the two again", ev)
	}
}

func TestControllerLimitsAndFamilies(t *testing.T) {
	e := newEnv(t, devicePlugin, pendingPod(testPod("a").Neuron(4).Selector(labels.InstanceFamily, "trn1")))
	c, rec := e.controller(func(o *ControllerOptions) { o.Families = []string{"inf1"} })
	round(t, c)
	if got := e.provider.launched(); len(got) != 0 {
		t.Errorf("launches %+v, want none", got)
	}
	if ev := events(rec); !hasEvent(ev, "Warning NotTriggerScaleUp the instance types that can serve the pod are trn1.32xlarge (family trn1), but the autoscaler may launch only the families inf1") {
		t.Errorf("events %q", ev)
	}
	if _, err := NewController(ControllerOptions{Client: e.client, Provider: e.provider, Families: []string{"p5"}}); err == nil || !strings.Contains(err.Error(), `family "p5" is not in the instance catalog`) {
		t.Errorf("unknown family: err %v", err)
	}
}

func TestControllerDryRun(t *testing.T) {
	e := newEnv(t, devicePlugin, pendingPod(testPod("a").Neuron(1)), launchedNode("neuron-old-abc", "inf1.xlarge", t0.Add(-time.Hour)))
	c, rec := e.controller(func(o *ControllerOptions) { o.DryRun = true })
	round(t, c)
	e.clock.Add(time.Hour)
	round(t, c)
	if got := e.provider.launched(); len(got) != 0 {
		t.Errorf("dry run launched %+v", got)
	}
	if r := e.provider.records(); len(r) != 0 {
		t.Errorf("dry run recorded planned pods %q", r)
	}
	name := NodeName("inf1.xlarge", []string{"default/a"})
	ev := events(rec)
	if !hasEvent(ev, "Normal TriggeredScaleUp dry run: would launch node "+name+" for the pod: pod triggered scale-up: a new inf1.xlarge node ($0.228/h)") {
		t.Errorf("events %q, want the dry-run scale-up", ev)
	}
	if !hasEvent(ev, "Normal ScaleDown dry run: would remove node neuron-old-abc") {
		t.Errorf("events %q, want the dry-run scale-down", ev)
	}
	for _, a := range e.client.Actions() {
		if a.GetVerb() != "get" && a.GetVerb() != "list" && a.GetVerb() != "watch" {
			t.Errorf("dry run wrote to the API: %s %s", a.GetVerb(), a.GetResource().Resource)
		}
	}
	if _, err := e.client.CoreV1().Nodes().Get(context.Background(), "neuron-old-abc", metav1.GetOptions{}); err != nil {
		t.Errorf("dry run removed the node: %v", err)
	}
}

// dsPod is a DaemonSet's pod on the node.
func dsPod(name, node string) *corev1.Pod {
	p := boundPod(testPod(name).DefaultedContainer("plugin", "cpu", 1), node)
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "neuron-device-plugin", UID: "ds", Controller: ptr.To(true)}}
	return p
}

func TestControllerScaleDown(t *testing.T) {
	// On neuron-empty-abc only pods that go with the node: a DaemonSet's, a mirror pod and
	// pods that have finished.
	mirror := boundPod(testPod("static").DefaultedContainer("c", "cpu", 1), "neuron-empty-abc")
	mirror.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "x"}
	done, failed := boundPod(testPod("done").Neuron(1), "neuron-empty-abc"), boundPod(testPod("failed").DefaultedContainer("c", "cpu", 1), "neuron-empty-abc")
	done.Status.Phase, failed.Status.Phase = corev1.PodSucceeded, corev1.PodFailed
	objs := []runtime.Object{
		launchedNode("neuron-empty-abc", "inf1.xlarge", t0.Add(-time.Hour)),
		dsPod("plugin-x", "neuron-empty-abc"), mirror, done, failed,
		launchedNode("neuron-busy-abc", "inf1.xlarge", t0.Add(-time.Hour)),
		boundPod(testPod("work").Neuron(1), "neuron-busy-abc"),
		launchedNode("neuron-claim-abc", "inf1.xlarge", t0.Add(-time.Hour)),
		draPod(boundPod(testPod("dra"), "neuron-claim-abc"), "neurons"),
		draTemplate("neurons", 1),
		// A pod that asks for no Neuron hardware keeps the node too: nothing is evicted, and
		// removing the node would kill it.
		launchedNode("neuron-cpu-abc", "inf1.xlarge", t0.Add(-time.Hour)),
		boundPod(testPod("cpu-only").DefaultedContainer("c", "cpu", 1), "neuron-cpu-abc"),
	}
	other := launchedNode("someone-elses-abc", "inf1.xlarge", t0.Add(-time.Hour))
	delete(other.Labels, LaunchedByLabel)
	objs = append(objs, other)
	e := newEnv(t, objs...)
	for _, n := range []string{"neuron-empty-abc", "neuron-busy-abc", "neuron-claim-abc", "neuron-cpu-abc"} {
		e.provider.instances[n] = Instance{Name: n, Type: "inf1.xlarge"}
	}
	c, rec := e.controller()
	round(t, c) // empty from now
	e.clock.Add(10*time.Minute - time.Second)
	round(t, c)
	if len(e.provider.deleted) != 0 {
		t.Fatalf("removed %v before the scale-down delay", e.provider.deleted)
	}
	e.clock.Add(time.Second)
	round(t, c)
	if !slices.Equal(e.provider.deleted, []string{"neuron-empty-abc"}) {
		t.Errorf("removed %v, want neuron-empty-abc only", e.provider.deleted)
	}
	if _, err := e.client.CoreV1().Nodes().Get(context.Background(), "neuron-empty-abc", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the Node object is still there: %v", err)
	}
	cordoned := slices.ContainsFunc(e.client.Actions(), func(a clienttesting.Action) bool {
		p, ok := a.(clienttesting.PatchAction)
		return ok && p.GetName() == "neuron-empty-abc" && string(p.GetPatch()) == `{"spec":{"unschedulable":true}}`
	})
	if !cordoned {
		t.Error("the node was not cordoned before its removal")
	}
	if ev := events(rec); !slices.Equal(ev, []string{"Normal ScaleDown node neuron-empty-abc was empty for 10m0s (no pod but DaemonSet and mirror pods): cordoned and removed"}) {
		t.Errorf("events %q", ev)
	}
	if n := metricValue(t, c.metrics.removed); n != 1 {
		t.Errorf("nodes removed metric %v, want 1", n)
	}
	e.clock.Add(time.Hour)
	round(t, c)
	if len(e.provider.deleted) != 1 {
		t.Errorf("removed %v: nodes with pods (Neuron requests, claims or none) and nodes not launched by the autoscaler stay", e.provider.deleted)
	}
}

func draTemplate(name string, count int64) *resourcev1.ResourceClaimTemplate {
	return &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
			Name: "neurons", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: plan.DeviceClass, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: count},
		}}}}},
	}
}

func draPod(p *corev1.Pod, template string) *corev1.Pod {
	p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "neurons", ResourceClaimTemplateName: &template}}
	return p
}

func TestControllerDRAPod(t *testing.T) {
	e := newEnv(t, daemonSet("dra", map[string]string{"app": plan.DRADriverName}), plan.DefaultDeviceClass(), draTemplate("four", 4), draPod(pendingPod(testPod("a")), "four"))
	c, _ := e.controller()
	round(t, c)
	got := e.provider.launched()
	if len(got) != 1 || got[0].Mode != labels.AllocationModeDRA || got[0].Labels[labels.AllocationMode] != labels.AllocationModeDRA {
		t.Fatalf("launches %+v, want one dra node", got)
	}
}

// TestControllerDRAPodWithoutDeviceClass: the scheduler refuses a claim whose DeviceClass does not
// exist on every node, so nothing is launched and the pod is told why.
func TestControllerDRAPodWithoutDeviceClass(t *testing.T) {
	e := newEnv(t, daemonSet("dra", map[string]string{"app": plan.DRADriverName}), draTemplate("four", 4), draPod(pendingPod(testPod("a")), "four"))
	c, rec := e.controller()
	round(t, c)
	if got := e.provider.launched(); len(got) != 0 {
		t.Fatalf("launches %+v, want none", got)
	}
	ev := events(rec)
	if len(ev) != 1 || !strings.Contains(ev[0], "NotTriggerScaleUp") || !strings.Contains(ev[0], "DeviceClass neuron.aws.com does not exist") {
		t.Errorf("events %q, want one NotTriggerScaleUp saying the DeviceClass does not exist", ev)
	}
}

func TestControllerNodeThatNeverRegisters(t *testing.T) {
	e := newEnv(t, devicePlugin, pendingPod(testPod("a").Neuron(1)))
	c, rec := e.controller()
	round(t, c)
	first := e.provider.launched()[0].Name
	events(rec)
	e.clock.Add(DefaultRegisterTimeout - time.Second)
	round(t, c)
	if len(e.provider.deleted) != 0 || len(e.provider.launched()) != 1 {
		t.Fatalf("deleted %v, launched %d before the register timeout", e.provider.deleted, len(e.provider.launched()))
	}
	e.clock.Add(time.Second)
	round(t, c)
	if !slices.Equal(e.provider.deleted, []string{first}) {
		t.Errorf("deleted %v, want %s", e.provider.deleted, first)
	}
	got := e.provider.launched()
	if len(got) != 2 || got[1].Name == first || got[1].Annotations[PlannedPodsAnnotation] != "default/a" {
		t.Errorf("launches %+v: want a second node, of another name, for default/a", got)
	}
	if ev := events(rec); !hasEvent(ev, "Warning FailedScaleUp node "+first+" (inf1.xlarge) launched for the pod did not become Ready within 15m0s") {
		t.Errorf("events %q", ev)
	}
}

func TestControllerNodeSettles(t *testing.T) {
	e := newEnv(t, devicePlugin, pendingPod(testPod("a").Neuron(1)))
	c, _ := e.controller()
	round(t, c)
	name := e.provider.launched()[0].Name
	// The node registers: Ready just now, its device plugin advertising the devices. The pod is
	// still pending (the scheduler has not placed it yet): no new node.
	e.provider.mu.Lock()
	in := e.provider.instances[name]
	in.Launching = false
	e.provider.instances[name] = in
	e.provider.mu.Unlock()
	node := launchedNode(name, "inf1.xlarge", t0)
	if _, err := e.client.CoreV1().Nodes().Create(context.Background(), node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { _, err := c.nodes.Get(name); return err == nil })
	e.clock.Add(settleAfterReady - time.Second)
	round(t, c)
	if got := e.provider.launched(); len(got) != 1 {
		t.Fatalf("launches %+v while the new node settles", got)
	}
	// Settled, and the scheduler still refuses the pod there: it is planned again.
	e.clock.Add(time.Second)
	round(t, c)
	if got := e.provider.launched(); len(got) != 2 {
		t.Errorf("launches %+v: a pod still pending after its node settled is planned again", got)
	}
}

// TestControllerRun runs the whole controller: leader election, informers, the batch window and
// events through the API.
func TestControllerRun(t *testing.T) {
	e := newEnv(t, devicePlugin)
	c, err := NewController(ControllerOptions{
		Client: e.client, Provider: e.provider, BatchWindow: 300 * time.Millisecond, LeaderElect: true, LeaseNamespace: "kube-system", Identity: "test",
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- c.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	waitFor(t, func() bool { return c.synced.Load() })
	// b arrives once a has started the batch, within its window.
	for _, name := range []string{"a", "b"} {
		p, err := e.client.CoreV1().Pods("default").Create(ctx, pendingPod(testPod(name).Neuron(4).Selector(labels.InstanceFamily, "trn1")), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool {
			c.mu.Lock()
			defer c.mu.Unlock()
			return c.seen[p.UID]
		})
	}
	waitFor(t, func() bool { return len(e.provider.launched()) > 0 })
	if got := e.provider.launched(); len(got) != 1 || got[0].Annotations[PlannedPodsAnnotation] != "default/a,default/b" {
		t.Errorf("launches %+v: want one node for both pods of the batch", got)
	}
	waitFor(t, func() bool {
		list, _ := e.client.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
		return list != nil && slices.ContainsFunc(list.Items, func(ev corev1.Event) bool { return ev.Reason == plan.ReasonTriggeredScaleUp })
	})
	if _, err := e.client.CoordinationV1().Leases("kube-system").Get(ctx, LeaseName, metav1.GetOptions{}); err != nil {
		t.Errorf("the Lease: %v", err)
	}

	srv := httptest.NewServer(c.Handler())
	defer srv.Close()
	for path, want := range map[string]string{"/healthz": "ok", "/readyz": "ok", "/metrics": "neuron_autoscaler_nodes_launched_total{instance_type=\"trn1.32xlarge\"} 1"} {
		resp, err := srv.Client().Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), want) {
			t.Errorf("%s: %d %q, want %q", path, resp.StatusCode, body, want)
		}
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// metricValue reads a counter or gauge, or a histogram's count of observations.
func metricValue(t *testing.T, c prometheus.Collector) float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 1)
	c.Collect(ch)
	var m dto.Metric
	if err := (<-ch).Write(&m); err != nil {
		t.Fatal(err)
	}
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	t.Fatalf("metric %v is not a counter, gauge or histogram", &m)
	return 0
}

// TestPlannerPanicSkipsTheRound: a panic of the planner (an inconsistency it checks for, a bug)
// is logged and the round launches nothing; the controller keeps serving, and the next round
// plans again.
func TestPlannerPanicSkipsTheRound(t *testing.T) {
	e := newEnv(t, devicePlugin, pendingPod(testPod("a").Neuron(1)))
	c, _ := e.controller()
	c.plan = func([]plan.PodDemand, []plan.NodeOption, plan.Options) (plan.ScaleUp, []plan.Decision) {
		panic("autoscaler planner: pod default/a was put on a inf1.xlarge node where it does not fit")
	}
	round(t, c)
	if got := e.provider.launched(); len(got) != 0 {
		t.Fatalf("launches %+v after a failed planning", got)
	}
	if v := metricValue(t, c.metrics.decisions.WithLabelValues(reasonPlanningFailed)); v != 1 {
		t.Errorf("PlanningFailed decisions %v, want 1", v)
	}
	c.plan = plan.Plan
	round(t, c)
	if got := e.provider.launched(); len(got) != 1 {
		t.Fatalf("launches %+v, want one once planning works", got)
	}
}

// TestRestartCountsAPodOnItsLatestPlannedNode: a later round moved pod x from launching node A
// to launching node B; both nodes' planned pods still name it (A's from its launch, B's from
// SetPlannedPods). A restarted controller must count x once, on B, as its
// kube-neuron.io/planned-node annotation says: counted on both, A looked full and a third node
// was launched for y.
func TestRestartCountsAPodOnItsLatestPlannedNode(t *testing.T) {
	inf1Pod := func(name string) *testkit.PodWrapper {
		return testPod(name).Neuron(1).Selector(labels.InstanceType, "inf1.xlarge")
	}
	x := pendingPod(inf1Pod("x"))
	x.Annotations = map[string]string{PlannedNodeAnnotation: "node-b"}
	e := newEnv(t, devicePlugin, x, pendingPod(inf1Pod("y")))
	it, _ := topology.DefaultCatalog().Lookup("inf1.xlarge")
	for _, name := range []string{"node-a", "node-b"} {
		lbls := plan.NewNodeLabels(it, labels.AllocationModeDevicePlugin)
		lbls[LaunchedByLabel] = LaunchedByValue
		if _, err := e.provider.Launch(context.Background(), NodeRequest{Name: name, Type: it.Name, Mode: labels.AllocationModeDevicePlugin,
			Labels: lbls, Annotations: map[string]string{PlannedPodsAnnotation: "default/x"}}); err != nil {
			t.Fatal(err)
		}
	}
	c, rec := e.controller()
	round(t, c)
	if got := e.provider.launched(); len(got) != 2 {
		t.Errorf("launches %d, want none beyond node-a and node-b: %+v", len(got), got[2:])
	}
	want := "Normal TriggeredScaleUp node node-a (inf1.xlarge), already launching, will take the pod: no new node"
	if ev := events(rec); !slices.Contains(ev, want) {
		t.Errorf("events %q, want y on node-a: %q", ev, want)
	}
}

// TestControllerLaunchFailure: a launch the provider refuses is told to the pod (FailedScaleUp,
// counted), the pod is not nominated, and the next round launches its node.
func TestControllerLaunchFailure(t *testing.T) {
	e := newEnv(t, devicePlugin, pendingPod(testPod("a").Neuron(1)))
	e.provider.launchErr = errors.New("InsufficientInstanceCapacity")
	c, rec := e.controller()
	round(t, c)
	name := NodeName("inf1.xlarge", []string{"default/a"})
	want := "Warning FailedScaleUp launching a inf1.xlarge node (" + name + ") for the pod failed: InsufficientInstanceCapacity. It is tried again at the next round"
	if ev := events(rec); !slices.Equal(ev, []string{want}) {
		t.Errorf("events %q, want %q", ev, want)
	}
	if n := metricValue(t, c.metrics.decisions.WithLabelValues(ReasonFailedScaleUp)); n != 1 {
		t.Errorf("decisions{FailedScaleUp} %v, want 1", n)
	}
	if got := e.nominated("a"); got != "" {
		t.Errorf("pod a nominated to %q, want no nomination to a node that was not launched", got)
	}
	if got := c.fleet.in(phaseLaunching); len(got) != 0 {
		t.Errorf("launching %v, want none", got)
	}

	e.provider.mu.Lock()
	e.provider.launchErr = nil
	e.provider.mu.Unlock()
	round(t, c)
	if got := e.provider.launched(); len(got) != 1 || got[0].Name != name {
		t.Errorf("launches %+v, want %s once the provider launches again", got, name)
	}
	if got := e.nominated("a"); got != name {
		t.Errorf("pod a nominated to %q, want %s", got, name)
	}
}
