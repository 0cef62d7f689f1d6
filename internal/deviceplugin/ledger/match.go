package ledger

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
)

// Candidate is a container entry of an allocation record: the scheduler extender's, or one
// derived from the published Neuron stack's annotations.
type Candidate struct {
	Pod       PodKey
	PodUID    types.UID
	AllocTime int64
	Created   int64 // unix nanoseconds
	Container allocation.Container
	Index     int // position in the record
	// Published marks a record derived from the published Neuron stack's annotations.
	Published bool
}

// Ref is the candidate's container.
func (c Candidate) Ref() ContainerRef {
	return ContainerRef{UID: c.PodUID, Container: c.Container.Name}
}

// Candidates returns the container entries of the records of pods that are neither finished nor
// being deleted (ours, or derived from the published Neuron stack's annotations: see
// allocation.RecordOf). A derived entry whose container the kubelet already holds devices for
// (its PodResources show it: the published device plugin served it, though NEURON_ALLOCATED may
// still say false) is marked served: an Allocate call can no longer be for it, except a call
// again for the same ids, which is answered before matching. (Entries of our records are marked
// served by the plugin itself, and the swap of records admitted in reverse order relies on their
// unserved entries.) cached says the pods are the informer's (see recordOf).
func (l *Ledger) Candidates(pods []Pod, cached bool, now time.Time) []Candidate {
	admitted := map[ContainerKey]bool{}
	for _, h := range l.holdings {
		if h.Admitted {
			admitted[ContainerKey{UID: h.PodUID, Container: h.Container, Resource: h.Resource}] = true
		}
	}
	var out []Candidate
	for i := range pods {
		pod := &pods[i]
		if pod.Deleting || pod.Finished {
			continue
		}
		r := l.recordOf(pod, cached, now)
		if r == nil || r.Node != l.node {
			continue
		}
		for i, c := range r.Containers {
			if pod.Published && admitted[ContainerKey{UID: pod.UID, Container: c.Name, Resource: c.Resource}] {
				c.Served = true
			}
			out = append(out, Candidate{Pod: pod.Key, PodUID: pod.UID, AllocTime: pod.AllocTime, Created: pod.Created, Container: c, Index: i, Published: pod.Published})
		}
	}
	return out
}

// inflightSkip returns the containers matched by calls whose record write is in flight.
func (l *Ledger) inflightSkip() map[ContainerRef]bool {
	out := make(map[ContainerRef]bool, len(l.inflight))
	for k := range l.inflight {
		out[k] = true
	}
	return out
}

// Match chooses the container an Allocate (or GetPreferredAllocation) call for count ids of
// resource is for: among unserved entries of the same resource and count, the oldest
// NEURON_ALLOC_TIME first, then the oldest pod, then by name and container order. skip lists
// containers already taken by calls in flight. Entries of the scheduler extender's records come
// before entries derived from the published Neuron stack's annotations: the kubelet admits a pod
// right after its binding, so a call is far more likely for a pod the extender just bound than
// for one the published extension bound before kube-neuron took over and that the kubelet has
// still not admitted.
func Match(cands []Candidate, resource string, count int, skip map[ContainerRef]bool) (Candidate, bool) {
	var fit []Candidate
	for _, c := range cands {
		if c.Container.Resource == resource && !c.Container.Served && c.Container.Count() == count && !skip[c.Ref()] {
			fit = append(fit, c)
		}
	}
	if len(fit) == 0 {
		return Candidate{}, false
	}
	sort.SliceStable(fit, func(i, j int) bool {
		a, b := fit[i], fit[j]
		if a.Published != b.Published {
			return !a.Published
		}
		if a.AllocTime != b.AllocTime {
			return a.AllocTime < b.AllocTime
		}
		if a.Created != b.Created {
			return a.Created < b.Created
		}
		if a.Pod != b.Pod {
			return a.Pod.String() < b.Pod.String()
		}
		return a.Index < b.Index
	})
	return fit[0], true
}

// match finds the record entry a call is for. The kubelet and the plugin learn of a newly bound
// pod through different watches, so when the informer's pods have no match, the node's pods are
// read again from the API server before the call falls back to the kubelet's ids. So they are
// when the informer's only match is a pod of the published stack that the kubelet had not
// admitted: the call is more likely for a pod the extender has just bound (see Match). It
// returns the candidates it matched among, for messages.
func (l *Ledger) match(q Query, resource string, count int) (Candidate, []Candidate, bool) {
	cands := l.Candidates(q.Pods, true, q.Now)
	cached, ok := Match(cands, resource, count, l.inflightSkip())
	if ok && !cached.Published {
		return cached, cands, true
	}
	pods, err := q.Lookup.ListPods()
	if err != nil {
		q.Note("Listing the node's pods failed", "err", err)
		return cached, cands, ok
	}
	cands = l.Candidates(pods, false, q.Now)
	c, ok := Match(cands, resource, count, l.inflightSkip())
	return c, cands, ok
}

// describe lists candidates for error messages.
func describe(cands []Candidate, resource string) string {
	var parts []string
	for _, c := range cands {
		if c.Container.Resource == resource {
			state := "waiting"
			if c.Container.Served {
				state = "served"
			}
			parts = append(parts, fmt.Sprintf("%s/%s (%d, %s)", c.Pod, c.Container.Name, c.Container.Count(), state))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// waitingPods names the pods not running yet that ask for count of resource in one container:
// the kubelet names no pod, so this is who the call is for.
func waitingPods(pods []Pod, resource string, count int) string {
	var names []string
	for _, pod := range pods {
		if !pod.Pending {
			continue
		}
		if slices.ContainsFunc(pod.Asks, func(a allocation.Request) bool { return a.Resource == resource && a.Count == count }) {
			names = append(names, pod.Key.String())
		}
	}
	slices.Sort(names)
	if len(names) == 0 {
		return "(unknown: no pending pod on this node asks for that)"
	}
	return strings.Join(names, " or ")
}
