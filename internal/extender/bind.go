package extender

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// Bind chooses the pod's devices on the node and binds it with a Binding that carries the
// allocation record. Only the replica that holds the node's Lease decides for the node (see
// lease.go): while it holds it, decisions cost no write but the Binding, and a replica that
// takes the Lease over first waits until its cache shows every decision made before. Within a
// replica the node lock covers the decision only: the Binding is posted after it is released,
// while the decision already counts in this replica's usage, so binds to one node overlap. A
// failed bind removes what it wrote.
func (e *Extender) Bind(ctx context.Context, ns, name string, uid types.UID, node string) error {
	start := e.o.Now()
	defer func() { e.metrics.bindSeconds.Observe(e.o.Now().Sub(start).Seconds()) }()
	logger := klog.FromContext(ctx).WithValues("pod", klog.KRef(ns, name), "node", node)
	var lastErr error
	for attempt := 0; attempt < 8; attempt++ {
		if attempt > 0 {
			e.metrics.bindConflicts.Inc()
			time.Sleep(time.Duration(attempt*attempt) * 10 * time.Millisecond)
		}
		post, err := e.decide(ctx, ns, name, uid, node)
		if err == nil {
			err = post(ctx)
		}
		if err == nil {
			return nil
		}
		if !errors.Is(err, errRetry) {
			return err
		}
		lastErr = err
		logger.V(4).Info("Bind raced with another decision for the node; retrying", "attempt", attempt+1, "err", err)
	}
	return fmt.Errorf("binding pod %s/%s to node %s: the node's usage kept changing (%v); the scheduler will retry", ns, name, node, lastErr)
}

var errRetry = errors.New("retry")

// decide makes the bind decision under the node's lock, holding the node's Lease, and returns
// what posts it.
func (e *Extender) decide(ctx context.Context, ns, name string, uid types.UID, node string) (func(context.Context) error, error) {
	lock := e.owner.locks.of(node)
	lock.Lock()
	defer lock.Unlock()
	if seq := e.countOpening(ctx, ns, name, uid, node); seq != 0 {
		// Decisions for the node wait for this lock, so no bind decision sees the tentative one.
		defer e.scores.usage.forget(node, uid, seq)
	}
	deadline, err := e.owner.own(ctx, node)
	if err != nil {
		return nil, err
	}
	shape, err := e.scores.shapes.get(node)
	if err != nil {
		return nil, err
	}
	pod, err := e.pod(ctx, ns, name, uid)
	if err != nil {
		return nil, err
	}
	if pod.Spec.NodeName != "" {
		return nil, fmt.Errorf("pod %s/%s is already bound to node %s", ns, name, pod.Spec.NodeName)
	}
	binding := &corev1.Binding{
		// The Binding carries the pod's UID and resourceVersion as preconditions, and the
		// allocation annotations, which the API server merges into the pod in the same write that
		// sets its node: the record and the binding land together or not at all, and other
		// controllers' annotations are left as they are.
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: uid, ResourceVersion: pod.ResourceVersion},
		Target:     corev1.ObjectReference{Kind: "Node", Name: node},
	}
	reqs := allocation.PodRequests(pod)
	if len(reqs) == 0 {
		return func(ctx context.Context) error { return e.post(ctx, binding, node, nil, 0, deadline) }, nil
	}
	u, err := e.scores.freshUsage(ctx, shape, node, pod.UID)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errRetry, err)
	}
	containers, held, err := e.scores.planBind(u, node, pod, reqs)
	if err != nil {
		e.metrics.refusals.WithLabelValues("bind").Inc()
		if len(held) > 0 {
			return nil, fmt.Errorf("pod %s/%s no longer fits node %s beside the pods nominated to it (%s): %w", ns, name, node, strings.Join(held, ", "), err)
		}
		return nil, fmt.Errorf("pod %s/%s no longer fits node %s: %w", ns, name, node, err)
	}
	rec := &allocation.Record{Node: node, Containers: containers}
	binding.Annotations = rec.Annotations()
	binding.Annotations[allocation.AllocTime] = strconv.FormatInt(e.o.Now().UnixNano(), 10)
	// From here the decision counts in this replica's usage, before its Binding is posted, and a
	// release of the Lease waits for the Binding.
	e.owner.startBind(node)
	seq := e.scores.usage.remember(node, uid, ns+"/"+name, rec)
	return func(ctx context.Context) error { return e.post(ctx, binding, node, rec, seq, deadline) }, nil
}

// countOpening counts, in the scores of filter and prioritize only, a tentative decision for a
// pod bound to a node with nothing on it, while the real decision waits for the node's Lease and
// its pods (the first bind to a node; 100 ms and more under load). Without it the pods the
// scheduler places meanwhile see the node empty, tied with every empty node of its type, and
// each may open another node. It returns the tentative decision's number for forget, or 0 when
// nothing was counted: the node is not empty, or the pod is not in the informer's cache.
func (e *Extender) countOpening(ctx context.Context, ns, name string, uid types.UID, node string) uint64 {
	shape, err := e.scores.shapes.get(node)
	if err != nil {
		return 0
	}
	u, err := e.scores.nodeUsage(ctx, shape, node, uid)
	if err != nil || u.FreeCoreCount() != shape.Cores() {
		return 0
	}
	obj, ok, _ := e.pods.GetStore().GetByKey(ns + "/" + name)
	if !ok || obj.(*corev1.Pod).UID != uid {
		return 0
	}
	reqs := allocation.PodRequests(obj.(*corev1.Pod))
	if len(reqs) == 0 {
		return 0
	}
	containers, _, err := e.scores.plan(u, reqs)
	if err != nil {
		return 0
	}
	return e.scores.usage.remember(node, uid, ns+"/"+name, &allocation.Record{Node: node, Containers: containers})
}

