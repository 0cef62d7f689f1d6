package autoscaler

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"
)

const (
	cordonPatch   = `{"spec":{"unschedulable":true}}`
	uncordonPatch = `{"spec":{"unschedulable":false}}`
)

// emptyNodeEnv is a cluster with one empty node the autoscaler launched, Ready for an hour, and a
// controller that has timed its emptiness to one second before the scale-down delay: the next
// round, a second later, removes it.
func emptyNodeEnv(t *testing.T, objs ...runtime.Object) (*env, *Controller, func() []string) {
	t.Helper()
	const name = "neuron-empty-abc"
	e := newEnv(t, append([]runtime.Object{launchedNode(name, "inf1.xlarge", t0.Add(-time.Hour))}, objs...)...)
	e.provider.instances[name] = Instance{Name: name, Type: "inf1.xlarge"}
	c, rec := e.controller()
	round(t, c)
	e.clock.Add(10*time.Minute - time.Second)
	round(t, c)
	if len(e.provider.deleted) != 0 {
		t.Fatalf("removed %v before the scale-down delay", e.provider.deleted)
	}
	e.clock.Add(time.Second)
	return e, c, func() []string { return events(rec) }
}

// onPatch calls f for every patch of the node whose body is patch, before the fake client
// applies it; an error from f fails the patch instead.
func (e *env) onPatch(node, patch string, f func() error) {
	e.client.PrependReactor("patch", "nodes", func(a clienttesting.Action) (bool, runtime.Object, error) {
		p := a.(clienttesting.PatchAction)
		if p.GetName() != node || string(p.GetPatch()) != patch {
			return false, nil, nil
		}
		if err := f(); err != nil {
			return true, nil, err
		}
		return false, nil, nil
	})
}

// patches returns the bodies of the patches of the node, in order.
func (e *env) patches(node string) []string {
	var out []string
	for _, a := range e.client.Actions() {
		if p, ok := a.(clienttesting.PatchAction); ok && a.GetResource().Resource == "nodes" && p.GetName() == node && a.GetSubresource() == "" {
			out = append(out, string(p.GetPatch()))
		}
	}
	return out
}

func (e *env) unschedulable(node string) bool {
	e.t.Helper()
	n, err := e.client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return n.Spec.Unschedulable
}

// TestControllerScaleDownPodArrivesAtTheCordon: the scheduler binds a pod to the empty node in
// the moment between the round's emptiness check (from the informer) and the cordon. The check
// after the cordon, against the API server, finds it: the node is uncordoned and kept, not
// removed with the pod on it. Without that check the node would be deleted here.
func TestControllerScaleDownPodArrivesAtTheCordon(t *testing.T) {
	const node = "neuron-empty-abc"
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
	}{
		{"a Neuron pod", boundPod(testPod("late").devices(1), node)},
		{"a pod without Neuron requests", boundPod(testPod("late").container("c", "cpu", 1), node)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, c, evs := emptyNodeEnv(t)
			// The pod is bound as the node is cordoned. The API server's answer to a list of
			// the node's pods has it from then on; the informer gets it only after the round
			// (the fake's watch would deliver it at once, and a check that read the informer
			// again might see it here, where on a real cluster it may not).
			arrived := false
			e.onPatch(node, cordonPatch, func() error { arrived = true; return nil })
			e.client.PrependReactor("list", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
				if !arrived || a.(clienttesting.ListAction).GetListRestrictions().Fields.Empty() {
					return false, nil, nil
				}
				return true, &corev1.PodList{Items: []corev1.Pod{*tc.pod}}, nil
			})
			round(t, c)
			if err := e.client.Tracker().Add(tc.pod); err != nil {
				t.Fatal(err)
			}
			if !arrived {
				t.Fatal("the node was not cordoned")
			}
			if len(e.provider.deleted) != 0 {
				t.Fatalf("removed %v with pod %s on it", e.provider.deleted, tc.pod.Name)
			}
			if got := e.patches(node); !slices.Equal(got, []string{cordonPatch, uncordonPatch}) {
				t.Errorf("patches of the node %q, want the cordon then the uncordon", got)
			}
			if e.unschedulable(node) {
				t.Error("the node is still cordoned")
			}
			want := "Normal ScaleDownCancelled node " + node + " was cordoned for removal after it was empty for 10m0s, but pod default/late runs on it: uncordoned and kept"
			if ev := evs(); !slices.Equal(ev, []string{want}) {
				t.Errorf("events %q, want %q", ev, want)
			}
			if n := metricValue(t, c.metrics.cancelled); n != 1 {
				t.Errorf("scale-downs cancelled metric %v, want 1", n)
			}
			if n := metricValue(t, c.metrics.removed); n != 0 {
				t.Errorf("nodes removed metric %v, want 0", n)
			}
			// The pod keeps the node from now on, whatever the delay.
			waitFor(t, func() bool { return len(c.podsOn(node)) == 1 })
			e.clock.Add(time.Hour)
			round(t, c)
			if len(e.provider.deleted) != 0 {
				t.Errorf("removed %v while pod %s runs on it", e.provider.deleted, tc.pod.Name)
			}
		})
	}
}

