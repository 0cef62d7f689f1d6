package extender

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

// MaxBodyBytes caps request bodies. With nodeCacheCapable the scheduler sends node names only:
// 5,000 names and a large pod fit well below this.
const MaxBodyBytes = 8 << 20

// Handler serves filter, prioritize and bind, /healthz, /readyz and /metrics.
func (e *Extender) Handler(ctx context.Context) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/filter", e.serve(ctx, "filter", func(ctx context.Context, body []byte) (any, error) {
		var args extenderv1.ExtenderArgs
		if err := json.Unmarshal(body, &args); err != nil {
			return nil, err
		}
		if args.Pod == nil {
			return &extenderv1.ExtenderFilterResult{Error: "the request names no pod"}, nil
		}
		names := nodeNames(&args)
		passed, failed, unresolvable := e.Filter(ctx, args.Pod, names)
		return &extenderv1.ExtenderFilterResult{NodeNames: &passed, FailedNodes: failed, FailedAndUnresolvableNodes: unresolvable}, nil
	}))
	mux.HandleFunc("/prioritize", e.serve(ctx, "prioritize", func(ctx context.Context, body []byte) (any, error) {
		var args extenderv1.ExtenderArgs
		if err := json.Unmarshal(body, &args); err != nil {
			return nil, err
		}
		list := extenderv1.HostPriorityList{}
		if args.Pod == nil {
			return &list, nil
		}
		names := nodeNames(&args)
		scores := e.Prioritize(ctx, args.Pod, names)
		for _, n := range names {
			list = append(list, extenderv1.HostPriority{Host: n, Score: scores[n]})
		}
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
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !e.Ready() {
			http.Error(w, "informer caches have not synced yet", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	mux.Handle("/metrics", promhttp.HandlerFor(e.metrics.registry, promhttp.HandlerOpts{}))
	return mux
}

func nodeNames(args *extenderv1.ExtenderArgs) []string {
	if args.NodeNames != nil {
		return *args.NodeNames
	}
	var out []string
	if args.Nodes != nil {
		for _, n := range args.Nodes.Items {
			out = append(out, n.Name)
		}
	}
	return out
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
		if err != nil {
			http.Error(w, fmt.Sprintf("%s: the body is not a kube-scheduler extender %s request: %v", verb, verb, err), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if err := json.NewEncoder(w).Encode(res); err != nil {
			klog.FromContext(ctx).V(2).Info("Writing a response failed", "verb", verb, "err", err)
		}
	}
}

func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return nil, fmt.Errorf("request body larger than %d bytes", MaxBodyBytes)
	}
	// Any other read error leaves a truncated body, which the verb's JSON decoding rejects.
	return body, nil
}

// Serve listens on addr until ctx ends.
func (e *Extender) Serve(ctx context.Context, addr string) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", addr, err)
	}
	return e.ServeListener(ctx, lis)
}

// ServeListener serves on lis until ctx ends.
func (e *Extender) ServeListener(ctx context.Context, lis net.Listener) error {
	srv := &http.Server{
		Handler:           e.Handler(ctx),
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
	klog.FromContext(ctx).Info("Serving the scheduler extender", "address", lis.Addr().String())
	if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
