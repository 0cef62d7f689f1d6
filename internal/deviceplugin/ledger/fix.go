package ledger

import (
	"slices"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// Fix rewrites one container entry of a pod's allocation record to what runs.
type Fix struct {
	Pod      PodKey
	Key      ContainerKey
	Hardware topology.Allocation
	Served   bool
}

// Landed notes that the record write for a container matched by a call has landed: the
// container is no longer in flight.
func (l *Ledger) Landed(f Fix) {
	delete(l.inflight, ContainerRef{UID: f.Key.UID, Container: f.Key.Container})
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
