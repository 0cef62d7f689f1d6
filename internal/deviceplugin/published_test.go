package deviceplugin

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"
	podresv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/deviceplugin/ledger"
	"github.com/kube-neuron/kube-neuron/internal/neuron"
	"github.com/kube-neuron/kube-neuron/internal/testkit"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

const node = "trn1-a"

// testPod starts a running pod of the node in namespace ns:
// testPod("p").Container(app, topology.ResourceNeuronCore, 2).Published("0,1").Obj().
func testPod(name string) *testkit.PodWrapper {
	return testkit.MakePod().Namespace("ns").Name(name).Node(node).Running()
}

// neuronPod is testPod with container app asking for devices of aws.amazon.com/neuron.
func neuronPod(name string, devices int64) *testkit.PodWrapper {
	return testPod(name).Container(app, topology.ResourceNeuron, devices)
}

// app is the container of the test pods.
const app = "app"

// neuronRecord is an unserved record of the scheduler extender for container app on devices.
func neuronRecord(devices ...int) *allocation.Record {
	return &allocation.Record{Node: node, Containers: []allocation.Container{{Name: app, Resource: topology.ResourceNeuron, Devices: devices}}}
}

// testPlugin is a plugin for a trn1.32xlarge named trn1-a whose informer and API server hold pods.
func testPlugin(t *testing.T, pods ...*corev1.Pod) (*Plugin, *fake.Clientset, context.Context) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	objs := make([]*corev1.Pod, len(pods))
	client := fake.NewClientset()
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for i, pod := range pods {
		objs[i] = pod.DeepCopy()
		if _, err := client.CoreV1().Pods(pod.Namespace).Create(ctx, objs[i], metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := indexer.Add(objs[i]); err != nil {
			t.Fatal(err)
		}
	}
	s := trn1(t)
	p := newPlugin(Options{NodeName: node, Client: client, Source: SourceAuto}, s, neuron.NewHealth(s.Devices(), nil))
	p.pods, p.recorder = corelisters.NewPodLister(indexer), record.NewFakeRecorder(10)
	return p, client, ctx
}

// admitted is what the kubelet's PodResources show for one container.
func admitted(pod, res string, ids ...string) *podresv1.PodResources {
	return &podresv1.PodResources{Namespace: "ns", Name: pod, Containers: []*podresv1.ContainerResources{{
		Name: "app", Devices: []*podresv1.ContainerDevices{{ResourceName: res, DeviceIds: ids}},
	}}}
}

// refresh computes the holdings from the informer's pods and the PodResources, as refresh does,
// and returns the record fixes without writing them.
func refresh(t *testing.T, p *Plugin, podRes ...*podresv1.PodResources) []ledger.Fix {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	snap := ledger.Snapshot{Pods: podViews(p.cachedPods()), Cached: true, Kubelet: admittedOf(podRes), KubeletOK: true, Now: time.Now()}
	fixes, err := p.ledger.Refresh(snap, p.lookup(context.Background()))
	if err != nil {
		t.Fatal(err)
	}
	return fixes
}

func withdrawn(p *Plugin, res string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	ids := slices.Collect(maps.Keys(p.ledger.Withdrawn(res, p.health.Unhealthy())))
	ledger.SortIDs(ids)
	return ids
}

func TestPublishedPodRunningIsHeld(t *testing.T) {
	// The published device plugin served devices 0,1 while the kubelet holds ids 5,6 of
	// aws.amazon.com/neuron for the container: the hardware is what counts.
	p, _, _ := testPlugin(t, neuronPod("legacy", 2).Published("0,1").AllocTime(1000).Obj())
	if fixes := refresh(t, p, admitted("legacy", topology.ResourceNeuron, "5", "6")); len(fixes) != 0 {
		t.Errorf("fixes %+v: a running pod of the published stack must keep its annotations", fixes)
	}
	h := p.Holdings()
	if len(h) != 1 || !slices.Equal(h[0].Hardware.Devices, []int{0, 1}) || !h[0].Admitted || h[0].Reserved {
		t.Fatalf("holdings %+v, want devices 0,1 admitted", h)
	}
	for res, want := range map[string][]string{
		topology.ResourceNeuron:       {"0", "1"}, // 5, 6 are the kubelet's own
		topology.ResourceNeuronDevice: {"0", "1"},
		topology.ResourceNeuronCore:   {"0", "1", "2", "3"},
	} {
		if got := withdrawn(p, res); !slices.Equal(got, want) {
			t.Errorf("%s: withdrawn %v, want %v", res, got, want)
		}
	}
}

