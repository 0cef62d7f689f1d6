package observe

import (
	"sync"
	"time"
)

// Throttle says whether a message under a key (a pod and what it is told, say) is due: at most
// once a minute per key. Keys not used for ten minutes are forgotten. The zero value is ready.
type Throttle struct {
	mu   sync.Mutex
	sent map[string]time.Time
}

// Due reports whether the key was not used within the last minute, and notes it as used now
// if so.
func (t *Throttle) Due(key string, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.sent == nil {
		t.sent = map[string]time.Time{}
	}
	last, seen := t.sent[key]
	due := !seen || now.Sub(last) > time.Minute
	if due {
		t.sent[key] = now
	}
	for k, at := range t.sent {
		if now.Sub(at) > 10*time.Minute {
			delete(t.sent, k)
		}
	}
	return due
}
