package autoscaler

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/kube-neuron/kube-neuron/internal/autoscaler/plan"
	"github.com/kube-neuron/kube-neuron/internal/labels"
)

// scaleDown removes the launched nodes that stayed empty for ScaleDownAfter. The nodes of an
// UltraServer go together, once every one of them is due: UltraServer capacity comes and goes
// as a whole.
func (c *Controller) scaleDown(ctx context.Context, nodes []*corev1.Node, planned map[string][]string, pending map[string]plan.PodDemand, now time.Time) {
	if c.o.ScaleDownAfter <= 0 {
		return
	}
	present := map[string]bool{}
	due := map[string]time.Duration{} // node -> how long it has been empty, when due
	units := map[string][]string{}    // UltraServer id -> its launched nodes
	for _, node := range nodes {
		present[node.Name] = true
		if id := node.Labels[labels.UltraServerServerID4]; id != "" && node.Labels[LaunchedByLabel] == LaunchedByValue {
			units[id] = append(units[id], node.Name)
		}
		if c.emptyNow(node, planned[node.Name], pending) {
			since := c.fleet.get(node.Name).emptySince
			if since.IsZero() {
				c.fleet.update(node.Name, func(r *nodeRecord) { r.emptySince = now })
			} else if now.Sub(since) >= c.o.ScaleDownAfter {
				due[node.Name] = now.Sub(since)
			}
		} else {
			c.fleet.update(node.Name, func(r *nodeRecord) { r.emptySince = time.Time{} })
		}
	}
	for _, members := range units {
		if slices.ContainsFunc(members, func(name string) bool { _, ok := due[name]; return !ok }) {
			for _, name := range members {
				delete(due, name)
			}
		}
	}
	for _, node := range nodes {
		emptyFor, ok := due[node.Name]
		if ok {
			c.remove(ctx, node, planned[node.Name], pending, emptyFor)
		}
		// A node this controller cordoned and then kept: its uncordon failed last time.
		if !ok && c.fleet.get(node.Name).cordoned {
			c.uncordon(ctx, node.Name)
		}
	}
	c.fleet.forgetGone(present, func(r *nodeRecord) { r.emptySince, r.cordoned = time.Time{}, false })
}

// emptyNow reports whether a node the autoscaler launched is Ready, not being deleted, and
// empty (Controller.empty) this round.
func (c *Controller) emptyNow(node *corev1.Node, planned []string, pending map[string]plan.PodDemand) bool {
	if node.Labels[LaunchedByLabel] != LaunchedByValue || !nodeReady(node) || node.DeletionTimestamp != nil {
		return false
	}
	return c.empty(c.podsOn(node.Name), planned, pending) == ""
}

// empty returns "" when a node may be removed: none of the pods planned onto it is still
// pending, and every pod on it is a DaemonSet pod, a mirror pod or finished (Succeeded or
// Failed). Else it names what keeps the node, for the log and the events. Any other pod keeps
// the node, whether it asks for Neuron hardware or not, and a pod being deleted keeps it until
// it has stopped: the autoscaler evicts nothing, so a node with such a pod is not empty, and
// removing it would kill the pod. DaemonSet and mirror pods belong to the node and go with it.
func (c *Controller) empty(pods []*corev1.Pod, planned []string, pending map[string]plan.PodDemand) string {
	for _, k := range planned {
		if _, ok := pending[k]; ok {
			return "pod " + k + ", planned onto it, is still pending"
		}
	}
	if left := evictable(pods); len(left) > 0 {
		return "pod " + left[0].Namespace + "/" + left[0].Name + " runs on it"
	}
	return ""
}

