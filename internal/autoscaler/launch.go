package autoscaler

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/kube-neuron/kube-neuron/internal/autoscaler/plan"
	"github.com/kube-neuron/kube-neuron/internal/labels"
)

// instances lists the provider's nodes, adds those this controller launched that the provider
// does not list yet, and leaves out those it deleted.
func (c *Controller) instances(ctx context.Context, now time.Time) ([]Instance, error) {
	listed, err := c.o.Provider.Instances(ctx)
	if err != nil {
		return nil, err
	}
	var out []Instance
	names := map[string]bool{}
	byProviderID := map[string]string{}
	for _, in := range listed {
		if c.fleet.get(in.Name).phase == phaseDeleted {
			continue
		}
		names[in.Name] = true
		if in.ProviderID != "" {
			byProviderID[in.ProviderID] = in.Name
		}
		out = append(out, in)
	}
	for _, name := range c.fleet.in(phaseLaunching) {
		r := c.fleet.get(name)
		// The provider may name a node otherwise once it knows more (EC2: the private DNS name,
		// which RunInstances may not return yet): the same instance under its new name is the
		// same launching node, with the pods this controller planned onto it, not another one.
		if renamed := renamedTo(name, r, names, byProviderID); renamed != "" {
			c.fleet.rename(name, renamed)
			for k, at := range c.placedLast {
				if at == name {
					c.placedLast[k] = renamed
				}
			}
			continue
		}
		switch {
		case names[name]:
		case r.launched != nil && now.Sub(r.since) < c.o.RegisterTimeout:
			out = append(out, *r.launched)
		default:
			c.fleet.update(name, func(r *nodeRecord) { r.to(phaseNone) })
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// renamedTo is the name the provider lists a node this controller launched under now, when it
// no longer lists it under its record's name; "" otherwise.
func renamedTo(name string, r nodeRecord, names map[string]bool, byProviderID map[string]string) string {
	if r.launched == nil || names[name] || r.launched.ProviderID == "" {
		return ""
	}
	return byProviderID[r.launched.ProviderID]
}

func plannedPods(in Instance) []string {
	var out []string
	for _, k := range strings.Split(in.Annotations[PlannedPodsAnnotation], ",") {
		if k = strings.TrimSpace(k); k != "" {
			out = append(out, k)
		}
	}
	return out
}

// recordPlanned records, through the provider, the pods later rounds added to a launching node
// together with those the provider lists for it, so that a restarted controller counts them on
// the node too. Nothing is written while the provider lists them all (or this controller wrote
// the same list already). A failure is logged, and the next round tries again; meanwhile the
// node's record keeps the pods on it.
func (c *Controller) recordPlanned(ctx context.Context, name string) {
	t := c.fleet.get(name)
	if t.phase != phaseLaunching {
		return
	}
	want := slices.Clone(t.listed)
	missing := false
	for _, p := range t.added {
		if !slices.Contains(want, p) {
			want, missing = append(want, p), true
		}
	}
	slices.Sort(want)
	want = slices.Compact(want)
	if !missing || slices.Equal(want, t.written) {
		return
	}
	if err := c.o.Provider.SetPlannedPods(ctx, name, want); err != nil {
		klog.FromContext(ctx).Error(err, "Recording the pods planned onto a launching node failed; they stay planned there until the autoscaler restarts, and the next round tries again",
			"node", name, "pods", want)
		return
	}
	c.fleet.update(name, func(r *nodeRecord) {
		if r.phase == phaseLaunching {
			r.written = want
		}
	})
	klog.FromContext(ctx).V(2).Info("Recorded the pods planned onto a launching node", "node", name, "pods", want)
}

// nodeName is NodeName, with an attempt number when that name is taken: a node of the same
// name exists, is launching, or was deleted by this controller (EC2 may still list it).
func (c *Controller) nodeName(instanceType string, pods []string, taken map[string]bool) string {
	name := NodeName(instanceType, pods)
	for i := 1; taken[name] || c.fleet.get(name).phase == phaseDeleted; i++ {
		name = NodeName(instanceType, append(slices.Clone(pods), fmt.Sprintf("attempt-%d", i)))
	}
	return name
}

// nodeRequest is what the provider is asked to launch for a planned node: its labels (with,
// on an UltraServer's nodes, its identity, and the capacity labels), the reservation it
// launches into, the planned pods, for a reservation that ends its end, and the startup taints.
func (c *Controller) nodeRequest(name string, n plan.NodePlan, pods []string) NodeRequest {
	lbls := n.Labels()
	lbls[LaunchedByLabel] = LaunchedByValue
	// The capacity labels follow the reservation the node launches into (the planner's labels
	// say the same).
	if n.Reservation != "" {
		lbls[labels.CapacityReservationID] = n.Reservation
		lbls[labels.CapacityType] = labels.CapacityTypeReserved
	} else {
		delete(lbls, labels.CapacityReservationID)
		lbls[labels.CapacityType] = labels.CapacityTypeOnDemand
	}
	annotations := map[string]string{PlannedPodsAnnotation: strings.Join(pods, ",")}
	if r, ok := c.reserved.byID[n.Reservation]; ok && n.Reservation != "" && !r.End.IsZero() {
		annotations[labels.CapacityReservationEndAnnotation] = r.End.UTC().Format(time.RFC3339)
	}
	return NodeRequest{
		Name: name, Type: n.InstanceType.Name, Mode: n.Mode, Labels: lbls, Annotations: annotations,
		Taints:      []corev1.Taint{plan.NeuronTaint(), LaunchingTaint()},
		Reservation: n.Reservation,
	}
}

// launch launches one planned node and returns it as the provider describes it (its Name is the
// node name it registers under).
func (c *Controller) launch(ctx context.Context, name string, n plan.NodePlan, pods []string, now time.Time) (Instance, error) {
	req := c.nodeRequest(name, n, pods)
	in, err := c.o.Provider.Launch(ctx, req)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Launching a node failed", "node", name, "instanceType", req.Type)
		return Instance{}, err
	}
	return c.launched(ctx, req, in, now), nil
}

// launched records a node the provider launched for req, and returns it as recorded.
func (c *Controller) launched(ctx context.Context, req NodeRequest, in Instance, now time.Time) Instance {
	if in.Name == "" {
		in.Name = req.Name
	}
	if in.Type == "" {
		in.Type = req.Type
	}
	if in.Labels == nil {
		in.Labels = req.Labels
	}
	if in.Annotations == nil {
		in.Annotations = req.Annotations
	}
	in.Launching = true
	c.fleet.update(in.Name, func(r *nodeRecord) { r.startLaunching(now, &in) })
	c.metrics.launched.WithLabelValues(req.Type).Inc()
	klog.FromContext(ctx).Info("Launched a node", "node", in.Name, "requestedAs", req.Name, "instanceType", req.Type, "mode", req.Mode,
		"providerID", in.ProviderID, "reservation", req.Reservation, "ultraServer", req.Labels[labels.UltraServerServerID4], "pods", plannedPods(in))
	return in
}
