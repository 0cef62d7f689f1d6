package plan

import (
	"fmt"
	"strings"

	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// noCandidate explains why no type may be launched for pod i, limits aside. Each pod's reason is
// worked out once: it depends on the pod alone, and a batch may hold thousands of pods that no
// type serves, each refused by both runs.
func (p *planner) noCandidate(i int) string {
	if why, ok := p.why[i]; ok {
		return why
	}
	why := p.explain(i)
	p.why[i] = why
	return why
}

// explain works out noCandidate's reason.
func (p *planner) explain(i int) string {
	d := p.pending[i]
	if !d.Neuron() {
		return "the pod asks for no Neuron devices or cores"
	}
	if out := p.outside[i]; len(out) > 0 {
		var names []string
		for _, t := range out {
			names = append(names, fmt.Sprintf("%s (family %s)", t.Name, t.Family))
		}
		return fmt.Sprintf("the instance types that can serve the pod are %s, but the autoscaler may launch only the families %s. "+
			"Allow one of these families in the autoscaler's configuration, or change the pod's %s",
			strings.Join(names, ", "), strings.Join(p.opts.Families, ", "), constraintNames(d))
	}
	if pr := selectorProblems(d, p.opts.Catalog); len(pr) > 0 {
		return pr[0].Message
	}
	if pr := servingProblem(d, p.sim); pr != nil {
		return pr.Message
	}
	return "no instance type the pod allows can serve it"
}

// limitMessage says which limit keeps a node for pod i from launching.
func (r *run) limitMessage(i int) string {
	n, d := r.newN, r.newD
	o := r.p.opts
	if r.nodesCap >= 0 && n+1 > r.nodesCap {
		return fmt.Sprintf("the limit of %s is reached: %d in the cluster, %d launching, %d planned for other pending pods. "+
			"Raise the autoscaler's max nodes, or wait for nodes to free up", plural(o.MaxNodes, "Neuron node"), o.Existing.Nodes, r.launchN, n)
	}
	smallest := r.p.cands[i][0]
	for _, t := range r.p.cands[i] {
		if t.Devices < smallest.Devices {
			smallest = t
		}
	}
	return fmt.Sprintf("the limit of %s is reached: the smallest type that can serve the pod, %s, has %s, and %d are in the cluster, "+
		"%d launching and %d planned for other pending pods. Raise the autoscaler's max devices, or wait for nodes to free up",
		plural(o.MaxDevices, "Neuron device"), smallest.Name, plural(smallest.Devices, "device"), o.Existing.Devices, r.launchD, d)
}

// result turns the chosen run into the plan and the decisions.
func (p *planner) result(r *run) (ScaleUp, []Decision) {
	var out ScaleUp
	index := map[*node]int{}
	for _, n := range r.nodes {
		if n.launching && len(n.pods) == 0 {
			continue
		}
		np := NodePlan{Name: n.name, Launching: n.launching, InstanceType: n.t, Mode: n.mode, Reservation: p.reservationID(n)}
		for _, pl := range n.pods {
			d := p.pending[pl.pod]
			np.Pods = append(np.Pods, Placement{Pod: d.Key(), UID: d.Pod.UID, Hardware: cloneHardware(pl.hw)})
		}
		index[n] = len(out.Nodes)
		out.Nodes = append(out.Nodes, np)
		if !n.launching {
			if n.res > 0 {
				out.ReservedNodes++
			} else if n.t.PriceKnown() {
				out.CostUSDPerHour += *n.t.PriceUSDPerHour
			} else {
				out.UnknownPriceNodes++
			}
		}
	}
	decisions := make([]Decision, len(p.pending))
	for i, d := range p.pending {
		dec := Decision{Pod: d.Key(), UID: d.Pod.UID, Node: -1}
		switch n := r.at[i]; {
		case r.prior[i]:
			lo := p.launching[p.absorbed[d.id()]]
			dec.Reason, dec.Launching = ReasonTriggeredScaleUp, true
			dec.Message = fmt.Sprintf("node %s (%s), already launching, will take the pod: no new node", lo.Name, lo.InstanceType)
		case n != nil:
			if k, ok := index[n]; ok {
				dec.Node = k
			}
			dec.Reason = ReasonTriggeredScaleUp
			dec.Launching = n.launching
			dec.Message = p.placedMessage(i, n)
		default:
			dec.Reason = ReasonNotTriggerScaleUp
			dec.Message = r.blocked[i]
			if dec.Message == "" {
				dec.Message = r.p.noCandidate(i)
			}
		}
		decisions[i] = dec
	}
	return out, decisions
}

// cloneHardware copies allocations the placement cache shares between nodes.
func cloneHardware(hw []topology.Allocation) []topology.Allocation {
	out := make([]topology.Allocation, len(hw))
	for k, a := range hw {
		out[k] = topology.Allocation{Unit: a.Unit, Devices: append([]int{}, a.Devices...), Cores: append([]int{}, a.Cores...)}
	}
	return out
}

func (p *planner) placedMessage(i int, n *node) string {
	if n.launching {
		return fmt.Sprintf("node %s (%s), already launching, will take the pod: no new node", n.name, n.t.Name)
	}
	others := len(n.pods) - 1
	with := ""
	switch {
	case others == 1:
		with = ", together with 1 other pending pod"
	case others > 1:
		with = fmt.Sprintf(", together with %d other pending pods", others)
	}
	if n.res > 0 {
		return fmt.Sprintf("pod triggered scale-up: a new %s node in reservation %s (reserved, already paid)%s", n.t.Name, p.reservationID(n), with)
	}
	if n.t.PriceKnown() {
		return fmt.Sprintf("pod triggered scale-up: a new %s node (%s)%s", n.t.Name, priceString(n.t), with)
	}
	if p.value[i] == 0 {
		return fmt.Sprintf("pod triggered scale-up: a new %s node%s; its price is unknown: the instance catalog has no price for %s "+
			"and no type with a known price can serve the pod. Set priceUSDPerHour for %s in a catalog file", n.t.Name, with, n.t.Name, n.t.Name)
	}
	return fmt.Sprintf("pod triggered scale-up: the pod goes on a new %s node launched for other pending pods%s; its price is unknown: "+
		"the instance catalog has no price for %s. Set priceUSDPerHour for %s in a catalog file", n.t.Name, with, n.t.Name, n.t.Name)
}
