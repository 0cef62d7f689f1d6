//go:build e2e

package autoscaler

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-neuron/kube-neuron/internal/autoscaler"
	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/test/e2e/framework"
)

// ensureDRA creates the DeviceClass the chart ships and a DRA driver DaemonSet object (without
// pods, as on a cluster with no Neuron node yet).
func ensureDRA(t *testing.T, ctx context.Context) {
	t.Helper()
	c := framework.L.Client()
	dc := &resourcev1.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: autoscaler.DeviceClass},
		Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{
			CEL: &resourcev1.CELDeviceSelector{Expression: `device.driver == "neuron.aws.com"`},
		}}},
	}
	if _, err := c.ResourceV1().DeviceClasses().Create(ctx, dc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	sel := map[string]string{"app": autoscaler.DRADriverName}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: autoscaler.DRADriverName},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: sel},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "plugin", Image: "kube-neuron"}}},
			},
		},
	}
	if _, err := c.AppsV1().DaemonSets(metav1.NamespaceSystem).Create(ctx, ds, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// TestDRASelectorsLaunchOnlyNodesThatServe: seed 003's claim for a trn1.2xlarge with the lab's
// Neuron driver version gets a DRA node of that type and runs; the same claim with a version no
// node runs (9.99.99.0) gets a NotTriggerScaleUp event naming the version the nodes publish, and
// no node. Before the autoscaler evaluated claims' CEL selectors it launched a trn1.2xlarge for
// it, which could never serve it.
func TestDRASelectorsLaunchOnlyNodesThatServe(t *testing.T) {
	ctx, ns := setup(t)
	ensureDRA(t, ctx)
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
	time.Sleep(3 * time.Second) // two more batch windows
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
