package extender

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
)

// Bind decisions for a node are made by one replica at a time: the one that holds the node's
// Lease (kube-neuron-bind-<node> in the lease namespace). The holder decides without writing
// the Lease for ownWindow after each write of it, so a bind costs one write, the Binding; it
// renews the Lease with its next decision after that.
//
// A replica that is asked to bind to a node another replica holds writes its name in the
// Lease's handover-requested-by annotation. The holder notices it through its Lease informer,
// stops deciding for the node, waits until the Bindings of its decisions have been answered,
// and releases the Lease (holder empty, released-for naming the requester). A holder that does
// not answer (it crashed) loses the Lease once this replica has seen it unchanged for the
// Lease's duration. Either way the new holder then lists the node's pods from the API server
// (a consistent read) and waits until its pod informer shows each of their allocation records
// before it decides: it sees every decision made before it took the Lease.
//
// Timing keeps an expired holder harmless: it decides only within ownWindow of a write and
// gives each Binding until postTimeout after the end of that window, both well inside the
// leaseDuration another replica waits before taking the Lease.
//
// This file holds the protocol's vocabulary and its one decision, nextMove; ownership.go and
// handover.go make the API calls around it.
const (
	leaseDuration   = 15 * time.Second
	ownWindow       = 5 * time.Second
	postTimeout     = 4 * time.Second
	catchUpTimeout  = 5 * time.Second
	handoverTimeout = leaseDuration + 5*time.Second
	// yieldWindow: after a release for another replica, others leave the Lease to it this long.
	yieldWindow = time.Second
	// leasePoll is how often a replica waiting for a Lease looks at its informer's copy.
	leasePoll = 5 * time.Millisecond
)

// Lease labels and annotations.
const (
	leaseLabel      = "app.kubernetes.io/managed-by"
	leaseLabelValue = "neuron-scheduler-extender"
	// nodeAnnotation names the node of a bind Lease (its name may be a hash of a long node name).
	nodeAnnotation = "kube-neuron.io/node"
	// handoverAnnotation names a replica that asks the holder to release the Lease.
	handoverAnnotation = "kube-neuron.io/handover-requested-by"
	// releasedForAnnotation names the replica a holder released the Lease for.
	releasedForAnnotation = "kube-neuron.io/released-for"
)

// Annotations of earlier versions, which wrote the Lease for every decision; removed on write.
var obsoleteLeaseAnnotations = []string{"kube-neuron.io/last-bind", "kube-neuron.io/pending-binds"}

// LeaseName is the name of a node's bind Lease.
func LeaseName(node string) string {
	name := "kube-neuron-bind-" + node
	if len(name) > 253 {
		sum := sha256.Sum256([]byte(node))
		name = "kube-neuron-bind-" + hex.EncodeToString(sum[:16])
	}
	return name
}

// hold is this replica's hold on a node's Lease.
type hold struct {
	lease *coordinationv1.Lease // as this replica's last write left it
	until time.Time             // decisions need no write until then
}

// observation is when this replica first saw a Lease's holder and renewal time as they are.
type observation struct {
	holder, renew string
	at            time.Time
}

func holderOf(l *coordinationv1.Lease) string {
	if l == nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

func durationOf(l *coordinationv1.Lease) time.Duration {
	if l.Spec.LeaseDurationSeconds != nil && *l.Spec.LeaseDurationSeconds > 0 {
		return time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	return leaseDuration
}

// nodeOfLease returns the node a bind Lease is for.
func nodeOfLease(l *coordinationv1.Lease) string {
	if n := l.Annotations[nodeAnnotation]; n != "" {
		return n
	}
	return strings.TrimPrefix(l.Name, "kube-neuron-bind-")
}

// leaseMove is what a replica that wants to decide for a node does next about the node's Lease.
type leaseMove int

const (
	// renewLease: this replica holds the Lease; a renewal makes its decisions safe again.
	renewLease leaseMove = iota
	// yieldLease: this replica holds the Lease, but another replica asked for it first: release
	// it, then ask for it back.
	yieldLease
	// takeLease: nobody holds the Lease, its holder has been silent for its duration, or it names
	// this replica although this replica gave up on it (a write that landed late): acquire it.
	takeLease
	// leaveLease: the Lease was just released for another replica: give that one a moment.
	leaveLease
	// askForLease: another replica holds the Lease: ask it for a handover.
	askForLease
	// awaitLease: another replica holds the Lease and has been asked: wait for its answer.
	awaitLease
)

// nextMove decides what replica me does about Lease l. held says whether me has a hold on the
// Lease (it made the write it knows of last); unchanged is how long me has seen the Lease's
// holder and renewal time as they are now, by its own clock.
func nextMove(me string, l *coordinationv1.Lease, held bool, unchanged time.Duration) leaseMove {
	holder := holderOf(l)
	switch {
	case holder == me && held:
		if req := l.Annotations[handoverAnnotation]; req != "" && req != me {
			return yieldLease
		}
		return renewLease
	case holder == "" || holder == me || unchanged > durationOf(l):
		if to := l.Annotations[releasedForAnnotation]; holder == "" && to != "" && to != me && unchanged <= yieldWindow {
			return leaveLease
		}
		return takeLease
	case l.Annotations[handoverAnnotation] != me:
		return askForLease
	default:
		return awaitLease
	}
}
