package allocation

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// RecordCache remembers each pod's parsed record while its annotation is unchanged: a node's
// usage is derived again after every change on the node, from the same pods, and parsing
// their records was most of that work. Records it returns are shared: do not change them.
type RecordCache struct {
	mu   sync.Mutex
	pods map[types.UID]cachedRecord
}

type cachedRecord struct {
	raw string
	rec *Record
	err error
}

// maxCachedRecords bounds the cache should Forget calls be missed; past it the cache starts
// over.
const maxCachedRecords = 200_000

// RecordOf is RecordOf, from the cache when the pod's annotation is the one parsed before.
// Pods without kube-neuron's annotation (records derived from the published stack's
// annotations, or none) are not cached.
func (c *RecordCache) RecordOf(pod *corev1.Pod) (*Record, error) {
	raw, ok := pod.Annotations[Annotation]
	if !ok || pod.UID == "" {
		return RecordOf(pod)
	}
	c.mu.Lock()
	e, hit := c.pods[pod.UID]
	c.mu.Unlock()
	if hit && e.raw == raw {
		return e.rec, e.err
	}
	rec, err := RecordOf(pod)
	c.mu.Lock()
	if c.pods == nil || len(c.pods) >= maxCachedRecords {
		c.pods = map[types.UID]cachedRecord{}
	}
	c.pods[pod.UID] = cachedRecord{raw: raw, rec: rec, err: err}
	c.mu.Unlock()
	return rec, err
}

// Forget drops a deleted pod's record.
func (c *RecordCache) Forget(uid types.UID) {
	c.mu.Lock()
	delete(c.pods, uid)
	c.mu.Unlock()
}
