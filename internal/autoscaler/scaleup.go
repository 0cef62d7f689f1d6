package autoscaler

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	klabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	"github.com/kube-neuron/kube-neuron/internal/autoscaler/plan"
	"github.com/kube-neuron/kube-neuron/internal/labels"
)

// placement is where a round's plan puts a pending pod: the node it is nominated to (the name
// the node registers under), and whether the pod carries that nomination now.
type placement struct {
	node      string
	nominated bool
	resources []string // the device plugin resources the pod asks for
}

// scaleUp checks the pending pods, plans, launches and nominates; it returns, by pod key, the
// node the plan puts each pod on (launching or new; nothing in dry run).
func (c *Controller) scaleUp(ctx context.Context, pending []plan.PodDemand, devices *plan.DeviceTemplates, launching []plan.NodeOption, nodes []*corev1.Node, taken map[string]bool, now time.Time) map[string]placement {
	start := time.Now()
	defer func() { c.metrics.duration.Observe(time.Since(start).Seconds()) }()
	c.metrics.pending.Set(float64(len(pending)))
	if len(pending) == 0 {
		return nil
	}
	ok := c.checked(ctx, pending, devices)
	if len(ok) == 0 {
		return nil
	}
	up, decisions, err := safePlan(c.plan, ok, launching, c.planOptions(launching, nodes, devices))
	if err != nil {
		klog.FromContext(ctx).Error(err, "Planning failed: nothing is launched this round; the next round plans again", "pendingPods", len(ok))
		c.metrics.decisions.WithLabelValues(reasonPlanningFailed).Inc()
		return nil
	}
	l := c.launchAll(ctx, up, taken, now)
	prior := priorNodes(launching)
	placed := map[string]placement{}
	for i, dec := range decisions {
		c.decided(ctx, ok[i], dec, up, l, prior, placed)
	}
	return placed
}

// checked returns the pending pods that pass plan.Check; each of the others gets one
// NotTriggerScaleUp event with its problems.
func (c *Controller) checked(ctx context.Context, pending []plan.PodDemand, devices *plan.DeviceTemplates) []plan.PodDemand {
	env := plan.Environment{Catalog: c.o.Catalog, Devices: devices}
	daemons, _ := c.daemons.List(klabels.Everything())
	for _, ds := range daemons {
		env.DevicePlugin = env.DevicePlugin || plan.IsDevicePluginDaemonSet(ds)
		env.DRADriver = env.DRADriver || plan.IsDRADriverDaemonSet(ds)
	}
	var ok []plan.PodDemand
	for _, d := range pending {
		problems := plan.Check(d, env)
		if len(problems) == 0 {
			ok = append(ok, d)
			continue
		}
		c.metrics.decisions.WithLabelValues(plan.ReasonNotTriggerScaleUp).Inc()
		c.event(ctx, d.Pod, corev1.EventTypeWarning, plan.ReasonNotTriggerScaleUp, problemsMessage(problems))
	}
	return ok
}

// planOptions are the options of the round's plan: the controller's limits, and the Neuron
// nodes in the cluster that are not launching.
func (c *Controller) planOptions(launching []plan.NodeOption, nodes []*corev1.Node, devices *plan.DeviceTemplates) plan.Options {
	isLaunching := map[string]bool{}
	for _, l := range launching {
		isLaunching[l.Name] = true
	}
	var existing plan.Capacity
	for _, n := range nodes {
		if t, found := c.o.Catalog.Lookup(n.Labels[labels.InstanceType]); found && !isLaunching[n.Name] {
			existing.Nodes++
			existing.Devices += t.Devices
		}
	}
	return plan.Options{
		Catalog: c.o.Catalog, Policy: c.o.Policy, Families: c.o.Families, MaxNodes: c.o.MaxNodes, MaxDevices: c.o.MaxDevices, Existing: existing,
		Devices: devices, Reservations: c.reserved.usable, ReservedOnly: c.o.ReservedOnly,
	}
}

// launches is what launchAll did with the plan's nodes, by index k. names[k] is the name node
// k was requested under (NodeName), nodeNames[k] the name it registers under, as the provider
// reports it: the pods are nominated to that one. They differ on EC2, where the node is named
// after its instance (its private DNS name). failed[k] says why node k was not launched.
type launches struct {
	names, nodeNames []string
	failed           []error
}