func TestPublishedPodWithoutPodResourcesIsHeldEverywhere(t *testing.T) {
	p, _, _ := testPlugin(t, testPod("legacy").Container(app, topology.ResourceNeuronCore, 4).Published("0,1,2,3").AllocTime(1000).Obj())
	refresh(t, p) // the kubelet shows nothing (PodResources not available)
	for res, want := range map[string][]string{
		topology.ResourceNeuron:       {"0", "1"},
		topology.ResourceNeuronDevice: {"0", "1"},
		topology.ResourceNeuronCore:   {"0", "1", "2", "3"},
	} {
		if got := withdrawn(p, res); !slices.Equal(got, want) {
			t.Errorf("%s: withdrawn %v, want %v", res, got, want)
		}
	}
}

// TestPublishedPodIsNeverMatchedByOthers: a new pod of the same size is served its own record,
// and a call without a record is refused rather than given the published pod's devices.
func TestPublishedPodIsNeverMatchedByOthers(t *testing.T) {
	p, _, ctx := testPlugin(t,
		neuronPod("legacy", 4).Published("0,1,2,3").AllocTime(1000).Obj(),
		neuronPod("new", 4).Record(neuronRecord(4, 5, 6, 7)).AllocTime(2000).Pending().Obj(),
	)
	refresh(t, p, admitted("legacy", topology.ResourceNeuron, "0", "1", "2", "3"))
	r, err := p.allocate(ctx, topology.ResourceNeuron, []string{"8", "9", "10", "11"})
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Envs[allocation.EnvVisibleDevices]; got != "4,5,6,7" {
		t.Errorf("the new pod got devices %s, want its record's 4-7", got)
	}
	// Another pod without a record, offered the published pod's ids by a kubelet that has not
	// seen the withdrawal: refused.
	p2, _, ctx2 := testPlugin(t, neuronPod("legacy", 1).Published("0").AllocTime(1000).Obj())
	refresh(t, p2, admitted("legacy", topology.ResourceNeuron, "9"))
	if _, err := p2.allocate(ctx2, topology.ResourceNeuron, []string{"0"}); err == nil || !strings.Contains(err.Error(), "already in use by pod ns/legacy") {
		t.Errorf("allocate of the published pod's device for someone else: %v, want a refusal naming ns/legacy", err)
	}
}

// TestKubeletAsksAgainForPublishedPod: after a restart (of the plugin: nothing served yet in
// this process), the kubelet calls Allocate again with the ids it holds for a running container
// of the published stack; the container gets its AWS_NEURON_IDS again, not the kubelet's ids,
// and not a waiting pod's record of the same size.
func TestKubeletAsksAgainForPublishedPod(t *testing.T) {
	p, client, ctx := testPlugin(t,
		neuronPod("legacy", 4).Published("0,1,2,3").AllocTime(1000).Obj(),
		neuronPod("waiting", 4).Record(neuronRecord(4, 5, 6, 7)).AllocTime(1).Pending().Obj(), // older NEURON_ALLOC_TIME than the legacy pod
	)
	refresh(t, p, admitted("legacy", topology.ResourceNeuron, "12", "13", "14", "15"))
	r, err := p.allocate(ctx, topology.ResourceNeuron, []string{"15", "12", "13", "14"})
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Envs[allocation.EnvVisibleDevices]; got != "0,1,2,3" {
		t.Errorf("asked again: devices %s, want the published pod's 0-3", got)
	}
	legacy, _ := client.CoreV1().Pods("ns").Get(ctx, "legacy", metav1.GetOptions{})
	if _, ok := legacy.Annotations[allocation.Annotation]; ok || legacy.Annotations[allocation.AWSNeuronIDs] != "0,1,2,3" {
		t.Errorf("the running published pod's annotations changed: %v", legacy.Annotations)
	}
	// The waiting pod still gets its own record next.
	r, err = p.allocate(ctx, topology.ResourceNeuron, []string{"4", "5", "6", "7"})
	if err != nil || r.Envs[allocation.EnvVisibleDevices] != "4,5,6,7" {
		t.Errorf("the waiting pod: %v %v", r, err)
	}
}

