package allocation

import (
	"sync"
	"time"
)

// OverlapSettle is how long a node whose allocation records overlap (OverlapError) is refused:
// the usage misses what one of them held before it was corrected, and the device plugin corrects
// such records within seconds. An overlap that outlives it is logged, and the usage used as it is.
const OverlapSettle = 10 * time.Second

// Overlaps remembers when a scheduler first saw each node's records overlap. The zero value is
// ready to use.
type Overlaps struct {
	mu    sync.Mutex
	since map[string]time.Time
}

// Settling notes whether the node's records overlap now and reports whether the node is still
// within OverlapSettle of them first being seen to overlap; a node whose records no longer
// overlap is forgotten.
func (o *Overlaps) Settling(node string, overlap bool, now time.Time) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !overlap {
		delete(o.since, node)
		return false
	}
	if o.since == nil {
		o.since = map[string]time.Time{}
	}
	first, seen := o.since[node]
	if !seen {
		o.since[node], first = now, now
	}
	return now.Sub(first) < OverlapSettle
}
