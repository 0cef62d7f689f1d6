package plan

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// UltraServer capacity (trn2u.48xlarge) comes as UltraServers of four nodes: EC2 sells it as
// UltraServer Capacity Blocks, and the nodes of one UltraServer share the NeuronLink that
// UltraServer mode 2 or 4 uses. So the planner launches UltraServer types only as units: all the
// nodes of one UltraServer together, with one UltraServer identity, never unrelated single nodes.
// The pods that need an UltraServer are those that require pod affinity (or a LeaderWorkerSet's
// exclusive topology) on an UltraServer label, those whose claims set ultraserverMode 2 or 4, and
// those only an UltraServer type can serve. The pods of one group (one LeaderWorkerSet group, or
// the pods one required affinity term selects) get an UltraServer of their own; other pods share
// units.

// LeaderWorkerSet's pod labels and annotations (sigs.k8s.io/lws, API leaderworkerset.x-k8s.io/v1).
const (
	lwsNameLabel         = "leaderworkerset.sigs.k8s.io/name"
	lwsGroupIndexLabel   = "leaderworkerset.sigs.k8s.io/group-index"
	lwsSizeAnnotation    = "leaderworkerset.sigs.k8s.io/size"
	lwsExclusiveTopology = "leaderworkerset.sigs.k8s.io/exclusive-topology"
)

// ultraServerKeys are the node labels of an UltraServer's identity, with the number of its nodes
// that share a value.
var ultraServerKeys = map[string]int{labels.UltraServerServerID4: 4, labels.UltraServerServerID2: 2}

// ultraServerGroup returns the group of pods that must share one UltraServer with pod d, and how
// many nodes of it the group may use (4 or 2): a LeaderWorkerSet group with exclusive topology on
// an UltraServer label, or the pods a required pod affinity term on such a label selects. ok is
// false when the pod requires no UltraServer.
func ultraServerGroup(d PodDemand) (group string, nodes int, ok bool) {
	pod := d.Pod
	if key := pod.Annotations[lwsExclusiveTopology]; ultraServerKeys[key] > 0 && pod.Labels[lwsNameLabel] != "" {
		return fmt.Sprintf("LeaderWorkerSet %s/%s group %s", pod.Namespace, pod.Labels[lwsNameLabel], pod.Labels[lwsGroupIndexLabel]), ultraServerKeys[key], true
	}
	if a := pod.Spec.Affinity; a != nil && a.PodAffinity != nil {
		for _, term := range a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
			if n := ultraServerKeys[term.TopologyKey]; n > 0 {
				return fmt.Sprintf("the pods in %s with %s", pod.Namespace, metav1.FormatLabelSelector(term.LabelSelector)), n, true
			}
		}
	}
	return "", 0, false
}

// needsUltraServer reports whether the pod can only run on an UltraServer node: it requires one
// (ultraServerGroup), or its claims set ultraserverMode 2 or 4.
func needsUltraServer(d PodDemand) bool {
	if _, _, ok := ultraServerGroup(d); ok {
		return true
	}
	return slices.ContainsFunc(d.DRA, func(r DRARequest) bool { return r.Configs.UltraServerMode >= 2 })
}

// groupSize is how many pods the pod's group will have: a LeaderWorkerSet leader's size (its
// workers appear only once it is scheduled), else 0 (the pods pending now).
func groupSize(d PodDemand) int {
	n, _ := strconv.Atoi(d.Pod.Annotations[lwsSizeAnnotation])
	return n
}

// unitMember is one node of an UltraServer unit.
type unitMember struct {
	name string // the launching node's name; "" for a new one
	u    *topology.Usage
	pods []placed
}

// unit is one UltraServer: launching, or new in this plan.
type unit struct {
	id        string // the launching nodes' UltraServer id, or this plan's
	t         topology.InstanceType
	launching bool
	mode      string // its nodes' allocation mode
	group     string // the group it belongs to; "" when pods of no group share it
	members   []*unitMember
	res       string // the reservation a new unit launches into; "" on demand
}

// unitPlanner plans the pods that need an UltraServer.
type unitPlanner struct {
	sim     *sim
	opts    Options
	pending []PodDemand
	units   []*unit
	at      map[int]*unit // pod index -> its unit
	blocked map[int]string
	prior   map[int]string // pod index -> the launching node earlier plans put it on
	// caps: Neuron nodes and devices the limits leave for new units (-1: no limit).
	nodesCap, devCap int
	// fits caches placements by node state (stateKey) and request shape (requestShape), as the
	// planner's cache does (plan_cache.go); shapes holds each pod's request shape.
	fits   map[string]fit
	shapes map[int]string
	used   map[string]int // reservation id -> instances this plan's units take of it
}

