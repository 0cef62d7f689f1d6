//go:build e2e

package dra

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kube-neuron/kube-neuron/internal/dra"
	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/neuron"
	"github.com/kube-neuron/kube-neuron/test/e2e/framework"
)

// waitTaint waits until device of node carries the unhealthy taint with value reason ("" for no
// taint), and is still published.
func waitTaint(t *testing.T, ctx context.Context, node, device, reason string) {
	t.Helper()
	framework.WaitFor(t, ctx, 15*time.Second, fmt.Sprintf("%s/%s taint %q", node, device, reason), func(ctx context.Context) (bool, string, error) {
		d, ok := sliceDevices(t, ctx, node)[device]
		if !ok {
			return false, "not published", nil
		}
		got := ""
		for _, tn := range d.Taints {
			if tn.Key == dra.UnhealthyTaintKey {
				if tn.Effect != resourcev1.DeviceTaintEffectNoSchedule || tn.TimeAdded == nil {
					return false, "", fmt.Errorf("taint %+v, want effect NoSchedule and timeAdded", tn)
				}
				got = tn.Value
			}
		}
		return got == reason, fmt.Sprintf("taints %+v", d.Taints), nil
	})
}

// TestHealthTaint: a fault on trn2-a's device 3 taints it within seconds and it stays in the
// slice; a claim that fits only device 3 of trn2-a or trn2-b, preferring trn2-a, goes to
// trn2-b; clearing the fault lifts the taint.
func TestHealthTaint(t *testing.T) {
	ctx, ns := setup(t)
	hw := framework.L.Simulator().Node("trn2-a").Hardware()
	t.Cleanup(func() { _ = hw.ClearErrors(3) })
	waitTaint(t, ctx, "trn2-a", "neurondevice3", "")
	if err := hw.InjectError(3, neuron.MemECC, 2); err != nil {
		t.Fatal(err)
	}
	waitTaint(t, ctx, "trn2-a", "neurondevice3", neuron.ReasonECCUncorrected)
	if n := len(sliceDevices(t, ctx, "trn2-a")); n != 16 {
		t.Errorf("%d devices published with one unhealthy, want all 16 (tainted, not removed)", n)
	}

	c := framework.L.Client()
	tmpl := &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "device-3", Namespace: ns},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
			Name: "n", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: dra.DriverName, Count: 1,
				Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: `device.attributes['neuron.aws.com'].resourceType == 'neuron_device' && device.attributes['neuron.aws.com'].deviceId == 3`}}}},
		}}}}},
	}
	if _, err := c.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cleanup(t, ns) })
	hostIn := func(nodes ...string) corev1.NodeSelectorTerm {
		return corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: nodes}}}
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "wants-device-3", Namespace: ns},
		Spec: corev1.PodSpec{
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution:  &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{hostIn("trn2-a", "trn2-b")}},
				PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 100, Preference: hostIn("trn2-a")}},
			}},
			Tolerations:    []corev1.Toleration{{Key: labels.NeuronTaintKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			Containers:     []corev1.Container{{Name: "c", Image: "public.ecr.aws/ubuntu/ubuntu:22.04", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "one"}}}}},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "one", ResourceClaimTemplateName: ptr.To("device-3")}},
		},
	}
	if _, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, _ := running(t, ctx, ns, "wants-device-3")
	if got.Spec.NodeName != "trn2-b" {
		t.Errorf("pod ran on %s; trn2-a's device 3 is tainted, want trn2-b", got.Spec.NodeName)
	}

	if err := hw.ClearErrors(3); err != nil {
		t.Fatal(err)
	}
	waitTaint(t, ctx, "trn2-a", "neurondevice3", "")
	events, err := c.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=trn2-a,reason=NeuronDeviceUnhealthy"})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range events.Items {
		found = found || strings.Contains(e.Message, "stays in the node's ResourceSlice with the taint neuron.aws.com/unhealthy=ecc-uncorrected:NoSchedule")
	}
	if !found {
		t.Errorf("no NeuronDeviceUnhealthy event on trn2-a says the device is tainted: %d events", len(events.Items))
	}
}

// TestHealthTaintUltraServerNode: on trn2u, neuronnode follows its devices: a device that
// disappears taints it and the device with "gone", and both taints go when it is back.
func TestHealthTaintUltraServerNode(t *testing.T) {
	ctx, _ := setup(t)
	node := ""
	for _, spec := range framework.L.Nodes() {
		if spec.UltraServer != nil {
			node = spec.Name
			break
		}
	}
	if node == "" {
		t.Fatal("the fleet has no UltraServer node")
	}
	hw := framework.L.Simulator().Node(node).Hardware()
	t.Cleanup(func() { _ = hw.RestoreDevice(5) })
	waitTaint(t, ctx, node, dra.NodeDeviceName, "")
	if err := hw.RemoveDevice(5); err != nil {
		t.Fatal(err)
	}
	waitTaint(t, ctx, node, "neurondevice5", neuron.ReasonGone)
	waitTaint(t, ctx, node, dra.NodeDeviceName, neuron.ReasonGone)
	if err := hw.RestoreDevice(5); err != nil {
		t.Fatal(err)
	}
	waitTaint(t, ctx, node, "neurondevice5", "")
	waitTaint(t, ctx, node, dra.NodeDeviceName, "")
}
