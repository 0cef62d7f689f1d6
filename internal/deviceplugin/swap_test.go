package deviceplugin

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	podresv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/deviceplugin/ledger"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// swapPods are two pending pods with records for one device each: a (older) device 0, b device 1.
func swapPlugin(t *testing.T) (*Plugin, context.Context, func(name string) allocation.Container) {
	t.Helper()
	p, client, ctx := testPlugin(t,
		neuronPod("a", 1).Record(neuronRecord(0)).AllocTime(1).Pending().Obj(),
		neuronPod("b", 1).Record(neuronRecord(1)).AllocTime(2).Pending().Obj(),
	)
	return p, ctx, func(name string) allocation.Container {
		t.Helper()
		return recordOf(t, ctx, client, name)
	}
}

// TestSwappedRecordsServeTheWaitingPodWhileTheInformerLags: the kubelet admitted pod b first,
// but its call was matched to a's record (the oldest); the refresh then gives b device 0 and a
// b's old device 1. The kubelet's call for a comes before the informer shows the swap (seen in
// the autoscaler e2e). It must be served a's new record, not refused as "already in use".
func TestSwappedRecordsServeTheWaitingPodWhileTheInformerLags(t *testing.T) {
	p, ctx, recordOf := swapPlugin(t)
	r, err := p.allocate(ctx, topology.ResourceNeuron, []string{"0"})
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Envs[allocation.EnvVisibleDevices]; got != "0" {
		t.Fatalf("first call: devices %s, want a's 0", got)
	}
	// The kubelet's PodResources show that the call was for b. The informer (never updated in
	// this test) still shows both records as the extender wrote them.
	pods, _ := p.pods.List(labels.Everything())
	p.reconcile(ctx, pods, []*podresv1.PodResources{admitted("b", topology.ResourceNeuron, "0")}, true)
	if a, b := recordOf("a"), recordOf("b"); !slices.Equal(a.Devices, []int{1}) || a.Served || !slices.Equal(b.Devices, []int{0}) || !b.Served {
		t.Fatalf("after the swap: a %+v, b %+v; want a device 1 unserved, b device 0 served", a, b)
	}
	r, err = p.allocate(ctx, topology.ResourceNeuron, []string{"1"})
	if err != nil {
		t.Fatalf("the call for a after the swap: %v", err)
	}
	if got := r.Envs[allocation.EnvVisibleDevices]; got != "1" {
		t.Errorf("the call for a: devices %s, want its swapped record's 1", got)
	}
	if a := recordOf("a"); !slices.Equal(a.Devices, []int{1}) || !a.Served {
		t.Errorf("a's record %+v, want device 1 served", a)
	}
}

// TestCallsWaitForARefreshsRecordFixes: a call that comes while a refresh writes a swap must not
// match the half-written records (b fixed, a not yet): it waits, then gets a's new record.
func TestCallsWaitForARefreshsRecordFixes(t *testing.T) {
	p, ctx, recordOf := swapPlugin(t)
	if _, err := p.allocate(ctx, topology.ResourceNeuron, []string{"0"}); err != nil {
		t.Fatal(err)
	}
	// The fake clientset runs its reactors under its own lock, which would hold up the call's
	// reads too: block in a wrapper instead.
	patchingA, release := make(chan struct{}), make(chan struct{})
	var once, released sync.Once
	t.Cleanup(func() { released.Do(func() { close(release) }) })
	p.o.Client = beforePatch{Clientset: p.o.Client.(*fake.Clientset), before: func(name string) {
		if name == "a" {
			once.Do(func() {
				close(patchingA)
				<-release
			})
		}
	}}
	pods, _ := p.pods.List(labels.Everything())
	refreshed := make(chan struct{})
	go func() {
		defer close(refreshed)
		p.reconcile(ctx, pods, []*podresv1.PodResources{admitted("b", topology.ResourceNeuron, "0")}, true)
	}()
	<-patchingA // b's record is fixed, a's is being written
	// A kubelet call takes the plugin's lock before it decides anything; the refresh holds it
	// until every fix is written, so no call can be answered from a half-written swap.
	if p.mu.TryLock() {
		p.mu.Unlock()
		t.Fatal("the plugin's lock is free while the refresh writes its record fixes")
	}
	type result struct {
		devices string
		err     error
	}
	called := make(chan result, 1)
	go func() {
		r, err := p.allocate(ctx, topology.ResourceNeuron, []string{"1"})
		if err != nil {
			called <- result{err: err}
			return
		}
		called <- result{devices: r.Envs[allocation.EnvVisibleDevices]}
	}()
	released.Do(func() { close(release) })
	<-refreshed
	res := <-called
	if res.err != nil || res.devices != "1" {
		t.Fatalf("the call for a: devices %q, %v; want its swapped record's 1", res.devices, res.err)
	}
	if a := recordOf("a"); !slices.Equal(a.Devices, []int{1}) || !a.Served {
		t.Errorf("a's record %+v, want device 1 served", a)
	}
}

// beforePatch is a clientset that calls before with the pod's name ahead of each pod patch.
type beforePatch struct {
	*fake.Clientset
	before func(name string)
}

func (c beforePatch) CoreV1() typedcorev1.CoreV1Interface {
	return beforePatchCore{CoreV1Interface: c.Clientset.CoreV1(), before: c.before}
}

type beforePatchCore struct {
	typedcorev1.CoreV1Interface
	before func(name string)
}

