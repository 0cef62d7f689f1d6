package ledger

import (
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// How long an answer counts.
const (
	// answerTTL bounds how long an Allocate answer counts as in use before the kubelet's
	// PodResources API shows it.
	answerTTL = 2 * time.Minute
	// answerGrace is how long an answer counts whatever the pods show of its pod: the pod may
	// reach the informer after the kubelet asked for it.
	answerGrace = 5 * time.Second
	// answerUnseenTTL is how long an answer counts that the kubelet's PodResources, while they
	// can be read, have not shown; and how long a container stays in flight.
	answerUnseenTTL = 30 * time.Second
)

// Snapshot is what the plugin saw at a refresh.
type Snapshot struct {
	// Pods are the node's pods; Cached says they are the informer's, which may not show this
	// plugin's latest record writes yet.
	Pods   []Pod
	Cached bool
	// Kubelet is what the kubelet's PodResources show; KubeletOK says they could be read.
	Kubelet   []Admitted
	KubeletOK bool
	Now       time.Time
}

// Lister reads the node's pods from the API server, for when the informer may lag.
type Lister interface {
	ListPods() ([]Pod, error)
}

// Refresh recomputes the holdings from a snapshot and returns the record fixes that make the
// records agree with what the kubelet runs. When the kubelet admitted a pod this plugin answered
// for that the snapshot's pods do not show yet, its answer may have been matched to another
// pod's record (the oldest waiting), and fixing that record without this pod's would leave both
// naming the same hardware: the pods are read from the API server instead (list). When that
// read fails, listErr says why, and the fixes are those of the snapshot's pods.
func (l *Ledger) Refresh(snap Snapshot, list Lister) (fixes []Fix, listErr error) {
	if l.answeredUnseen(snap.Pods, snap.Kubelet) {
		pods, err := list.ListPods()
		if err != nil {
			listErr = err
		} else {
			snap.Pods, snap.Cached = pods, false
		}
	}
	r := newRefresh(l, snap)
	r.admitted()
	// Swap: a record fixed to hardware that another pod's record claims as served, while that
	// other pod is not running on it, gives that pod hardware nobody got (see displaced).
	r.fixes = append(r.fixes, r.displaced()...)
	r.reserved()
	r.answered()
	for k, t := range l.inflight {
		if snap.Now.Sub(t) > answerUnseenTTL {
			delete(l.inflight, k)
		}
	}
	l.holdings = r.holdings
	return r.fixes, listErr
}

// answeredUnseen reports whether the kubelet shows a pod holding ids this plugin answered for
// that pods do not have.
func (l *Ledger) answeredUnseen(pods []Pod, kubelet []Admitted) bool {
	if len(l.answers) == 0 {
		return false
	}
	known := make(map[PodKey]bool, len(pods))
	for _, p := range pods {
		known[p.Key] = true
	}
	for _, a := range kubelet {
		if _, ok := l.answers[KeyOf(a.Resource, a.IDs)]; ok && !known[a.Pod] {
			return true
		}
	}
	return false
}

// refresh is one Refresh's working state.
type refresh struct {
	l    *Ledger
	snap Snapshot
	// byName are the pods not finished; byUID all pods.
	byName map[PodKey]*Pod
	byUID  map[types.UID]*Pod
	// records are the records of the pods not finished that name this node, by pod, in uids.
	records map[types.UID]*allocation.Record
	uids    []types.UID
	// published marks pods whose record is derived from the published stack's annotations.
	published map[types.UID]bool

	holdings []Holding
	fixes    []Fix
	covered  map[ContainerKey]bool // entries the kubelet holds ids for
	seen     map[AnswerKey]bool    // answers the kubelet's PodResources show
}

func newRefresh(l *Ledger, snap Snapshot) *refresh {
	r := &refresh{
		l: l, snap: snap, byName: map[PodKey]*Pod{}, byUID: map[types.UID]*Pod{}, records: map[types.UID]*allocation.Record{},
		published: map[types.UID]bool{}, covered: map[ContainerKey]bool{}, seen: map[AnswerKey]bool{},
	}
	for i := range snap.Pods {
		pod := &snap.Pods[i]
		if _, dup := r.byUID[pod.UID]; !dup {
			r.byUID[pod.UID] = pod
		}
		if pod.Finished {
			continue
		}
		r.byName[pod.Key] = pod
		if rec := l.recordOf(pod, snap.Cached, snap.Now); rec != nil && rec.Node == l.node {
			if _, dup := r.records[pod.UID]; !dup {
				r.uids = append(r.uids, pod.UID)
			}
			r.records[pod.UID] = rec
			r.published[pod.UID] = pod.Published
		}
	}
	slices.Sort(r.uids)
	return r
}

// podKeyOf names the pod with uid.
func (r *refresh) podKeyOf(uid types.UID) PodKey {
	if p := r.byUID[uid]; p != nil {
		return p.Key
	}
	return PodKey{}
}

// entry returns the record entry of a container for a resource, or nil.
func (r *refresh) entry(k ContainerKey) *allocation.Container {
	rec := r.records[k.UID]
	if rec == nil {
		return nil
	}
	var found *allocation.Container
	for i := range rec.Containers {
		if c := &rec.Containers[i]; c.Name == k.Container && c.Resource == k.Resource {
			found = c
		}
	}
	return found
}

// admitted adds the holdings of the containers the kubelet's PodResources show.
func (r *refresh) admitted() {
	for _, a := range r.snap.Kubelet {
		pod := r.byName[a.Pod]
		if pod == nil || !slices.Contains(topology.Resources, a.Resource) {
			continue
		}
		ids := slices.Clone(a.IDs)
		SortIDs(ids)
		k := ContainerKey{UID: pod.UID, Container: a.Container, Resource: a.Resource}
		hw, ok := r.admittedHardware(pod, k, ids)
		if !ok {
			continue
		}
		r.covered[k] = true
		r.holdings = append(r.holdings, Holding{Pod: a.Pod, PodUID: pod.UID, Container: a.Container, Resource: a.Resource, KubeletIDs: ids, Hardware: hw, Admitted: true})
	}
}

// admittedHardware returns what an admitted container runs on, and adds the fix of its record
// when that says otherwise: the answer given for its ids, else its record's hardware when the
// record says served (or is the published stack's: the published device plugin served its
// AWS_NEURON_IDS, whatever ids the kubelet holds), else the kubelet's ids (served by this plugin
// before a restart: recorded, so that the scheduler extender counts it too).
func (r *refresh) admittedHardware(pod *Pod, k ContainerKey, ids []string) (topology.Allocation, bool) {
	shape := r.l.shape
	rec := r.entry(k)
	fix := Fix{Pod: pod.Key, Key: k, Served: true}
	key := KeyOf(k.Resource, ids)
	if a, ok := r.l.answers[key]; ok {
		r.seen[key] = true
		// The answer may have been matched to another pod's record (the kubelet admitted the
		// pods in another order): from now on it is this container's.
		a.Seen, a.PodUID, a.Pod, a.Container = true, pod.UID, pod.Key, k.Container
		r.l.answers[key] = a
		if rec == nil || !rec.Served || !SameHardware(shape, *rec, a.Hardware) {
			fix.Hardware = a.Hardware
			r.fixes = append(r.fixes, fix)
		}
		return a.Hardware, true
	}
	if rec != nil && (rec.Served || r.published[pod.UID]) {
		hw, err := rec.Hardware(shape)
		return hw, err == nil
	}
	hw, err := HardwareOf(shape, k.Resource, ids)
	if err != nil {
		return topology.Allocation{}, false
	}
	fix.Hardware = hw
	r.fixes = append(r.fixes, fix)
	return hw, true
}

// reserved adds the holdings of the record entries the kubelet holds no ids for: containers
// waiting to be admitted (reserved), and served ones the PodResources do not show (yet), at
// their fixed hardware. A pod being deleted whose containers the readable PodResources do not
// show has had its ids released: withdrawing them from the other pools until the informer drops
// the pod would refuse the pod placed there next.
func (r *refresh) reserved() {
	fixed := map[ContainerKey]Fix{}
	for _, f := range r.fixes {
		fixed[f.Key] = f
	}
	for _, uid := range r.uids {
		if r.byUID[uid].Deleting && r.snap.KubeletOK {
			continue
		}
		for _, c := range r.records[uid].Containers {
			k := ContainerKey{UID: uid, Container: c.Name, Resource: c.Resource}
			if r.covered[k] {
				continue
			}
			hw, err := c.Hardware(r.l.shape)
			served := c.Served
			if f, ok := fixed[k]; ok {
				hw, served = f.Hardware, f.Served
			}
			if err != nil {
				continue
			}
			r.holdings = append(r.holdings, Holding{Pod: r.podKeyOf(uid), Who: string(uid), PodUID: uid, Container: c.Name, Resource: c.Resource, Hardware: hw, Reserved: !served})
		}
	}
}

// answered adds the holdings of the answers the PodResources do not show, and forgets those
// that no longer count: the kubelet showed the ids and no longer does, the answer's pod is gone
// or finished (also when the kubelet admitted and tore the pod down between two looks at its
// PodResources; after answerGrace), or the answer is older than answerTTL (answerUnseenTTL when
// the PodResources can be read).
func (r *refresh) answered() {
	now := r.snap.Now
	for _, k := range sortedAnswerKeys(r.l.answers) {
		if r.seen[k] {
			continue
		}
		a := r.l.answers[k]
		age := now.Sub(a.At)
		gone := a.PodUID != "" && age > answerGrace && !r.live(a.PodUID)
		if a.Seen && r.snap.KubeletOK || gone || age > answerTTL || (r.snap.KubeletOK && age > answerUnseenTTL) {
			delete(r.l.answers, k)
			continue
		}
		r.holdings = append(r.holdings, a.holding("(being admitted)"))
	}
}

// live reports whether the pod with uid is among the pods and has not finished.
func (r *refresh) live(uid types.UID) bool {
	p := r.byUID[uid]
	return p != nil && !p.Finished
}