// post posts the Binding of a decision made by decide (seq: its number in the usage cache) and
// settles the decision. The Binding must be answered by deadline, before another replica could
// take the node's Lease over. rec is nil for a pod without Neuron requests: nothing to settle.
func (e *Extender) post(ctx context.Context, binding *corev1.Binding, node string, rec *allocation.Record, seq uint64, deadline time.Time) error {
	ns, name, uid := binding.Namespace, binding.Name, binding.UID
	logger := klog.FromContext(ctx).WithValues("pod", klog.KRef(ns, name), "node", node)
	if rec == nil {
		if err := e.sendBinding(ctx, binding); err != nil {
			return fmt.Errorf("binding pod %s/%s to node %s: %w", ns, name, node, err)
		}
		logger.V(2).Info("Bound a pod without Neuron requests")
		return nil
	}
	late, err := e.postBy(ctx, binding, node, deadline)
	// Only a definite refusal means nothing was written; after a timeout or a server error the
	// binding may have been applied, so the decision keeps counting until the informer shows it.
	if late || definiteRefusal(err) {
		e.scores.usage.failedBind(node, uid, seq)
	}
	switch {
	case late:
		return err
	case apierrors.IsConflict(err):
		// The pod changed since it was read (or the cache was behind): read it again.
		e.reread.add(ns, name)
		return fmt.Errorf("%w: pod %s/%s changed: %v", errRetry, ns, name, err)
	case err != nil:
		return fmt.Errorf("binding pod %s/%s to node %s: %w", ns, name, node, err)
	}
	for _, c := range rec.Containers {
		e.metrics.allocations.WithLabelValues(c.Resource).Inc()
		logger.Info("Bound", "container", c.Name, "resource", c.Resource, "devices", topology.JoinIDs(c.Devices), "cores", topology.JoinIDs(c.Cores))
	}
	return nil
}

// postBy posts the Binding of a decision if it can be answered by deadline (late when it cannot:
// nothing is sent), and ends its count among the Bindings in flight. Another replica may take
// the node over once this one's Lease has expired; the Binding must have landed or failed by
// then (see lease.go).
func (e *Extender) postBy(ctx context.Context, binding *corev1.Binding, node string, deadline time.Time) (late bool, err error) {
	defer e.owner.endBind(node)
	left := deadline.Sub(e.o.Now())
	if left <= 0 {
		return true, fmt.Errorf("%w: the decision for pod %s/%s on node %s is older than this replica's hold on the node's Lease; deciding again", errRetry, binding.Namespace, binding.Name, node)
	}
	pctx, cancel := context.WithTimeout(ctx, left)
	defer cancel()
	return false, e.sendBinding(pctx, binding)
}

func (e *Extender) sendBinding(ctx context.Context, binding *corev1.Binding) error {
	return e.o.Client.CoreV1().Pods(binding.Namespace).Bind(ctx, binding, metav1.CreateOptions{FieldManager: "neuron-scheduler-extender"})
}

// definiteRefusal reports whether the API server refused a Binding, so that nothing of it was
// written.
func definiteRefusal(err error) bool {
	return err != nil && (apierrors.IsConflict(err) || apierrors.IsNotFound(err) || apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err))
}

// pod returns the pod from the informer's cache, or from the API server when the cache does
// not have this pod (or was told to forget it).
func (e *Extender) pod(ctx context.Context, ns, name string, uid types.UID) (*corev1.Pod, error) {
	if obj, ok, _ := e.pods.GetStore().GetByKey(ns + "/" + name); ok {
		if p := obj.(*corev1.Pod); p.UID == uid && !e.reread.has(ns, name) {
			return p, nil
		}
	}
	p, err := e.o.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("getting pod %s/%s: %w", ns, name, err)
	}
	if p.UID != uid {
		return nil, fmt.Errorf("pod %s/%s was replaced (uid %s, the scheduler asked for %s)", ns, name, p.UID, uid)
	}
	return p, nil
}

// rereads are the pods whose cached copy lost a conflict at bind: pod reads them from the API
// server from then on.
type rereads struct {
	mu   sync.Mutex
	pods map[string]struct{} // namespace/name
}

func (r *rereads) has(ns, name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.pods[ns+"/"+name]
	return ok
}

func (r *rereads) add(ns, name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pods == nil || len(r.pods) >= 10000 {
		r.pods = map[string]struct{}{}
	}
	r.pods[ns+"/"+name] = struct{}{}
}

// bindVisible reports whether the informer shows how a decision for the pod ended: the pod with
// its record naming the node, or the pod gone, replaced or bound elsewhere.
func (e *Extender) bindVisible(node string, listed *corev1.Pod) bool {
	ns, name, uid := listed.Namespace, listed.Name, listed.UID
	if e.scores.usage.known(node, uid) {
		return true // this replica's own decision: counted already
	}
	obj, exists, _ := e.pods.GetStore().GetByKey(ns + "/" + name)
	if !exists {
		return true
	}
	pod := obj.(*corev1.Pod)
	if pod.UID != uid {
		return true
	}
	if r, err := allocation.RecordOf(pod); err == nil && r != nil && r.Node == node {
		return true
	}
	return pod.DeletionTimestamp != nil || (pod.Spec.NodeName != "" && pod.Spec.NodeName != node)
}

// Shutdown releases every Lease this replica holds, after the Bindings in flight have been
// answered, so that another replica (or this one restarted) can take the nodes over at once.
func (e *Extender) Shutdown(ctx context.Context) { e.owner.shutdown(ctx) }