func (c beforePatchCore) Pods(namespace string) typedcorev1.PodInterface {
	return beforePatchPods{PodInterface: c.CoreV1Interface.Pods(namespace), before: c.before}
}

type beforePatchPods struct {
	typedcorev1.PodInterface
	before func(name string)
}

func (c beforePatchPods) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*corev1.Pod, error) {
	c.before(name)
	return c.PodInterface.Patch(ctx, name, pt, data, opts, subresources...)
}

// TestAnAnswerBelongsToThePodThatGotIt: the kubelet admitted y first, and its call was matched to
// x's record (the oldest), so the plugin's answer named x. Once PodResources show y holding the
// ids, the answer is y's: when y has gone, and before the next refresh, a new pod placed on that
// device is served, not refused as if x (which runs elsewhere) held it.
func TestAnAnswerBelongsToThePodThatGotIt(t *testing.T) {
	p, client, ctx := testPlugin(t,
		neuronPod("x", 1).Record(neuronRecord(0)).AllocTime(1).Pending().Obj(),
		neuronPod("y", 1).Record(neuronRecord(1)).AllocTime(2).Pending().Obj(),
	)
	var podRes []*podresv1.PodResources
	p.podResources = func(context.Context) ([]*podresv1.PodResources, error) { return podRes, nil }
	reconcile := func() {
		pods, _ := p.pods.List(labels.Everything())
		p.reconcile(ctx, pods, podRes, true)
	}
	if _, err := p.allocate(ctx, topology.ResourceNeuron, []string{"0"}); err != nil { // y's call, matched to x's record
		t.Fatal(err)
	}
	podRes = []*podresv1.PodResources{admitted("y", topology.ResourceNeuron, "0")}
	reconcile()
	if _, err := p.allocate(ctx, topology.ResourceNeuron, []string{"1"}); err != nil { // x's call
		t.Fatal(err)
	}
	podRes = append(podRes, admitted("x", topology.ResourceNeuron, "1"))
	reconcile()

	// y ends; the kubelet releases id 0; the extender places z on device 0.
	if err := client.CoreV1().Pods("ns").Delete(ctx, "y", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	podRes = podRes[1:]
	z := neuronPod("z", 1).Record(neuronRecord(0)).AllocTime(3).Pending().Obj()
	if _, err := client.CoreV1().Pods("ns").Create(ctx, z, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r, err := p.allocate(ctx, topology.ResourceNeuron, []string{"0"})
	if err != nil {
		t.Fatalf("z's call: %v", err)
	}
	if got := r.Envs[allocation.EnvVisibleDevices]; got != "0" {
		t.Errorf("z got devices %s, want its record's 0", got)
	}
}

// TestACallMatchedToARunningContainersRecordIsRefused: a record whose container the kubelet
// already runs on its devices (admitted, not yet marked served) cannot be what a new call is
// for: the call is refused, and the message says why, not that the pod conflicts with itself.
func TestACallMatchedToARunningContainersRecordIsRefused(t *testing.T) {
	p, _, ctx := testPlugin(t, neuronPod("a", 1).Record(neuronRecord(0)).AllocTime(1).Pending().Obj())
	p.podResources = func(context.Context) ([]*podresv1.PodResources, error) { return nil, nil }
	p.mu.Lock()
	p.ledger.SetHoldings([]ledger.Holding{{Pod: ledger.PodKey{Namespace: "ns", Name: "a"}, PodUID: "uid-a", Container: "app", Resource: topology.ResourceNeuron,
		KubeletIDs: []string{"3"}, Hardware: hw(t, p.shape, topology.ResourceNeuron, "0"), Admitted: true}})
	p.mu.Unlock()
	_, err := p.allocate(ctx, topology.ResourceNeuron, []string{"5"})
	if err == nil {
		t.Fatal("a call matched to a's record was served a's device 0, which a runs on")
	}
	for _, want := range []string{"only waiting record of that size is pod ns/a container app's", "already runs that container on devices 0", "refusing to hand the devices out twice"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q\ndoes not contain %q", err, want)
		}
	}
}

// TestAGoneAnswersIdsHeldByAnotherPodStillConflict: the plugin's answer for kubelet id 3
// (device 0) names x, whose record it was matched to; x is gone, but the kubelet's PodResources
// show y holding id 3: y runs on device 0, and z's record for device 0 must be refused.
func TestAGoneAnswersIdsHeldByAnotherPodStillConflict(t *testing.T) {
	p, _, ctx := testPlugin(t, neuronPod("y", 1).Obj(), neuronPod("z", 1).Record(neuronRecord(0)).AllocTime(3).Pending().Obj())
	p.podResources = func(context.Context) ([]*podresv1.PodResources, error) {
		return []*podresv1.PodResources{admitted("y", topology.ResourceNeuron, "3")}, nil
	}
	p.ledger.Restore(map[ledger.AnswerKey]ledger.Answer{ledger.KeyOf(topology.ResourceNeuron, []string{"3"}): {Hardware: hw(t, p.shape, topology.ResourceNeuron, "0"),
		Resource: topology.ResourceNeuron, Kubelet: []string{"3"}, PodUID: "uid-x", Pod: ledger.PodKey{Namespace: "ns", Name: "x"}, Container: "app", At: time.Now()}}, time.Now())
	_, err := p.allocate(ctx, topology.ResourceNeuron, []string{"5"})
	if err == nil {
		t.Fatal("z was served device 0, which y runs on")
	}
	if !strings.Contains(err.Error(), "already in use by pod ns/y") {
		t.Errorf("error %q does not name y as the holder", err)
	}
}
