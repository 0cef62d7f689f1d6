package extender

import (
	"context"
	"fmt"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
)

// Bind decisions for a node are made by one replica at a time: the one that holds the node's
// Lease (kube-neuron-bind-<node> in the lease namespace). The holder decides without writing
// the Lease for ownWindow after each write of it, so a bind costs one write, the Binding; it
// renews the Lease with its next decision after that.
//
// A replica that is asked to bind to a node another replica holds writes its name in the
// Lease's handover-requested-by annotation. The holder notices it through its Lease informer,
// stops deciding for the node, waits until the Bindings of its decisions have been answered,
// and releases the Lease (holder empty, released-for naming the requester). A holder that does
// not answer (it crashed) loses the Lease once this replica has seen it unchanged for the
// Lease's duration. Either way the new holder then lists the node's pods from the API server
// (a consistent read) and waits until its pod informer shows each of their allocation records
// before it decides: it sees every decision made before it took the Lease.
//
// Timing keeps an expired holder harmless: it decides only within ownWindow of a write and
// gives each Binding until postTimeout after the end of that window, both well inside the
// leaseDuration another replica waits before taking the Lease.
const (
	leaseDuration   = 15 * time.Second
	ownWindow       = 5 * time.Second
	postTimeout     = 4 * time.Second
	catchUpTimeout  = 5 * time.Second
	handoverTimeout = leaseDuration + 5*time.Second
	// yieldWindow: after a release for another replica, others leave the Lease to it this long.
	yieldWindow = time.Second
	// leasePoll is how often a replica waiting for a Lease looks at its informer's copy.
	leasePoll = 5 * time.Millisecond
)

// Lease labels and annotations.
const (
	leaseLabel      = "app.kubernetes.io/managed-by"
	leaseLabelValue = "neuron-scheduler-extender"
	// nodeAnnotation names the node of a bind Lease (its name may be a hash of a long node name).
	nodeAnnotation = "kube-neuron.io/node"
	// handoverAnnotation names a replica that asks the holder to release the Lease.
	handoverAnnotation = "kube-neuron.io/handover-requested-by"
	// releasedForAnnotation names the replica a holder released the Lease for.
	releasedForAnnotation = "kube-neuron.io/released-for"
)

// Annotations of earlier versions, which wrote the Lease for every decision; removed on write.
var obsoleteLeaseAnnotations = []string{"kube-neuron.io/last-bind", "kube-neuron.io/pending-binds"}

// hold is this replica's hold on a node's Lease.
type hold struct {
	lease *coordinationv1.Lease // as this replica's last write left it
	until time.Time             // decisions need no write until then
}

// observation is when this replica first saw a Lease's holder and renewal time as they are.
type observation struct {
	holder, renew string
	at            time.Time
}

