//go:build e2e

package scheduler

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// verbStats times the extender's HTTP verbs on the server side (handler entry to return,
// JSON decoding and encoding included).
type verbStats struct {
	verbs map[string]*verbStat // path -> stat; fixed at creation, so reads need no lock
}

type verbStat struct {
	calls, nanos atomic.Int64
}

func newVerbStats() *verbStats {
	return &verbStats{verbs: map[string]*verbStat{"/filter": {}, "/prioritize": {}, "/bind": {}}}
}

func (s *verbStats) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st := s.verbs[r.URL.Path]
		if st == nil {
			h.ServeHTTP(w, r)
			return
		}
		begin := time.Now()
		h.ServeHTTP(w, r)
		st.calls.Add(1)
		st.nanos.Add(int64(time.Since(begin)))
	})
}

// snapshot returns calls and total time per verb ("filter", "prioritize", "bind").
func (s *verbStats) snapshot() map[string]callStat {
	out := map[string]callStat{}
	for path, st := range s.verbs {
		out[strings.TrimPrefix(path, "/")] = callStat{N: st.calls.Load(), Total: time.Duration(st.nanos.Load())}
	}
	return out
}

type callStat struct {
	N     int64
	Total time.Duration
}

func (c callStat) mean() time.Duration {
	if c.N == 0 {
		return 0
	}
	return c.Total / time.Duration(c.N)
}

func diffStats(after, before map[string]callStat) map[string]callStat {
	out := map[string]callStat{}
	for k, a := range after {
		b := before[k]
		if d := (callStat{N: a.N - b.N, Total: a.Total - b.Total}); d.N > 0 {
			out[k] = d
		}
	}
	return out
}

// serveHTTP serves h on a free port of 127.0.0.1 until ctx ends, with the http.Server settings
// of extender.ServeListener, and returns its URL.
func serveHTTP(ctx context.Context, h http.Handler) (string, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    1 << 16,
	}
	go func() {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	}()
	go func() { _ = srv.Serve(lis) }()
	return "http://" + lis.Addr().String(), nil
}

// apiCounter counts a client's API requests by verb and resource and times them (request sent
// to response headers); watches are counted, not timed.
type apiCounter struct {
	mu sync.Mutex
	m  map[string]callStat
}

func (c *apiCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		key := apiKey(req)
		begin := time.Now()
		resp, err := rt.RoundTrip(req)
		d := time.Since(begin)
		if strings.HasPrefix(key, "watch ") {
			d = 0
		}
		c.mu.Lock()
		if c.m == nil {
			c.m = map[string]callStat{}
		}
		s := c.m[key]
		s.N++
		s.Total += d
		c.m[key] = s
		c.mu.Unlock()
		return resp, err
	})
}

func (c *apiCounter) snapshot() map[string]callStat {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]callStat, len(c.m))
	for k, v := range c.m {
		out[k] = v
	}
	return out
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// apiKey names a request "<verb> <resource>[/<subresource>]", e.g. "get leases",
// "create pods/binding".
func apiKey(req *http.Request) string {
	segs := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	// /api/v1/... or /apis/<group>/<version>/...
	i := 2
	if len(segs) > 0 && segs[0] == "apis" {
		i = 3
	}
	if i < len(segs) && segs[i] == "namespaces" && i+2 < len(segs) {
		i += 2
	}
	rest := []string{}
	if i < len(segs) {
		rest = segs[i:]
	}
	resource, named := "?", false
	if len(rest) > 0 {
		resource = rest[0]
	}
	if len(rest) > 1 {
		named = true
	}
	if len(rest) > 2 {
		resource += "/" + rest[2]
	}
	verb := strings.ToLower(req.Method)
	switch req.Method {
	case http.MethodGet:
		verb = "list"
		if named {
			verb = "get"
		}
		if req.URL.Query().Get("watch") == "true" || req.URL.Query().Get("watch") == "1" {
			verb = "watch"
		}
	case http.MethodPost:
		verb = "create"
	case http.MethodPut:
		verb = "update"
	}
	return verb + " " + resource
}

// timedLimiter is a client-side token bucket that adds up the time callers waited in it.
type timedLimiter struct {
	flowcontrol.RateLimiter
	waited atomic.Int64
}

func (l *timedLimiter) Wait(ctx context.Context) error {
	begin := time.Now()
	err := l.RateLimiter.Wait(ctx)
	l.waited.Add(int64(time.Since(begin)))
	return err
}

func (l *timedLimiter) Accept() {
	begin := time.Now()
	l.RateLimiter.Accept()
	l.waited.Add(int64(time.Since(begin)))
}

// instrumentedClientConfig returns cfg with a client-side rate limit of qps (burst 2*qps, as
// neuron-scheduler-extender sets 200/400), a request counter and a timed limiter.
func instrumentedClientConfig(cfg *rest.Config, qps int) (*rest.Config, *apiCounter, *timedLimiter) {
	cfg = rest.CopyConfig(cfg)
	counter := &apiCounter{}
	limiter := &timedLimiter{RateLimiter: flowcontrol.NewTokenBucketRateLimiter(float32(qps), 2*qps)}
	cfg.RateLimiter = limiter
	cfg.QPS, cfg.Burst = float32(qps), 2*qps
	cfg.Wrap(counter.wrap)
	return cfg, counter, limiter
}
