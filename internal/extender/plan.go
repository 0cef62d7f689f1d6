// Package extender is neuron-scheduler-extender: the kube-scheduler HTTP extender that filters
// and scores nodes with the topology engine and binds pods with an allocation record naming
// their devices. Decisions are plain functions: allocation.PodRequests and allocation.Plan (shared
// with the autoscaler), those of this file, and nextMove (lease.go) for the bind Leases. The
// Extender (extender.go) composes three parts with their own state: scorer places pods over each
// node's usage, owner runs the per-node bind Lease protocol, and api speaks HTTP.
package extender

import (
	"errors"

	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// Unresolvable reports whether err means the node can never take the pod (a count its instance
// type does not accept), so that preemption cannot help.
func Unresolvable(err error) bool {
	var uc *topology.UnsupportedCountError
	return errors.As(err, &uc)
}
