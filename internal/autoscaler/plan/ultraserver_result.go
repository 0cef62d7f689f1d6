package plan

import (
	"fmt"
	"strings"
)

// servedByUltraServer reports whether an UltraServer type the pod allows, in the allowed
// families, can serve it.
func servedByUltraServer(s *sim, d PodDemand, opts Options) bool {
	for _, t := range ultraServerTypes(opts) {
		if d.Allows(t) && s.serves(t, d, requestShape(d)) {
			return true
		}
	}
	return false
}

// result adds the units' nodes to the plan and decides for the pods (indices into pending).
func (up *unitPlanner) result(pods []int, out *ScaleUp, decisions []Decision) {
	index := map[*unitMember]int{}
	for _, un := range up.units {
		if !un.launching {
			un.id = unitID(un, up.pending)
		}
		for k, m := range un.members {
			var added []Placement
			for _, pl := range m.pods {
				d := up.pending[pl.pod]
				if _, prior := up.prior[pl.pod]; !prior {
					added = append(added, Placement{Pod: d.Key(), UID: d.Pod.UID, Hardware: pl.hw})
				}
			}
			if un.launching && len(added) == 0 {
				continue
			}
			index[m] = len(out.Nodes)
			out.Nodes = append(out.Nodes, NodePlan{Name: m.name, Launching: un.launching, InstanceType: un.t, Mode: un.mode,
				Pods: added, UltraServer: un.id, UltraServerNode: k, Reservation: un.res})
			if un.launching {
				continue
			}
			if un.res != "" {
				out.ReservedNodes++
			} else if un.t.PriceKnown() {
				out.CostUSDPerHour += *un.t.PriceUSDPerHour
			} else {
				out.UnknownPriceNodes++
			}
		}
	}
	for _, i := range pods {
		d := up.pending[i]
		dec := Decision{Pod: d.Key(), UID: d.Pod.UID, Node: -1}
		un := up.at[i]
		switch {
		case up.prior[i] != "":
			dec.Reason, dec.Launching = ReasonTriggeredScaleUp, true
			dec.Message = fmt.Sprintf("node %s (%s) of UltraServer %s, already launching, will take the pod: no new node", up.prior[i], un.t.Name, un.id)
		case un != nil:
			dec.Reason, dec.Launching = ReasonTriggeredScaleUp, un.launching
			for k, m := range un.members {
				for _, pl := range m.pods {
					if pl.pod == i {
						dec.Node = index[m]
						dec.Message = up.placedMessage(un, k, m)
					}
				}
			}
		default:
			dec.Reason = ReasonNotTriggerScaleUp
			dec.Message = up.blocked[i]
			if dec.Message == "" {
				dec.Message = up.explain(d)
			}
		}
		decisions[i] = dec
	}
}

func (up *unitPlanner) placedMessage(un *unit, k int, m *unitMember) string {
	if un.launching {
		return fmt.Sprintf("node %s (%s) of UltraServer %s, already launching, will take the pod: no new node", m.name, un.t.Name, un.id)
	}
	price := "price unknown"
	if un.res != "" {
		price = "in reservation " + un.res + ": reserved, already paid"
	} else if un.t.PriceKnown() {
		price = fmt.Sprintf("$%s/h", strings.TrimSuffix(fmt.Sprintf("%g", *un.t.PriceUSDPerHour*float64(len(un.members))), ".0"))
	}
	who := "for pods that need an UltraServer"
	if un.group != "" {
		who = "for " + un.group
	}
	return fmt.Sprintf("pod triggered scale-up: a new UltraServer %s of %d %s nodes launched together (%s), %s; the pod goes on its node %d",
		un.id, len(un.members), un.t.Name, price, who, k)
}

// explain says why no UltraServer takes a pod that needs one.
func (up *unitPlanner) explain(d PodDemand) string {
	types := ultraServerTypes(up.opts)
	if len(types) == 0 {
		return "the pod needs an UltraServer (trn2u), but the autoscaler may launch no UltraServer type: allow the family trn2u in the autoscaler's configuration"
	}
	if pr := selectorProblems(d, up.opts.Catalog); len(pr) > 0 {
		return pr[0].Message
	}
	if pr := servingProblem(d, up.sim); pr != nil {
		return "the pod needs an UltraServer node: " + pr.Message
	}
	return fmt.Sprintf("the pod needs an UltraServer node, and no node of a new %s UltraServer can take it", types[0].Name)
}
