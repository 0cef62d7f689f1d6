package extender

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	registry      *prometheus.Registry
	filterSeconds prometheus.Histogram
	bindSeconds   prometheus.Histogram
	allocations   *prometheus.CounterVec
	refusals      *prometheus.CounterVec
	bindConflicts prometheus.Counter
	leaseWrites   *prometheus.CounterVec
}

func newMetrics() *metrics {
	buckets := prometheus.ExponentialBuckets(0.0001, 2, 16)
	m := &metrics{
		registry: prometheus.NewRegistry(),
		filterSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "neuron_scheduler_extender_filter_duration_seconds", Help: "Time to answer one filter call.", Buckets: buckets,
		}),
		bindSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "neuron_scheduler_extender_bind_duration_seconds", Help: "Time to answer one bind call, API writes included.", Buckets: buckets,
		}),
		allocations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "neuron_scheduler_extender_allocations_total", Help: "Container allocations written at bind, by resource.",
		}, []string{"resource"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "neuron_scheduler_extender_refusals_total", Help: "Pods no node could take (unsupported: a count no instance type accepts; no-fit: nothing free; bind: no longer fit at bind).",
		}, []string{"reason"}),
		bindConflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "neuron_scheduler_extender_bind_retries_total", Help: "Bind decisions retried because another decision for the same node came first.",
		}),
		leaseWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "neuron_scheduler_extender_lease_writes_total", Help: "Writes of the per-node bind Leases, by reason (acquire, renew, request: asking the holder for a handover, release).",
		}, []string{"reason"}),
	}
	m.registry.MustRegister(m.filterSeconds, m.bindSeconds, m.allocations, m.refusals, m.bindConflicts, m.leaseWrites)
	return m
}