// TestControllerScaleDownDaemonSetPodAtTheCordon: a DaemonSet pod that appears at the cordon
// goes with the node, which is removed.
func TestControllerScaleDownDaemonSetPodAtTheCordon(t *testing.T) {
	const node = "neuron-empty-abc"
	e, c, evs := emptyNodeEnv(t)
	e.onPatch(node, cordonPatch, func() error { return e.client.Tracker().Add(dsPod("plugin-y", node)) })
	round(t, c)
	if !slices.Equal(e.provider.deleted, []string{node}) {
		t.Errorf("removed %v, want %s", e.provider.deleted, node)
	}
	if ev := evs(); len(ev) != 1 || !hasEvent(ev, "Normal ScaleDown node "+node) {
		t.Errorf("events %q, want the ScaleDown only", ev)
	}
}

// TestControllerScaleDownUncordonFails: an uncordon that fails is tried again at the next round,
// until it succeeds.
func TestControllerScaleDownUncordonFails(t *testing.T) {
	const node = "neuron-empty-abc"
	e, c, _ := emptyNodeEnv(t)
	e.onPatch(node, cordonPatch, func() error { return e.client.Tracker().Add(boundPod(testPod("late").devices(1), node)) })
	failing := true
	e.onPatch(node, uncordonPatch, func() error {
		if failing {
			return errors.New("the API server is unavailable")
		}
		return nil
	})
	round(t, c)
	if len(e.provider.deleted) != 0 || !e.unschedulable(node) {
		t.Fatalf("removed %v, cordoned %v: want the node kept, still cordoned", e.provider.deleted, e.unschedulable(node))
	}
	round(t, c)
	if got := e.patches(node); !slices.Equal(got, []string{cordonPatch, uncordonPatch, uncordonPatch}) {
		t.Errorf("patches %q, want the cordon and an uncordon per round", got)
	}
	// The uncordon works again: once, and the node is schedulable.
	failing = false
	round(t, c)
	round(t, c)
	if got := e.patches(node); len(got) != 4 {
		t.Errorf("patches %q, want one more uncordon, then none", got)
	}
	if cordoned := c.fleet.cordoned(); e.unschedulable(node) || len(cordoned) != 0 {
		t.Errorf("cordoned %v, nodes still to uncordon %v", e.unschedulable(node), cordoned)
	}
}

// TestControllerScaleDownAdministratorsCordon: a node that was already cordoned (by an
// administrator) is removed when empty, and when a pod arrives, kept as it is: cordoned.
func TestControllerScaleDownAdministratorsCordon(t *testing.T) {
	const node = "neuron-empty-abc"
	n := launchedNode(node, "inf1.xlarge", t0.Add(-time.Hour))
	n.Spec.Unschedulable = true
	e := newEnv(t, n)
	e.provider.instances[node] = Instance{Name: node, Type: "inf1.xlarge"}
	// The pod is in the API server but not (yet) in the informer: the list after the check
	// finds it.
	e.client.PrependReactor("list", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.(clienttesting.ListAction).GetListRestrictions().Fields.Empty() {
			return false, nil, nil
		}
		return true, &corev1.PodList{Items: []corev1.Pod{*boundPod(testPod("late").devices(1), node)}}, nil
	})
	c, rec := e.controller()
	round(t, c)
	e.clock.Add(10 * time.Minute)
	round(t, c)
	if len(e.provider.deleted) != 0 {
		t.Fatalf("removed %v with a pod on it", e.provider.deleted)
	}
	if got := e.patches(node); len(got) != 0 || !e.unschedulable(node) {
		t.Errorf("patches %q, cordoned %v: an administrator's cordon stays", got, e.unschedulable(node))
	}
	want := "Normal ScaleDownCancelled node " + node + " was to be removed after it was empty for 10m0s, but pod default/late runs on it: kept (its cordon, which the autoscaler did not set, stays)"
	if ev := events(rec); !slices.Equal(ev, []string{want}) {
		t.Errorf("events %q, want %q", ev, want)
	}
}

// TestControllerScaleDownListFails: when the pods cannot be listed after the cordon, the node is
// kept and uncordoned, and its emptiness is timed again.
func TestControllerScaleDownListFails(t *testing.T) {
	const node = "neuron-empty-abc"
	e, c, _ := emptyNodeEnv(t)
	failing := true
	e.client.PrependReactor("list", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.(clienttesting.ListAction).GetListRestrictions().Fields.Empty() || !failing {
			return false, nil, nil
		}
		return true, nil, errors.New("etcdserver: request timed out")
	})
	round(t, c)
	if len(e.provider.deleted) != 0 || e.unschedulable(node) {
		t.Fatalf("removed %v, cordoned %v: want the node kept and uncordoned", e.provider.deleted, e.unschedulable(node))
	}
	failing = false
	round(t, c) // empty from now
	e.clock.Add(10*time.Minute - time.Second)
	round(t, c)
	if len(e.provider.deleted) != 0 {
		t.Fatalf("removed %v before the delay, timed again, had passed", e.provider.deleted)
	}
	e.clock.Add(time.Second)
	round(t, c)
	if !slices.Equal(e.provider.deleted, []string{node}) {
		t.Errorf("removed %v, want %s", e.provider.deleted, node)
	}
}
