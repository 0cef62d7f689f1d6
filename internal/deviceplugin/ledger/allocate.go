package ledger

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// Allocation sources, as Grant.Source names them.
const (
	SourceExtender  = "extender"  // a kube-neuron.io/allocation record
	SourcePublished = "published" // AWS_NEURON_IDS left by the published Neuron stack
	SourceKubelet   = "kubelet"   // the kubelet's ids
	SourceAgain     = "again"     // the kubelet asked again for a container it holds the ids for
)

// Grant is the answer to one container of an Allocate call, already in the ledger.
type Grant struct {
	Hardware topology.Allocation
	Unit     topology.Unit
	Source   string
	// Who names the container the answer is for, for messages.
	Who string
	// Fix is the record write that marks the matched container served, nil when there is none
	// to write.
	Fix *Fix

	key      AnswerKey
	prev     Answer
	hadPrev  bool
	holdings int
}

// call is one container of an Allocate call while it is decided.
type call struct {
	resource string
	ids      []string // ascending
	hw       topology.Allocation
	source   string
	matched  *Candidate
	again    bool
	who      string
	podUID   types.UID
}

// Allocate decides what a container gets for the kubelet's ids of resource: the same hardware
// when the kubelet asks again for a container it holds them for, else the matching record's
// hardware, else the kubelet's ids. Hardware another container holds is refused. The answer is
// in the ledger when it returns: Undo takes it back when it cannot be kept.
func (l *Ledger) Allocate(q Query, resource string, kubeletIDs []string) (Grant, error) {
	ids := slices.Clone(kubeletIDs)
	SortIDs(ids)
	unit, err := topology.UnitOf(resource)
	if err != nil {
		return Grant{}, err
	}
	c := &call{resource: resource, ids: ids, source: SourceKubelet}
	if err := l.choose(q, c); err != nil {
		return Grant{}, err
	}
	if err := l.checkConflicts(q, c); err != nil {
		return Grant{}, err
	}
	g := l.answer(q, c)
	g.Unit = unit
	return g, nil
}

// choose sets the hardware of the call, and the container it is for when known.
func (l *Ledger) choose(q Query, c *call) error {
	if again, ok := l.reallocation(q.Pods, c.resource, c.ids); ok {
		c.hw, c.source, c.again = again.Hardware, SourceAgain, true
		c.matched = &Candidate{Pod: again.Pod, PodUID: again.PodUID, Container: allocation.Container{Name: again.Container, Resource: c.resource}}
		q.Note("The kubelet asks again for a container it already holds these ids for: serving the same hardware", "pod", again.Pod, "container", again.Container)
	} else if q.Records {
		if err := l.chooseRecord(q, c); err != nil {
			return err
		}
	}
	if c.matched == nil {
		if err := l.chooseKubeletIDs(q, c); err != nil {
			return err
		}
	}
	c.podUID, c.who = "", waitingPods(q.Pods, c.resource, len(c.ids))
	if c.matched != nil {
		c.podUID, c.who = c.matched.PodUID, c.matched.Pod.String()+" container "+c.matched.Container.Name
	}
	return nil
}

// chooseRecord serves the call the matching record's hardware, if there is one.
func (l *Ledger) chooseRecord(q Query, c *call) error {
	m, cands, ok := l.match(q, c.resource, len(c.ids))
	if !ok {
		if q.RequireRecord {
			return fmt.Errorf("no pod bound to node %s has a container waiting for %d %s in its %s annotation (pods waiting for %s here: %s; records: %s). Schedule the pod with the scheduler extender (schedulerName: my-scheduler), or run the plugin with --allocation-source=auto to serve pods scheduled without it",
				l.node, len(c.ids), c.resource, allocation.Annotation, c.resource, waitingPods(q.Pods, c.resource, len(c.ids)), describe(cands, c.resource))
		}
		return nil
	}
	hw, err := m.Container.Hardware(l.shape)
	if err != nil {
		what := allocation.Annotation + " record"
		if m.Published {
			what = allocation.AWSNeuronIDs + " annotation (left by the published Neuron scheduler extension)"
		}
		return fmt.Errorf("pod %s container %s: its %s does not fit this %s node: %w; delete the pod so that the scheduler extender places it again",
			m.Pod, m.Container.Name, what, l.shape.Type.Name, err)
	}
	c.hw, c.matched, c.source = hw, &m, SourceExtender
	if m.Published {
		c.source = SourcePublished
	}
	return nil
}