// TestPublishedPodAdmittedByThisPlugin: a pod the published extension bound that does not run
// yet is served its AWS_NEURON_IDS when the kubelet admits it (the preferred ids and Allocate),
// and its record becomes ours, with the same ids.
func TestPublishedPodAdmittedByThisPlugin(t *testing.T) {
	p, client, ctx := testPlugin(t, testPod("legacy").Container(app, topology.ResourceNeuronCore, 4).Published("3,2,4,5").AllocTime(1000).Pending().Obj())
	refresh(t, p)
	// Reserved: free in its own pool for the kubelet to hand out, withdrawn from the others.
	if got := withdrawn(p, topology.ResourceNeuronCore); len(got) != 0 {
		t.Errorf("neuroncore withdrawn %v, want none (reserved for the pod)", got)
	}
	if got := withdrawn(p, topology.ResourceNeuron); !slices.Equal(got, []string{"1", "2"}) {
		t.Errorf("neuron withdrawn %v, want 1, 2", got)
	}
	all := ledger.PoolIDs(p.shape, topology.ResourceNeuronCore)
	if got := p.preferred(ctx, topology.ResourceNeuronCore, all, nil, 4); !slices.Equal(got, []string{"2", "3", "4", "5"}) {
		t.Errorf("preferred %v, want the published ids 2-5", got)
	}
	r, err := p.allocate(ctx, topology.ResourceNeuronCore, []string{"2", "3", "4", "5"})
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Envs[allocation.EnvVisibleCores]; got != "2,3,4,5" {
		t.Errorf("cores %s, want 2,3,4,5", got)
	}
	pod, _ := client.CoreV1().Pods("ns").Get(ctx, "legacy", metav1.GetOptions{})
	rec, err := allocation.RecordOf(pod)
	if err != nil || allocation.FromPublishedStack(pod) || len(rec.Containers) != 1 || !rec.Containers[0].Served ||
		!slices.Equal(rec.Containers[0].Cores, []int{2, 3, 4, 5}) || !slices.Equal(rec.Containers[0].Devices, []int{1, 2}) {
		t.Fatalf("record %+v (%v), want ours with cores 2-5 served", rec, err)
	}
	if pod.Annotations[allocation.AWSNeuronIDs] != "2,3,4,5" || pod.Annotations[allocation.Allocated] != "true" || pod.Annotations[allocation.AllocTime] != "1000" {
		t.Errorf("annotations %v", pod.Annotations)
	}
}

func TestPublishedProblemsAreReportedOnce(t *testing.T) {
	p, _, ctx := testPlugin(t, neuronPod("bad", 1).Published("zero").AllocTime(1000).Obj())
	pods, _ := p.pods.List(labels.Everything())
	p.reportPublished(ctx, pods)
	p.reportPublished(ctx, pods)
	events := p.recorder.(*record.FakeRecorder).Events
	if len(events) != 1 {
		t.Fatalf("%d events, want 1", len(events))
	}
	if e := <-events; !strings.Contains(e, "PublishedNeuronAllocation") || !strings.Contains(e, "pod ns/bad") {
		t.Errorf("event %q", e)
	}
	if refresh(t, p); len(p.Holdings()) != 0 {
		t.Errorf("a malformed annotation is not counted: %+v", p.Holdings())
	}
}

