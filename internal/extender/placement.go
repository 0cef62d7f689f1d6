package extender

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kube-neuron/kube-neuron/internal/topology"
)

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
	fits  map[string]placement // allocation.PlacementKey -> result
}

type placement struct {
	score int64
	err   error
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
