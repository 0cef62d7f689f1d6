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
// kube-neuron.io/allocation-mode; and the capacity labels (NodePlan.Labels). A pod's nodeSelector
// or node affinity is evaluated against exactly those labels.
//
// Reserved capacity (Options.Reservations: On-Demand Capacity Reservations and Capacity Blocks
// for ML the user bought) is already paid for: a new node launched into a reservation costs $0
// (it is counted in ScaleUp.ReservedNodes, not in CostUSDPerHour), so the search opens nodes in
// reservations before on-demand ones and its improvements move pods into them where that saves
// money; among plans of one price the one that uses fewer reserved instances wins, leaving room
// for later pods. A run counts the instances it takes of each reservation and never plans past
// its Available; an improvement that removes a reserved node gives the slot back. Reservations of
// one type add up, and each reserved NodePlan names the one it launches into. UltraServer
// reservations (trn2u) take whole UltraServers, UltraServerNodes instances each. With
// Options.ReservedOnly (the on-demand fallback off) no on-demand node is planned, and a pod no
// reservation takes is refused with the reservations of its types and what they have left. A
// reserved node is labelled kube-neuron.io/capacity-type=reserved and
// kube-neuron.io/capacity-reservation-id=<id>, an on-demand one capacity-type=on-demand; a pod
// that selects these labels goes only where they match (Check takes them as labels some new node
// carries), and pods that only a reservation may take are placed first (reserve.go).
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
// improves a packed run (evacuate, merge, downsize); reserve.go prices and counts reserved
// nodes; result.go turns the best run into decisions and their messages. check.go is Check, with demand.go (what a pending pod asks
// for, PodDemand), newnode.go (the labels and taints of a new node, and which pods and
// DaemonSets match them) and messages.go (how the messages write sizes, prices and lists);
// advice.go is Advise, selectors.go the DRA selector templates, allocate.go, claims.go and
// masks.go the DRA allocation, ultraserver.go and ultraserver_result.go the UltraServer units.
package plan
