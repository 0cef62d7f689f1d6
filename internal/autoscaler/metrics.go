package autoscaler

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kube-neuron/kube-neuron/internal/observe"
)

type metrics struct {
	registry  *prometheus.Registry
	pending   prometheus.Gauge
	decisions *prometheus.CounterVec
	launched  *prometheus.CounterVec
	removed   prometheus.Counter
	cancelled prometheus.Counter
	duration  prometheus.Histogram
	// Reserved capacity: failed provider calls, nodes removed before their Capacity Block
	// ended, evictions.
	providerErrors *prometheus.CounterVec
	drained        prometheus.Counter
	evictions      *prometheus.CounterVec
}

func newMetrics() *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "neuron_autoscaler_pending_pods",
			Help: "Pending pods that ask for Neuron devices or cores and that the scheduler marked unschedulable, at the last planning round.",
		}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "neuron_autoscaler_decisions_total",
			Help: "Decisions on pending Neuron pods, one per pod and planning round, by reason (TriggeredScaleUp, NotTriggerScaleUp, FailedScaleUp; PlanningFailed once per round whose planning failed).",
		}, []string{"reason"}),
		launched: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "neuron_autoscaler_nodes_launched_total",
			Help: "Neuron nodes launched, by instance type.",
		}, []string{"instance_type"}),
		removed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "neuron_autoscaler_nodes_removed_total",
			Help: "Neuron nodes removed: empty for the scale-down delay, or never registered.",
		}),
		cancelled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "neuron_autoscaler_scale_downs_cancelled_total",
			Help: "Removals of empty nodes called off because the check after the cordon found a pod on the node (the node was uncordoned and kept).",
		}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "neuron_autoscaler_decision_duration_seconds",
			Help:    "Time of one planning round: checks, plan and launches.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}),
		providerErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "neuron_autoscaler_provider_errors_total",
			Help: "Failed calls to the provider that the round went on without, by call (reservations: the round planned without capacity reservations).",
		}, []string{"call"}),
		drained: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "neuron_autoscaler_capacity_block_nodes_drained_total",
			Help: "Nodes on a Capacity Block removed (after their pods were evicted, or at the drain deadline) before the block ended.",
		}),
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "neuron_autoscaler_capacity_block_evictions_total",
			Help: "Evictions of pods from nodes on an ending Capacity Block, by result (evicted; refused: a PodDisruptionBudget or another error, retried at the next round).",
		}, []string{"result"}),
	}
	m.registry.MustRegister(m.pending, m.decisions, m.launched, m.removed, m.cancelled, m.duration, m.providerErrors, m.drained, m.evictions)
	return m
}

// handler serves /metrics, /healthz and /readyz.
func (m *metrics) handler(ready func() bool) http.Handler {
	return observe.Mux(m.registry, ready, "not ready: the leader's informer caches have not synced yet")
}
