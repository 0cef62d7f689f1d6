//go:build e2e

package autoscaler

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kube-neuron/kube-neuron/internal/autoscaler"
	"github.com/kube-neuron/kube-neuron/internal/autoscaler/plan"
	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/test/e2e/framework"
)

// seedDRAPods are the pods of the seeds' DRA templates (examples/dra) on an empty fleet, with the
// instance type that serves each; "" for one the DRA driver would refuse, which must get
// NotTriggerScaleUp with refused and no node.
var seedDRAPods = []struct {
	file, pod, typ, refused string
}{
	{"1x4-connected-neurons.yaml", "pod-1x4-connected", "trn2.48xlarge", ""},
	{"xl-trn2.yaml", "pod-xl-trn2", "trn2.48xlarge", ""},
	{"l-trn2.yaml", "pod-l-trn2", "trn2.48xlarge", ""},
	{"driver-version-trn1.yaml", "pod-driver-version-trn1", "trn1.2xlarge", ""},
	{"single-neuron-device.yaml", "neuron-dra-test-pod", "trn1.2xlarge", ""},
	{"lnc-1-trn1.yaml", "pod-lnc-1-trn1", "", "LNC value is not configurable for instance type trn1.2xlarge"},
	{"us-4-node-config.yaml", "vllm-0", "trn2u.48xlarge", ""},
	{"us-4-node-config.yaml", "vllm-1", "trn2u.48xlarge", ""},
	{"us-4-node-config.yaml", "vllm-2", "trn2u.48xlarge", ""},
	{"us-4-node-config.yaml", "vllm-3", "trn2u.48xlarge", ""},
}

// TestSeedDRATemplatesGetNodesTheSchedulerTakes: the seeds' DRA templates, all pending at once on
// an empty fleet. Each pod either runs on a node of a type that serves it, launched for it, or
// gets the driver's refusal and no node. The pod the driver refuses is applied once the others
// run: the scheduler does not know the driver's refusal, and would bind it to a free trn1.2xlarge
// launched for another pod, which then needs another node. Every launched node takes a pod (the scheduler and the
// DRA driver refuse none), no claim fails to prepare, and the four us-4-node-config replicas run
// on the four nodes of one UltraServer, launched as one.
func TestSeedDRATemplatesGetNodesTheSchedulerTakes(t *testing.T) {
	ctx, ns := setup(t)
	framework.EnsureDeviceClass(t, ctx)
	createDaemonSet(t, ctx, plan.DRADriverName)
	c := framework.L.Client()
	t.Cleanup(func() { // before setup's clean-up: the StatefulSet would recreate its pods
		_ = c.AppsV1().StatefulSets(ns).Delete(context.Background(), "vllm", metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
	})
	applied := map[string]bool{}
	for _, s := range seedDRAPods {
		if !applied[s.file] && s.refused == "" {
			framework.Apply(t, ctx, "examples/dra/"+s.file, ns)
			applied[s.file] = true
		}
	}
	ultraServers := map[string]bool{}
	for _, s := range seedDRAPods {
		if s.typ == "" {
			continue
		}
		p := framework.WaitForPod(t, ctx, ns, s.pod, corev1.PodRunning, 4*time.Minute)
		node, err := c.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if node.Labels[labels.InstanceType] != s.typ || node.Labels[autoscaler.LaunchedByLabel] != autoscaler.LaunchedByValue {
			t.Errorf("%s runs on %s (%s), want a %s the autoscaler launched", s.pod, node.Name, node.Labels[labels.InstanceType], s.typ)
		}
		if s.typ == "trn2u.48xlarge" {
			ultraServers[node.Labels[labels.UltraServerServerID4]] = true
		}
		t.Logf("%s (%s): runs on %s (%s)", s.pod, s.file, node.Name, s.typ)
	}
	if len(ultraServers) != 1 {
		t.Errorf("the us-4-node-config replicas run on UltraServers %v, want one", ultraServers)
	}
	checkUltraServerSlices(t, ctx)
	before := names(launched(t, ctx))
	for _, s := range seedDRAPods {
		if s.refused == "" {
			continue
		}
		framework.Apply(t, ctx, "examples/dra/"+s.file, ns)
		waitEvent(t, ctx, ns, s.pod, plan.ReasonNotTriggerScaleUp, s.refused)
		if msgs := events(t, ctx, ns, s.pod, plan.ReasonTriggeredScaleUp); len(msgs) > 0 {
			t.Errorf("%s triggered a scale-up: %q", s.pod, msgs)
		}
		t.Logf("%s (%s): NotTriggerScaleUp, no node: %s", s.pod, s.file, s.refused)
	}
	waitRounds(t, ctx)
	if after := names(launched(t, ctx)); strings.Join(after, ",") != strings.Join(before, ",") {
		t.Errorf("nodes launched for pods the driver refuses: before %v, after %v", before, after)
	}
	// Every launched node holds a running pod of the test: none was launched that the scheduler
	// or the driver then refused.
	pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	running := map[string][]string{}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning {
			running[p.Spec.NodeName] = append(running[p.Spec.NodeName], p.Name)
		}
		if msgs := events(t, ctx, ns, p.Name, "FailedPrepareDynamicResources"); len(msgs) > 0 {
			t.Errorf("%s: the DRA driver refused its claim on the node launched for it: %q", p.Name, msgs)
		}
	}
	var fleet []string
	for _, n := range launched(t, ctx) {
		if len(running[n.Name]) == 0 {
			t.Errorf("node %s (%s) was launched and runs no pod of the test", n.Name, n.Labels[labels.InstanceType])
		}
		fleet = append(fleet, fmt.Sprintf("%s (%s%s): %s", n.Name, n.Labels[labels.InstanceType], ultraServerSuffix(n), strings.Join(running[n.Name], ",")))
	}
	t.Logf("fleet: %s", strings.Join(fleet, "; "))
}

// checkUltraServerSlices: the DRA driver of each launched UltraServer node publishes the identity
// its labels carry (ultraserverId, ultraserverNodeId), as a trn2u node's Neuron driver reports it.
func checkUltraServerSlices(t *testing.T, ctx context.Context) {
	t.Helper()
	slices, err := framework.L.Client().ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, n := range launched(t, ctx) {
		id := n.Labels[labels.UltraServerServerID4]
		if id == "" {
			continue
		}
		for _, s := range slices.Items {
			if s.Spec.NodeName == nil || *s.Spec.NodeName != n.Name {
				continue
			}
			for _, d := range s.Spec.Devices {
				gotID, gotNode := d.Attributes["ultraserverId"].StringValue, d.Attributes["ultraserverNodeId"].IntValue
				if gotID == nil || *gotID != id || gotNode == nil || fmt.Sprint(*gotNode) != n.Labels[labels.UltraServerNodeID4] {
					t.Errorf("node %s (UltraServer %s node %s): device %s publishes ultraserverId %v, ultraserverNodeId %v",
						n.Name, id, n.Labels[labels.UltraServerNodeID4], d.Name, ptr.Deref(gotID, "none"), ptr.Deref(gotNode, -1))
				}
				checked++
			}
		}
	}
	if checked == 0 {
		t.Error("no device of a launched UltraServer node is published")
	}
}

func ultraServerSuffix(n corev1.Node) string {
	if id := n.Labels[labels.UltraServerServerID4]; id != "" {
		return ", UltraServer " + id + " node " + n.Labels[labels.UltraServerNodeID4]
	}
	return ""
}
