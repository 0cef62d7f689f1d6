package plan

import "fmt"

// A ResourceClaim that several pods name (resourceClaimName) is allocated once, and every pod
// that shares it runs on the node it is allocated on. So a pending pod whose every claim it shares
// with a pod planned before it (in pending order) takes no devices of its own: it follows that
// pod, and the planner plans only the first.

// claimKey identifies a claim: namespace/name.
func claimKey(d PodDemand, k int) string {
	c := d.Claims[k]
	return c.Namespace + "/" + c.Name
}

// followers returns, per pending pod that shares all its claims with an earlier pending pod, the
// index of the first pod that holds one of them (the pod it follows), and the claim they share.
// A claim already allocated is not followed: the pods go where it is.
func followers(pending []PodDemand) map[int]follow {
	first := map[string]int{} // claim -> the first pending pod that names it
	out := map[int]follow{}
	for i, d := range pending {
		if len(d.Claims) == 0 || len(d.Requests) > 0 {
			continue
		}
		lead, shared := -1, ""
		all := true
		for k, c := range d.Claims {
			key := claimKey(d, k)
			j, seen := first[key]
			if !seen || c.Status.Allocation != nil {
				all = false
				if !seen {
					first[key] = i
				}
				continue
			}
			if lead < 0 {
				lead, shared = j, key
			}
		}
		if all && lead >= 0 {
			for out[lead].shared != "" { // follow the pod that is planned
				lead = out[lead].lead
			}
			out[i] = follow{lead: lead, shared: shared}
		}
	}
	return out
}

// follow is a pod that goes where another goes.
type follow struct {
	lead   int    // index into pending of the pod it follows
	shared string // a claim they share, namespace/name
}

// withFollowers plans the pods that follow others onto their leaders' nodes: the plan of the
// other pods (decisions of pending without the followers, in order) becomes the plan of all.
func withFollowers(pending []PodDemand, f map[int]follow, planOthers func([]PodDemand) (ScaleUp, []Decision)) (ScaleUp, []Decision) {
	if len(f) == 0 {
		return planOthers(pending)
	}
	var others []PodDemand
	index := make([]int, len(pending)) // pending index -> index into others; -1 for a follower
	for i, d := range pending {
		if _, ok := f[i]; ok {
			index[i] = -1
			continue
		}
		index[i] = len(others)
		others = append(others, d)
	}
	up, od := planOthers(others)
	decisions := make([]Decision, len(pending))
	for i, d := range pending {
		if index[i] >= 0 {
			decisions[i] = od[index[i]]
			continue
		}
		lead := od[index[f[i].lead]]
		dec := Decision{Pod: d.Key(), UID: d.Pod.UID, Node: lead.Node, Reason: lead.Reason, Launching: lead.Launching}
		leadPod := pending[f[i].lead].Key()
		if lead.Warning() {
			dec.Message = fmt.Sprintf("the pod shares ResourceClaim %s with pod %s, which gets no node: %s", f[i].shared, leadPod, lead.Message)
		} else {
			dec.Message = fmt.Sprintf("the pod shares ResourceClaim %s with pod %s and goes where it goes: %s", f[i].shared, leadPod, lead.Message)
		}
		if lead.Node >= 0 {
			n := &up.Nodes[lead.Node]
			n.Pods = append(n.Pods, Placement{Pod: d.Key(), UID: d.Pod.UID})
		}
		decisions[i] = dec
	}
	return up, decisions
}
