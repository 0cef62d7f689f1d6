package autoscaler

import (
	"context"
	"encoding/json"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// restoreNomination is the released node a pod is planned onto: its nomination is written again
// should the scheduler clear it before until.
type restoreNomination struct {
	node  string
	until time.Time
}

// nominationCleared writes a pod's nomination again as soon as the scheduler clears it, when the
// pod is planned onto a node this controller released less than settleAfterReady ago, once per
// pod and release. The scheduler clears the nomination of a pod it failed to place (as it may
// while the nodes released together reach it one by one); written again, the pod's next attempt,
// after its backoff, tries its own node first instead of any node with room, which a round may
// come too late for (the resync is 30 seconds by default). Once only: a pod that fails on its
// own node again is planned again by the next round.
func (c *Controller) nominationCleared(ctx context.Context, oldObj, obj any) {
	old, ok := oldObj.(*corev1.Pod)
	pod, ok2 := obj.(*corev1.Pod)
	if !ok || !ok2 || old.Status.NominatedNodeName == "" || pod.Status.NominatedNodeName != "" || pod.Spec.NodeName != "" || pod.DeletionTimestamp != nil {
		return
	}
	defer c.clearsHandled.Add(1)
	key := pod.Namespace + "/" + pod.Name
	c.mu.Lock()
	r, found := c.restore[key]
	found = found && r.node == old.Status.NominatedNodeName && c.o.Now().Before(r.until)
	if found {
		delete(c.restore, key)
	}
	c.mu.Unlock()
	if !found {
		return
	}
	c.renominating.Add(1)
	go func() {
		defer c.renominating.Done()
		if c.nominate(ctx, pod, r.node) {
			klog.FromContext(ctx).V(2).Info("Nominated a pod again after the scheduler cleared its nomination", "pod", klog.KObj(pod), "node", r.node)
		}
	}()
}

// nominate sets the pod's status.nominatedNodeName to the node planned for it, under the name
// the provider says the node registers with (on EC2 the instance's private DNS name or id, not
// the planned name), and reports whether the pod carries that nomination now. The scheduler
// tries that node first, and counts the pod there (with its priority or higher) while it
// filters that node for other pods. But it clears the nomination whenever it fails to place the
// pod (its preemption finds no victim, and tells it to), as it does while the node is not up
// yet: so every round nominates the pods again, and release lets the node take pods only once
// its pods are nominated. A name no node ever takes (a launch template that renames the node)
// makes the hint do nothing, and does no harm.
//
// The pod also gets PlannedNodeAnnotation naming the node, which the scheduler does not clear:
// the scheduler extender keeps the pod off other nodes while that node still holds pods off.
func (c *Controller) nominate(ctx context.Context, pod *corev1.Pod, node string) bool {
	if pod.Annotations[PlannedNodeAnnotation] != node {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{PlannedNodeAnnotation: node}}})
		if _, err := c.o.Client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			klog.FromContext(ctx).V(2).Info("Annotating the pod with its planned node failed; retrying at the next round", "pod", klog.KObj(pod), "node", node, "err", err)
		}
	}
	if pod.Status.NominatedNodeName == node {
		return true
	}
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"nominatedNodeName": node}})
	if _, err := c.o.Client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		klog.FromContext(ctx).V(2).Info("Nominating the pod to its planned node failed; retrying at the next round", "pod", klog.KObj(pod), "node", node, "err", err)
		return false
	}
	return true
}

// expireRestores drops the released nodes' pods whose nomination is no longer written again.
func (c *Controller) expireRestores(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, r := range c.restore {
		if !now.Before(r.until) {
			delete(c.restore, k)
		}
	}
}