// launchAll launches the plan's new nodes and adds the pods it planned onto launching nodes to
// their records.
func (c *Controller) launchAll(ctx context.Context, up plan.ScaleUp, taken map[string]bool, now time.Time) launches {
	l := launches{names: make([]string, len(up.Nodes)), nodeNames: make([]string, len(up.Nodes)), failed: make([]error, len(up.Nodes))}
	for k, n := range up.Nodes {
		pods := make([]string, len(n.Pods))
		for i, p := range n.Pods {
			pods[i] = p.Pod
		}
		sort.Strings(pods)
		if n.Launching {
			l.names[k], l.nodeNames[k] = n.Name, n.Name
			if !c.o.DryRun {
				c.fleet.update(n.Name, func(r *nodeRecord) {
					if r.phase == phaseLaunching {
						r.addPlanned(pods)
					}
				})
			}
			continue
		}
		if n.UltraServer != "" {
			continue // launched with the other nodes of its UltraServer, below
		}
		l.names[k] = c.nodeName(n.InstanceType.Name, pods, taken)
		l.nodeNames[k] = l.names[k]
		taken[l.names[k]] = true
		if c.o.DryRun {
			klog.FromContext(ctx).Info("Dry run: would launch a node", "node", l.names[k], "instanceType", n.InstanceType.Name, "mode", n.Mode, "pods", pods)
			continue
		}
		var in Instance
		if in, l.failed[k] = c.launch(ctx, l.names[k], n, pods, now); l.failed[k] == nil {
			l.nodeNames[k] = in.Name
		}
	}
	c.launchUltraServers(ctx, up, l, now)
	return l
}

// launchUltraServers launches the plan's new UltraServers, each as one unit of all its nodes.
func (c *Controller) launchUltraServers(ctx context.Context, up plan.ScaleUp, l launches, now time.Time) {
	var ids []string
	members := map[string][]int{} // UltraServer id -> its nodes' indices in up.Nodes
	for k, n := range up.Nodes {
		if n.Launching || n.UltraServer == "" {
			continue
		}
		if members[n.UltraServer] == nil {
			ids = append(ids, n.UltraServer)
		}
		members[n.UltraServer] = append(members[n.UltraServer], k)
	}
	for _, id := range ids {
		var reqs []NodeRequest
		for _, k := range members[id] {
			n := up.Nodes[k]
			l.names[k] = UltraServerNodeName(n.InstanceType.Name, id, n.UltraServerNode)
			l.nodeNames[k] = l.names[k]
			reqs = append(reqs, c.nodeRequest(l.names[k], n, podKeys(n)))
		}
		if c.o.DryRun {
			klog.FromContext(ctx).Info("Dry run: would launch an UltraServer", "ultraServer", id, "nodes", l.names)
			continue
		}
		ins, err := c.o.Provider.LaunchUltraServer(ctx, id, reqs)
		if err != nil {
			klog.FromContext(ctx).Error(err, "Launching an UltraServer failed", "ultraServer", id, "instanceType", reqs[0].Type)
			for _, k := range members[id] {
				l.failed[k] = err
			}
			continue
		}
		for j, k := range members[id] {
			if j < len(ins) {
				l.nodeNames[k] = c.launched(ctx, reqs[j], ins[j], now).Name
			}
		}
	}
}

// podKeys are the keys of the pods planned onto a node, sorted.
func podKeys(n plan.NodePlan) []string {
	pods := make([]string, len(n.Pods))
	for i, p := range n.Pods {
		pods[i] = p.Pod
	}
	sort.Strings(pods)
	return pods
}

// priorNodes returns, by pod key, the launching node an earlier round planned each pod onto
// (the first that lists it). Such a pod stays there (Decision.Node is -1): it is nominated to
// that node again, whose name may have changed since (EC2 reports the private DNS name once it
// has it), or was never nominated (a restarted controller).
func priorNodes(launching []plan.NodeOption) map[string]string {
	prior := map[string]string{}
	for _, l := range launching {
		for _, d := range l.Pods {
			if _, seen := prior[d.Key()]; !seen {
				prior[d.Key()] = l.Name
			}
		}
	}
	return prior
}

