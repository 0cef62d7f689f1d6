package autoscaler

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/autoscaler/plan"
	"github.com/kube-neuron/kube-neuron/internal/labels"
)

// launching returns the launching nodes with the pending pods planned onto them, after deleting
// those that did not register in time; planned lists, for every instance, the pods planned onto it.
//
// Every node the provider lists has a phase after it: Registered once it has settled (and from
// then on, even NotReady: never deleted for it); else Launching, or Deleted when it was not Ready
// within the register timeout.
func (c *Controller) launching(ctx context.Context, insts []Instance, nodes map[string]*corev1.Node, pending map[string]plan.PodDemand, now time.Time) ([]plan.NodeOption, map[string][]string) {
	var out []plan.NodeOption
	planned := map[string][]string{}
	listed := map[string]bool{}
	for _, in := range insts {
		listed[in.Name] = true
	}
	c.fleet.each(func(name string, r *nodeRecord) {
		if r.phase == phaseRegistered && !listed[name] {
			r.to(phaseNone)
		}
	})
	for _, in := range insts {
		r := c.fleet.get(in.Name)
		pods := plannedPods(in)
		if r.phase == phaseLaunching {
			for _, k := range r.added {
				if !slices.Contains(pods, k) {
					pods = append(pods, k)
				}
			}
		}
		planned[in.Name] = pods
		node := nodes[in.Name]
		// A node that holds Neuron pods but has not settled yet stays a launching option: the
		// scheduler may have put pods planned elsewhere on it, and its free room is offered to
		// the pending pods before any new node.
		if r.phase == phaseRegistered || (!in.Launching && c.settled(node, now)) {
			c.fleet.update(in.Name, func(r *nodeRecord) { r.to(phaseRegistered) })
			continue
		}
		var since time.Time
		c.fleet.update(in.Name, func(r *nodeRecord) {
			if r.phase != phaseLaunching {
				r.startLaunching(now, nil)
			}
			r.listed = plannedPods(in)
			since = r.since
		})
		if (node == nil || !nodeReady(node)) && now.Sub(since) >= c.o.RegisterTimeout && c.timeout(ctx, in, node, pods, pending) {
			delete(planned, in.Name)
			continue
		}
		opt := plan.NodeOption{Name: in.Name, InstanceType: in.Type, Mode: in.Labels[labels.AllocationMode], UltraServer: in.Labels[labels.UltraServerServerID4]}
		if opt.InstanceType == "" {
			opt.InstanceType = in.Labels[labels.InstanceType]
		}
		opt.Pods = c.offered(in.Name, pods, pending, listed)
		opt.Bound = c.bound(node, pending)
		out = append(out, opt)
	}
	return out, planned
}

// offered returns the pending pods the planner is to count on a launching node: those whose
// claims the scheduler allocated there, wherever a plan put them (it binds them there), and
// those planned onto it, but not those a later plan moved to another node or whose claims are
// allocated on another node.
func (c *Controller) offered(node string, pods []string, pending map[string]plan.PodDemand, listed map[string]bool) []plan.PodDemand {
	var out []plan.PodDemand
	for _, k := range pods {
		d, ok := pending[k]
		if !ok {
			continue
		}
		if on := allocatedOn(d); on != "" {
			if on == node {
				out = append(out, d)
			}
			continue
		}
		at, moved := c.placedLast[k]
		if !moved && listed[d.Pod.Annotations[PlannedNodeAnnotation]] {
			// A restarted controller has no placedLast: the pod's annotation names the
			// node the last plan put it on, where an earlier node's list may still name it.
			at, moved = d.Pod.Annotations[PlannedNodeAnnotation], true
		}
		if moved && at != node {
			// Moved to another node by a later plan: offered on two nodes, the planner
			// would count it on both, and on neither where it no longer fits.
			continue
		}
		out = append(out, d)
	}
	var here []string // allocated on the node, planned elsewhere
	for k, d := range pending {
		if allocatedOn(d) == node && !slices.Contains(pods, k) {
			here = append(here, k)
		}
	}
	slices.Sort(here)
	for _, k := range here {
		out = append(out, pending[k])
	}
	return out
}

