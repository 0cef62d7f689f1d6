package extender

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

const (
	trn1 = "trn1.32xlarge" // 16 devices, 2 cores each, 4x4 torus
	inf2 = "inf2.48xlarge" // 12 devices, 2 cores each, ring
)

// catalog is the default catalog, parsed once.
var catalog = sync.OnceValue(topology.DefaultCatalog)

// nodeBuilder builds test nodes: testNode("n").instanceType(trn1).obj().
type nodeBuilder struct{ n *corev1.Node }

func testNode(name string) *nodeBuilder {
	return &nodeBuilder{n: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}}
}

// instanceType labels the node and, for a catalog type, advertises its devices and cores the
// way the device plugin does.
func (b *nodeBuilder) instanceType(name string) *nodeBuilder {
	b.n.Labels[labels.InstanceType] = name
	if it, ok := catalog().Lookup(name); ok {
		b.n.Status.Capacity = corev1.ResourceList{
			corev1.ResourceName(topology.ResourceNeuron):     *resource.NewQuantity(int64(it.Devices), resource.DecimalSI),
			corev1.ResourceName(topology.ResourceNeuronCore): *resource.NewQuantity(int64(it.Devices*it.LogicalCoresPerDevice(0)), resource.DecimalSI),
		}
	}
	return b
}

func (b *nodeBuilder) dra() *nodeBuilder {
	b.n.Labels[labels.AllocationMode] = labels.AllocationModeDRA
	return b
}

func (b *nodeBuilder) obj() *corev1.Node { return b.n }

// podBuilder builds test pods: testPod("p").neuron(4).obj().
type podBuilder struct{ p *corev1.Pod }

func testPod(name string) *podBuilder {
	return &podBuilder{p: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Namespace: "default", Name: name, UID: types.UID("uid-" + name), Annotations: map[string]string{},
	}}}
}

// container adds a container asking for count of res in its limits.
func (b *podBuilder) container(name, res string, count int) *podBuilder {
	c := corev1.Container{Name: name, Image: "app"}
	if res != "" {
		c.Resources.Limits = corev1.ResourceList{corev1.ResourceName(res): *resource.NewQuantity(int64(count), resource.DecimalSI)}
	}
	b.p.Spec.Containers = append(b.p.Spec.Containers, c)
	return b
}

func (b *podBuilder) neuron(devices int) *podBuilder {
	return b.container("main", topology.ResourceNeuron, devices)
}

func (b *podBuilder) neuronCores(cores int) *podBuilder {
	return b.container("main", topology.ResourceNeuronCore, cores)
}

// record gives the pod an allocation record (as the extender's bind writes it) on node for
// its first container.
func (b *podBuilder) record(node string, devices ...int) *podBuilder {
	name := "main"
	if len(b.p.Spec.Containers) > 0 {
		name = b.p.Spec.Containers[0].Name
	}
	cores := []int{}
	for _, d := range devices {
		cores = append(cores, 2*d, 2*d+1) // 2 cores per device on trn1 and inf2
	}
	r := &allocation.Record{Node: node, Containers: []allocation.Container{{
		Name: name, Resource: topology.ResourceNeuron, Devices: devices, Cores: cores,
	}}}
	for k, v := range r.Annotations() {
		b.p.Annotations[k] = v
	}
	b.p.Annotations[allocation.AllocTime] = strconv.Itoa(1)
	b.p.Spec.NodeName = node
	return b
}

func (b *podBuilder) obj() *corev1.Pod { return b.p }

func seqInts(start, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = start + i
	}
	return out
}

// startExtender starts an extender on a fake clientset holding objs, logging through t. The
// clientset binds pods the way the API server does (see emulateBinding).
func startExtender(t testing.TB, objs ...runtime.Object) (*Extender, *fake.Clientset, context.Context) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	return startExtenderCtx(t, ctx, true, objs...)
}

// startQuietExtender is startExtender without logs, for fuzzing and benchmarks; emulate says
// whether Bindings change the pod.
func startQuietExtender(t testing.TB, emulate bool, objs ...runtime.Object) (*Extender, *fake.Clientset, context.Context) {
	t.Helper()
	return startExtenderCtx(t, klog.NewContext(context.Background(), logr.Discard()), emulate, objs...)
}

func startExtenderCtx(t testing.TB, ctx context.Context, emulate bool, objs ...runtime.Object) (*Extender, *fake.Clientset, context.Context) {
	t.Helper()
	return startExtenderWith(t, ctx, fake.NewClientset(objs...), emulate)
}

func startExtenderWith(t testing.TB, ctx context.Context, client *fake.Clientset, emulate bool) (*Extender, *fake.Clientset, context.Context) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	if emulate {
		emulateBinding(client)
	}
	e, err := New(Options{Client: client, LeaseNamespace: "kube-system", Identity: "test"})
	if err != nil {
		t.Fatal(err)
	}
	// Start's context is the informers' lifetime, so it must outlive the test body.
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return e, client, ctx
}

var podsResource = corev1.SchemeGroupVersion.WithResource("pods")

// emulateBinding makes the fake clientset's pods/binding create do what the API server's does
// (the fake only records it): check the Binding's UID and resourceVersion preconditions and that
// the pod is not bound yet, then set spec.nodeName and merge the Binding's annotations into the
// pod, in one write.
func emulateBinding(client *fake.Clientset) {
	client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "binding" {
			return false, nil, nil
		}
		b := a.(k8stesting.CreateAction).GetObject().(*corev1.Binding)
		obj, err := client.Tracker().Get(podsResource, b.Namespace, b.Name)
		if err != nil {
			return true, nil, err
		}
		pod := obj.(*corev1.Pod).DeepCopy()
		conflict := func(format string, args ...any) error {
			return apierrors.NewConflict(schema.GroupResource{Resource: "pods/binding"}, b.Name, fmt.Errorf(format, args...))
		}
		switch {
		case b.UID != "" && b.UID != pod.UID:
			return true, nil, conflict("Precondition failed: UID in precondition: %s, UID in object meta: %s", b.UID, pod.UID)
		case b.ResourceVersion != "" && b.ResourceVersion != pod.ResourceVersion:
			return true, nil, conflict("Precondition failed: ResourceVersion in precondition: %s, ResourceVersion in object meta: %s", b.ResourceVersion, pod.ResourceVersion)
		case pod.Spec.NodeName != "":
			return true, nil, conflict("pod %s is already assigned to node %q", pod.Name, pod.Spec.NodeName)
		}
		pod.Spec.NodeName = b.Target.Name
		if len(b.Annotations) > 0 && pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		maps.Copy(pod.Annotations, b.Annotations)
		if err := client.Tracker().Update(podsResource, pod, b.Namespace); err != nil {
			return true, nil, err
		}
		return true, b, nil
	})
}
