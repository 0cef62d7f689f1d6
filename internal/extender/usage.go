package extender

import (
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// usageCache keeps each node's usage as derived from the informer's pods, recomputed only after
// an informer event touched a pod whose record names the node, plus this replica's own binds
// that the informer has not shown yet (so a replica never waits for itself).
type usageCache struct {
	mu     sync.Mutex
	gen    map[string]uint64
	cached map[string]cachedUsage
	recent map[string]map[types.UID][]recentBind // node -> decisions of this replica the cache does not show yet
	seq    uint64
	failed map[types.UID]struct{} // decisions of this replica whose Binding failed
	// overlaps: nodes whose records overlap, since when (see scorer.nodeUsage).
	overlaps allocation.Overlaps
	// records parses each pod's allocation record once per change of its annotation.
	records allocation.RecordCache
}

type cachedUsage struct {
	gen   uint64
	shape *topology.Shape
	usage *topology.Usage
}

// recentBind is one bind decision. A pod can have two at once: the scheduler retries a bind
// that timed out while the first is still posting; only one can land, and the other's failure
// must not take the first out of the usage.
type recentBind struct {
	seq    uint64
	pod    string
	record *allocation.Record
}

func newUsageCache() *usageCache {
	return &usageCache{gen: map[string]uint64{}, cached: map[string]cachedUsage{}, recent: map[string]map[types.UID][]recentBind{}, failed: map[types.UID]struct{}{}}
}

// handler bumps the generation of the nodes a pod's record names, before and after the event,
// and drops recent binds the informer now shows.
func (c *usageCache) handler() cache.ResourceEventHandler {
	touch := func(obj any) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		r, err := c.records.RecordOf(pod)
		if err != nil || r == nil {
			return
		}
		c.mu.Lock()
		c.gen[r.Node]++
		delete(c.recent[r.Node], pod.UID)
		c.mu.Unlock()
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: touch,
		UpdateFunc: func(old, obj any) {
			if c.sameUsage(old, obj) {
				return
			}
			touch(old)
			touch(obj)
		},
		DeleteFunc: func(obj any) {
			touch(obj)
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				c.records.Forget(pod.UID)
			}
		},
	}
}

// sameUsage reports whether a pod update leaves every node's usage as it was, so that the
// node's generation, and with it the cached usage and placements, stay valid. Two updates
// qualify, and in a backlog they are most of the events: the informer showing this replica's
// bind (the record it already counts through recent arrives; recent drops it), and updates of a
// bound pod that change neither its record, its NEURON_ALLOC_TIME nor whether it counts (its
// status as the kubelet starts it). Anything else bumps the generations as before.
func (c *usageCache) sameUsage(oldObj, newObj any) bool {
	old, ok1 := oldObj.(*corev1.Pod)
	pod, ok2 := newObj.(*corev1.Pod)
	if !ok1 || !ok2 {
		return false
	}
	raw, ok := pod.Annotations[allocation.Annotation]
	if !ok || !allocation.Counts(pod) {
		return false
	}
	oldRaw, oldHas := old.Annotations[allocation.Annotation]
	if oldHas {
		return oldRaw == raw && allocation.Counts(old) && old.Annotations[allocation.AllocTime] == pod.Annotations[allocation.AllocTime]
	}
	if _, published := old.Annotations[allocation.AWSNeuronIDs]; published {
		return false // the old object may have counted through its published annotations
	}
	r, err := c.records.RecordOf(pod)
	if err != nil || r == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	rbs := c.recent[r.Node][pod.UID]
	if len(rbs) != 1 || rbs[0].record.Encode() != raw {
		return false // not this replica's decision, or another decision for the pod is counted too
	}
	delete(c.recent[r.Node], pod.UID)
	return true
}

// remember counts a bind decision of this replica on the node until the informer shows the pod
// (or the decision fails), and returns the decision's number for failedBind.
func (c *usageCache) remember(node string, uid types.UID, pod string, r *allocation.Record) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.recent[node] == nil {
		c.recent[node] = map[types.UID][]recentBind{}
	}
	c.seq++
	c.recent[node][uid] = append(c.recent[node][uid], recentBind{seq: c.seq, pod: pod, record: r})
	// The cached usage (which counts the earlier recent decisions) plus this one is what usage
	// would derive for the next generation: keep it, so that filtering the next pod of a
	// backlog does not derive the node again. Bind decisions derive it afresh anyway.
	cu, ok := c.cached[node]
	cached := ok && cu.gen == c.gen[node]
	c.gen[node]++
	if cached {
		if u, ok := withRecord(cu.usage, cu.shape, r); ok {
			c.cached[node] = cachedUsage{gen: c.gen[node], shape: cu.shape, usage: u}
		}
	}
	return c.seq
}

