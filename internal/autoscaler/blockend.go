package autoscaler

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/kube-neuron/kube-neuron/internal/labels"
)

// ReasonCapacityBlockEnding: the node runs on a Capacity Block that ends soon; it is cordoned
// and drained, and the pod (Warning, on each pod of the node and on the node) is evicted.
const ReasonCapacityBlockEnding = "CapacityBlockEnding"

// blockNode is a launched node on a reservation that ends (a Capacity Block).
type blockNode struct {
	reservation string
	end         time.Time
	// lead is how long before end its drain starts; ultraServer: an UltraServer block.
	lead        time.Duration
	ultraServer bool
}

// drainStart is when the node is cordoned and its pods evicted.
func (b blockNode) drainStart() time.Time { return b.end.Add(-b.lead) }

// deadline is when the node is removed whatever pods are left on it: halfway between the start
// of the drain and the moment EC2 starts terminating the block's instances (30 minutes before
// the end of an instance block, 60 before an UltraServer block's), so that the pods still there
// get their graceful termination from Kubernetes, not EC2's cut. With the default leads (40 and
// 70 minutes) that is 35 and 65 minutes before the end. With a lead no longer than EC2's
// termination (the lab's short leads) it is halfway between the start of the drain and the end.
func (b blockNode) deadline() time.Time {
	term := instanceBlockTermination
	if b.ultraServer {
		term = ultraServerBlockTermination
	}
	if b.lead > term {
		return b.end.Add(-term).Add(-(b.lead - term) / 2)
	}
	return b.end.Add(-b.lead / 2)
}

// nodeBlock returns the Capacity Block a node the autoscaler launched runs on, when its end is
// known: the End of its reservation (by the id of the Node's or the Instance's capacity label)
// as the provider lists it this round, which follows an extension of the block; else the end
// annotation of the Node, else of its Instance (in: nil when the provider does not list it).
// The lead is the UltraServer lead for the nodes of an UltraServer block.
func nodeBlock(node *corev1.Node, in *Instance, byID map[string]Reservation, l leads) (blockNode, bool) {
	var inLabels, inAnnotations map[string]string
	if in != nil {
		inLabels, inAnnotations = in.Labels, in.Annotations
	}
	id := node.Labels[labels.CapacityReservationID]
	if id == "" {
		id = inLabels[labels.CapacityReservationID]
	}
	r, listed := byID[id]
	b := blockNode{reservation: id}
	if listed && id != "" {
		b.end = r.End
	}
	for _, a := range []string{node.Annotations[labels.CapacityReservationEndAnnotation], inAnnotations[labels.CapacityReservationEndAnnotation]} {
		if t, err := time.Parse(time.RFC3339, a); err == nil && b.end.IsZero() {
			b.end = t
		}
	}
	if b.end.IsZero() {
		return blockNode{}, false
	}
	b.ultraServer = (listed && r.UltraServerType != "") || node.Labels[labels.UltraServerServerID4] != "" || inLabels[labels.UltraServerServerID4] != ""
	b.lead = l.of(b.ultraServer)
	return b, true
}

// drainAction is what the drain rule says of a node on a Capacity Block.
type drainAction int

const (
	// drainNone: its drain has not started.
	drainNone drainAction = iota
	// drainEvict: cordon it and evict its pods.
	drainEvict
	// drainRemove: remove it: no pod to evict is left (checked again after the cordon), or
	// the deadline has come.
	drainRemove
)

// drainRule is the drain rule: nothing before the drain starts (end - lead); from then on the
// node is cordoned and its pods (remaining: those not DaemonSet, mirror or finished pods) are
// evicted, and it is removed once none is left, or at the deadline with whatever is left.
func drainRule(b blockNode, now time.Time, remaining int) drainAction {
	switch {
	case now.Before(b.drainStart()):
		return drainNone
	case remaining == 0 || !now.Before(b.deadline()):
		return drainRemove
	}
	return drainEvict
}

// drainEnding drains and removes the nodes the autoscaler launched on Capacity Blocks that end
// (drainRule), and returns the nodes it did not remove. It keeps no state of its own: the cordon
// is on the Node, the end on the Node or the Instance, the pods in the cache, so a restarted
// controller goes on where the last one stopped.
func (c *Controller) drainEnding(ctx context.Context, nodes []*corev1.Node, insts []Instance, now time.Time) []*corev1.Node {
	byName := make(map[string]*Instance, len(insts))
	for i := range insts {
		byName[insts[i].Name] = &insts[i]
	}
	out := nodes[:0:0]
	for _, node := range nodes {
		if node.Labels[LaunchedByLabel] != LaunchedByValue || node.DeletionTimestamp != nil {
			out = append(out, node)
			continue
		}
		b, ok := nodeBlock(node, byName[node.Name], c.reserved.byID, c.leads())
		if !ok {
			out = append(out, node)
			continue
		}
		pods := evictable(c.podsOn(node.Name))
		act := drainRule(b, now, len(pods))
		if act == drainNone || !c.drain(ctx, node, b, pods, act, now) {
			out = append(out, node)
		}
	}
	return out
}

// evictable returns the pods a drain evicts or waits for: all but DaemonSet pods, mirror pods
// and finished pods, which go with the node.
func evictable(pods []*corev1.Pod) []*corev1.Pod {
	var out []*corev1.Pod
	for _, pod := range pods {
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		if _, mirror := pod.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
			continue
		}
		if ref := metav1.GetControllerOf(pod); ref != nil && ref.Kind == "DaemonSet" {
			continue
		}
		out = append(out, pod)
	}
	return out
}

