package plugin

import (
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// The results of narrowingCycles.
const (
	narrowedResult = "narrowed" // PreFilter handed on the candidates
	sampledResult  = "sampled"  // not narrowed: kube-scheduler checks its sample of the nodes
	retriedResult  = "retried"  // a narrowed cycle found no node: the next runs on every node
)

// narrowingCycles counts the scheduling cycles of pods with Neuron requests by what PreFilter
// did with the nodes, and the narrowed cycles that found no node. It is served on the
// scheduler's /metrics as scheduler_neuron_topology_narrowing_total.
var narrowingCycles = metrics.NewCounterVec(&metrics.CounterOpts{
	Namespace:      "scheduler",
	Subsystem:      "neuron_topology",
	Name:           "narrowing_total",
	Help:           "Scheduling cycles of pods with Neuron requests by result: narrowed (NeuronTopology's PreFilter handed kube-scheduler the nodes it ranks best), sampled (not narrowed: kube-scheduler checked its sample of the nodes), retried (a narrowed cycle found no node; the pod is tried again on every node).",
	StabilityLevel: metrics.ALPHA,
}, []string{"result"})

func init() {
	legacyregistry.MustRegister(narrowingCycles)
}
