// Package autoscaler is the controller of neuron-autoscaler: it watches pending Neuron pods,
// launches nodes for them through a Provider (local or ec2), lets each new node take pods once
// it serves Neuron hardware, and removes the nodes it launched once they stay empty. What to
// launch is decided by the pure planner in package plan (Check and Plan); this package does the
// I/O around it: informers on pods, nodes, DaemonSets, ResourceClaims, ResourceClaimTemplates
// and ResourceSlices; leader election on a Lease; the provider's API; patches of pods
// (status.nominatedNodeName, PlannedNodeAnnotation) and of nodes (LaunchingTaint, the capacity
// labels, the cordon); evictions; deletes of nodes; events and metrics.
//
// The controller works in rounds (Controller.reconcile), one at a time, from one goroutine. A
// round reads the caches and the provider, then:
//
//   - registration.go: which listed nodes are still launching, with the pods planned onto them,
//     and which have registered; a node not Ready within the register timeout is deleted;
//   - scaleup.go: the pending pods are checked and planned; every decision is an event on the
//     pod, and a nomination of the pod to its node;
//   - launch.go: the provider's listing (with the nodes it does not list yet, and those it
//     renamed), each launch, and the pods later rounds add to a launching node, recorded
//     through the provider;
//   - release.go, releaserule.go: a launched node holds pods off with LaunchingTaint until the
//     release rule (releaseRule) lets it take them;
//   - reservations.go: the provider's capacity reservations that a pod could still start on are
//     offered to the planner;
//   - blockend.go: the nodes of a Capacity Block that ends are cordoned, their pods evicted
//     through the eviction API (PodDisruptionBudgets honoured), and the nodes removed;
//   - scaledown.go: a launched node empty for the scale-down delay is cordoned, checked again
//     and removed; scale-down evicts nothing.
//
// Each node the controller launched or found launched has one record (fleet.go) with its
// phase: Launching, Registered or Deleted, and the conditions the steps time (serving, released,
// empty, cordoned). Pod-keyed state stays with the step that owns it: the pods that started a
// batch (informers.go), the node the last plan put each pod on (controller.go), the nominations to
// write again after a release (nominate.go), and the last event of each reason on each object
// (events.go).
//
// election.go runs the loop (and the metrics server) under the Lease; informers.go starts the
// caches and turns their changes into rounds; nodes.go reads a Node's conditions and taints.
package autoscaler