// decided acts on the plan's decision for one pod: the decisions metric, the nomination to its
// node (recorded in placed) and the event; a pod whose new node failed to launch gets a
// FailedScaleUp event instead.
func (c *Controller) decided(ctx context.Context, d plan.PodDemand, dec plan.Decision, up plan.ScaleUp, l launches, prior map[string]string, placed map[string]placement) {
	pod := d.Pod
	if dec.Node >= 0 && l.failed[dec.Node] != nil {
		n := up.Nodes[dec.Node]
		c.metrics.decisions.WithLabelValues(ReasonFailedScaleUp).Inc()
		c.event(ctx, pod, corev1.EventTypeWarning, ReasonFailedScaleUp, fmt.Sprintf("launching a %s node (%s) for the pod failed: %v. It is tried again at the next round",
			n.InstanceType.Name, l.names[dec.Node], l.failed[dec.Node]))
		return
	}
	c.metrics.decisions.WithLabelValues(dec.Reason).Inc()
	switch {
	case dec.Warning() || c.o.DryRun:
	case dec.Node >= 0:
		placed[dec.Pod] = placement{node: l.nodeNames[dec.Node], nominated: c.nominate(ctx, pod, l.nodeNames[dec.Node]), resources: requestedResources(d)}
	case dec.Launching && prior[dec.Pod] != "":
		placed[dec.Pod] = placement{node: prior[dec.Pod], nominated: c.nominate(ctx, pod, prior[dec.Pod]), resources: requestedResources(d)}
	}
	eventType, msg := decisionEvent(dec, l, c.o.DryRun)
	c.event(ctx, pod, eventType, dec.Reason, msg)
}

// decisionEvent is the type and message of the event that tells a pod the plan's decision.
func decisionEvent(dec plan.Decision, l launches, dryRun bool) (eventType, msg string) {
	newNode := dec.Node >= 0 && !dec.Launching
	switch {
	case dec.Warning():
		return corev1.EventTypeWarning, dec.Message
	case newNode && dryRun:
		return corev1.EventTypeNormal, fmt.Sprintf("dry run: would launch node %s for the pod: %s", l.names[dec.Node], dec.Message)
	case newNode && l.nodeNames[dec.Node] != l.names[dec.Node]:
		// The name the node will have, and the one its instance carries (EC2's Name tag).
		return corev1.EventTypeNormal, fmt.Sprintf("%s: node %s (launched as %s)", dec.Message, l.nodeNames[dec.Node], l.names[dec.Node])
	case newNode:
		return corev1.EventTypeNormal, fmt.Sprintf("%s: node %s", dec.Message, l.names[dec.Node])
	}
	return corev1.EventTypeNormal, dec.Message
}

// reasonPlanningFailed is the decisions metric's reason for a round whose planning failed.
const reasonPlanningFailed = "PlanningFailed"

// planFunc is plan.Plan's signature.
type planFunc func([]plan.PodDemand, []plan.NodeOption, plan.Options) (plan.ScaleUp, []plan.Decision)

// safePlan is Plan, with a panic of the planner (an inconsistency it checks for: a bug) turned
// into an error, so that the controller logs it and goes on serving, rather than crashing in a
// loop on the same pending pods.
func safePlan(planFn planFunc, pending []plan.PodDemand, launching []plan.NodeOption, opts plan.Options) (up plan.ScaleUp, decisions []plan.Decision, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the planner failed on %d pending pods: %v", len(pending), r)
		}
	}()
	up, decisions = planFn(pending, launching, opts)
	return up, decisions, nil
}

// problemsMessage is the message of a pod's NotTriggerScaleUp event: its one problem, or every
// problem, numbered.
func problemsMessage(problems []plan.Problem) string {
	if len(problems) == 1 {
		return problems[0].Message
	}
	parts := make([]string, len(problems))
	for i, p := range problems {
		parts[i] = fmt.Sprintf("(%d) %s", i+1, p.Message)
	}
	return fmt.Sprintf("%d problems: %s", len(problems), strings.Join(parts, "; "))
}
