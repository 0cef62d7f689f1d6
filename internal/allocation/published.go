package allocation

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// maxPublishedID bounds the ids read from AWS_NEURON_IDS: no instance type has this many cores,
// and a bound keeps a garbage value from turning into a huge allocation.
const maxPublishedID = 4096

// FromPublishedStack reports whether the pod carries the published Neuron stack's allocation
// (AWS_NEURON_IDS) and no kube-neuron.io/allocation record of ours.
func FromPublishedStack(pod *corev1.Pod) bool {
	_, ours := pod.Annotations[Annotation]
	_, theirs := pod.Annotations[AWSNeuronIDs]
	return !ours && theirs
}

// PublishedRecord derives an allocation record from what the published Neuron stack left on a
// pod it placed: AWS_NEURON_IDS (device ids for aws.amazon.com/neuron and neurondevice requests,
// global core ids for aws.amazon.com/neuroncore requests), NEURON_ALLOC_TIME, NEURON_ALLOCATED
// and, from HAMi, NEURON_RESOURCE_TYPE. Such a pod was placed by the published scheduler
// extension and served by the published device plugin, so when kube-neuron takes over a node it
// must count what the pod holds, exactly as if it had a record of ours.
//
// It returns nil when the pod does not carry such an allocation: it has a record of ours, no
// AWS_NEURON_IDS, is not bound (spec.nodeName is empty: until the binding nothing was given), or
// has terminated. Otherwise the record names the pod's node and has one entry per Neuron request
// of the pod (init containers first, in spec order; only requests of NEURON_RESOURCE_TYPE when
// it is set). Each entry holds the ids of its unit only (Devices for device requests, Cores for
// core requests; Container.Hardware gives both). An entry is served when the pod is running or
// NEURON_ALLOCATED is "true": the published device plugin gave it its devices. A bound pod
// that does not run yet is not served, so that kube-neuron's device plugin serves it the same
// ids when the kubelet admits it.
//
// The ids are split over the requests in that order, each taking its count, when their number is
// the sum of the counts. When it is not, the split is unknown: every id is counted against the
// first request's container and resource (holding more than the pod asked for is safe, holding
// less could give a device twice), and a warning says so. A value that cannot be read at all
// (not a list of numbers, an id listed twice, a pod that requests no Neuron resource) is an
// error that names the pod and says what to do; the pod is then not counted.
func PublishedRecord(pod *corev1.Pod) (rec *Record, warnings []string, err error) {
	if !FromPublishedStack(pod) || pod.Spec.NodeName == "" || !Counts(pod) {
		return nil, nil, nil
	}
	ref := pod.Namespace + "/" + pod.Name
	fail := func(format string, args ...any) (*Record, []string, error) {
		return nil, nil, fmt.Errorf("pod %s: %s %q (left by the published Neuron scheduler extension) %s; kube-neuron does not count it, so its devices may be given to other pods: delete the pod so that it is scheduled again, or correct the annotation",
			ref, AWSNeuronIDs, pod.Annotations[AWSNeuronIDs], fmt.Sprintf(format, args...))
	}
	ids, err := parsePublishedIDs(pod.Annotations[AWSNeuronIDs])
	if err != nil {
		return fail("%v", err)
	}
	reqs := PodRequests(pod)
	if rt, ok := pod.Annotations[ResourceType]; ok {
		if _, err := topology.UnitOf(rt); err != nil {
			return fail("comes with %s %q: %v", ResourceType, rt, err)
		}
		reqs = slices.DeleteFunc(reqs, func(r Request) bool { return r.Resource != rt })
		if len(reqs) == 0 {
			return fail("comes with %s %q, which no container of the pod requests", ResourceType, rt)
		}
	}
	if len(reqs) == 0 {
		return fail("is on a pod that requests no Neuron resource")
	}
	if v, ok := pod.Annotations[AllocTime]; ok {
		if _, err := strconv.ParseInt(v, 10, 64); err != nil {
			warnings = append(warnings, fmt.Sprintf("pod %s: %s %q is not unix nanoseconds: the pod is served after every pod with a valid time", ref, AllocTime, v))
		}
	}
	served := pod.Status.Phase == corev1.PodRunning || pod.Annotations[Allocated] == "true"
	entry := func(r Request, ids []int) Container {
		c := Container{Name: r.Container, Resource: r.Resource, Served: served}
		ids = slices.Sorted(slices.Values(ids))
		if r.Resource == topology.ResourceNeuronCore {
			c.Cores = ids
		} else {
			c.Devices = ids
		}
		return c
	}
	total := 0
	for _, r := range reqs {
		total += r.Count
	}
	rec = &Record{Node: pod.Spec.NodeName}
	if len(ids) != total {
		first := reqs[0]
		unit := "devices"
		if first.Resource == topology.ResourceNeuronCore {
			unit = "cores"
		}
		warnings = append(warnings, fmt.Sprintf("pod %s: %s %q lists %d ids but the pod requests %d (%s): all %d are counted as %s of container %s (%s) until the pod ends; delete the pod so that it is scheduled again to hold only what it asks for",
			ref, AWSNeuronIDs, pod.Annotations[AWSNeuronIDs], len(ids), total, describeRequests(reqs), len(ids), unit, first.Container, first.Resource))
		rec.Containers = []Container{entry(first, ids)}
		return rec, warnings, nil
	}
	for _, r := range reqs {
		rec.Containers = append(rec.Containers, entry(r, ids[:r.Count]))
		ids = ids[r.Count:]
	}
	return rec, warnings, nil
}

// parsePublishedIDs reads a comma list of non-negative decimal ids in any order, without
// duplicates.
func parsePublishedIDs(v string) ([]int, error) {
	if strings.TrimSpace(v) == "" {
		return nil, fmt.Errorf("is empty")
	}
	parts := strings.Split(v, ",")
	out := make([]int, 0, len(parts))
	seen := map[int]bool{}
	for _, p := range parts {
		p = strings.TrimSpace(p)
		if p == "" || strings.TrimLeft(p, "0123456789") != "" {
			return nil, fmt.Errorf("is not a comma list of device or core numbers (%q)", p)
		}
		n, err := strconv.Atoi(p)
		if err != nil || n >= maxPublishedID {
			return nil, fmt.Errorf("has id %s, which no Neuron instance has", p)
		}
		if seen[n] {
			return nil, fmt.Errorf("lists id %d twice", n)
		}
		seen[n] = true
		out = append(out, n)
	}
	return out, nil
}

func describeRequests(reqs []Request) string {
	parts := make([]string, len(reqs))
	for i, r := range reqs {
		parts[i] = fmt.Sprintf("%s: %d %s", r.Container, r.Count, r.Resource)
	}
	return strings.Join(parts, ", ")
}
