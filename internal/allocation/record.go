// Package allocation is the contract between the scheduler extender and the device plugin: the
// pod annotation kube-neuron.io/allocation (the source of truth, one entry per Neuron container)
// and the published Neuron stack's annotation keys, written as single-key merge patches. Pods the
// published stack placed, with only its keys, get a record derived from them (PublishedRecord),
// so that kube-neuron takes over its nodes without giving their devices twice.
package allocation

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// Pod annotation keys.
const (
	// Annotation holds the Record as JSON.
	Annotation = "kube-neuron.io/allocation"
	// AWSNeuronIDs lists the device ids (device requests) or global core ids (core requests),
	// ascending; for a pod with several Neuron containers, all of them.
	AWSNeuronIDs = "AWS_NEURON_IDS"
	// AllocTime is unix nanoseconds at bind.
	AllocTime = "NEURON_ALLOC_TIME"
	// Allocated is "false" from the extender, "true" once every container was served.
	Allocated = "NEURON_ALLOCATED"
	// ResourceType is the Neuron resource name of the pod's request.
	ResourceType = "NEURON_RESOURCE_TYPE"
)

// Container env the device plugin sets.
const (
	EnvVisibleCores   = "NEURON_RT_VISIBLE_CORES"
	EnvVisibleDevices = "AWS_NEURON_VISIBLE_DEVICES"
)

// Record is the value of the kube-neuron.io/allocation annotation.
type Record struct {
	Node       string      `json:"node"`
	Containers []Container `json:"containers"`
}

// Container is what one container of the pod gets.
type Container struct {
	Name     string `json:"name"`
	Resource string `json:"resource"`
	Devices  []int  `json:"devices"`
	Cores    []int  `json:"cores"`
	Served   bool   `json:"served"`
}

// Count is the number the container asked for: devices for a device resource, cores otherwise.
func (c Container) Count() int {
	if c.Resource == topology.ResourceNeuronCore {
		return len(c.Cores)
	}
	return len(c.Devices)
}

// Hardware returns the devices and cores the entry names, checked against the node's shape.
func (c Container) Hardware(shape *topology.Shape) (topology.Allocation, error) {
	if c.Resource == topology.ResourceNeuronCore {
		return shape.CoreAllocation(c.Cores)
	}
	return shape.DeviceAllocation(c.Devices)
}

// IDs are the ids of AWS_NEURON_IDS for this container.
func (c Container) IDs() []int {
	if c.Resource == topology.ResourceNeuronCore {
		return c.Cores
	}
	return c.Devices
}

// Parse decodes an annotation value. Unknown fields are errors: a record this version does not
// understand must not be half-read.
func Parse(value string) (*Record, error) {
	var r Record
	if err := decodeStrict([]byte(value), &r); err != nil {
		return nil, fmt.Errorf("annotation %s is not a valid allocation record: %w", Annotation, err)
	}
	if r.Node == "" {
		return nil, fmt.Errorf("annotation %s names no node", Annotation)
	}
	for i, c := range r.Containers {
		if c.Name == "" {
			return nil, fmt.Errorf("annotation %s: container %d has no name", Annotation, i)
		}
		if _, err := topology.UnitOf(c.Resource); err != nil {
			return nil, fmt.Errorf("annotation %s: container %s: %w", Annotation, c.Name, err)
		}
		if !slices.IsSorted(c.Devices) || !slices.IsSorted(c.Cores) {
			return nil, fmt.Errorf("annotation %s: container %s: ids must be ascending", Annotation, c.Name)
		}
	}
	return &r, nil
}

func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("unexpected data after the record")
	}
	return nil
}

// Encode returns the annotation value.
func (r *Record) Encode() string {
	for i := range r.Containers {
		if r.Containers[i].Devices == nil {
			r.Containers[i].Devices = []int{}
		}
		if r.Containers[i].Cores == nil {
			r.Containers[i].Cores = []int{}
		}
	}
	data, _ := json.Marshal(r)
	return string(data)
}

// AllServed reports whether every container was served by the device plugin.
func (r *Record) AllServed() bool {
	for _, c := range r.Containers {
		if !c.Served {
			return false
		}
	}
	return len(r.Containers) > 0
}

// NeuronIDs is the value of AWS_NEURON_IDS: every container's ids, ascending.
func (r *Record) NeuronIDs() string {
	var ids []int
	for _, c := range r.Containers {
		ids = append(ids, c.IDs()...)
	}
	slices.Sort(ids)
	return topology.JoinIDs(slices.Compact(ids))
}

// Annotations returns the annotations that go with the record: the record itself,
// AWS_NEURON_IDS, NEURON_ALLOCATED and NEURON_RESOURCE_TYPE.
func (r *Record) Annotations() map[string]string {
	a := map[string]string{
		Annotation:   r.Encode(),
		AWSNeuronIDs: r.NeuronIDs(),
		Allocated:    strconv.FormatBool(r.AllServed()),
	}
	if len(r.Containers) > 0 {
		a[ResourceType] = r.Containers[0].Resource
	}
	return a
}

// MergePatch returns a JSON merge patch that sets exactly the given annotations (nil value:
// remove the key) and touches nothing else of the pod.
func MergePatch(annotations map[string]*string) []byte {
	data, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	return data
}

// StringPtrs turns a map of values into the pointer map MergePatch takes.
func StringPtrs(m map[string]string) map[string]*string {
	out := make(map[string]*string, len(m))
	for k, v := range m {
		out[k] = &v
	}
	return out
}

// MergePatchWithVersion is MergePatch with metadata.resourceVersion set, so that the API server
// refuses the patch with a conflict when the pod changed since it was read.
func MergePatchWithVersion(annotations map[string]*string, resourceVersion string) []byte {
	data, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations, "resourceVersion": resourceVersion}})
	return data
}