// remove cordons an empty node, lists its pods again from the API server, and removes it if it
// is still empty. The informer's view of the node may be behind: a pod the scheduler bound to it
// after the round began (but before the cordon, which stops further binds) is in the fresh list,
// and then the node is uncordoned and kept rather than removed with the pod on it.
func (c *Controller) remove(ctx context.Context, node *corev1.Node, planned []string, pending map[string]plan.PodDemand, emptyFor time.Duration) {
	logger := klog.FromContext(ctx).WithValues("node", node.Name, "instanceType", node.Labels[labels.InstanceType])
	if c.o.DryRun {
		logger.Info("Dry run: would remove an empty node", "emptyFor", emptyFor)
		c.event(ctx, node, corev1.EventTypeNormal, ReasonScaleDown, fmt.Sprintf("dry run: would remove node %s: empty for %s", node.Name, c.o.ScaleDownAfter))
		return
	}
	nodes := c.o.Client.CoreV1().Nodes()
	if !node.Spec.Unschedulable {
		if _, err := nodes.Patch(ctx, node.Name, types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{}); err != nil {
			logger.Error(err, "Cordoning an empty node failed; retrying at the next round")
			return
		}
		c.fleet.update(node.Name, func(r *nodeRecord) { r.cordoned = true })
	}
	list, err := c.o.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node.Name).String()})
	if err != nil {
		logger.Error(err, "Listing the node's pods after cordoning it failed; keeping the node, its emptiness is timed again")
		c.keep(ctx, node.Name)
		return
	}
	var onNode []*corev1.Pod
	for i := range list.Items {
		if list.Items[i].Spec.NodeName == node.Name {
			onNode = append(onNode, &list.Items[i])
		}
	}
	if why := c.empty(onNode, planned, pending); why != "" {
		c.metrics.cancelled.Inc()
		if c.fleet.get(node.Name).cordoned {
			logger.Info("The node is no longer empty after its cordon; uncordoning and keeping it", "reason", why)
			c.event(ctx, node, corev1.EventTypeNormal, ReasonScaleDownCancelled, fmt.Sprintf("node %s was cordoned for removal after it was empty for %s, but %s: uncordoned and kept", node.Name, c.o.ScaleDownAfter, why))
		} else {
			logger.Info("The node is no longer empty; keeping it, cordoned as it was", "reason", why)
			c.event(ctx, node, corev1.EventTypeNormal, ReasonScaleDownCancelled, fmt.Sprintf("node %s was to be removed after it was empty for %s, but %s: kept (its cordon, which the autoscaler did not set, stays)", node.Name, c.o.ScaleDownAfter, why))
		}
		c.keep(ctx, node.Name)
		return
	}
	if err := c.o.Provider.Delete(ctx, node.Name); err != nil {
		logger.Error(err, "Removing an empty node failed; it stays cordoned and is retried at the next round")
		return
	}
	if err := nodes.Delete(ctx, node.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		logger.Error(err, "Deleting the Node object failed; the provider removed the node")
	}
	c.fleet.update(node.Name, func(r *nodeRecord) {
		r.to(phaseDeleted)
		r.emptySince, r.cordoned = time.Time{}, false
	})
	c.metrics.removed.Inc()
	logger.Info("Removed an empty node", "emptyFor", emptyFor)
	c.event(ctx, node, corev1.EventTypeNormal, ReasonScaleDown, fmt.Sprintf("node %s was empty for %s (no pod but DaemonSet and mirror pods): cordoned and removed", node.Name, c.o.ScaleDownAfter))
}

// keep stops the removal of a node: its emptiness is timed again from the next round, and the
// cordon is lifted if this controller set it (a node an administrator cordoned stays so).
func (c *Controller) keep(ctx context.Context, name string) {
	cordoned := false
	c.fleet.update(name, func(r *nodeRecord) { r.emptySince, cordoned = time.Time{}, r.cordoned })
	if cordoned {
		c.uncordon(ctx, name)
	}
}

// uncordon lifts a cordon this controller set; a failure is retried at the next round.
func (c *Controller) uncordon(ctx context.Context, name string) {
	if _, err := c.o.Client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(`{"spec":{"unschedulable":false}}`), metav1.PatchOptions{}); err != nil {
		if !apierrors.IsNotFound(err) {
			klog.FromContext(ctx).Error(err, "Uncordoning a node the autoscaler kept failed; retrying at the next round", "node", name)
			return
		}
	}
	c.fleet.update(name, func(r *nodeRecord) { r.cordoned = false })
}