// ultraServerTypes are the catalog's UltraServer types the families allow, cheapest first.
func ultraServerTypes(opts Options) []topology.InstanceType {
	var out []topology.InstanceType
	for _, t := range opts.Catalog.Types() {
		if t.UltraServerNodes > 0 && (len(opts.Families) == 0 || slices.Contains(opts.Families, t.Family)) {
			out = append(out, t)
		}
	}
	sortByPrice(out)
	return out
}

// newUnitPlanner adds the launching UltraServers (launching nodes with an UltraServer id) with
// their pods.
func newUnitPlanner(s *sim, pending []PodDemand, launching []NodeOption, opts Options, nodesCap, devCap int) *unitPlanner {
	up := &unitPlanner{sim: s, opts: opts, pending: pending, at: map[int]*unit{}, blocked: map[int]string{}, prior: map[int]string{},
		nodesCap: nodesCap, devCap: devCap, fits: map[string]fit{}, shapes: map[int]string{}, used: map[string]int{}}
	byID := map[string]*unit{}
	index := map[string]int{}
	for i, d := range pending {
		index[d.id()] = i
	}
	for _, lo := range launching {
		t, ok := opts.Catalog.Lookup(lo.InstanceType)
		if lo.UltraServer == "" || !ok || s.shape(t) == nil {
			continue
		}
		un := byID[lo.UltraServer]
		if un == nil {
			un = &unit{id: lo.UltraServer, t: t, launching: true, mode: cmp.Or(lo.Mode, labels.AllocationModeDevicePlugin)}
			byID[lo.UltraServer] = un
			up.units = append(up.units, un)
		}
		m := &unitMember{name: lo.Name, u: topology.NewUsage(s.shape(t))}
		un.members = append(un.members, m)
		for _, d := range append(slices.Clone(lo.Bound), lo.Pods...) {
			if g, _, ok := ultraServerGroup(d); ok {
				un.group = g
			}
			if _, _, fits := s.place(m.u, d); fits {
				if i, ok := index[d.id()]; ok {
					up.at[i], up.prior[i] = un, lo.Name
				}
			}
		}
	}
	return up
}

// plan places the pods (indices into pending) in order.
func (up *unitPlanner) plan(pods []int) {
	types := ultraServerTypes(up.opts)
	for _, i := range pods {
		if up.at[i] != nil {
			continue
		}
		d := up.pending[i]
		group, nodes, grouped := ultraServerGroup(d)
		if grouped && groupSize(d) > nodes {
			up.blocked[i] = fmt.Sprintf("the pod's LeaderWorkerSet group has %d pods that must share an UltraServer label that %d nodes share: "+
				"one pod per node, it never fits. Set the LeaderWorkerSet's size to at most %d, or use exclusive topology on %s", groupSize(d), nodes, nodes, labels.UltraServerServerID4)
			continue
		}
		if up.placeExisting(i, group, grouped) {
			continue
		}
		up.placeNew(i, group, types)
	}
}

// placeExisting puts pod i on a unit of this plan or a launching one: its group's, or for a pod
// of no group one that pods of no group share.
func (up *unitPlanner) placeExisting(i int, group string, grouped bool) bool {
	for _, un := range up.units {
		if un.group != group || un.mode != up.pending[i].Mode() || !up.pending[i].Allows(un.t) || !up.capacityOK(i, un) {
			continue
		}
		if up.placeOn(un, i) {
			return true
		}
		if grouped {
			up.blocked[i] = fmt.Sprintf("%s must share one UltraServer, and its %d nodes cannot take them all: no node of it has room for this pod", group, len(un.members))
			return true
		}
	}
	return false
}

// placeNew launches a unit for pod i: into an UltraServer reservation with room
// (placeReserved), else on demand, of the cheapest UltraServer type that takes it.
func (up *unitPlanner) placeNew(i int, group string, types []topology.InstanceType) {
	d := up.pending[i]
	if up.placeReserved(i, group, types) {
		return
	}
	refused := false
	for _, t := range types {
		if !d.Allows(t) || up.sim.shape(t) == nil || !up.fit(topology.NewUsage(up.sim.shape(t)), i).ok {
			continue
		}
		if up.opts.ReservedOnly || !d.allowsIn(t, "") {
			refused = true
			continue
		}
		up.launch(i, t, group, "")
		return
	}
	if refused {
		up.blocked[i] = up.reservationMessage(i, types)
	}
}

