package ledger

import (
	"slices"
	"time"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// written is a record entry as this plugin last wrote it.
type written struct {
	devices, cores []int
	served         bool
	at             time.Time
}

// WrittenTTL bounds how long a write of this plugin overrides what the informer shows: a watch
// lags by far less, and a later writer (none is expected for a bound pod) wins after it.
const WrittenTTL = 30 * time.Second

// Fix rewrites one container entry of a pod's allocation record to what runs.
type Fix struct {
	Pod      PodKey
	Key      ContainerKey
	Hardware topology.Allocation
	Served   bool
}

// Wrote notes a record entry the plugin has just written (or found already written).
func (l *Ledger) Wrote(f Fix, now time.Time) {
	l.written[f.Key] = written{devices: slices.Clone(f.Hardware.Devices), cores: slices.Clone(f.Hardware.Cores), served: f.Served, at: now}
}

// Landed notes that the record write for a container matched by a call has landed: the
// container is no longer in flight.
func (l *Ledger) Landed(f Fix) {
	delete(l.inflight, ContainerRef{UID: f.Key.UID, Container: f.Key.Container})
}

// recordOf is the pod's allocation record. When cached (the pod is the informer's), it has this
// plugin's own writes that the informer does not show yet: after a refresh swapped two records,
// a call matched against the informer's older copy would be served the other pod's hardware and
// refused as a conflict with that pod. Writes the informer shows, or older than WrittenTTL, are
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
		if now.Sub(w.at) > WrittenTTL || (slices.Equal(c.Devices, w.devices) && slices.Equal(c.Cores, w.cores) && c.Served == w.served) {
			delete(l.written, k)
			continue
		}
		c.Devices, c.Cores, c.Served = slices.Clone(w.devices), slices.Clone(w.cores), w.served
	}
	return out
}

// ApplyFix returns the record r (nil: the pod has none) with f applied, and whether that changed
// it. A record of another node is an error: the pod runs on node.
func ApplyFix(r *allocation.Record, node string, f Fix) (*allocation.Record, bool, error) {
	if r != nil && r.Node != node {
		return nil, false, &OtherNodeError{Pod: f.Pod, Node: node, RecordNode: r.Node}
	}
	out := &allocation.Record{Node: node}
	if r != nil {
		out.Containers = slices.Clone(r.Containers)
	}
	if !slices.ContainsFunc(out.Containers, func(c allocation.Container) bool { return c.Name == f.Key.Container && c.Resource == f.Key.Resource }) {
		// A pod served from the kubelet's ids: its entry starts here.
		out.Containers = append(out.Containers, allocation.Container{Name: f.Key.Container, Resource: f.Key.Resource})
	}
	changed := r == nil
	for i := range out.Containers {
		c := &out.Containers[i]
		if c.Name != f.Key.Container || c.Resource != f.Key.Resource {
			continue
		}
		if !slices.Equal(c.Devices, f.Hardware.Devices) || !slices.Equal(c.Cores, f.Hardware.Cores) || c.Served != f.Served {
			c.Devices, c.Cores, c.Served = slices.Clone(f.Hardware.Devices), slices.Clone(f.Hardware.Cores), f.Served
			changed = true
		}
	}
	return out, changed, nil
}

// OtherNodeError says a pod's record names another node than the one it runs on.
type OtherNodeError struct {
	Pod              PodKey
	Node, RecordNode string
}

func (e *OtherNodeError) Error() string {
	return "pod " + e.Pod.String() + " runs on node " + e.Node + " but its " + allocation.Annotation + " record names node " + e.RecordNode
}
