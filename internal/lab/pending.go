package lab

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/autoscaler"
	"github.com/kube-neuron/kube-neuron/internal/autoscaler/plan"
	"github.com/kube-neuron/kube-neuron/internal/labels"
)

// PendingFacts are what the explanation of a pending pod depends on in a lab.
type PendingFacts struct {
	// SystemNode: the lab has its untainted system node lab-system (a fleet with real nodes).
	SystemNode bool
	// MyScheduler: my-scheduler runs (the stock kube-scheduler with neuron-scheduler-extender,
	// or neuron-kube-scheduler).
	MyScheduler bool
	// Autoscaler: neuron-autoscaler runs (local provider).
	Autoscaler bool
}

// ExplainPending says why a Pending pod waits in the lab and what would change it, one point a
// line; events are the pod's events, oldest first. Every Pending pod gets an explanation: when
// no rule of the lab's fits, the scheduler's or the kubelet's last word.
func ExplainPending(pod *corev1.Pod, events []corev1.Event, f PendingFacts) string {
	if !f.SystemNode && isChartScheduler(pod) {
		return fmt.Sprintf("a pod of the chart's %s Deployment. A lab without real nodes installs the chart with 0 replicas "+
			"of the extender and my-scheduler and runs both as host processes; a values file (-f) asked for pods, "+
			"and they need a node without the Neuron taint, which only a lab with real nodes has (%s). "+
			"Leave the replicas to the lab, or add a `kubelet: real` node to the fleet", pod.Labels["app.kubernetes.io/name"], SystemNodeName)
	}
	if pod.Spec.NodeName != "" {
		if pod.Annotations[HoldAdmissionAnnotation] == "true" {
			return fmt.Sprintf("on node %s, held by the simulated kubelet (annotation %s: \"true\"); remove the annotation to admit it",
				pod.Spec.NodeName, HoldAdmissionAnnotation)
		}
		why := "waiting for the kubelet to start it"
		if s := podState(pod); s != string(corev1.PodPending) {
			why = strings.TrimPrefix(s, string(corev1.PodPending)+", ")
		} else if e := lastEvent(events, func(e corev1.Event) bool { return e.Type == corev1.EventTypeWarning }); e != nil {
			why = e.Reason + ": " + e.Message
		}
		return fmt.Sprintf("on node %s: %s", pod.Spec.NodeName, why)
	}
	switch name := pod.Spec.SchedulerName; {
	case name == CustomSchedulerName && !f.MyScheduler:
		return fmt.Sprintf("it asks for schedulerName: %s, which runs with %s or as %s, and this lab runs without it: "+
			"add %s or %s to COMPONENTS (neuron-lab --components)", CustomSchedulerName, ComponentExtender, ComponentKubeScheduler,
			ComponentExtender, ComponentKubeScheduler)
	case name != "" && name != corev1.DefaultSchedulerName && name != CustomSchedulerName:
		return fmt.Sprintf("it asks for schedulerName: %s, and no scheduler of that name runs in the lab (%s and %s do)",
			name, corev1.DefaultSchedulerName, CustomSchedulerName)
	}
	var cond *corev1.PodCondition
	for i, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			cond = &pod.Status.Conditions[i]
		}
	}
	if cond == nil {
		return "not scheduled yet"
	}
	parts := []string{"no node takes it: " + strings.TrimSpace(cond.Message)}
	neuron := asksForNeuron(pod)
	if !plan.ToleratesNeuronTaint(pod) {
		hint := fmt.Sprintf("every Neuron node carries the taint %s=%s:%s, and the pod does not tolerate it",
			labels.NeuronTaintKey, labels.NeuronTaintValue, labels.NeuronTaintEffect)
		switch {
		case neuron:
			hint += " (the examples show the toleration)"
		case !f.SystemNode:
			hint += "; it asks for no Neuron hardware, and this lab has no other node (a lab with real nodes has " + SystemNodeName + ")"
		}
		parts = append(parts, hint)
	}
	// neuron-autoscaler's event reasons about a pending pod.
	fromAutoscaler := func(e corev1.Event) bool {
		return e.Reason == plan.ReasonTriggeredScaleUp || e.Reason == plan.ReasonNotTriggerScaleUp || e.Reason == autoscaler.ReasonFailedScaleUp
	}
	switch e := lastEvent(events, fromAutoscaler); {
	case !neuron:
		parts = append(parts, "the autoscaler launches nodes only for pods that ask for Neuron devices or cores")
	case !f.Autoscaler:
		parts = append(parts, fmt.Sprintf("%s, which launches nodes for pending pods, is left out of this lab (COMPONENTS)", ComponentAutoscaler))
	case e != nil:
		parts = append(parts, "the autoscaler: "+e.Message)
	default:
		parts = append(parts, "the autoscaler has not decided about it yet (it looks every 2 s)")
	}
	return strings.Join(parts, "\n")
}

// asksForNeuron reports whether the pod asks for Neuron hardware: a resource of the device
// plugin or a ResourceClaim (which the autoscaler resolves to the DRA driver's devices).
func asksForNeuron(pod *corev1.Pod) bool {
	return len(pod.Spec.ResourceClaims) > 0 || len(allocation.PodRequests(pod)) > 0
}

// isChartScheduler reports whether the pod is one of the chart's extender or my-scheduler pods,
// which the lab replaces with host processes when it has no system node (LabChartValues).
func isChartScheduler(pod *corev1.Pod) bool {
	app := pod.Labels["app.kubernetes.io/name"]
	return pod.Labels["app.kubernetes.io/instance"] == ChartRelease && (app == ComponentExtender || app == CustomSchedulerName)
}

// unschedulable reports whether the scheduler found no node for the pod.
func unschedulable(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return true
		}
	}
	return false
}

// lastEvent is the latest of events (oldest first) that match.
func lastEvent(events []corev1.Event, match func(corev1.Event) bool) *corev1.Event {
	for i := len(events) - 1; i >= 0; i-- {
		if match(events[i]) {
			return &events[i]
		}
	}
	return nil
}
