//go:build e2e

package extender

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/lab"
	"github.com/kube-neuron/kube-neuron/internal/topology"
	"github.com/kube-neuron/kube-neuron/test/e2e/framework"
)

// switchTo starts the other way of running my-scheduler than from: neuron-kube-scheduler after
// the extender, the extender after neuron-kube-scheduler.
func switchTo(ctx context.Context, to string) error {
	if err := framework.EnsureComponents(to); err != nil {
		return err
	}
	if to == lab.ComponentKubeScheduler {
		return framework.L.StartKubeScheduler(ctx)
	}
	return framework.L.StartExtender(ctx)
}

// TestSwitchKeepsRunningPodsDevices switches a running lab from one way of running my-scheduler
// to the other (the extender to neuron-kube-scheduler; the other way round in plugin mode), as
// an upgrade of the chart from scheduler.customScheduler.mode extender to plugin does: the pods
// placed before keep running with their allocation records unchanged, and the pods placed after
// get devices and cores none of them holds.
func TestSwitchKeepsRunningPodsDevices(t *testing.T) {
	ctx := framework.Context(t)
	ns := framework.CreateNamespace(t, ctx)
	const node = "switch"
	from := framework.L.Scheduling()
	to := lab.ComponentKubeScheduler
	if from == lab.ComponentKubeScheduler {
		to = lab.ComponentExtender
	}
	if from == "" {
		t.Fatal("my-scheduler does not run in this lab")
	}

	type size struct {
		res string
		n   int
	}
	before := map[string]size{"old-4": {topology.ResourceNeuron, 4}, "old-1": {topology.ResourceNeuron, 1},
		"old-c2": {topology.ResourceNeuronCore, 2}, "old-c1": {topology.ResourceNeuronCore, 1}}
	// 13 devices of the node's 16 in all: the new 4-device pod needs an aligned block the old
	// one does not hold, the new single cores a device or a core the old ones leave free.
	after := map[string]size{"new-4": {topology.ResourceNeuron, 4}, "new-1": {topology.ResourceNeuron, 1},
		"new-c2": {topology.ResourceNeuronCore, 2}, "new-c1": {topology.ResourceNeuronCore, 1}}
	spec := framework.L.Simulator().Node(node).Spec
	shape, err := topology.NewShape(spec.InstanceType, spec.LNC)
	if err != nil {
		t.Fatal(err)
	}
	held := map[int]string{} // core of the node -> pod
	hold := func(name string, r *allocation.Record) {
		t.Helper()
		if r.Node != node {
			t.Fatalf("pod %s went to %s, not %s", name, r.Node, node)
		}
		for _, c := range r.Containers {
			if c.Resource == topology.ResourceNeuron && !shape.IsValidDeviceSet(c.Devices) {
				t.Errorf("pod %s: devices %v are not a connected set of the node", name, c.Devices)
			}
			for _, core := range c.Cores {
				if other, ok := held[core]; ok {
					t.Errorf("core %d of %s is held by %s and %s", core, node, other, name)
				}
				held[core] = name
			}
		}
	}
	records := map[string]string{} // pod -> its allocation record as written
	for name, s := range before {
		create(t, ctx, ns, name, "trn1.32xlarge", s.res, s.n, node)
	}
	for name := range before {
		hold(name, checkServed(t, ctx, ns, name))
		pod, err := framework.L.Client().CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		records[name] = pod.Annotations[allocation.Annotation]
	}

	begin := time.Now()
	if err := framework.L.StopScheduling(); err != nil {
		t.Fatalf("stopping %s: %v", from, err)
	}
	// Whatever happens below, the tests after this one find the lab as it was.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if framework.L.Scheduling() != "" {
			if err := framework.L.StopScheduling(); err != nil {
				t.Errorf("stopping %s: %v", to, err)
			}
		}
		if err := switchTo(ctx, from); err != nil {
			t.Errorf("starting %s again: %v", from, err)
		}
	})
	if err := switchTo(ctx, to); err != nil {
		t.Fatalf("starting %s: %v", to, err)
	}
	if got := framework.L.Scheduling(); got != to {
		t.Fatalf("my-scheduler runs with %q after the switch, want %s", got, to)
	}
	t.Logf("switched from %s to %s in %v", from, to, time.Since(begin).Round(time.Millisecond))

	for name, s := range after {
		create(t, ctx, ns, name, "trn1.32xlarge", s.res, s.n, node)
	}
	for name := range after {
		hold(name, checkServed(t, ctx, ns, name))
	}
	// The pods placed before still run, on what they were given.
	for name := range before {
		pod, err := framework.L.Client().CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if pod.Status.Phase != corev1.PodRunning {
			t.Errorf("pod %s placed before the switch: %s", name, framework.DescribePod(ctx, pod))
		}
		if got := pod.Annotations[allocation.Annotation]; got != records[name] {
			t.Errorf("pod %s placed before the switch: record %s, was %s", name, got, records[name])
		}
	}
	want := 0 // cores held on the node: two a device on a trn1.32xlarge
	for _, sizes := range []map[string]size{before, after} {
		for _, s := range sizes {
			if s.res == topology.ResourceNeuronCore {
				want += s.n
			} else {
				want += 2 * s.n
			}
		}
	}
	if len(held) != want {
		t.Errorf("%d cores of %s held, want %d: %s", len(held), node, want, fmt.Sprint(held))
	}
}
