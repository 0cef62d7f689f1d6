// Package topology is kube-neuron's one topology engine: the instance catalog, the device
// graph of a node, which device and core sets a request may take (the rules of the Neuron
// scheduler extension, extended to every instance family), node usage that can never hand out
// a device or core twice, and the placement policies (best-fit, first-fit) with the node score
// the scheduler extender's prioritize uses.
//
// Every component takes its placement decisions from here: the scheduler extender, the device
// plugin's GetPreferredAllocation, the DRA driver's published groups, the autoscaler's fit
// simulation and kubectl-neuron. The package imports no Kubernetes client.
//
// Core ids are global: core = device*coresPerDevice + k, where coresPerDevice is the logical
// count at the node's LNC (physical cores / LNC). Every id list this package returns is
// ascending.
package topology
