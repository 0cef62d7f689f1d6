package extender

import (
	"context"
	"fmt"
	"maps"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/testkit"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

const (
	trn1 = "trn1.32xlarge" // 16 devices, 2 cores each, 4x4 torus
	inf2 = "inf2.48xlarge" // 12 devices, 2 cores each, ring
)

// recordOn is the allocation record the extender's bind writes for a pod whose container
// "main" (testkit.DefaultContainer) holds the devices on node, with both cores of each device
// (trn1 and inf2 have 2 cores per device). Pods take it with
// testkit.MakePod()....Record(recordOn(node, devices...)).AllocTime(1).
func recordOn(node string, devices ...int) *allocation.Record {
	cores := []int{}
	for _, d := range devices {
		cores = append(cores, 2*d, 2*d+1)
	}
	return &allocation.Record{Node: node, Containers: []allocation.Container{{
		Name: testkit.DefaultContainer, Resource: topology.ResourceNeuron, Devices: devices, Cores: cores,
	}}}
}

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
