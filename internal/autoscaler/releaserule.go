package autoscaler

import corev1 "k8s.io/api/core/v1"

// hold is a launched node that keeps pods off with LaunchingTaint, as a round sees it.
type hold struct {
	node        *corev1.Node
	pods        []string // pending pods the round's plan puts on it
	unnominated []string // of those, the ones whose nomination is not in place
	serving     bool     // it could take its pods but for LaunchingTaint (Controller.serving)
	waited      bool     // it has been serving for releaseWait
	// capacity are the capacity labels and the reservation's end that the Node lacks: they are
	// added with the release (on EC2 the launch template cannot know the reservation).
	capacity capacityMeta
}

// capacityMeta are labels and annotations to add to a Node.
type capacityMeta struct {
	labels, annotations map[string]string
}

// verdict is what the release rule says of a held node.
type verdict int

const (
	// keepNotServing: it does not serve Neuron hardware yet.
	keepNotServing verdict = iota
	// keepForGroup: it serves, but not all its pods are nominated to it, or another node the
	// plan puts pods on is not ready.
	keepForGroup
	// releaseNoPods: it serves, and no pending pod is planned onto it.
	releaseNoPods
	// releaseWithGroup: it serves with its pods nominated, and so does every node the plan
	// puts pending pods on (or takes pods already).
	releaseWithGroup
	// releaseAfterWait: it has served for releaseWait, whatever its pods and the others.
	releaseAfterWait
)

// release reports whether the verdict removes the node's LaunchingTaint.
func (v verdict) release() bool { return v >= releaseNoPods }

// releaseRule is the release rule. A held node is released when it serves Neuron hardware and
//   - it has served for releaseWait already, or
//   - no pending pod is planned onto it, or
//   - every pending pod planned onto it is nominated to it, and the group is ready: every node
//     the round's plan puts pending pods on serves with its pods nominated, or takes pods
//     already (groupReady).
//
// Why. Released before it serves with its pods nominated, the node would take pods planned onto
// nodes still booting (or not yet nominated at all), and the scheduler clears the nomination of
// every pod it fails to place, as it does while a pod's node is not up. The nodes of a group go
// together because the scheduler keeps a nominated pod's room only per resource name (a pod
// asking for cores may take devices nominated pods asked for): a pod whose own node is still
// held could take room planned for another pod on a node released before its own. (The
// scheduler extender closes that gap for the pods it schedules: it keeps a pod off other nodes
// while its PlannedNodeAnnotation node is held.) The wait bounds the hold: nothing is held for
// long, not when the pods are deleted (they are no longer pending), nor when nominating fails,
// nor across a restart (the rule reads only the node, the pods and the plan; a restarted
// controller times releaseWait again).
func releaseRule(h hold, groupReady bool) verdict {
	switch {
	case !h.serving:
		return keepNotServing
	case h.waited:
		return releaseAfterWait
	case len(h.pods) == 0:
		return releaseNoPods
	case len(h.unnominated) == 0 && groupReady:
		return releaseWithGroup
	}
	return keepForGroup
}

// groupReady reports whether every node the round's plan puts pending pods on may take them: a
// held node that serves with its pods nominated, or a node that takes pods already (it has a
// Node and holds nothing off). A node still booting (no Node yet, or not serving) holds the
// others back.
func groupReady(placed map[string]placement, held map[string]*hold, present map[string]bool) bool {
	for _, p := range placed {
		h, isHeld := held[p.node]
		switch {
		case isHeld && (!h.serving || len(h.unnominated) > 0):
			return false
		case !isHeld && !present[p.node]:
			return false
		}
	}
	return true
}

func (v verdict) String() string {
	return [...]string{"keepNotServing", "keepForGroup", "releaseNoPods", "releaseWithGroup", "releaseAfterWait"}[v]
}
