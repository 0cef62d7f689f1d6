package extender

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync/atomic"

	jsonv1 "github.com/go-json-experiment/json/v1"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/kube-neuron/kube-neuron/internal/observe"
)

// MaxBodyBytes caps request bodies. With nodeCacheCapable the scheduler sends node names only:
// 5,000 names and a large pod fit well below this.
const MaxBodyBytes = 8 << 20

// verbs are what the HTTP layer serves: the Extender's.
type verbs interface {
	Filter(ctx context.Context, pod *corev1.Pod, names []string) (passed []string, failed, unresolvable map[string]string)
	// prioritize is Prioritize, and the best score the pod gets on a whole node (relativeScores).
	prioritize(ctx context.Context, pod *corev1.Pod, names []string) ([]int64, int64)
	Bind(ctx context.Context, ns, name string, uid types.UID, node string) error
	// Ready reports whether the caches have synced: no verb is answered before.
	Ready() bool
	// internName returns the string of a node name the extender knows, without allocating.
	internName(b []byte) (string, bool)
}

var _ verbs = (*Extender)(nil)

// api is the HTTP layer: routes, request decoding, errors. It keeps what one request leaves for
// the next: the pods and node names filter decoded, which prioritize is sent again.
type api struct {
	core     verbs
	registry *prometheus.Registry
	// argPods and lastPassed spare prioritize decoding what filter decoded (see reuse).
	argPods    podMemo
	lastPassed atomic.Pointer[[]string]
}

// Handler serves filter, prioritize and bind, /healthz, /readyz and /metrics.
func (e *Extender) Handler(ctx context.Context) http.Handler { return e.api.handler(ctx) }

// MetricsHandler serves /metrics, /healthz and /readyz only: ServeOptions.MetricsAddress.
func (e *Extender) MetricsHandler() http.Handler { return e.api.metricsHandler() }

// prioritize is Prioritize, and also returns the best score the pod would get on a whole node:
// see relativeScores.
func (e *Extender) prioritize(ctx context.Context, pod *corev1.Pod, names []string) ([]int64, int64) {
	return e.scores.prioritize(ctx, pod, names)
}

// internName returns the name of a node the node informer delivered, without allocating.
func (e *Extender) internName(b []byte) (string, bool) { return e.scores.shapes.intern(b) }

// handler serves filter, prioritize and bind, /healthz, /readyz and /metrics.
func (a *api) handler(ctx context.Context) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/filter", a.serve(ctx, "filter", a.filter))
	mux.HandleFunc("/prioritize", a.serve(ctx, "prioritize", a.prioritize))
	mux.HandleFunc("/bind", a.serve(ctx, "bind", a.bind))
	a.handleObservability(mux)
	return mux
}

// filter answers an ExtenderArgs body with an ExtenderFilterResult.
func (a *api) filter(ctx context.Context, body []byte) (any, error) {
	args, err := decodeArgs(body, reuse{intern: a.core.internName, pods: &a.argPods})
	if err != nil {
		return nil, err
	}
	if args.pod == nil {
		return &extenderv1.ExtenderFilterResult{Error: "the request names no pod"}, nil
	}
	passed, failed, unresolvable := a.core.Filter(ctx, args.pod, args.names)
	a.lastPassed.Store(&passed)
	return &extenderv1.ExtenderFilterResult{NodeNames: &passed, FailedNodes: failed, FailedAndUnresolvableNodes: unresolvable}, nil
}

// prioritize answers an ExtenderArgs body with a HostPriorityList (see relativeScores).
func (a *api) prioritize(ctx context.Context, body []byte) (any, error) {
	// The scheduler sends prioritize the pod it just sent filter, and the nodes filter passed.
	r := reuse{intern: a.core.internName, pods: &a.argPods}
	if last := a.lastPassed.Load(); last != nil {
		r.names = *last
	}
	args, err := decodeArgs(body, r)
	if err != nil {
		return nil, err
	}
	if args.pod == nil {
		return &extenderv1.HostPriorityList{}, nil
	}
	scores, whole := a.core.prioritize(ctx, args.pod, args.names)
	list := relativeScores(args.names, scores, whole)
	return &list, nil
}

// bind answers an ExtenderBindingArgs body with an ExtenderBindingResult.
func (a *api) bind(ctx context.Context, body []byte) (any, error) {
	var args extenderv1.ExtenderBindingArgs
	if err := json.Unmarshal(body, &args); err != nil {
		return nil, err
	}
	if args.PodName == "" || args.PodNamespace == "" || args.Node == "" {
		return &extenderv1.ExtenderBindingResult{Error: "the bind request needs PodName, PodNamespace and Node"}, nil
	}
	if err := a.core.Bind(ctx, args.PodNamespace, args.PodName, args.PodUID, args.Node); err != nil {
		klog.FromContext(ctx).Info("Bind failed", "pod", klog.KRef(args.PodNamespace, args.PodName), "node", args.Node, "err", err)
		return &extenderv1.ExtenderBindingResult{Error: err.Error()}, nil
	}
	return &extenderv1.ExtenderBindingResult{}, nil
}

// metricsHandler serves /metrics, /healthz and /readyz only.
func (a *api) metricsHandler() http.Handler {
	mux := http.NewServeMux()
	a.handleObservability(mux)
	return mux
}

// handleObservability adds /healthz, /readyz and /metrics. They answer "ok", why the extender
// is not ready, and counts and durations: nothing about pods or nodes.
func (a *api) handleObservability(mux *http.ServeMux) {
	observe.Handle(mux, a.registry, a.core.Ready, "informer caches have not synced yet")
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
func (a *api) serve(ctx context.Context, verb string, fn func(context.Context, []byte) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, verb+" takes POST with the kube-scheduler extender JSON", http.StatusMethodNotAllowed)
			return
		}
		if !a.core.Ready() {
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
