//go:build e2e

package autoscaler

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-neuron/kube-neuron/internal/autoscaler"
	"github.com/kube-neuron/kube-neuron/internal/autoscaler/local"
	"github.com/kube-neuron/kube-neuron/internal/autoscaler/plan"
	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/topology"
	"github.com/kube-neuron/kube-neuron/test/e2e/framework"
)

// TestLocalProviderNodeIsAdopted: a node the local provider launches becomes a simulated Neuron
// node with its device plugin, runs a pod, and is removed again.
func TestLocalProviderNodeIsAdopted(t *testing.T) {
	ctx := framework.Context(t)
	ns := framework.CreateNamespace(t, ctx)
	c := framework.L.Client()
	p := local.New(local.Options{Client: c})
	it, _ := topology.DefaultCatalog().Get("inf2.xlarge")
	name := autoscaler.NodeName(it.Name, []string{ns + "/one"})
	if _, err := p.Launch(ctx, autoscaler.NodeRequest{
		Name: name, Type: it.Name, Mode: labels.AllocationModeDevicePlugin,
		Labels: plan.NewNodeLabels(it, labels.AllocationModeDevicePlugin),
		Taints: []corev1.Taint{plan.NeuronTaint()},
	}); err != nil {
		t.Fatal(err)
	}
	framework.WaitFor(t, ctx, 60*time.Second, "the launched node to be Ready with its device plugin", func(ctx context.Context) (bool, string, error) {
		insts, err := p.Instances(ctx)
		if err != nil || len(insts) != 1 {
			return false, fmt.Sprintf("instances %+v, %v", insts, err), nil
		}
		n, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		q := n.Status.Allocatable[topology.ResourceNeuron]
		return !insts[0].Launching && q.Value() == 1, fmt.Sprintf("launching %v, allocatable %v", insts[0].Launching, n.Status.Allocatable), nil
	})
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "one", Namespace: ns},
		Spec: corev1.PodSpec{
			Tolerations: []corev1.Toleration{{Key: labels.NeuronTaintKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			Containers: []corev1.Container{{Name: "c", Image: "public.ecr.aws/ubuntu/ubuntu:22.04", Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{topology.ResourceNeuron: resource.MustParse("1")},
			}}},
		},
	}
	if _, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.WaitForPod(t, ctx, ns, "one", corev1.PodRunning, 60*time.Second)
	if err := c.CoreV1().Pods(ns).Delete(ctx, "one", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	if err := p.Delete(ctx, name); err != nil {
		t.Fatal(err)
	}
	framework.WaitFor(t, ctx, 30*time.Second, "the lab to stop simulating the deleted node", func(ctx context.Context) (bool, string, error) {
		return framework.L.Simulator().Node(name) == nil && len(framework.L.Adopted()) == 0, "", nil
	})
}
