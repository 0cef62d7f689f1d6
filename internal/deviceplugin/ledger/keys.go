// Package ledger is the device plugin's bookkeeping of which hardware each container holds, as
// plain data and decisions over it. It imports no Kubernetes client, no gRPC and no kubelet API:
// the plugin reads the node's pods, the kubelet's PodResources and its own checkpoint, hands them
// to a Ledger, and carries out what comes back (record fixes to write, the ids to withdraw from
// each pool, the answer to an Allocate or GetPreferredAllocation call).
//
// Four sources of truth meet here:
//   - the kubelet's PodResources: which ids of which pool each admitted container holds;
//   - the allocation records on the pods (the scheduler extender's, the published Neuron
//     stack's as allocation.RecordOf derives them, and the plugin's own fixes);
//   - the answers the plugin gave to Allocate calls (kept in its checkpoint), which say which
//     hardware a container got for the kubelet's ids;
//   - the record entries the plugin wrote that the pod informer may not show yet.
//
// A Ledger is not safe for concurrent use: the plugin holds one lock around it.
package ledger

import (
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// PodKey names a pod.
type PodKey struct{ Namespace, Name string }

// String is namespace/name.
func (k PodKey) String() string { return k.Namespace + "/" + k.Name }

// IsZero reports whether k names no pod.
func (k PodKey) IsZero() bool { return k.Name == "" }

// ContainerKey is one container's entry for one resource in a pod's allocation record.
type ContainerKey struct {
	UID       types.UID
	Container string
	Resource  string
}

// ContainerRef is a container of a pod, whatever it asks for.
type ContainerRef struct {
	UID       types.UID
	Container string
}

// AnswerKey is the key of the answer for an Allocate call with some kubelet ids of a resource:
// the ids in ascending order, joined by commas.
type AnswerKey struct {
	Resource string
	IDs      string
}

// KeyOf returns the key of the answer for a call with ids of resource, in any order.
func KeyOf(resource string, ids []string) AnswerKey {
	sorted := slices.Clone(ids)
	SortIDs(sorted)
	return AnswerKey{Resource: resource, IDs: strings.Join(sorted, ",")}
}

// SortIDs sorts pool ids by number (ids that are not numbers by text).
func SortIDs(ids []string) {
	slices.SortFunc(ids, func(a, b string) int {
		x, errA := strconv.Atoi(a)
		y, errB := strconv.Atoi(b)
		if errA != nil || errB != nil {
			return strings.Compare(a, b)
		}
		return x - y
	})
}
