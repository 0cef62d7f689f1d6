package extender

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	jsonv1 "github.com/go-json-experiment/json/v1"
	"k8s.io/klog/v2"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/kube-neuron/kube-neuron/internal/observe"
)

// MaxBodyBytes caps request bodies. With nodeCacheCapable the scheduler sends node names only:
// 5,000 names and a large pod fit well below this.
const MaxBodyBytes = 8 << 20

// Handler serves filter, prioritize and bind, /healthz, /readyz and /metrics.
func (e *Extender) Handler(ctx context.Context) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/filter", e.serve(ctx, "filter", func(ctx context.Context, body []byte) (any, error) {
		args, err := decodeArgs(body, reuse{intern: e.internName, pods: &e.argPods})
		if err != nil {
			return nil, err
		}
		if args.pod == nil {
			return &extenderv1.ExtenderFilterResult{Error: "the request names no pod"}, nil
		}
		passed, failed, unresolvable := e.Filter(ctx, args.pod, args.names)
		e.lastPassed.Store(&passed)
		return &extenderv1.ExtenderFilterResult{NodeNames: &passed, FailedNodes: failed, FailedAndUnresolvableNodes: unresolvable}, nil
	}))
	mux.HandleFunc("/prioritize", e.serve(ctx, "prioritize", func(ctx context.Context, body []byte) (any, error) {
		// The scheduler sends prioritize the pod it just sent filter, and the nodes filter passed.
		r := reuse{intern: e.internName, pods: &e.argPods}
		if last := e.lastPassed.Load(); last != nil {
			r.names = *last
		}
		args, err := decodeArgs(body, r)
		if err != nil {
			return nil, err
		}
		if args.pod == nil {
			return &extenderv1.HostPriorityList{}, nil
		}
		scores, whole := e.prioritize(ctx, args.pod, args.names)
		list := relativeScores(args.names, scores, whole)
		return &list, nil
	}))
	mux.HandleFunc("/bind", e.serve(ctx, "bind", func(ctx context.Context, body []byte) (any, error) {
		var args extenderv1.ExtenderBindingArgs
		if err := json.Unmarshal(body, &args); err != nil {
			return nil, err
		}
		if args.PodName == "" || args.PodNamespace == "" || args.Node == "" {
			return &extenderv1.ExtenderBindingResult{Error: "the bind request needs PodName, PodNamespace and Node"}, nil
		}
		if err := e.Bind(ctx, args.PodNamespace, args.PodName, args.PodUID, args.Node); err != nil {
			klog.FromContext(ctx).Info("Bind failed", "pod", klog.KRef(args.PodNamespace, args.PodName), "node", args.Node, "err", err)
			return &extenderv1.ExtenderBindingResult{Error: err.Error()}, nil
		}
		return &extenderv1.ExtenderBindingResult{}, nil
	}))
	e.handleObservability(mux)
	return mux
}

// MetricsHandler serves /metrics, /healthz and /readyz only: ServeOptions.MetricsAddress.
func (e *Extender) MetricsHandler() http.Handler {
	mux := http.NewServeMux()
	e.handleObservability(mux)
	return mux
}

// handleObservability adds /healthz, /readyz and /metrics. They answer "ok", why the extender
// is not ready, and counts and durations: nothing about pods or nodes.
func (e *Extender) handleObservability(mux *http.ServeMux) {
	observe.Handle(mux, e.metrics.registry, e.Ready, "informer caches have not synced yet")
}

// relativeScores lists the nodes whose score is above a floor, with the floor subtracted, in
// request order. The kube-scheduler adds an extender's score to the hosts it lists and nothing to
// the others, and it decodes the answer for every pod: the fewer nodes it names, the better.
//
// The floor is the lowest score of the request, which changes no node's rank; or, when some node
// scores above whole (the best score the pod gets on a node with nothing on it, -1 for none),
// whole: the nodes that do not beat a whole node then rank alike, and the pod goes to one that
// does. The order of whole nodes is kept when no node beats them, that is, when the pod opens
// one (a small pod opens an empty inf2.48xlarge before an empty trn1.32xlarge). Without this,
// on a fleet of both, every answer of a backlog of small pods named every empty inf2.48xlarge.
func relativeScores(names []string, scores []int64, whole int64) extenderv1.HostPriorityList {
	lowest, top := int64(0), int64(0)
	for i, s := range scores {
		if i == 0 || s < lowest {
			lowest = s
		}
		top = max(top, s)
	}
	floor := lowest
	if top > whole && whole > lowest {
		floor = whole
	}
	above := 0
	for _, s := range scores {
		if s > floor {
			above++
		}
	}
	list := make(extenderv1.HostPriorityList, 0, above)
	for i, n := range names {
		if s := scores[i] - floor; s > 0 {
			list = append(list, extenderv1.HostPriority{Host: n, Score: s})
		}
	}
	return list
}