// launch launches a unit of type t, into reservation res ("" on demand), with pod i on it; within
// the limits, else pod i is blocked.
func (up *unitPlanner) launch(i int, t topology.InstanceType, group, res string) {
	d := up.pending[i]
	if up.nodesCap >= 0 && t.UltraServerNodes > up.nodesCap || up.devCap >= 0 && t.UltraServerNodes*t.Devices > up.devCap {
		up.blocked[i] = fmt.Sprintf("an UltraServer of %d %s nodes (%s) would exceed the autoscaler's limits (max nodes %d, max devices %d, counting the cluster's, launching and planned nodes). "+
			"Raise the limits, or wait for nodes to free up", t.UltraServerNodes, t.Name, plural(t.UltraServerNodes*t.Devices, "device"), up.opts.MaxNodes, up.opts.MaxDevices)
		return
	}
	un := &unit{t: t, group: group, mode: d.Mode(), res: res}
	for range t.UltraServerNodes {
		un.members = append(un.members, &unitMember{u: topology.NewUsage(up.sim.shape(t))})
	}
	up.units = append(up.units, un)
	if res != "" {
		up.used[res] += t.UltraServerNodes
	}
	if up.nodesCap >= 0 {
		up.nodesCap -= t.UltraServerNodes
	}
	if up.devCap >= 0 {
		up.devCap -= t.UltraServerNodes * t.Devices
	}
	up.placeOn(un, i)
}

// placeOn puts pod i on the first member of the unit that takes it, one pod of a group per node
// when the pod requires that (pod anti-affinity on the hostname).
func (up *unitPlanner) placeOn(un *unit, i int) bool {
	d := up.pending[i]
	for _, m := range un.members {
		if hostnameAntiAffinity(d.Pod) && len(m.pods) > 0 {
			continue
		}
		f := up.fit(m.u, i)
		if !f.ok {
			continue
		}
		var hw []topology.Allocation
		for _, a := range f.hw {
			a = topology.Allocation{Unit: a.Unit, Devices: slices.Clone(a.Devices), Cores: slices.Clone(a.Cores)}
			if err := m.u.Allocate(a); err != nil {
				panic(fmt.Sprintf("autoscaler planner: the cached placement of pod %s on an UltraServer node does not fit its usage (%v). This is a bug in the autoscaler: please report it", d.Key(), err))
			}
			hw = append(hw, a)
		}
		m.pods = append(m.pods, placed{pod: i, hw: hw})
		up.at[i] = un
		return true
	}
	return false
}

// fit is where pod i goes on a node whose usage is u (which it does not change), cached.
func (up *unitPlanner) fit(u *topology.Usage, i int) fit {
	shape, ok := up.shapes[i]
	if !ok {
		shape = requestShape(up.pending[i])
		up.shapes[i] = shape
	}
	key := stateKey(0, u) + u.Shape().Type.Name + "\x00" + shape
	if f, ok := up.fits[key]; ok {
		return f
	}
	hw, score, ok := up.sim.place(u.Clone(), up.pending[i])
	f := fit{hw: hw, score: score, ok: ok}
	up.fits[key] = f
	return f
}

// hostnameAntiAffinity reports whether the pod requires pod anti-affinity on the node's hostname
// (the seed's StatefulSet: one pod per node).
func hostnameAntiAffinity(pod *corev1.Pod) bool {
	a := pod.Spec.Affinity
	if a == nil || a.PodAntiAffinity == nil {
		return false
	}
	return slices.ContainsFunc(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution, func(t corev1.PodAffinityTerm) bool {
		return t.TopologyKey == corev1.LabelHostname
	})
}

// unitID is a new unit's UltraServer id: 16 hex digits, as the Neuron driver reports them, from
// its first pod's key.
func unitID(un *unit, pending []PodDemand) string {
	var keys []string
	for _, m := range un.members {
		for _, pl := range m.pods {
			keys = append(keys, pending[pl.pod].Key())
		}
	}
	slices.Sort(keys)
	sum := sha256.Sum256([]byte(un.t.Name + "\n" + strings.Join(keys, "\n")))
	return hex.EncodeToString(sum[:8])
}
