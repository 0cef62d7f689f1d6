package extender

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

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
	// overlapSince: nodes whose records overlap, since when (see usage).
	overlapSince map[string]time.Time
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
	return &usageCache{gen: map[string]uint64{}, cached: map[string]cachedUsage{}, recent: map[string]map[types.UID][]recentBind{}, failed: map[types.UID]struct{}{}, overlapSince: map[string]time.Time{}}
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

// usage derives the node's usage from the pods whose record names it, leaving out the pod being
// scheduled (its own record, if any, must not block it). The result must not be changed.
// Filter and prioritize may use the cached usage: client-go updates the indexer before it runs
// the handler that invalidates the cache, so the cache can lag the indexer for a moment, which
// only costs a bind that no longer fits. The bind decision (fresh) always derives it again.
//
// While records on the node overlap (see allocation.OverlapError) the usage misses what one of
// them held before it was corrected, so for overlapSettle from when this replica first saw the
// overlap the node is refused (the error says why); an overlap that outlives that is logged and
// the usage used as it is.
func (e *Extender) usage(ctx context.Context, shape *topology.Shape, node string, except types.UID) (*topology.Usage, error) {
	return e.usageOf(ctx, shape, node, except, false)
}

// freshUsage is usage derived from the indexer now, for bind decisions.
func (e *Extender) freshUsage(ctx context.Context, shape *topology.Shape, node string, except types.UID) (*topology.Usage, error) {
	return e.usageOf(ctx, shape, node, except, true)
}

// testHookBetweenReads runs between the two reads of usageOf (tests only).
var testHookBetweenReads func()

// overlapSettle is how long a node whose allocation records overlap is refused.
const overlapSettle = 10 * time.Second

func (e *Extender) usageOf(ctx context.Context, shape *topology.Shape, node string, except types.UID, fresh bool) (*topology.Usage, error) {
	c := e.usageCache
	// This replica's recent decisions first, the indexer second: the informer drops a decision
	// from recent only after its indexer holds the pod's record, so whatever is not in this
	// snapshot of recent is in the indexer read below. (Read the other way round, a decision
	// whose record arrived in between was in neither, and its devices were given again.)
	c.mu.Lock()
	gen := c.gen[node]
	cu, ok := c.cached[node]
	_, exceptRecent := c.recent[node][except]
	recent := make([]recentBind, 0, len(c.recent[node]))
	for uid, rbs := range c.recent[node] {
		if uid != except {
			recent = append(recent, rbs...)
		}
	}
	c.mu.Unlock()
	if testHookBetweenReads != nil {
		testHookBetweenReads()
	}
	objs, _ := e.pods.GetIndexer().ByIndex(byRecordNode, node)
	exceptListed := false
	for _, o := range objs {
		if o.(*corev1.Pod).UID == except {
			exceptListed = true
		}
	}
	if !fresh && ok && cu.gen == gen && cu.shape == shape && !exceptListed && !exceptRecent {
		return cu.usage, nil
	}
	pods := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		if p := o.(*corev1.Pod); p.UID != except {
			pods = append(pods, p)
		}
	}
	u, _, problems := allocation.NodeUsageWith(shape, node, pods, c.records.RecordOf)
	var overlap error
	for _, err := range problems {
		if errors.As(err, new(*allocation.OverlapError)) {
			overlap = err
		}
	}
	if unsettled := c.settling(node, overlap != nil, e.o.Now()); unsettled {
		return u, fmt.Errorf("the allocation records on node %s overlap (%v): the device plugin is correcting them; the node takes pods again once it is done", node, overlap)
	}
	for _, err := range problems {
		klog.FromContext(ctx).Error(err, "Ignoring an allocation record", "node", node)
	}
	for _, rb := range recent {
		for _, ctr := range rb.record.Containers {
			hw, err := ctr.Hardware(shape)
			if err == nil {
				err = u.Allocate(hw)
			}
			if err != nil {
				// The informer already shows this pod (its record is in u): nothing to add.
				klog.FromContext(ctx).V(6).Info("Recent bind already counted", "pod", rb.pod, "err", err)
			}
		}
	}
	if !fresh && !exceptListed && !exceptRecent && overlap == nil {
		c.mu.Lock()
		if c.gen[node] == gen {
			c.cached[node] = cachedUsage{gen: gen, shape: shape, usage: u}
		}
		c.mu.Unlock()
	}
	return u, nil
}