// serve wraps a verb: POST only, capped body, 503 before the caches synced, 400 for a body that
// is not the verb's JSON; logical errors are in the result, with status 200.
func (e *Extender) serve(ctx context.Context, verb string, fn func(context.Context, []byte) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, verb+" takes POST with the kube-scheduler extender JSON", http.StatusMethodNotAllowed)
			return
		}
		if !e.Ready() {
			http.Error(w, "the extender's informer caches have not synced yet; retry", http.StatusServiceUnavailable)
			return
		}
		body, err := readBody(w, r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
			return
		}
		reqCtx := klog.NewContext(r.Context(), klog.FromContext(ctx).WithValues("verb", verb))
		res, err := fn(reqCtx, body)
		putBuf(body)
		if err != nil {
			http.Error(w, fmt.Sprintf("%s: the body is not a kube-scheduler extender %s request: %v", verb, verb, err), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		// encoding/json's API and output, on the encoding/json/v2 implementation (see wire.go).
		if err := jsonv1.NewEncoder(w).Encode(res); err != nil {
			klog.FromContext(ctx).V(2).Info("Writing a response failed", "verb", verb, "err", err)
		}
	}
}

// readBody reads the request body into a buffer of bufs; the caller returns it with putBuf.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	buf := bytes.NewBuffer(getBuf())
	if n := r.ContentLength; n > 0 && n <= MaxBodyBytes {
		buf.Grow(int(n) + 1) // one allocation of the announced size at most, instead of doublings
	}
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		putBuf(buf.Bytes())
		return nil, fmt.Errorf("request body larger than %d bytes", MaxBodyBytes)
	}
	// Any other read error leaves a truncated body, which the verb's JSON decoding rejects.
	return buf.Bytes(), nil
}

// bufs recycles request bodies: the scheduler sends two bodies of a few kilobytes for every
// pod. Nothing keeps a reference into a body past its request (decoding
// copies strings).
var bufs = sync.Pool{New: func() any { return new([]byte) }}

// maxPooledBuf keeps the buffers of unusually large requests out of the pool.
const maxPooledBuf = 1 << 20

func getBuf() []byte { return (*bufs.Get().(*[]byte))[:0] }

func putBuf(b []byte) {
	if cap(b) > maxPooledBuf {
		return
	}
	bufs.Put(&b)
}

// ServeOptions configure Serve.
type ServeOptions struct {
	// Address serves filter, prioritize and bind, and /healthz, /readyz and /metrics.
	Address string
	// MetricsAddress, when set, also serves /healthz, /readyz and /metrics on a plain HTTP
	// listener of their own, so that probes and scrapers need no client certificate and a
	// NetworkPolicy can admit them to that port only.
	MetricsAddress string
	// TLS, when set, serves Address over HTTPS (with client authentication when it names a
	// client CA).
	TLS *TLSOptions
}

// Serve listens until ctx ends; it returns the first listener's error.
func (e *Extender) Serve(ctx context.Context, o ServeOptions) error {
	handler := e.Handler(ctx)
	var tlsConfig *tls.Config
	if o.TLS != nil {
		var err error
		if tlsConfig, err = newTLSConfig(ctx, *o.TLS); err != nil {
			return err
		}
		if o.TLS.ClientCAFile != "" {
			handler = requireClientCert(handler)
		}
	}
	lis, err := net.Listen("tcp", o.Address)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", o.Address, err)
	}
	if o.MetricsAddress == "" {
		return serveHTTP(ctx, lis, handler, tlsConfig, "scheduler extender")
	}
	mlis, err := net.Listen("tcp", o.MetricsAddress)
	if err != nil {
		_ = lis.Close()
		return fmt.Errorf("listening on %s: %w", o.MetricsAddress, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 2)
	go func() { errc <- serveHTTP(ctx, lis, handler, tlsConfig, "scheduler extender") }()
	go func() { errc <- serveHTTP(ctx, mlis, e.MetricsHandler(), nil, "metrics and health") }()
	err = <-errc
	cancel()
	return errors.Join(err, <-errc)
}

// ServeListener serves Handler over plain HTTP on lis until ctx ends.
func (e *Extender) ServeListener(ctx context.Context, lis net.Listener) error {
	return serveHTTP(ctx, lis, e.Handler(ctx), nil, "scheduler extender")
}

// serveHTTP serves h on lis (over TLS when tlsConfig is set) until ctx ends.
func serveHTTP(ctx context.Context, lis net.Listener, h http.Handler, tlsConfig *tls.Config, what string) error {
	srv := &http.Server{
		Handler:           h,
		TLSConfig:         tlsConfig,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    1 << 16,
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
		case <-done:
		}
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	}()
	klog.FromContext(ctx).Info("Serving", "what", what, "address", lis.Addr().String(), "tls", tlsConfig != nil)
	var err error
	if tlsConfig != nil {
		err = srv.ServeTLS(lis, "", "")
	} else {
		err = srv.Serve(lis)
	}
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
