//go:build e2e

package autoscaler

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-neuron/kube-neuron/internal/autoscaler"
	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/test/e2e/framework"
)

// TestDRASelectorsLaunchOnlyNodesThatServe: seed 003's claim for a trn1.2xlarge with the lab's
// Neuron driver version gets a DRA node of that type and runs; the same claim with a version no
// node runs (9.99.99.0) gets a NotTriggerScaleUp event naming the version the nodes publish, and
// no node. Before the autoscaler evaluated claims' CEL selectors it launched a trn1.2xlarge for
// it, which could never serve it.
func TestDRASelectorsLaunchOnlyNodesThatServe(t *testing.T) {
	ctx, ns := setup(t)
	framework.EnsureDeviceClass(t, ctx)
	createDaemonSet(t, ctx, autoscaler.DRADriverName) // without pods, as with no Neuron node yet
	c := framework.L.Client()
	framework.Apply(t, ctx, "examples/dra/driver-version-trn1.yaml", ns)
	pod := framework.WaitForPod(t, ctx, ns, "pod-driver-version-trn1", corev1.PodRunning, 2*time.Minute)
	node, err := c.CoreV1().Nodes().Get(ctx, pod.Spec.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if node.Labels[labels.InstanceType] != "trn1.2xlarge" || node.Labels[labels.AllocationMode] != labels.AllocationModeDRA || node.Labels[autoscaler.LaunchedByLabel] != autoscaler.LaunchedByValue {
		t.Fatalf("pod-driver-version-trn1 runs on %s with labels %v, want a trn1.2xlarge in dra mode that the autoscaler launched", node.Name, node.Labels)
	}
	before := names(launched(t, ctx))

	framework.Apply(t, ctx, "examples/dra/driver-version-missing.yaml", ns)
	waitEvent(t, ctx, ns, "pod-driver-version-missing", autoscaler.ReasonNotTriggerScaleUp, "neuronDriverVersion 2.26.5.0")
	waitEvent(t, ctx, ns, "pod-driver-version-missing", autoscaler.ReasonNotTriggerScaleUp, "Change the claim's selectors")
	waitRounds(t, ctx)
	if after := names(launched(t, ctx)); strings.Join(after, ",") != strings.Join(before, ",") {
		t.Errorf("nodes launched for a claim no new node can satisfy: before %v, after %v", before, after)
	}
	if msgs := events(t, ctx, ns, "pod-driver-version-missing", autoscaler.ReasonTriggeredScaleUp); len(msgs) > 0 {
		t.Errorf("the pod triggered a scale-up: %q", msgs)
	}
	got, err := c.CoreV1().Pods(ns).Get(ctx, "pod-driver-version-missing", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.NodeName != "" {
		t.Errorf("pod-driver-version-missing was bound to %s", got.Spec.NodeName)
	}
	t.Logf("fleet: %v; %s", before, fmt.Sprint(events(t, ctx, ns, "pod-driver-version-missing", autoscaler.ReasonNotTriggerScaleUp)))
}