func holderOf(l *coordinationv1.Lease) string {
	if l == nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

func durationOf(l *coordinationv1.Lease) time.Duration {
	if l.Spec.LeaseDurationSeconds != nil && *l.Spec.LeaseDurationSeconds > 0 {
		return time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	return leaseDuration
}

// nodeOfLease returns the node a bind Lease is for.
func nodeOfLease(l *coordinationv1.Lease) string {
	if n := l.Annotations[nodeAnnotation]; n != "" {
		return n
	}
	return strings.TrimPrefix(l.Name, "kube-neuron-bind-")
}

// own makes sure this replica holds the node's Lease, and returns until when a Binding of a
// decision made now may be posted. The caller holds the node's lock.
func (e *Extender) own(ctx context.Context, node string) (time.Time, error) {
	if e.closing.Load() {
		return time.Time{}, fmt.Errorf("this extender replica is shutting down; the scheduler will retry the bind with another")
	}
	e.leasesMu.Lock()
	h := e.holds[node]
	e.leasesMu.Unlock()
	if h != nil && e.o.Now().Before(h.until) {
		return h.until.Add(postTimeout), nil
	}
	if h != nil {
		// Renew with this replica's last copy: the write succeeds only if nobody touched the
		// Lease since; otherwise the loop below finds out why.
		if err := e.writeHold(ctx, node, h.lease, "renew"); err == nil {
			return e.holdDeadline(node), nil
		} else if !apierrors.IsConflict(err) {
			return time.Time{}, err
		}
	}
	deadline := e.o.Now().Add(handoverTimeout)
	var fresh *coordinationv1.Lease
	for {
		l := fresh
		fresh = nil
		if l == nil {
			var created bool
			var err error
			if l, created, err = e.currentLease(ctx, node); err != nil {
				return time.Time{}, err
			}
			if created {
				if err := e.catchUp(ctx, node); err != nil {
					e.dropHold(node)
					return time.Time{}, err
				}
				return e.holdDeadline(node), nil
			}
		}
		holder := holderOf(l)
		if holder != e.o.Identity {
			e.dropHold(node)
		}
		var err error
		switch {
		case holder == e.o.Identity && e.hasHold(node):
			if req := l.Annotations[handoverAnnotation]; req != "" && req != e.o.Identity {
				// Another replica asked first: let it have the node, then ask for it back.
				if fresh, err = e.releaseLocked(ctx, node, l); err == nil {
					continue
				}
				break
			}
			if err = e.writeHold(ctx, node, l, "renew"); err == nil {
				return e.holdDeadline(node), nil
			}
		case holder == "" || holder == e.o.Identity || e.expired(node, l):
			// holder == e.o.Identity without a hold: a write of this replica landed after it
			// gave up on it. Take the Lease as if it were another replica's.
			if to := l.Annotations[releasedForAnnotation]; holder == "" && to != "" && to != e.o.Identity && !e.expiredAfter(node, l, yieldWindow) {
				break // released for another replica: give it a moment to take it
			}
			if err = e.writeHold(ctx, node, l, "acquire"); err == nil {
				if err = e.catchUp(ctx, node); err != nil {
					e.dropHold(node)
					return time.Time{}, err
				}
				return e.holdDeadline(node), nil
			}
		default:
			if l.Annotations[handoverAnnotation] != e.o.Identity {
				err = e.requestHandover(ctx, l)
			}
		}
		if apierrors.IsConflict(err) {
			// Read the Lease again: the informer may not show the change that won yet.
			if got, gerr := e.o.Client.CoordinationV1().Leases(e.o.LeaseNamespace).Get(ctx, l.Name, metav1.GetOptions{}); gerr == nil {
				e.observe(node, got)
				fresh = got
			}
		} else if err != nil {
			return time.Time{}, err
		}
		if e.o.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("node %s is held by extender replica %q, which neither released it nor let it expire within %v; the scheduler will retry", node, holderOf(l), handoverTimeout)
		}
		if fresh == nil {
			select {
			case <-ctx.Done():
				return time.Time{}, ctx.Err()
			case <-time.After(leasePoll):
			}
		}
	}
}

func (e *Extender) hasHold(node string) bool {
	e.leasesMu.Lock()
	defer e.leasesMu.Unlock()
	return e.holds[node] != nil
}

func (e *Extender) dropHold(node string) {
	e.leasesMu.Lock()
	delete(e.holds, node)
	e.leasesMu.Unlock()
}

func (e *Extender) holdDeadline(node string) time.Time {
	e.leasesMu.Lock()
	defer e.leasesMu.Unlock()
	if h := e.holds[node]; h != nil {
		return h.until.Add(postTimeout)
	}
	return e.o.Now().Add(postTimeout)
}

// writeHold writes the Lease with this replica as holder, based on base (whose resourceVersion
// is the precondition), and holds it from the time the write was sent.
func (e *Extender) writeHold(ctx context.Context, node string, base *coordinationv1.Lease, reason string) error {
	next := base.DeepCopy()
	start := e.o.Now()
	now := metav1.NewMicroTime(start)
	if holderOf(base) != e.o.Identity {
		next.Spec.AcquireTime = &now
		next.Spec.LeaseTransitions = ptr.To(ptr.Deref(base.Spec.LeaseTransitions, 0) + 1)
	}
	next.Spec.HolderIdentity = ptr.To(e.o.Identity)
	next.Spec.LeaseDurationSeconds = ptr.To(int32(leaseDuration / time.Second))
	next.Spec.RenewTime = &now
	if reason == "acquire" {
		// A request addressed to the previous holder is void; its author asks again.
		delete(next.Annotations, handoverAnnotation)
	}
	delete(next.Annotations, releasedForAnnotation)
	for _, k := range obsoleteLeaseAnnotations {
		delete(next.Annotations, k)
	}
	updated, err := e.o.Client.CoordinationV1().Leases(e.o.LeaseNamespace).Update(ctx, next, metav1.UpdateOptions{FieldManager: "neuron-scheduler-extender"})
	if err != nil {
		if !apierrors.IsConflict(err) {
			err = fmt.Errorf("updating the bind lease of node %s in namespace %s (check the extender's RBAC for leases): %w", node, e.o.LeaseNamespace, err)
		}
		return err
	}
	e.metrics.leaseWrites.WithLabelValues(reason).Inc()
	e.observe(node, updated)
	e.leasesMu.Lock()
	e.holds[node] = &hold{lease: updated, until: start.Add(ownWindow)}
	e.leasesMu.Unlock()
	return nil
}

// requestHandover asks the Lease's holder to release it.
func (e *Extender) requestHandover(ctx context.Context, l *coordinationv1.Lease) error {
	next := l.DeepCopy()
	if next.Annotations == nil {
		next.Annotations = map[string]string{}
	}
	next.Annotations[handoverAnnotation] = e.o.Identity
	_, err := e.o.Client.CoordinationV1().Leases(e.o.LeaseNamespace).Update(ctx, next, metav1.UpdateOptions{FieldManager: "neuron-scheduler-extender"})
	if err == nil {
		e.metrics.leaseWrites.WithLabelValues("request").Inc()
	} else if !apierrors.IsConflict(err) {
		err = fmt.Errorf("asking for the bind lease of node %s in namespace %s: %w", nodeOfLease(l), e.o.LeaseNamespace, err)
	}
	return err
}

// releaseLocked gives the node's Lease up: no new decision, and once every Binding of this
// replica's decisions for the node has been answered, the Lease without holder. The caller holds
// the node's lock; base is a recent copy of the Lease.
func (e *Extender) releaseLocked(ctx context.Context, node string, base *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	e.dropHold(node)
	for wait := e.o.Now().Add(postTimeout + time.Second); e.inflightBinds(node) > 0 && e.o.Now().Before(wait); {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	leases := e.o.Client.CoordinationV1().Leases(e.o.LeaseNamespace)
	for attempt := 0; ; attempt++ {
		if holderOf(base) != e.o.Identity {
			return base, nil // taken over already (this replica was too slow)
		}
		next := base.DeepCopy()
		next.Spec.HolderIdentity = nil
		next.Spec.RenewTime = ptr.To(metav1.NewMicroTime(e.o.Now()))
		if next.Annotations == nil {
			next.Annotations = map[string]string{}
		}
		if to := next.Annotations[handoverAnnotation]; to != "" {
			next.Annotations[releasedForAnnotation] = to
		}
		delete(next.Annotations, handoverAnnotation)
		updated, err := leases.Update(ctx, next, metav1.UpdateOptions{FieldManager: "neuron-scheduler-extender"})
		if err == nil {
			e.metrics.leaseWrites.WithLabelValues("release").Inc()
			e.observe(node, updated)
			klog.FromContext(ctx).V(3).Info("Released the bind lease", "node", node, "for", next.Annotations[releasedForAnnotation])
			return updated, nil
		}
		if !apierrors.IsConflict(err) || attempt == 4 {
			return nil, fmt.Errorf("releasing the bind lease of node %s: %w", node, err)
		}
		if base, err = leases.Get(ctx, base.Name, metav1.GetOptions{}); err != nil {
			return nil, fmt.Errorf("releasing the bind lease of node %s: %w", node, err)
		}
	}
}

// release releases the node's Lease if this replica still holds it (from the Lease informer,
// when another replica asks for it).
func (e *Extender) release(ctx context.Context, node string) {
	defer func() {
		e.leasesMu.Lock()
		delete(e.releasing, node)
		e.leasesMu.Unlock()
	}()
	lock := e.nodeLock(node)
	lock.Lock()
	defer lock.Unlock()
	if !e.hasHold(node) {
		return
	}
	l, err := e.o.Client.CoordinationV1().Leases(e.o.LeaseNamespace).Get(ctx, LeaseName(node), metav1.GetOptions{})
	if err == nil {
		_, err = e.releaseLocked(ctx, node, l)
	}
	if err != nil {
		klog.FromContext(ctx).Error(err, "Could not release the bind lease; the other replica takes it when it expires", "node", node)
	}
}

// Shutdown releases every Lease this replica holds, after the Bindings in flight have been
// answered, so that another replica (or this one restarted) can take the nodes over at once.
func (e *Extender) Shutdown(ctx context.Context) {
	e.closing.Store(true)
	e.leasesMu.Lock()
	nodes := make([]string, 0, len(e.holds))
	for n := range e.holds {
		nodes = append(nodes, n)
	}
	e.leasesMu.Unlock()
	for _, n := range nodes {
		e.release(ctx, n)
	}
}

// leaseHandler watches the bind Leases: it notes when each was seen as it is (for expiry) and
// releases a Lease this replica holds when another replica asks for it.
func (e *Extender) leaseHandler(ctx context.Context) cache.ResourceEventHandler {
	on := func(obj any) {
		l, ok := obj.(*coordinationv1.Lease)
		if !ok {
			return
		}
		node := nodeOfLease(l)
		e.observe(node, l)
		req := l.Annotations[handoverAnnotation]
		if holderOf(l) != e.o.Identity || req == "" || req == e.o.Identity {
			return
		}
		e.leasesMu.Lock()
		start := e.holds[node] != nil && !e.releasing[node]
		if start {
			e.releasing[node] = true
		}
		e.leasesMu.Unlock()
		if start {
			go e.release(context.WithoutCancel(ctx), node)
		}
	}
	return cache.ResourceEventHandlerFuncs{AddFunc: on, UpdateFunc: func(_, obj any) { on(obj) }}
}

// observe notes when this replica first saw the Lease's holder and renewal time.
func (e *Extender) observe(node string, l *coordinationv1.Lease) {
	renew := ""
	if l.Spec.RenewTime != nil {
		renew = l.Spec.RenewTime.UTC().Format(time.RFC3339Nano)
	}
	e.leasesMu.Lock()
	defer e.leasesMu.Unlock()
	if o, ok := e.observed[node]; ok && o.holder == holderOf(l) && o.renew == renew {
		return
	}
	e.observed[node] = observation{holder: holderOf(l), renew: renew, at: e.o.Now()}
}

// expired reports whether this replica has seen the Lease unchanged for its duration: its
// holder, if alive, has stopped deciding and its Bindings have been answered. Only this
// replica's clock is used.
func (e *Extender) expired(node string, l *coordinationv1.Lease) bool {
	return e.expiredAfter(node, l, durationOf(l))
}

func (e *Extender) expiredAfter(node string, l *coordinationv1.Lease, d time.Duration) bool {
	e.observe(node, l)
	e.leasesMu.Lock()
	defer e.leasesMu.Unlock()
	return e.o.Now().Sub(e.observed[node].at) > d
}

// currentLease returns the node's Lease as the informer shows it, else read; a node that has
// none yet gets one held by this replica (created reports that).
func (e *Extender) currentLease(ctx context.Context, node string) (l *coordinationv1.Lease, created bool, err error) {
	name := LeaseName(node)
	if obj, ok, _ := e.leaseInf.GetStore().GetByKey(e.o.LeaseNamespace + "/" + name); ok {
		return obj.(*coordinationv1.Lease), false, nil
	}
	// The informer has synced: a Lease it does not show most likely does not exist yet.
	leases := e.o.Client.CoordinationV1().Leases(e.o.LeaseNamespace)
	start := e.o.Now()
	now := metav1.NewMicroTime(start)
	l, err = leases.Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Labels:      map[string]string{leaseLabel: leaseLabelValue},
			Annotations: map[string]string{nodeAnnotation: node},
		},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(e.o.Identity),
			LeaseDurationSeconds: ptr.To(int32(leaseDuration / time.Second)),
			AcquireTime:          &now,
			RenewTime:            &now,
		},
	}, metav1.CreateOptions{FieldManager: "neuron-scheduler-extender"})
	if err == nil {
		e.metrics.leaseWrites.WithLabelValues("acquire").Inc()
		e.observe(node, l)
		e.leasesMu.Lock()
		e.holds[node] = &hold{lease: l, until: start.Add(ownWindow)}
		e.leasesMu.Unlock()
		return l, true, nil
	}
	if apierrors.IsAlreadyExists(err) {
		l, err = leases.Get(ctx, name, metav1.GetOptions{})
	}
	if err != nil {
		return nil, false, fmt.Errorf("reading the bind lease of node %s in namespace %s (check the extender's RBAC for leases): %w", node, e.o.LeaseNamespace, err)
	}
	e.observe(node, l)
	return l, false, nil
}

