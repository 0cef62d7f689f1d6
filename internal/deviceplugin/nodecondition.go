package deviceplugin

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// NodeCondition is the Node condition the plugin owns: False while every Neuron device of the
// node is unhealthy. (NeuronHealth is the node problem detector's.)
const NodeCondition corev1.NodeConditionType = "NeuronDevicesHealthy"

// Reasons of NodeCondition.
const (
	ConditionReasonHealthy   = "NeuronDevicesHealthy"
	ConditionReasonUnhealthy = "NeuronDevicesUnhealthy"
)

// nodeConditionState is the condition as last written to the Node ("" before the first write).
type nodeConditionState struct {
	status  corev1.ConditionStatus
	message string
}

// healthCondition decides NodeCondition from the reason code of each device ("" for a healthy
// one): False when there are devices and all are unhealthy, True otherwise. The message names
// the unhealthy devices and their reasons ("neuron0: ecc-uncorrected, neuron1: gone").
func healthCondition(reasons []string) (status corev1.ConditionStatus, reason, message string) {
	var bad []string
	for i, r := range reasons {
		if r != "" {
			bad = append(bad, fmt.Sprintf("neuron%d: %s", i, r))
		}
	}
	switch {
	case len(reasons) > 0 && len(bad) == len(reasons):
		return corev1.ConditionFalse, ConditionReasonUnhealthy, "All Neuron devices are unhealthy: " + strings.Join(bad, ", ")
	case len(bad) > 0:
		return corev1.ConditionTrue, ConditionReasonHealthy, fmt.Sprintf("%d of %d Neuron devices are healthy; unhealthy: %s", len(reasons)-len(bad), len(reasons), strings.Join(bad, ", "))
	}
	return corev1.ConditionTrue, ConditionReasonHealthy, fmt.Sprintf("All %d Neuron devices are healthy", len(reasons))
}

// conditionPatch is the strategic merge patch of nodes/status that sets this one condition
// (conditions merge on their type, so the others are left alone).
func conditionPatch(c corev1.NodeCondition) []byte {
	b, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{c}}})
	return b
}

// syncNodeCondition writes NodeCondition when it differs from what was last written (always the
// first time), with an event when its status changes. A failed write is retried at the next
// health check.
func (p *Plugin) syncNodeCondition(ctx context.Context, reasons []string) {
	status, reason, message := healthCondition(reasons)
	last := p.nodeCondition
	if last.status == status && last.message == message {
		return
	}
	now := metav1.NewTime(time.Now())
	patch := conditionPatch(corev1.NodeCondition{
		Type: NodeCondition, Status: status, Reason: reason, Message: message,
		LastHeartbeatTime: now, LastTransitionTime: now,
	})
	if last.status == status {
		// Same status, new message: keep the transition time the Node has.
		patch = conditionPatch(corev1.NodeCondition{Type: NodeCondition, Status: status, Reason: reason, Message: message, LastHeartbeatTime: now})
	}
	logger := klog.FromContext(ctx)
	if _, err := p.o.Client.CoreV1().Nodes().PatchStatus(ctx, p.o.NodeName, patch); err != nil {
		logger.Error(err, "Setting the node condition", "condition", NodeCondition, "status", status)
		return
	}
	p.nodeCondition = nodeConditionState{status: status, message: message}
	logger.Info("Node condition set", "condition", NodeCondition, "status", status, "message", message)
	if last.status == status || (last.status == "" && status == corev1.ConditionTrue) {
		return
	}
	nodeRef := &corev1.ObjectReference{Kind: "Node", Name: p.o.NodeName, UID: types.UID(p.o.NodeName)}
	if status == corev1.ConditionFalse {
		p.recorder.Eventf(nodeRef, corev1.EventTypeWarning, ConditionReasonUnhealthy, "Node condition %s=False: %s", NodeCondition, message)
	} else {
		p.recorder.Eventf(nodeRef, corev1.EventTypeNormal, ConditionReasonHealthy, "Node condition %s=True: %s", NodeCondition, message)
	}
}
