package deviceplugin

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"
	podresv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/neuron"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// pluginWorld is the whole plugin, with a fake clientset for the API server, an indexer the
// model fills for its informer, and the model's kubelet behind its PodResources client.
type pluginWorld struct {
	m       *kubeletModel
	ctx     context.Context
	p       *Plugin
	client  *fake.Clientset
	indexer cache.Indexer
	// stateDir is the plugin's --state-dir: its checkpoint outlives the process.
	stateDir string
}

func newPluginWorld(m *kubeletModel) modelWorld {
	w := &pluginWorld{
		m: m, stateDir: m.t.TempDir(),
		// The field-managed tracker of fake.NewClientset builds a REST mapper on every write,
		// which took most of this test's time; field management plays no part here.
		client:  fake.NewSimpleClientset(),
		indexer: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}),
	}
	if err := w.restart(); err != nil {
		m.t.Fatal(err)
	}
	return w
}

// restart starts a plugin process on the model's node: nothing in memory, the answers of the
// previous process from its checkpoint.
func (w *pluginWorld) restart() error {
	_, ctx := ktesting.NewTestContext(w.m.t)
	p := newPlugin(Options{NodeName: node, Client: w.client, Source: SourceAuto, StateDir: w.stateDir}, w.m.shape, neuron.NewHealth(w.m.shape.Devices(), nil))
	p.pods, p.recorder = corelisters.NewPodLister(w.indexer), record.NewFakeRecorder(10)
	p.podResources = func(context.Context) ([]*podresv1.PodResources, error) { return w.podResources(), nil }
	w.p, w.ctx = p, ctx
	return p.loadCheckpoint(ctx)
}

func (w *pluginWorld) bind(mp modelPod, shown bool) error {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: mp.name, UID: types.UID("uid-" + mp.name), CreationTimestamp: metav1.Unix(mp.created, 0)},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Phase: corev1.PodPending},
	}
	for _, c := range mp.ctrs {
		pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: c.name, Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{corev1.ResourceName(c.res): *resource.NewQuantity(int64(c.count), resource.DecimalSI)},
		}})
	}
	pod.Annotations = mp.record.Annotations()
	pod.Annotations[allocation.AllocTime] = strconv.FormatInt(mp.allocTime, 10)
	created, err := w.client.CoreV1().Pods("ns").Create(w.ctx, pod, metav1.CreateOptions{})
	if err != nil || !shown {
		return err
	}
	return w.indexer.Add(created)
}

func (w *pluginWorld) remove(name string) error {
	if err := w.client.CoreV1().Pods("ns").Delete(w.ctx, name, metav1.DeleteOptions{}); err != nil {
		return err
	}
	return w.indexer.Delete(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}})
}

func (w *pluginWorld) catchUp() error {
	list, err := w.client.CoreV1().Pods("ns").List(w.ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	objs := make([]any, len(list.Items))
	for i := range list.Items {
		objs[i] = &list.Items[i]
	}
	return w.indexer.Replace(objs, "")
}

func (w *pluginWorld) records() (map[string]*allocation.Record, error) {
	list, err := w.client.CoreV1().Pods("ns").List(w.ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]*allocation.Record{}
	for i := range list.Items {
		r, err := allocation.RecordOf(&list.Items[i])
		if err != nil {
			return nil, err
		}
		out[list.Items[i].Name] = r
	}
	return out, nil
}

func (w *pluginWorld) preferred(resource string, available []string, count int) []string {
	return w.p.preferred(w.ctx, resource, available, nil, count)
}

// allocate calls Allocate; what the container gets is what the response's environment says.
func (w *pluginWorld) allocate(resource string, ids []string) (topology.Allocation, error) {
	r, err := w.p.allocate(w.ctx, resource, ids)
	if err != nil {
		return topology.Allocation{}, err
	}
	var cores []int
	for _, f := range strings.Split(r.GetEnvs()[allocation.EnvVisibleCores], ",") {
		c, err := strconv.Atoi(f)
		if err != nil {
			return topology.Allocation{}, fmt.Errorf("the response's %s is %q", allocation.EnvVisibleCores, r.GetEnvs()[allocation.EnvVisibleCores])
		}
		cores = append(cores, c)
	}
	return w.m.shape.CoreAllocation(cores)
}

func (w *pluginWorld) refresh() error {
	podRes, err := w.p.kubeletPodResources(w.ctx) // what the plugin's refresh reads
	if err != nil {
		return err
	}
	w.p.reconcile(w.ctx, w.p.cachedPods(), podRes, true)
	return nil
}

func (w *pluginWorld) withdrawn(resource string) map[string]string {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	return w.p.ledger.Withdrawn(resource, w.p.health.Unhealthy())
}

// podResources is the kubelet's PodResources answer, in its shape: a container's ids as one
// entry per id.
func (w *pluginWorld) podResources() []*podresv1.PodResources {
	var out []*podresv1.PodResources
	byPod := map[string]*podresv1.PodResources{}
	for _, a := range w.m.kubelet() {
		pr := byPod[a.Pod.Name]
		if pr == nil {
			pr = &podresv1.PodResources{Namespace: a.Pod.Namespace, Name: a.Pod.Name}
			byPod[a.Pod.Name] = pr
			out = append(out, pr)
		}
		cr := &podresv1.ContainerResources{Name: a.Container}
		for _, id := range a.IDs {
			cr.Devices = append(cr.Devices, &podresv1.ContainerDevices{ResourceName: a.Resource, DeviceIds: []string{id}})
		}
		pr.Containers = append(pr.Containers, cr)
	}
	return out
}
