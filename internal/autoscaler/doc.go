// Package autoscaler is the controller of neuron-autoscaler: it watches pending Neuron pods,
// launches nodes for them through a Provider (local or ec2), and removes the nodes it launched
// once they stay empty. What to launch is decided by the pure planner in package plan; this
// package does the I/O around it: informers on pods, nodes, DaemonSets, ResourceClaims,
// ResourceClaimTemplates and ResourceSlices, leader election on a Lease, the provider's API,
// patches of pods (nomination, planned-node annotation) and nodes (launching taint, cordon),
// node deletes, events and metrics.
package autoscaler
