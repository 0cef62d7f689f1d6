package ledger

import (
	"slices"
	"time"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
)

// written is a record entry as this plugin last wrote it.
type written struct {
	devices, cores []int
	served         bool
	at             time.Time
}

// writtenTTL bounds how long a write of this plugin overrides what the informer shows: a watch
// lags by far less, and a later writer (none is expected for a bound pod) wins after it.
const writtenTTL = 30 * time.Second

// Wrote notes a record entry the plugin has just written (or found already written).
func (l *Ledger) Wrote(f Fix, now time.Time) {
	l.written[f.Key] = written{devices: slices.Clone(f.Hardware.Devices), cores: slices.Clone(f.Hardware.Cores), served: f.Served, at: now}
}

// recordOf is the pod's allocation record. When cached (the pod is the informer's), it has this
// plugin's own writes that the informer does not show yet: after a refresh swapped two records,
// a call matched against the informer's older copy would be served the other pod's hardware and
// refused as a conflict with that pod. Writes the informer shows, or older than writtenTTL, are
// forgotten. Pods read from the API server show the writes, and must not make the ledger forget
// them while the informer still lags.
func (l *Ledger) recordOf(pod *Pod, cached bool, now time.Time) *allocation.Record {
	r := pod.Record
	if !cached || r == nil || len(l.written) == 0 {
		return r
	}
	out := &allocation.Record{Node: r.Node, Containers: slices.Clone(r.Containers)}
	for i := range out.Containers {
		c := &out.Containers[i]
		k := ContainerKey{UID: pod.UID, Container: c.Name, Resource: c.Resource}
		w, ok := l.written[k]
		if !ok {
			continue
		}
		if now.Sub(w.at) > writtenTTL || (slices.Equal(c.Devices, w.devices) && slices.Equal(c.Cores, w.cores) && c.Served == w.served) {
			delete(l.written, k)
			continue
		}
		c.Devices, c.Cores, c.Served = slices.Clone(w.devices), slices.Clone(w.cores), w.served
	}
	return out
}
