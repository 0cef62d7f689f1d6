// Package plan is the pure core of neuron-autoscaler: which pending pods may trigger a scale-up,
// and which Neuron nodes to launch for them. It takes everything it decides on as arguments and
// makes no API calls; it imports no Kubernetes client (TestPure holds it to that). The
// controller around it (package autoscaler) watches the cluster, calls Check and Plan, and
// launches, nominates, releases and removes nodes.
//
// Check applies the autoscaler's rules to one pending pod: the pod tolerates the Neuron taint
// aws.amazon.com/neuron=true:NoSchedule, sets its Neuron resources in limits (equal to requests),
// the device plugin DaemonSet (DRA pods: the DRA driver DaemonSet) is installed, its nodeSelector
// and required node affinity allow a new Neuron node, and some instance type it allows can serve
// its request under the topology rules. Every problem says what is wrong and how to fix it; the
// controller tells a pod its problems in one NotTriggerScaleUp event.
//
// Plan chooses the nodes: it simulates each candidate node with the topology engine (the same
// allocation.Plan the scheduler extender binds with, so a new node can always take the pods
// planned onto it), fills nodes that are already launching first, packs several pods onto one
// node where that is cheaper than one node per pod, and minimises the total hourly price from the
// instance catalog. Types without a known price are launched only for pods that no priced type
// can serve, and the event says so. Limits (nodes and devices in the cluster, allowed families)
// always hold.
//
// Advise warns about pods that schedule, or make another autoscaler launch a node, but do not get
// what their author expects (kubectl-neuron check uses it).
//
// New nodes carry NewNodeLabels and NeuronTaint: the instance type and family, amd64/linux and
// kube-neuron.io/allocation-mode. A pod's nodeSelector or node affinity is evaluated against
// exactly those labels.
//
// DRA pods are placed as the kube-scheduler allocates their claims: the caller gives a pod's
// ResourceClaims (PodDemand.Claims) and the cluster's ResourceSlices and DeviceClasses
// (DeviceTemplates); for each candidate type the planner builds the ResourceSlices a new node would
// publish (the DRA driver's own devices.Build) and runs k8s.io/dynamic-resource-allocation/structured
// over them (allocate.go), beside what earlier pods planned onto the node took. Constraints,
// firstAvailable, allocationMode All, the DeviceClass's selectors and the UltraServer node device's
// shared counter are therefore exact. A selector on what only a running node knows is taken to
// match (masks.go). A claim's opaque configs are checked with the DRA driver's own code (package
// dra/opaque) against a new node of each type (configs.go). A pod whose claims are all shared with
// an earlier pending pod follows it (shared.go). UltraServer types (trn2u) are planned only as
// whole UltraServers (ultraserver.go).
//
// Files: plan.go is the API (Plan, its options and results); sim.go simulates one node with the
// topology engine; planner.go and plan_cache.go index the pending pods and memoise their fits;
// run.go is one search (launching nodes first, then new nodes, within the limits); improve.go
// improves a packed run (evacuate, merge, downsize); result.go turns the best run into
// decisions and their messages. check.go is Check, with demand.go (what a pending pod asks
// for, PodDemand), newnode.go (the labels and taints of a new node, and which pods and
// DaemonSets match them) and messages.go (how the messages write sizes, prices and lists);
// advice.go is Advise, selectors.go the DRA selector templates, allocate.go, claims.go and
// masks.go the DRA allocation, ultraserver.go and ultraserver_result.go the UltraServer units.
package plan