// chooseKubeletIDs serves the call the kubelet's ids.
func (l *Ledger) chooseKubeletIDs(q Query, c *call) error {
	unit, _ := topology.UnitOf(c.resource)
	if err := l.shape.Validate(topology.Request{Unit: unit, Count: len(c.ids)}); err != nil {
		sizes := l.shape.DeviceSizes()
		if unit == topology.UnitCore {
			sizes = l.shape.CoreSizes()
		}
		return fmt.Errorf("%w The kubelet asked for %d %s for pod %s without an allocation from the scheduler extender: schedule the pod with it (schedulerName: my-scheduler), or request one of %s",
			err, len(c.ids), c.resource, waitingPods(q.Pods, c.resource, len(c.ids)), topology.FormatList(sizes))
	}
	hw, err := HardwareOf(l.shape, c.resource, c.ids)
	if err != nil {
		return fmt.Errorf("pod %s: the kubelet offered %s ids %v: %w", waitingPods(q.Pods, c.resource, len(c.ids)), c.resource, c.ids, err)
	}
	if !l.shape.IsValidDeviceSet(hw.Devices) {
		q.Log.Info("Serving the kubelet's ids, which are not a connected set: the kubelet did not take the preferred allocation", "ids", c.ids, "devices", hw.Devices)
	}
	c.hw = hw
	return nil
}

// reallocation returns the holding of a container the kubelet's PodResources show holding
// exactly ids in this pool, of a pod that runs and is not being deleted: the kubelet hands a
// container's ids to no other container, so a call with them is the kubelet asking again for
// that container (after a kubelet restart, when the container starts again), and it must get the
// same hardware, also when the ids are not that hardware (a record of the scheduler extender, or
// of the published Neuron stack, served on other ids than the kubelet's). A pod that does not
// run yet is left out: the kubelet may have released its ids for a failed admission that the
// plugin has not seen.
func (l *Ledger) reallocation(pods []Pod, resource string, ids []string) (Holding, bool) {
	i := slices.IndexFunc(l.holdings, func(h Holding) bool {
		return h.Admitted && h.Resource == resource && h.PodUID != "" && slices.Equal(h.KubeletIDs, ids)
	})
	if i < 0 {
		return Holding{}, false
	}
	h := l.holdings[i]
	j := slices.IndexFunc(pods, func(p Pod) bool { return p.Key == h.Pod })
	if j < 0 || pods[j].UID != h.PodUID || pods[j].Deleting || !pods[j].Running {
		return Holding{}, false
	}
	return h, true
}

// checkConflicts refuses hardware another container holds.
func (l *Ledger) checkConflicts(q Query, c *call) error {
	conflicts := Conflicts(c.hw, c.podUID, l.current())
	if c.matched == nil || c.again {
		// The kubelet's own pool ids for this pool never conflict with themselves: the
		// container it asks again for holds them.
		conflicts = slices.DeleteFunc(conflicts, func(h Holding) bool { return h.Resource == c.resource && slices.Equal(h.KubeletIDs, c.ids) })
	}
	if len(conflicts) > 0 {
		// The plugin's view of pods can lag the scheduler's: a holder the API server no longer
		// has (or that has finished) holds nothing. Ask before failing the pod.
		conflicts = l.confirm(q, conflicts)
	}
	if len(conflicts) == 0 {
		return nil
	}
	h := conflicts[0]
	holder := "pod " + h.Holder()
	if h.Container != "" {
		holder += " (container " + h.Container + ", " + h.Resource + ")"
	} else {
		holder += " (" + h.Resource + ")"
	}
	if c.matched != nil && h.Admitted && h.PodUID == c.matched.PodUID {
		// The record's own container runs there: the call is not for it.
		return fmt.Errorf("the kubelet asked for %d %s (ids %s) and the only waiting record of that size is pod %s container %s's, but the kubelet already runs that container on devices %s (cores %s); the call is for another pod, whose record the plugin does not see yet, refusing to hand the devices out twice: delete the pod that failed and let its controller create it again",
			len(c.ids), c.resource, strings.Join(c.ids, ","), c.matched.Pod, c.matched.Container.Name, topology.FormatList(c.hw.Devices), topology.FormatList(c.hw.Cores))
	}
	return fmt.Errorf("pod %s: devices %s (cores %s) are already in use by %s; refusing to hand them out twice. The kubelet admitted the pod before it saw the plugin withdraw these ids: delete the pod and let its controller create it again",
		c.who, topology.FormatList(c.hw.Devices), topology.FormatList(c.hw.Cores), holder)
}