// catchUp waits until the pod informer shows every allocation record on the node that the API
// server has now: decisions made by the Lease's previous holders.
func (e *Extender) catchUp(ctx context.Context, node string) error {
	list, err := e.o.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(),
	})
	if err != nil {
		return fmt.Errorf("listing the pods of node %s after taking its bind lease: %w", node, err)
	}
	deadline := e.o.Now().Add(catchUpTimeout)
	for i := range list.Items {
		p := &list.Items[i]
		if p.Spec.NodeName != node || p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if r, err := allocation.RecordOf(p); err != nil || r == nil || r.Node != node {
			continue
		}
		for !e.bindVisible(node, p.Namespace, p.Name, p.UID) {
			if e.o.Now().After(deadline) {
				return fmt.Errorf("%w: the extender's cache does not show pod %s/%s on node %s yet", errRetry, p.Namespace, p.Name, node)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(leasePoll):
			}
		}
	}
	return nil
}

func (e *Extender) startBind(node string) {
	e.leasesMu.Lock()
	e.inflight[node]++
	e.leasesMu.Unlock()
}

func (e *Extender) endBind(node string) {
	e.leasesMu.Lock()
	if e.inflight[node]--; e.inflight[node] <= 0 {
		delete(e.inflight, node)
	}
	e.leasesMu.Unlock()
}

func (e *Extender) inflightBinds(node string) int {
	e.leasesMu.Lock()
	defer e.leasesMu.Unlock()
	return e.inflight[node]
}
