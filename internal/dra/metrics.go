package dra

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kube-neuron/kube-neuron/internal/observe"
)

type metrics struct {
	registry  *prometheus.Registry
	duration  *prometheus.HistogramVec
	failures  *prometheus.CounterVec
	prepared  prometheus.Gauge
	unhealthy prometheus.Gauge
	published prometheus.Gauge
}

func newMetrics() *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "neuron_dra_driver_request_duration_seconds",
			Help:    "Time to handle one claim in NodePrepareResources (operation prepare) or NodeUnprepareResources (unprepare).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}, []string{"operation"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "neuron_dra_driver_request_failures_total",
			Help: "Claims that could not be prepared (operation prepare) or unprepared (unprepare).",
		}, []string{"operation"}),
		prepared: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "neuron_dra_driver_prepared_claims",
			Help: "Claims prepared on this node (in the checkpoint).",
		}),
		unhealthy: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "neuron_dra_driver_unhealthy_devices",
			Help: "Neuron devices currently unhealthy and left out of the ResourceSlice.",
		}),
		published: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "neuron_dra_driver_published_devices",
			Help: "Devices in the node's ResourceSlices (Neuron devices, plus the UltraServer node device).",
		}),
	}
	m.registry.MustRegister(m.duration, m.failures, m.prepared, m.unhealthy, m.published)
	return m
}

// handler serves /metrics, /healthz and /readyz (ready once the driver has registered with the
// kubelet and published its devices).
func (m *metrics) handler(ready func() bool) http.Handler {
	return observe.Mux(m.registry, ready, "not ready: the driver has not published its devices yet")
}
