package plugin

import (
	"maps"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// reservations are the records Reserve chose, by pod UID, until Unreserve or the pod's deletion.
// A pod's own annotation, once the snapshot shows it, takes precedence (usage.go).
type reservations struct {
	mu   sync.RWMutex
	pods map[types.UID]*allocation.Record
}

func (r *reservations) get(uid types.UID) *allocation.Record {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.pods[uid]
}

func (r *reservations) put(uid types.UID, rec *allocation.Record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pods == nil {
		r.pods = map[types.UID]*allocation.Record{}
	}
	r.pods[uid] = rec
}

func (r *reservations) forget(uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.pods, uid)
}

// nodeCache keeps, per node, the usage derived at one NodeInfo generation and the placements of
// request shapes on it. The scheduler bumps a NodeInfo's generation on every change of its pods,
// and the reservations of the pods it holds are made before the next snapshot is taken, so an
// entry is valid for as long as the generation is the same. (Unreserve drops a reservation
// before the scheduler forgets the pod: until then the entry counts it, which only refuses what
// would have fitted.) Filter and Score run on many nodes in parallel: reads take no lock.
type nodeCache struct {
	nodes sync.Map // node name -> *nodeEntry
}

// nodeEntry is immutable but for fits.
type nodeEntry struct {
	gen   int64
	node  *corev1.Node // the node object the shape is of
	shape *topology.Shape
	usage *topology.Usage

	// fits maps allocation.PlacementKey to the placement on usage. The map is never changed
	// once stored (keepFit stores a copy): Filter reads it on many nodes at once, and an entry
	// gets a handful of shapes in its life.
	fits atomic.Pointer[map[string]placed]
}

// placed is a placement's score (0-100) or why the requests do not fit.
type placed struct {
	score float64
	err   error
}

// maxCachedFits bounds the request shapes cached per node.
const maxCachedFits = 64

// entry returns the node's entry when it was derived at generation gen of the same node
// object, nil otherwise.
func (c *nodeCache) entry(name string, gen int64, node *corev1.Node) *nodeEntry {
	v, ok := c.nodes.Load(name)
	if !ok {
		return nil
	}
	e := v.(*nodeEntry)
	if e.gen != gen || e.node != node {
		return nil
	}
	return e
}

// keep caches the node's usage at gen, in place of what was cached for the node (the
// generations of the copies the framework makes for preemption are newer than the snapshot's:
// keeping only the newest would stop caching the snapshot's), and returns the entry.
func (c *nodeCache) keep(name string, gen int64, node *corev1.Node, shape *topology.Shape, u *topology.Usage) *nodeEntry {
	if e := c.entry(name, gen, node); e != nil {
		return e // another goroutine derived the same
	}
	e := &nodeEntry{gen: gen, node: node, shape: shape, usage: u}
	c.nodes.Store(name, e)
	return e
}

// forget drops a node's entry.
func (c *nodeCache) forget(name string) { c.nodes.Delete(name) }

// fit returns the cached placement of the request shape key.
func (e *nodeEntry) fit(key string) (placed, bool) {
	fits := e.fits.Load()
	if fits == nil {
		return placed{}, false
	}
	p, ok := (*fits)[key]
	return p, ok
}

// keepFit caches a placement computed on the entry's usage.
func (e *nodeEntry) keepFit(key string, p placed) {
	for {
		old := e.fits.Load()
		var fits map[string]placed
		if old != nil {
			if _, ok := (*old)[key]; ok || len(*old) >= maxCachedFits {
				return
			}
			fits = make(map[string]placed, len(*old)+1)
			maps.Copy(fits, *old)
		} else {
			fits = make(map[string]placed, 1)
		}
		fits[key] = p
		if e.fits.CompareAndSwap(old, &fits) {
			return
		}
	}
}
