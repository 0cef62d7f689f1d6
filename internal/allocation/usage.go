package allocation

import (
	"fmt"
	"sort"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// Holder is a pod's container holding part of a node.
type Holder struct {
	Namespace, Name, UID string
	Container            Container
	Hardware             topology.Allocation
}

// Counts reports whether a pod's record counts against its node: from the moment the extender
// wrote it (bound or not yet bound) until the pod terminates.
func Counts(pod *corev1.Pod) bool {
	return pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed
}

// RecordOf returns the pod's allocation record, nil when it has none; a malformed record is an
// error that names the pod. A pod without a record of ours that the published Neuron stack
// placed (AWS_NEURON_IDS on a bound pod that has not terminated) gets the record PublishedRecord
// derives from its annotations, so that the extender, the device plugin and kubectl-neuron count
// it like any other: a node taken over from the published stack keeps its running pods' devices.
func RecordOf(pod *corev1.Pod) (*Record, error) {
	v, ok := pod.Annotations[Annotation]
	if !ok {
		r, _, err := PublishedRecord(pod)
		return r, err
	}
	r, err := Parse(v)
	if err != nil {
		return nil, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return r, nil
}

// AllocTimeOf returns NEURON_ALLOC_TIME, or the largest value when it is missing or malformed.
func AllocTimeOf(pod *corev1.Pod) int64 {
	t, err := strconv.ParseInt(pod.Annotations[AllocTime], 10, 64)
	if err != nil {
		return 1<<63 - 1
	}
	return t
}

// NodeUsage derives what is in use on one node from the allocation records of pods: every
// container entry of every pod whose record names the node and that has not terminated. Entries
// are applied oldest NEURON_ALLOC_TIME first; an entry that does not fit the node, or overlaps
// an earlier one, is not applied and comes back as a problem (it can only come from a record
// written by hand or by another tool). Records are those of RecordOf, so pods the published
// Neuron stack placed count too; the published extension's node annotations
// (NEURON_DEV_USAGE_MAP, NEURON_CORE_USAGE_MAP) are never read, whatever they hold.
func NodeUsage(shape *topology.Shape, node string, pods []*corev1.Pod) (*topology.Usage, []Holder, []error) {
	return NodeUsageWith(shape, node, pods, RecordOf)
}

// NodeUsageWith is NodeUsage with the records read by recordOf (a RecordCache's RecordOf, for
// callers that derive a node's usage again and again from the same pods).
func NodeUsageWith(shape *topology.Shape, node string, pods []*corev1.Pod, recordOf func(*corev1.Pod) (*Record, error)) (*topology.Usage, []Holder, []error) {
	type entry struct {
		pod  *corev1.Pod
		t    int64
		c    Container
		pidx int
	}
	var entries []entry
	var problems []error
	for _, pod := range pods {
		if !Counts(pod) {
			continue
		}
		r, err := recordOf(pod)
		if err != nil {
			problems = append(problems, err)
			continue
		}
		if r == nil || r.Node != node {
			continue
		}
		for i, c := range r.Containers {
			entries = append(entries, entry{pod: pod, t: AllocTimeOf(pod), c: c, pidx: i})
		}
	}
	sort.SliceStable(entries, func(i, j int) bool {
		a, b := entries[i], entries[j]
		if a.t != b.t {
			return a.t < b.t
		}
		if a.pod.Namespace != b.pod.Namespace {
			return a.pod.Namespace < b.pod.Namespace
		}
		if a.pod.Name != b.pod.Name {
			return a.pod.Name < b.pod.Name
		}
		return a.pidx < b.pidx
	})
	u := topology.NewUsage(shape)
	var holders []Holder
	for _, e := range entries {
		hw, err := e.c.Hardware(shape)
		if err == nil {
			if err = u.Allocate(hw); err != nil {
				err = &OverlapError{Pod: e.pod.Namespace + "/" + e.pod.Name, Container: e.c.Name, Err: err}
			}
		}
		if err != nil {
			err = fmt.Errorf("pod %s/%s container %s: %w", e.pod.Namespace, e.pod.Name, e.c.Name, err)
			if FromPublishedStack(e.pod) {
				err = fmt.Errorf("%w (the ids come from %s %q, left by the published Neuron scheduler extension: delete the pod so that it is scheduled again)", err, AWSNeuronIDs, e.pod.Annotations[AWSNeuronIDs])
			}
			problems = append(problems, err)
			continue
		}
		holders = append(holders, Holder{Namespace: e.pod.Namespace, Name: e.pod.Name, UID: string(e.pod.UID), Container: e.c, Hardware: hw})
	}
	return u, holders, problems
}

// OverlapError is a record entry naming hardware that an earlier entry on the node names too.
// The extender never writes such records; the device plugin makes them for a moment while it
// corrects two records whose containers the kubelet started the other way round (one patch per
// pod), and the published Neuron stack left some.
type OverlapError struct {
	Pod, Container string
	Err            error
}

func (e *OverlapError) Error() string { return e.Err.Error() }
func (e *OverlapError) Unwrap() error { return e.Err }