// settling notes whether the node's records overlap now and reports whether the node is within
// overlapSettle of the first time this replica saw them overlap.
func (c *usageCache) settling(node string, overlap bool, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !overlap {
		delete(c.overlapSince, node)
		return false
	}
	since, ok := c.overlapSince[node]
	if !ok {
		since = now
		c.overlapSince[node] = since
	}
	return now.Sub(since) < overlapSettle
}

// scoreMemo keeps the scores filter computed for a pod, so that prioritize, which the scheduler
// calls right after filter for the same pod and nodes, does not place the pod again. A score is
// used only while the node's usage generation is the one it was computed at.
type scoreMemo struct {
	mu   sync.Mutex
	pods map[types.UID]*memoEntry
}

type memoEntry struct {
	at time.Time
	// nodes are the nodes filter passed, in its order, with their usage generations and scores.
	nodes  []string
	gens   []uint64
	scores []int64
	next   int            // where find looks first
	index  map[string]int // built on the first lookup out of order
}

// find returns the index of node in the memo.
func (m *memoEntry) find(node string) (int, bool) {
	if m == nil {
		return 0, false
	}
	if m.next < len(m.nodes) && m.nodes[m.next] == node {
		m.next++
		return m.next - 1, true
	}
	if m.index == nil {
		m.index = make(map[string]int, len(m.nodes))
		for i, n := range m.nodes {
			m.index[n] = i
		}
	}
	i, ok := m.index[node]
	if ok {
		m.next = i + 1
	}
	return i, ok
}

func (m *scoreMemo) put(uid types.UID, entry memoEntry, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.pods == nil {
		m.pods = map[types.UID]*memoEntry{}
	}
	for k, v := range m.pods {
		if now.Sub(v.at) > 30*time.Second {
			delete(m.pods, k)
		}
	}
	entry.at = now
	m.pods[uid] = &entry
}

// take returns and forgets the pod's memo (nil when there is none).
func (m *scoreMemo) take(uid types.UID) *memoEntry {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.pods[uid]
	delete(m.pods, uid)
	return e
}

// placementCache keeps, per node, whether and how well each request shape fits at the node's
// current usage generation: filter places every pending pod on every node the scheduler sends,
// and between two pods only the nodes a decision or an informer event touched change. A bind
// decision never uses it (it plans on fresh usage).
type placementCache struct {
	mu    sync.Mutex
	nodes map[string]*nodePlacements
}

type nodePlacements struct {
	gen   uint64
	shape *topology.Shape
	fits  map[string]placement // placementKey -> result
}

type placement struct {
	score int64
	err   error
}

// placementKey identifies what a placement depends on besides the node: the policy is the
// extender's, and the containers' names do not matter, only their resources and counts in
// order. "" for a pod whose own record must be left out of the usage (it is not cached).
func placementKey(pod *corev1.Pod, reqs []allocation.Request) string {
	if _, has := pod.Annotations[allocation.Annotation]; has {
		return ""
	}
	var b strings.Builder
	for _, r := range reqs {
		b.WriteString(r.Resource)
		b.WriteByte('=')
		b.WriteString(strconv.Itoa(r.Count))
		b.WriteByte(';')
	}
	return b.String()
}

// place returns the node's usage generation and the extender score of the pod's requests on the
// node, or why they do not fit, from the cache when nothing changed on the node since.
func (e *Extender) place(ctx context.Context, shape *topology.Shape, node string, uid types.UID, reqs []allocation.Request, key string) (uint64, int64, error) {
	gen, recent := e.usageCache.generationFor(node, uid)
	cacheable := key != "" && !recent // a recent decision for this pod counts in the usage: leave it out
	if cacheable {
		if p, ok := e.placements.get(node, gen, shape, key); ok {
			return gen, p.score, p.err
		}
	}
	u, err := e.usage(ctx, shape, node, uid)
	if err != nil {
		return gen, 0, err
	}
	_, s, err := allocation.Plan(u, reqs, e.o.Policy)
	score := ExtenderScore(s)
	if cacheable {
		e.placements.put(node, gen, shape, key, placement{score: score, err: err})
	}
	return gen, score, err
}

