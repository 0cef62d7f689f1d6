package observe

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestMux(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "kn_test_total", Help: "test"})
	reg.MustRegister(c)
	c.Inc()
	var ready atomic.Bool
	mux := Mux(reg, ready.Load, "not ready: caches not synced")
	get := func(path string) (int, string) {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code, rec.Body.String()
	}
	if code, body := get("/healthz"); code != 200 || body != "ok" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "caches not synced") {
		t.Errorf("/readyz before ready: %d %q", code, body)
	}
	ready.Store(true)
	if code, body := get("/readyz"); code != 200 || body != "ok" {
		t.Errorf("/readyz when ready: %d %q", code, body)
	}
	if code, body := get("/metrics"); code != 200 || !strings.Contains(body, "kn_test_total 1") {
		t.Errorf("/metrics: %d %q", code, body)
	}
	always := httptest.NewRecorder()
	Mux(reg, nil, "").ServeHTTP(always, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	if always.Code != 200 {
		t.Errorf("/readyz without a ready func: %d", always.Code)
	}
}