// TestMatchPrefersExtenderRecords: a bound pod of the published stack that the kubelet has not
// admitted (older NEURON_ALLOC_TIME) comes after a pod the extender bound, then is matched itself.
func TestMatchPrefersExtenderRecords(t *testing.T) {
	p, _, _ := testPlugin(t,
		neuronPod("legacy", 1).Published("15").AllocTime(1000).Pending().Obj(),
		neuronPod("new", 1).Record(neuronRecord(4)).AllocTime(2000).Pending().Obj(),
	)
	refresh(t, p)
	cands := p.ledger.Candidates(podViews(p.cachedPods()), true, time.Now())
	if c, ok := ledger.Match(cands, topology.ResourceNeuron, 1, nil); !ok || c.Pod.String() != "ns/new" {
		t.Errorf("matched %v, want ns/new", c.Pod)
	}
	if c, ok := ledger.Match(cands, topology.ResourceNeuron, 1, map[ledger.ContainerRef]bool{{UID: "uid-new", Container: "app"}: true}); !ok || c.Pod.String() != "ns/legacy" || !c.Published {
		t.Errorf("matched %+v, want ns/legacy", c)
	}
}

// TestMatchReadsAgainBeforeServingPublished: the informer has only the published stack's
// waiting pod, the API server also a pod the extender has just bound: the call is for that pod.
func TestMatchReadsAgainBeforeServingPublished(t *testing.T) {
	p, client, ctx := testPlugin(t, neuronPod("legacy", 1).Published("15").AllocTime(1000).Pending().Obj())
	refresh(t, p)
	if _, err := client.CoreV1().Pods("ns").Create(ctx, neuronPod("new", 1).Record(neuronRecord(3)).AllocTime(2000).Pending().Obj(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := p.preferred(ctx, topology.ResourceNeuron, ledger.PoolIDs(p.shape, topology.ResourceNeuron), nil, 1); !slices.Equal(got, []string{"3"}) {
		t.Errorf("preferred %v, want the new pod's device 3", got)
	}
	r, err := p.allocate(ctx, topology.ResourceNeuron, []string{"3"})
	if err != nil || r.Envs[allocation.EnvVisibleDevices] != "3" {
		t.Errorf("allocate: %v %v, want device 3", r, err)
	}
}

// TestAskAgainOnlyForRunningPods: ids the kubelet shows for a pod that is being deleted were
// released for the next pod; the call is for that pod, served from its own record.
func TestAskAgainOnlyForRunningPods(t *testing.T) {
	gone := neuronPod("gone", 1).Published("9").AllocTime(1000).Obj()
	gone.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	p, _, ctx := testPlugin(t, gone, neuronPod("next", 1).Record(neuronRecord(5)).AllocTime(2000).Pending().Obj())
	refresh(t, p, admitted("gone", topology.ResourceNeuron, "2"))
	r, err := p.allocate(ctx, topology.ResourceNeuron, []string{"2"})
	if err != nil || r.Envs[allocation.EnvVisibleDevices] != "5" {
		t.Errorf("allocate: %v %v, want the next pod's device 5", r, err)
	}
}

// TestAdmittedPublishedPodIsNotMatched: a pod of the published stack that the kubelet admitted
// (the published plugin served it) but that does not run yet, NEURON_ALLOCATED still false, is
// not what a call for the same size is for.
func TestAdmittedPublishedPodIsNotMatched(t *testing.T) {
	p, _, ctx := testPlugin(t, neuronPod("legacy", 1).Published("15").AllocTime(1000).Pending().Obj())
	refresh(t, p, admitted("legacy", topology.ResourceNeuron, "7"))
	r, err := p.allocate(ctx, topology.ResourceNeuron, []string{"3"})
	if err != nil || r.Envs[allocation.EnvVisibleDevices] != "3" {
		t.Errorf("allocate: %v %v, want the kubelet's device 3, not the published pod's 15", r, err)
	}
	if got := withdrawn(p, topology.ResourceNeuron); !slices.Contains(got, "15") {
		t.Errorf("neuron withdrawn %v: device 15 is the published pod's", got)
	}
}