// placed is the outcome of placing a pod on one node: the node's usage generation it was
// computed at and the score, or why the pod does not fit (unknown: the node's shape).
type placed struct {
	gen     uint64
	score   int64
	err     error
	unknown bool
}

// placeAll is place for each of the nodes, with the locks taken once per call rather than once
// per node: filter asks for hundreds of nodes for every pod, and in a backlog almost every
// answer comes from the placement cache.
//
// On a node that pods are nominated to (placeBesideNominated), the pod must also fit beside the
// room they hold; that is worked out each time, never cached.
func (e *Extender) placeAll(ctx context.Context, names []string, pod *corev1.Pod, reqs []allocation.Request, key string) []placed {
	uid := pod.UID
	out := make([]placed, len(names))
	shapes := make([]*topology.Shape, len(names))
	e.nodeShapesMu.RLock()
	for i, name := range names {
		shape, err := e.nodeShapeLocked(name)
		if err != nil {
			out[i] = placed{err: err, unknown: true}
		}
		shapes[i] = shape
	}
	e.nodeShapesMu.RUnlock()

	hit := make([]bool, len(names))
	if key != "" {
		recent := make([]bool, len(names))
		c := e.usageCache
		c.mu.Lock()
		for i, name := range names {
			if shapes[i] != nil {
				out[i].gen = c.gen[name]
				_, recent[i] = c.recent[name][uid]
			}
		}
		c.mu.Unlock()
		e.placements.mu.Lock()
		for i, name := range names {
			if shapes[i] == nil || recent[i] {
				continue
			}
			if p, ok := e.placements.getLocked(name, out[i].gen, shapes[i], key); ok {
				out[i].score, out[i].err, hit[i] = p.score, p.err, true
			}
		}
		e.placements.mu.Unlock()
	}
	for i, name := range names {
		if shapes[i] != nil && !hit[i] {
			out[i].gen, out[i].score, out[i].err = e.place(ctx, shapes[i], name, uid, reqs, key)
		}
	}
	if nominated := e.nominatedNodes(); nominated != nil {
		for i, name := range names {
			if out[i].err == nil && shapes[i] != nil && nominated[name] {
				if score, applies, err := e.placeBesideNominated(ctx, shapes[i], name, pod, reqs); applies {
					out[i].score, out[i].err = score, err
				}
			}
		}
	}
	return out
}

func (c *placementCache) reset() {
	c.mu.Lock()
	c.nodes = nil
	c.mu.Unlock()
}

func (c *placementCache) get(node string, gen uint64, shape *topology.Shape, key string) (placement, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.getLocked(node, gen, shape, key)
}

// getLocked is get for a caller that holds c.mu.
func (c *placementCache) getLocked(node string, gen uint64, shape *topology.Shape, key string) (placement, bool) {
	n := c.nodes[node]
	if n == nil || n.gen != gen || n.shape != shape {
		return placement{}, false
	}
	p, ok := n.fits[key]
	return p, ok
}

func (c *placementCache) put(node string, gen uint64, shape *topology.Shape, key string, p placement) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nodes == nil {
		c.nodes = map[string]*nodePlacements{}
	}
	n := c.nodes[node]
	if n == nil || n.gen != gen || n.shape != shape {
		if n != nil && n.gen > gen {
			return // computed on an older generation than the one cached
		}
		n = &nodePlacements{gen: gen, shape: shape, fits: map[string]placement{}}
		c.nodes[node] = n
	}
	if len(n.fits) < 64 {
		n.fits[key] = p
	}
}

// generationFor returns the node's usage generation and whether uid has a recent decision of
// this replica on the node.
func (c *usageCache) generationFor(node string, uid types.UID) (uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, recent := c.recent[node][uid]
	return c.gen[node], recent
}
