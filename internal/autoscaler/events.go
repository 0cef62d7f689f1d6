package autoscaler

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// The controller's event reasons, beside the planner's (plan.ReasonTriggeredScaleUp and
// plan.ReasonNotTriggerScaleUp): FailedScaleUp on a pod (Warning), ScaleDown and
// ScaleDownCancelled on a node (Normal).
const (
	// ReasonFailedScaleUp: the node launched for the pod could not be launched, or never
	// registered and was deleted; the pod is planned again.
	ReasonFailedScaleUp = "FailedScaleUp"
	// ReasonScaleDown: an empty node the autoscaler launched is removed.
	ReasonScaleDown = "ScaleDown"
	// ReasonScaleDownCancelled: a pod arrived on an empty node while it was being removed (found
	// by the check after the cordon): the node is uncordoned and kept.
	ReasonScaleDownCancelled = "ScaleDownCancelled"
)

// eventKey is an object and an event reason: the object's latest event of that reason is kept
// in Controller.emitted.
type eventKey struct {
	UID             types.UID
	Namespace, Name string
	Reason          string
}

// emission is an event this controller recorded, and when.
type emission struct {
	msg string
	at  time.Time
}

// event records an event on the object unless the object's last event of that reason, recorded
// less than eventInterval ago, has the same message: a decision that stays the same is told
// once in eventInterval, a changed one at once (also when it changes back). Each caller records
// one event per object, reason and round, so that alternating messages are not repeated every
// round.
func (c *Controller) event(ctx context.Context, obj runtime.Object, eventType, reason, msg string) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return
	}
	key := eventKey{UID: m.GetUID(), Namespace: m.GetNamespace(), Name: m.GetName(), Reason: reason}
	now := c.o.Now()
	if last, ok := c.emitted[key]; ok && last.msg == msg && now.Sub(last.at) < eventInterval {
		return
	}
	c.emitted[key] = emission{msg: msg, at: now}
	klog.FromContext(ctx).V(2).Info("Event", "object", klog.KObj(m), "type", eventType, "reason", reason, "message", msg)
	c.recorder.Event(obj, eventType, reason, msg)
}