// confirm keeps the conflicting holdings whose pod the API server still has, not finished.
// Holdings of answers this plugin gave to a pod it could not name are kept: they are recent.
// An answer the kubelet's PodResources have not shown yet names the pod whose record it was
// matched to, which may not be the pod the kubelet admitted (it admits pods in its own order):
// when that pod is gone, the kubelet is asked who holds the answer's ids (exactly those: the
// kubelet may have handed some of them to a pod admitted since, with an answer of its own), and a
// pod that does keeps the conflict.
func (l *Ledger) confirm(q Query, conflicts []Holding) []Holding {
	var out []Holding
	for _, h := range conflicts {
		if h.Pod.IsZero() || h.PodUID == "" || !q.Lookup.Gone(h.Pod, h.PodUID) {
			out = append(out, h)
			continue
		}
		if len(h.KubeletIDs) > 0 && !h.Admitted {
			if holder := q.Lookup.KubeletHolder(h.Resource, h.KubeletIDs); !holder.IsZero() {
				q.Note("A conflicting answer's pod is gone, but the kubelet holds its ids for another pod", "answeredFor", h.Pod, "holder", holder, "ids", h.KubeletIDs)
				h.Pod, h.PodUID = holder, ""
				out = append(out, h)
				continue
			}
		}
		q.Note("A conflicting holder is gone; its devices are free", "holder", h.Holder())
	}
	return out
}

// answer puts the call's answer in the ledger.
func (l *Ledger) answer(q Query, c *call) Grant {
	g := Grant{Hardware: c.hw, Source: c.source, Who: c.who, key: KeyOf(c.resource, c.ids), holdings: len(l.holdings)}
	a := Answer{Hardware: c.hw, Resource: c.resource, Kubelet: c.ids, At: q.Now}
	h := Holding{Who: c.who, PodUID: c.podUID, Resource: c.resource, KubeletIDs: c.ids, Hardware: c.hw}
	if m := c.matched; m != nil {
		a.PodUID, a.Pod, a.Container = m.PodUID, m.Pod, m.Container.Name
		h.Pod = m.Pod
		if !c.again {
			l.inflight[m.Ref()] = q.Now
			g.Fix = &Fix{Pod: m.Pod, Key: ContainerKey{UID: m.PodUID, Container: m.Container.Name, Resource: c.resource}, Hardware: c.hw, Served: true}
		}
	}
	g.prev, g.hadPrev = l.answers[g.key]
	l.answers[g.key] = a
	l.holdings = append(l.holdings, h)
	return g
}

// Undo takes back an answer that cannot be kept (its checkpoint could not be written): like the
// kubelet, which fails an admission whose checkpoint it cannot write, the plugin gives no answer
// a restart could lose.
func (l *Ledger) Undo(g Grant) {
	if g.hadPrev {
		l.answers[g.key] = g.prev
	} else {
		delete(l.answers, g.key)
	}
	if g.Fix != nil {
		delete(l.inflight, ContainerRef{UID: g.Fix.Key.UID, Container: g.Fix.Key.Container})
	}
	l.holdings = l.holdings[:g.holdings]
}