// drain acts on one node whose drain has started; it reports whether the node was removed.
func (c *Controller) drain(ctx context.Context, node *corev1.Node, b blockNode, pods []*corev1.Pod, act drainAction, now time.Time) bool {
	logger := klog.FromContext(ctx).WithValues("node", node.Name, "reservation", b.reservation, "end", b.end.UTC().Format(time.RFC3339))
	end := b.end.UTC().Format(time.RFC3339)
	deadline := b.deadline().UTC().Format(time.RFC3339)
	if c.o.DryRun {
		logger.Info("Dry run: would drain and remove a node on an ending Capacity Block", "pods", len(pods), "deadline", deadline)
		c.event(ctx, node, corev1.EventTypeWarning, ReasonCapacityBlockEnding, fmt.Sprintf("dry run: node %s runs on Capacity Block %s, which ends at %s: would cordon it, evict its %d pods and remove it by %s",
			node.Name, b.reservation, end, len(pods), deadline))
		return false
	}
	if !node.Spec.Unschedulable {
		if _, err := c.o.Client.CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{}); err != nil {
			logger.Error(err, "Cordoning a node on an ending Capacity Block failed; retrying at the next round")
			return false
		}
		logger.Info("Cordoned a node on an ending Capacity Block; its pods are evicted", "pods", len(pods), "deadline", deadline)
	}
	c.event(ctx, node, corev1.EventTypeWarning, ReasonCapacityBlockEnding, fmt.Sprintf("node %s runs on Capacity Block %s, which ends at %s: cordoned, its pods are evicted (PodDisruptionBudgets permitting), "+
		"and it is removed once they are gone, at the latest at %s", node.Name, b.reservation, end, deadline))
	if act == drainRemove && now.Before(b.deadline()) {
		// The cache may be behind: a pod bound just before the cordon is evicted first.
		fresh, err := c.podsFromServer(ctx, node.Name)
		if err != nil {
			logger.Error(err, "Listing the pods of a drained node failed; retrying at the next round")
			return false
		}
		if pods = evictable(fresh); len(pods) > 0 {
			act = drainEvict
		}
	}
	if act == drainEvict {
		c.evictAll(ctx, node, b, pods)
		return false
	}
	return c.removeEnding(ctx, node, b, len(pods), logger)
}

// podsFromServer lists a node's pods from the API server.
func (c *Controller) podsFromServer(ctx context.Context, node string) ([]*corev1.Pod, error) {
	list, err := c.o.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String()})
	if err != nil {
		return nil, err
	}
	out := make([]*corev1.Pod, 0, len(list.Items))
	for i := range list.Items {
		if list.Items[i].Spec.NodeName == node {
			out = append(out, &list.Items[i])
		}
	}
	return out, nil
}

// evictAll tells each pod of the node and evicts it through the eviction API. A pod already
// being deleted is waited for. An eviction a PodDisruptionBudget refuses (429) is tried again at
// the next round, never forced: the deadline removes the node with the pod.
func (c *Controller) evictAll(ctx context.Context, node *corev1.Node, b blockNode, pods []*corev1.Pod) {
	logger := klog.FromContext(ctx).WithValues("node", node.Name, "reservation", b.reservation)
	for _, pod := range pods {
		if pod.DeletionTimestamp != nil {
			continue
		}
		c.event(ctx, pod, corev1.EventTypeWarning, ReasonCapacityBlockEnding, fmt.Sprintf("node %s runs on Capacity Block %s, which ends at %s: the node is drained before then, and the pod will be evicted "+
			"(its PodDisruptionBudget permitting; removed with the node at the latest at %s). A pod that a controller owns is created again and gets a new node",
			node.Name, b.reservation, b.end.UTC().Format(time.RFC3339), b.deadline().UTC().Format(time.RFC3339)))
		ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}}
		err := c.o.Client.CoreV1().Pods(pod.Namespace).EvictV1(ctx, ev)
		switch {
		case err == nil || apierrors.IsNotFound(err):
			c.metrics.evictions.WithLabelValues("evicted").Inc()
			logger.Info("Evicted a pod from a node on an ending Capacity Block", "pod", klog.KObj(pod))
		case apierrors.IsTooManyRequests(err):
			c.metrics.evictions.WithLabelValues("refused").Inc()
			logger.V(2).Info("A PodDisruptionBudget refuses the pod's eviction now; retrying at the next round", "pod", klog.KObj(pod), "err", err.Error())
		default:
			c.metrics.evictions.WithLabelValues("refused").Inc()
			logger.Error(err, "Evicting a pod failed; retrying at the next round (the autoscaler needs create on pods/eviction)", "pod", klog.KObj(pod))
		}
	}
}

// removeEnding removes a drained node through the provider, and its Node object.
func (c *Controller) removeEnding(ctx context.Context, node *corev1.Node, b blockNode, left int, logger klog.Logger) bool {
	if err := c.o.Provider.Delete(ctx, node.Name); err != nil {
		logger.Error(err, "Removing a node on an ending Capacity Block failed; retrying at the next round")
		return false
	}
	if err := c.o.Client.CoreV1().Nodes().Delete(ctx, node.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		logger.Error(err, "Deleting the Node object failed; the provider removed the node")
	}
	c.fleet.update(node.Name, func(r *nodeRecord) {
		r.to(phaseDeleted)
		r.emptySince, r.cordoned = time.Time{}, false
	})
	c.metrics.removed.Inc()
	c.metrics.drained.Inc()
	why := "its pods were evicted"
	if left > 0 {
		why = fmt.Sprintf("the drain deadline came with %d pods left on it", left)
	}
	logger.Info("Removed a node on an ending Capacity Block", "podsLeft", left)
	c.event(ctx, node, corev1.EventTypeNormal, ReasonCapacityBlockEnding, fmt.Sprintf("node %s on Capacity Block %s (ends at %s) removed: %s", node.Name, b.reservation, b.end.UTC().Format(time.RFC3339), why))
	return true
}
