// Package observe serves what every kube-neuron component exposes for operators: Prometheus
// metrics, liveness and readiness.
package observe

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handle adds /metrics (the registry), /healthz (always ok) and /readyz to mux. /readyz answers
// 503 with notReady while ready reports false; a nil ready is always ready.
func Handle(mux *http.ServeMux, reg *prometheus.Registry, ready func() bool, notReady string) {
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if ready != nil && !ready() {
			http.Error(w, notReady, http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
}

// Mux is a ServeMux with only what Handle adds.
func Mux(reg *prometheus.Registry, ready func() bool, notReady string) *http.ServeMux {
	mux := http.NewServeMux()
	Handle(mux, reg, ready, notReady)
	return mux
}
