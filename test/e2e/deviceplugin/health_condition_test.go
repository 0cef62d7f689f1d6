//go:build e2e

package deviceplugin

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-neuron/kube-neuron/internal/deviceplugin"
	"github.com/kube-neuron/kube-neuron/internal/neuron"
	"github.com/kube-neuron/kube-neuron/test/e2e/framework"
)

// waitCondition waits until the node's NeuronDevicesHealthy has status and a message containing
// message.
func waitCondition(t *testing.T, ctx context.Context, node string, status corev1.ConditionStatus, message string) {
	t.Helper()
	framework.WaitFor(t, ctx, 15*time.Second, fmt.Sprintf("node %s %s=%s", node, deviceplugin.NodeCondition, status), func(ctx context.Context) (bool, string, error) {
		n, err := framework.L.Client().CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		ready := false
		for _, c := range n.Status.Conditions {
			ready = ready || c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
		}
		if !ready {
			return false, "", fmt.Errorf("node %s lost its Ready condition: %+v", node, n.Status.Conditions)
		}
		for _, c := range n.Status.Conditions {
			if c.Type == deviceplugin.NodeCondition {
				return c.Status == status && strings.Contains(c.Message, message), fmt.Sprintf("%s %s", c.Status, c.Message), nil
			}
		}
		return false, "no condition", nil
	})
}

// TestHealthNodeCondition: a fault drops allocatable by the device; faulting the last healthy
// device sets NeuronDevicesHealthy=False with an event; clearing one device sets it True again.
func TestHealthNodeCondition(t *testing.T) {
	ctx := framework.Context(t)
	const node = "trn1-c" // no other test of the package uses it
	hw := framework.L.Simulator().Node(node).Hardware()
	const devices = 16 // trn1.32xlarge
	t.Cleanup(func() {
		for d := range devices {
			_ = hw.ClearErrors(d)
		}
	})
	// Pods of earlier tests may still hold hardware of the node through another resource
	// (withdrawn from this one): wait until they are gone and everything is allocatable.
	full := map[string]int64{deviceRes: devices, neuronRes: devices, coreRes: 2 * devices}
	waitAllocatable(t, ctx, node, full)
	waitCondition(t, ctx, node, corev1.ConditionTrue, "All 16 Neuron devices are healthy")

	if err := hw.InjectError(0, neuron.MemECC, 1); err != nil {
		t.Fatal(err)
	}
	waitAllocatable(t, ctx, node, map[string]int64{deviceRes: devices - 1, neuronRes: devices - 1})
	waitCondition(t, ctx, node, corev1.ConditionTrue, "15 of 16 Neuron devices are healthy; unhealthy: neuron0: ecc-uncorrected")

	for d := 1; d < devices; d++ {
		if err := hw.InjectError(d, neuron.MemECC, 1); err != nil {
			t.Fatal(err)
		}
	}
	waitAllocatable(t, ctx, node, map[string]int64{deviceRes: 0, neuronRes: 0, coreRes: 0})
	waitCondition(t, ctx, node, corev1.ConditionFalse, "All Neuron devices are unhealthy: neuron0: ecc-uncorrected, neuron1: ecc-uncorrected")
	waitEvent(t, ctx, node, deviceplugin.ConditionReasonUnhealthy, "Node condition NeuronDevicesHealthy=False: All Neuron devices are unhealthy: neuron0: ecc-uncorrected")

	if err := hw.ClearErrors(7); err != nil {
		t.Fatal(err)
	}
	waitCondition(t, ctx, node, corev1.ConditionTrue, "1 of 16 Neuron devices are healthy")
	waitEvent(t, ctx, node, deviceplugin.ConditionReasonHealthy, "Node condition NeuronDevicesHealthy=True")
	for d := range devices {
		if err := hw.ClearErrors(d); err != nil {
			t.Fatal(err)
		}
	}
	waitAllocatable(t, ctx, node, full)
	waitCondition(t, ctx, node, corev1.ConditionTrue, "All 16 Neuron devices are healthy")
}
