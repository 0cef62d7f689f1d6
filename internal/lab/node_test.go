package lab

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// TestRegisteredTaintsKeepTheLaunchingTaint: a node the autoscaler's local provider created
// keeps the taints it was launched with (the autoscaler removes its launching taint itself) but
// node.kubernetes.io/not-ready once the simulated kubelet registers it, and gains the
// simulator's own without a duplicate.
func TestRegisteredTaintsKeepTheLaunchingTaint(t *testing.T) {
	neuron := corev1.Taint{Key: "aws.amazon.com/neuron", Value: "true", Effect: corev1.TaintEffectNoSchedule}
	launching := corev1.Taint{Key: "kube-neuron.io/launching", Value: "true", Effect: corev1.TaintEffectNoSchedule}
	notReady := corev1.Taint{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule}
	got := registeredTaints([]corev1.Taint{notReady, neuron, launching}, []corev1.Taint{neuron})
	if want := []corev1.Taint{neuron, launching}; !slices.Equal(got, want) {
		t.Errorf("taints %v, want %v", got, want)
	}
	if got, want := registeredTaints([]corev1.Taint{notReady}, []corev1.Taint{neuron}), []corev1.Taint{neuron}; !slices.Equal(got, want) {
		t.Errorf("taints %v, want %v", got, want)
	}
}

// TestFirstDevicesOfAResourceArePostedAtOnce: a plugin registers its resources one after the
// other, and a resource that registered but listed no devices yet goes out with the first
// post as 0. Its devices, when they come, are posted at once (a fresh resource), not at the
// next status tick; a later change of a resource already posted waits for the tick, as on a
// real kubelet.
func TestFirstDevicesOfAResourceArePostedAtOnce(t *testing.T) {
	const name = "inf1-a"
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
	n := &SimNode{Spec: NodeSpec{Name: name}, client: client, statusEvery: time.Hour, posted: map[string]bool{}}
	n.dm = newDeviceManager(t.TempDir(), n.syncStatusAsync)
	healthy := func(ids ...string) map[string]string {
		out := map[string]string{}
		for _, id := range ids {
			out[id] = pluginapi.Healthy
		}
		return out
	}
	set := func(resource string, devices map[string]string) {
		n.dm.mu.Lock()
		n.dm.endpoints[resource] = &endpoint{resource: resource, devices: devices}
		n.dm.mu.Unlock()
		n.dm.onChange()
	}
	allocatable := func(resource string) int64 {
		node, err := client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		q := node.Status.Allocatable[corev1.ResourceName(resource)]
		return q.Value()
	}
	waitPosted := func(resource string, want int64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for allocatable(resource) != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s allocatable %d, want %d posted at once", resource, allocatable(resource), want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	// The device resource lists its device while the core resource has only registered.
	n.dm.mu.Lock()
	n.dm.endpoints["aws.amazon.com/neuroncore"] = &endpoint{resource: "aws.amazon.com/neuroncore", devices: map[string]string{}}
	n.dm.mu.Unlock()
	set("aws.amazon.com/neuron", healthy("0"))
	waitPosted("aws.amazon.com/neuron", 1)
	if err := n.syncStatus(context.Background()); err != nil { // settle the first post's goroutine
		t.Fatal(err)
	}

	set("aws.amazon.com/neuroncore", healthy("0", "1", "2", "3"))
	waitPosted("aws.amazon.com/neuroncore", 4)
	if n.StatusPending() {
		t.Error("a status change pending after the fresh resource was posted")
	}

	set("aws.amazon.com/neuroncore", healthy("0", "1"))
	if !n.StatusPending() {
		t.Error("a change of a posted resource went out before the status tick")
	}
	if got := allocatable("aws.amazon.com/neuroncore"); got != 4 {
		t.Errorf("neuroncore allocatable %d before the status tick, want the old 4", got)
	}
}
