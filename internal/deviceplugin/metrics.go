package deviceplugin

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kube-neuron/kube-neuron/internal/observe"
)

type metrics struct {
	registry    *prometheus.Registry
	allocations *prometheus.CounterVec
	failures    *prometheus.CounterVec
	unhealthy   prometheus.Gauge
	withdrawn   *prometheus.GaugeVec
}

func newMetrics() *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		allocations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "neuron_device_plugin_allocations_total",
			Help: "Containers served by Allocate, by resource and by where the devices came from: extender (a kube-neuron.io/allocation record), published (AWS_NEURON_IDS left by the published Neuron stack), kubelet (the kubelet's ids), again (the kubelet asked again for a container it holds ids for: the same hardware).",
		}, []string{"resource", "source"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "neuron_device_plugin_allocation_failures_total",
			Help: "Allocate calls answered with an error, by resource.",
		}, []string{"resource"}),
		unhealthy: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "neuron_device_plugin_unhealthy_devices",
			Help: "Neuron devices currently unhealthy (error counters rose, or the device disappeared).",
		}),
		withdrawn: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "neuron_device_plugin_withdrawn_ids",
			Help: "Ids of each resource reported unhealthy to the kubelet: unhealthy devices, and hardware taken through another resource.",
		}, []string{"resource"}),
	}
	m.registry.MustRegister(m.allocations, m.failures, m.unhealthy, m.withdrawn)
	return m
}

// handler serves /metrics, /healthz and /readyz (always ready).
func (m *metrics) handler() http.Handler { return observe.Mux(m.registry, nil, "") }