// allocatedOn is the node on which the scheduler allocated the pod's Neuron claims: the pool of
// their devices, which the DRA driver names after its node; "" when none is allocated.
func allocatedOn(d plan.PodDemand) string {
	for _, c := range d.Claims {
		if a := c.Status.Allocation; a != nil {
			for _, r := range a.Devices.Results {
				if r.Driver == plan.DeviceClass && r.Pool != "" {
					return r.Pool
				}
			}
		}
	}
	return ""
}

// bound returns the Neuron pods that run on a launching node (nil: no Node yet).
func (c *Controller) bound(node *corev1.Node, pending map[string]plan.PodDemand) []plan.PodDemand {
	if node == nil {
		return nil
	}
	var out []plan.PodDemand
	for _, pod := range c.podsOn(node.Name) {
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		if _, still := pending[pod.Namespace+"/"+pod.Name]; still {
			// Bound since the round listed it pending (the cache moved on): it counts once,
			// as the planned pod it was, or the planner finds no room for it beside itself
			// and launches a node for it.
			continue
		}
		if dra, claims, _ := c.draRequests(pod); len(dra) > 0 || len(allocation.PodRequests(pod)) > 0 {
			d := plan.NewPodDemand(pod, dra)
			d.Claims = claims
			out = append(out, d)
		}
	}
	return out
}

// settled reports whether a node takes pods: Ready for a little while, released (no
// LaunchingTaint) for as long, and, on a device plugin node, advertising Neuron capacity (or
// Ready for the register timeout whatever it advertises).
func (c *Controller) settled(node *corev1.Node, now time.Time) bool {
	if node == nil || !nodeReady(node) || hasLaunchingTaint(node) {
		return false
	}
	if at := c.fleet.get(node.Name).releasedAt; !at.IsZero() && now.Sub(at) < settleAfterReady {
		return false
	}
	since := readySince(node)
	if now.Sub(since) < settleAfterReady {
		return false
	}
	if node.Labels[labels.AllocationMode] == labels.AllocationModeDRA || now.Sub(since) >= c.o.RegisterTimeout {
		return true
	}
	return hasNeuronCapacity(node)
}

// timeout deletes a node that did not register in time and tells its pending pods; it reports
// whether the node is gone (in dry run, or when the delete fails, it stays launching).
func (c *Controller) timeout(ctx context.Context, in Instance, node *corev1.Node, pods []string, pending map[string]plan.PodDemand) bool {
	logger := klog.FromContext(ctx).WithValues("node", in.Name, "instanceType", in.Type)
	if c.o.DryRun {
		for _, k := range pods {
			if d, ok := pending[k]; ok {
				c.event(ctx, d.Pod, corev1.EventTypeWarning, ReasonFailedScaleUp, fmt.Sprintf("dry run: node %s (%s) did not become Ready within %s: would delete it and plan the pod again", in.Name, in.Type, c.o.RegisterTimeout))
			}
		}
		return false
	}
	logger.Info("Node did not become Ready in time; deleting it and planning its pods again", "timeout", c.o.RegisterTimeout)
	if err := c.o.Provider.Delete(ctx, in.Name); err != nil {
		logger.Error(err, "Deleting a node that did not register failed; retrying at the next round")
		return false
	}
	if node != nil {
		if err := c.o.Client.CoreV1().Nodes().Delete(ctx, in.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			logger.Error(err, "Deleting the Node object failed")
		}
	}
	c.fleet.update(in.Name, func(r *nodeRecord) { r.to(phaseDeleted) })
	if r := in.Annotations[RequestNameAnnotation]; r != "" {
		c.fleet.update(r, func(r *nodeRecord) { r.to(phaseDeleted) })
	}
	c.metrics.removed.Inc()
	for _, k := range pods {
		if d, ok := pending[k]; ok {
			c.metrics.decisions.WithLabelValues(ReasonFailedScaleUp).Inc()
			c.event(ctx, d.Pod, corev1.EventTypeWarning, ReasonFailedScaleUp, fmt.Sprintf("node %s (%s) launched for the pod did not become Ready within %s: "+
				"it was deleted and the pod is planned again. Check the provider (instance console output, kubelet logs)", in.Name, in.Type, c.o.RegisterTimeout))
		}
	}
	return true
}