// withRecord returns a copy of u with every container of r allocated, or false when one does
// not apply (it overlaps what u counts or does not fit the shape).
func withRecord(u *topology.Usage, shape *topology.Shape, r *allocation.Record) (*topology.Usage, bool) {
	out := u.Clone()
	for _, ctr := range r.Containers {
		hw, err := ctr.Hardware(shape)
		if err == nil {
			err = out.Allocate(hw)
		}
		if err != nil {
			return nil, false
		}
	}
	return out, true
}

// failedBind notes a decision whose Binding failed: nothing of it will appear, and it no
// longer counts on the node.
func (c *usageCache) failedBind(node string, uid types.UID, seq uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.failed) > 10000 {
		c.failed = map[types.UID]struct{}{}
	}
	left := slices.DeleteFunc(c.recent[node][uid], func(rb recentBind) bool { return rb.seq == seq })
	if len(left) == 0 {
		delete(c.recent[node], uid)
		c.failed[uid] = struct{}{}
	} else {
		c.recent[node][uid] = left
	}
	c.gen[node]++
}

// forget drops a tentative decision (countOpening) once the real one is made or failed. Unlike
// failedBind it says nothing about how the pod's bind ended.
func (c *usageCache) forget(node string, uid types.UID, seq uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	left := slices.DeleteFunc(c.recent[node][uid], func(rb recentBind) bool { return rb.seq == seq })
	if len(left) == 0 {
		delete(c.recent[node], uid)
	} else {
		c.recent[node][uid] = left
	}
	c.gen[node]++
}

// known reports whether uid is a decision of this replica that need not be waited for: bound
// and counted through the overlay, or failed.
func (c *usageCache) known(node string, uid types.UID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, recent := c.recent[node][uid]
	_, failed := c.failed[uid]
	return recent || failed
}

// decided reports whether this replica has a decision for uid that the informer may not show
// yet (it counts in the usage of its node through recent).
func (c *usageCache) decided(uid types.UID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, byUID := range c.recent {
		if _, ok := byUID[uid]; ok {
			return true
		}
	}
	return false
}

// generationFor returns the node's usage generation and whether uid has a recent decision of
// this replica on the node.
func (c *usageCache) generationFor(node string, uid types.UID) (uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, recent := c.recent[node][uid]
	return c.gen[node], recent
}

// usageSnapshot is what usage reads of the cache for a node, under one lock.
type usageSnapshot struct {
	gen    uint64
	cached cachedUsage
	has    bool // cached is set
	// exceptRecent: the pod being scheduled has a recent decision on the node.
	exceptRecent bool
	recent       []recentBind // the node's recent decisions for other pods
}

// snapshot reads the node's generation, cached usage and recent decisions, leaving out those
// for the pod except.
func (c *usageCache) snapshot(node string, except types.UID) usageSnapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := usageSnapshot{gen: c.gen[node], recent: make([]recentBind, 0, len(c.recent[node]))}
	s.cached, s.has = c.cached[node]
	_, s.exceptRecent = c.recent[node][except]
	for uid, rbs := range c.recent[node] {
		if uid != except {
			s.recent = append(s.recent, rbs...)
		}
	}
	return s
}

// keep caches u as the node's usage at generation gen, unless the generation moved on since.
func (c *usageCache) keep(node string, gen uint64, shape *topology.Shape, u *topology.Usage) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen[node] == gen {
		c.cached[node] = cachedUsage{gen: gen, shape: shape, usage: u}
	}
}

// generations returns the generations of the nodes whose shape is known (shapes[i] != nil) and
// whether uid has a recent decision of this replica on each.
func (c *usageCache) generations(names []string, shapes []*topology.Shape, uid types.UID) (gens []uint64, recent []bool) {
	gens, recent = make([]uint64, len(names)), make([]bool, len(names))
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, name := range names {
		if shapes[i] != nil {
			gens[i] = c.gen[name]
			_, recent[i] = c.recent[name][uid]
		}
	}
	return gens, recent
}

// generationsOf returns the usage generations of the nodes.
func (c *usageCache) generationsOf(names []string) []uint64 {
	gens := make([]uint64, len(names))
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, name := range names {
		gens[i] = c.gen[name]
	}
	return gens
}
