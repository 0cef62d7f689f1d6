package deviceplugin

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
)

// writtenEntry is a record entry as this plugin last wrote it.
type writtenEntry struct {
	devices, cores []int
	served         bool
	at             time.Time
}

// writtenTTL bounds how long a write of this plugin overrides what the informer shows: a watch
// lags by far less, and a later writer (none is expected for a bound pod) wins after it.
const writtenTTL = 30 * time.Second

// rememberWrittenLocked notes an entry this plugin has just written. The caller holds p.mu.
func (p *Plugin) rememberWrittenLocked(f recordFix, now time.Time) {
	p.written[f.podUID+"/"+f.container+"/"+f.resource] = writtenEntry{
		devices: slices.Clone(f.hw.Devices), cores: slices.Clone(f.hw.Cores), served: f.served, at: now,
	}
}

// recordOfLocked is the pod's allocation record (allocation.RecordOf) with this plugin's own
// writes that the informer does not show yet: after a refresh swapped two records, a call
// matched against the informer's older copy would be served the other pod's hardware and
// refused as a conflict with that pod. Writes the informer shows, or older than writtenTTL, are
// forgotten. The caller holds p.mu.
func (p *Plugin) recordOfLocked(pod *corev1.Pod, now time.Time) (*allocation.Record, error) {
	r, err := allocation.RecordOf(pod)
	if err != nil || r == nil || len(p.written) == 0 {
		return r, err
	}
	for i := range r.Containers {
		c := &r.Containers[i]
		k := string(pod.UID) + "/" + c.Name + "/" + c.Resource
		w, ok := p.written[k]
		if !ok {
			continue
		}
		if now.Sub(w.at) > writtenTTL || (slices.Equal(c.Devices, w.devices) && slices.Equal(c.Cores, w.cores) && c.Served == w.served) {
			delete(p.written, k)
			continue
		}
		c.Devices, c.Cores, c.Served = slices.Clone(w.devices), slices.Clone(w.cores), w.served
	}
	return r, nil
}
