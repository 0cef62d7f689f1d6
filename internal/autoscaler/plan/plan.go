package plan

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/neuron"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// Options configure Plan.
type Options struct {
	// Catalog is the instance catalog; nil means topology.DefaultCatalog().
	Catalog *topology.Catalog
	// Policy places requests in the simulation, as the scheduler extender does; "" is best-fit.
	Policy topology.Policy
	// Families the autoscaler may launch; empty allows every family of the catalog.
	Families []string
	// MaxNodes caps the Neuron nodes in the cluster: Existing, launching and new together.
	// 0 means no limit.
	MaxNodes int
	// MaxDevices caps the Neuron devices in the cluster, counted the same way. 0 means no limit.
	MaxDevices int
	// Existing is what the cluster's Neuron nodes that are not launching hold.
	Existing Capacity
	// Devices are the ResourceSlices and DeviceClasses DRA pods are placed with; nil means
	// NewDeviceTemplates(Catalog, nil, nil).
	Devices *DeviceTemplates
	// Reservations are capacity the user already bought that new nodes may launch into: a
	// reserved node costs nothing more, so they are used before on-demand nodes, and never past
	// their Available instances. The caller passes only those a pod could still start on.
	Reservations []Reservation
	// ReservedOnly forbids on-demand nodes: new nodes launch only into Reservations (the
	// autoscaler's on-demand fallback is off). Launching nodes take pods either way.
	ReservedOnly bool
}

// Reservation is reserved capacity new nodes may launch into: an On-Demand Capacity
// Reservation or a Capacity Block for ML (for trn2u, an UltraServer Capacity Block).
type Reservation struct {
	ID           string // cr-...
	InstanceType string
	// Available is how many more instances may launch into it. On an UltraServer block it
	// counts instances too, and only whole UltraServers launch into it.
	Available int
	// UltraServer marks an UltraServer Capacity Block: its nodes launch as whole UltraServers.
	UltraServer bool
}

// Capacity counts Neuron nodes and their devices.
type Capacity struct {
	Nodes, Devices int
}

// NodeOption is a node that is already launching, and the pods already planned onto it. Its
// free capacity is used before any new node.
type NodeOption struct {
	Name         string
	InstanceType string
	// Mode is the node's allocation mode; "" is labels.AllocationModeDevicePlugin.
	Mode string
	Pods []PodDemand
	// Bound are the pods the scheduler already put on the node (it may have come up and taken
	// pods planned elsewhere): they occupy it first. A planned pod that no longer fits beside
	// them is planned again.
	Bound []PodDemand
	// UltraServer is the UltraServer id of a node launched as part of an UltraServer (its
	// labels.UltraServerServerID4 label); "" for other nodes.
	UltraServer string
}

// ScaleUp is what Plan decided to launch.
type ScaleUp struct {
	// Nodes are the launching nodes that take pending pods and the new nodes to launch, in
	// that order.
	Nodes []NodePlan
	// CostUSDPerHour is the sum of the known prices of the new on-demand nodes.
	CostUSDPerHour float64
	// UnknownPriceNodes counts the new nodes whose type has no price in the catalog.
	UnknownPriceNodes int
	// ReservedNodes counts the new nodes launched into reservations: already paid, not in
	// CostUSDPerHour.
	ReservedNodes int
}

// New returns the nodes to launch.
func (s ScaleUp) New() []NodePlan {
	var out []NodePlan
	for _, n := range s.Nodes {
		if !n.Launching {
			out = append(out, n)
		}
	}
	return out
}

// NodePlan is one node and the pending pods planned onto it.
type NodePlan struct {
	// Name is the launching node's name; empty for a new node.
	Name         string
	Launching    bool
	InstanceType topology.InstanceType
	// Mode is labels.AllocationModeDevicePlugin or labels.AllocationModeDRA.
	Mode string
	// Pods are the pods of this plan, in the order they were simulated. For a launching node,
	// only the pods added now.
	Pods []Placement
	// UltraServer, on the nodes of an UltraServer, is its id (16 hex digits), the same on all
	// its nodes, which are launched together; UltraServerNode is the node's position in it.
	UltraServer     string
	UltraServerNode int
	// Reservation is the id of the reservation a new node launches into; "" on demand.
	Reservation string
}

// Labels are the labels the node carries: NewNodeLabels; the capacity labels (in a reservation
// labels.CapacityReservationID and labels.CapacityType reserved, else on-demand); and on an
// UltraServer's nodes its identity (labels.UltraServerLabels: the UltraServer's id, the pair of
// nodes within it, the node's positions and the modes the UltraServer supports).
func (n NodePlan) Labels() map[string]string {
	l := withCapacity(NewNodeLabels(n.InstanceType, n.Mode), n.Reservation)
	if n.UltraServer != "" {
		maps.Copy(l, labels.UltraServerLabels(UltraServerMember(n.UltraServer, n.UltraServerNode)))
	}
	return l
}

// UltraServerMember is node k of the UltraServer with this id, as the Neuron driver of a trn2u
// node reports it: the nodes 0-1 and 2-3 form its 2-node pairs, and it supports modes 1, 2 and 4.
func UltraServerMember(id string, k int) *neuron.UltraServer {
	pair := sha256.Sum256([]byte(fmt.Sprintf("%s/%d", id, k/2)))
	return &neuron.UltraServer{ServerID4: id, ServerID2: hex.EncodeToString(pair[:8]), NodeID4: k, NodeID2: k % 2, Mode: "1_2_4"}
}

// Placement is a pod and the devices and cores the simulation gave it. The scheduler chooses the
// real ones; the simulation proves that they exist.
type Placement struct {
	Pod      string // namespace/name
	UID      types.UID
	Hardware []topology.Allocation
}

// Decision is the outcome for one pending pod: an event on the pod.
type Decision struct {
	Pod     string // namespace/name
	UID     types.UID
	Reason  string // ReasonTriggeredScaleUp or ReasonNotTriggerScaleUp
	Message string
	// Node is the index in ScaleUp.Nodes of the node that takes the pod; -1 when the pod is
	// refused, or was planned onto a launching node by an earlier plan (Launching is then true
	// and the message names the node).
	Node int
	// Launching: the node was already launching, nothing new is launched for the pod.
	Launching bool
}

// Warning reports whether the decision is a Warning event.
func (d Decision) Warning() bool { return d.Reason == ReasonNotTriggerScaleUp }

// Plan chooses the nodes to launch for pending pods that passed Check. Pods fill the launching
// nodes first; the others go on new nodes, packed several to a node where that is cheaper, so
// that the total hourly price is the lowest the search finds (when every pod is placed, never
// above one node of the cheapest fitting type per pod). Every pod gets a Decision, in the order
// of pending.
func Plan(pending []PodDemand, launching []NodeOption, opts Options) (ScaleUp, []Decision) {
	return withFollowers(pending, followers(pending), func(pods []PodDemand) (ScaleUp, []Decision) {
		return planPods(pods, launching, opts)
	})
}

// planPods is Plan for pods that share no claim with each other.
func planPods(pending []PodDemand, launching []NodeOption, opts Options) (ScaleUp, []Decision) {
	if opts.Catalog == nil {
		opts.Catalog = topology.DefaultCatalog()
	}
	var general, units []int
	for i, d := range pending {
		if needsUltraServer(d) {
			units = append(units, i)
		} else {
			general = append(general, i)
		}
	}
	gp := make([]PodDemand, len(general))
	for k, i := range general {
		gp[k] = pending[i]
	}
	p := newPlanner(gp, launching, opts)
	packed := p.run(true)
	naive := p.run(false)
	best := packed
	if naive.worse(packed) < 0 {
		best = naive
	}
	up, gd := p.result(best)
	decisions := make([]Decision, len(pending))
	for k, i := range general {
		decisions[i] = gd[k]
		if gd[k].Warning() && len(p.cands[k]) == 0 && len(p.outside[k]) == 0 && servedByUltraServer(p.sim, gp[k], opts) {
			units = append(units, i)
		}
	}
	if len(units) == 0 {
		return up, decisions
	}
	slices.Sort(units)
	nodesCap, devCap := -1, -1
	if opts.MaxNodes > 0 {
		nodesCap = max(0, opts.MaxNodes-opts.Existing.Nodes-best.launchN-best.newN)
	}
	if opts.MaxDevices > 0 {
		devCap = max(0, opts.MaxDevices-opts.Existing.Devices-best.launchD-best.newD)
	}
	u := newUnitPlanner(p.sim, pending, launching, opts, nodesCap, devCap)
	u.plan(units)
	u.result(units, &up, decisions)
	return up, decisions
}
