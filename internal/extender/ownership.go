package extender

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
)

// owner runs this replica's side of the bind Lease protocol (lease.go): it makes sure the
// replica holds a node's Lease before it decides for the node, and hands Leases over when other
// replicas ask for them.
type owner struct {
	client    kubernetes.Interface
	namespace string
	identity  string
	now       func() time.Time
	writes    *prometheus.CounterVec // Lease writes by reason
	// visible reports whether the pod informer shows how the decision for a pod with a record on
	// the node ended (catchUp waits for it).
	visible func(node string, pod *corev1.Pod) bool
	leases  cache.Store // the Lease informer's
	locks   nodeLocks
	closing atomic.Bool // Shutdown began: no new decisions

	mu        sync.Mutex
	holds     map[string]*hold       // node -> this replica's hold on the node's Lease
	inflight  map[string]int         // node -> Bindings of this replica's decisions still posting
	observed  map[string]observation // node -> when this replica first saw the Lease's current holder and renewal
	releasing map[string]bool        // node -> a release is under way
}

func newOwner(o Options, writes *prometheus.CounterVec, visible func(string, *corev1.Pod) bool) *owner {
	return &owner{
		client: o.Client, namespace: o.LeaseNamespace, identity: o.Identity, now: o.Now, writes: writes, visible: visible,
		locks: nodeLocks{m: map[string]*sync.Mutex{}},
		holds: map[string]*hold{}, inflight: map[string]int{}, observed: map[string]observation{}, releasing: map[string]bool{},
	}
}

// informers returns the factory of the Lease informer, with the owner's handler added.
func (o *owner) informers(ctx context.Context) (informers.SharedInformerFactory, error) {
	f := informers.NewSharedInformerFactoryWithOptions(o.client, 0, informers.WithNamespace(o.namespace),
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = leaseLabel + "=" + leaseLabelValue }))
	inf := f.Coordination().V1().Leases().Informer()
	if _, err := inf.AddEventHandler(o.leaseHandler(ctx)); err != nil {
		return nil, err
	}
	o.leases = inf.GetStore()
	return f, nil
}

// own makes sure this replica holds the node's Lease, and returns until when a Binding of a
// decision made now may be posted. The caller holds the node's lock.
func (o *owner) own(ctx context.Context, node string) (time.Time, error) {
	if o.closing.Load() {
		return time.Time{}, fmt.Errorf("this extender replica is shutting down; the scheduler will retry the bind with another")
	}
	if deadline, ok, err := o.keepHold(ctx, node); ok || err != nil {
		return deadline, err
	}
	giveUp := o.now().Add(handoverTimeout)
	var l *coordinationv1.Lease
	for {
		if l == nil {
			var created bool
			var err error
			if l, created, err = o.currentLease(ctx, node); err != nil {
				return time.Time{}, err
			}
			if created {
				return o.caughtUp(ctx, node)
			}
		}
		owned, next, err := o.step(ctx, node, l)
		switch {
		case owned && err == nil:
			return o.holdDeadline(node), nil
		case next != nil && err == nil:
			l = next // released for another replica: look again at once
			continue
		case apierrors.IsConflict(err):
			// Read the Lease again: the informer may not show the change that won yet.
			next = o.reread(ctx, node, l)
		case err != nil:
			return time.Time{}, err
		}
		if o.now().After(giveUp) {
			return time.Time{}, fmt.Errorf("node %s is held by extender replica %q, which neither released it nor let it expire within %v; the scheduler will retry", node, holderOf(l), handoverTimeout)
		}
		if next == nil {
			if err := pause(ctx, leasePoll); err != nil {
				return time.Time{}, err
			}
		}
		l = next
	}
}

// keepHold answers own from this replica's hold on the node's Lease, when it has one: within
// ownWindow of its last write, or after a renewal of the copy it wrote (ok). A renewal that
// conflicts (somebody wrote the Lease since) leaves it to own's loop to find out why.
func (o *owner) keepHold(ctx context.Context, node string) (deadline time.Time, ok bool, err error) {
	o.mu.Lock()
	h := o.holds[node]
	o.mu.Unlock()
	switch {
	case h == nil:
		return time.Time{}, false, nil
	case o.now().Before(h.until):
		return h.until.Add(postTimeout), true, nil
	}
	// Renew with this replica's last copy: the write succeeds only if nobody touched the Lease
	// since.
	switch err := o.writeHold(ctx, node, h.lease, "renew"); {
	case err == nil:
		return o.holdDeadline(node), true, nil
	case apierrors.IsConflict(err):
		return time.Time{}, false, nil
	default:
		return time.Time{}, false, err
	}
}

// step makes the move nextMove chooses for Lease l. owned reports that this replica now holds
// the Lease and has caught up with the node; released is the Lease as this replica released it
// for another one. An error that is a conflict means the Lease changed since l.
func (o *owner) step(ctx context.Context, node string, l *coordinationv1.Lease) (owned bool, released *coordinationv1.Lease, err error) {
	if holderOf(l) != o.identity {
		o.dropHold(node)
	}
	switch nextMove(o.identity, l, o.hasHold(node), o.unchanged(node, l)) {
	case renewLease:
		return true, nil, o.writeHold(ctx, node, l, "renew")
	case takeLease:
		if err := o.writeHold(ctx, node, l, "acquire"); err != nil {
			return false, nil, err
		}
		if _, err := o.caughtUp(ctx, node); err != nil {
			return false, nil, err
		}
		return true, nil, nil
	case yieldLease:
		// Another replica asked first: let it have the node, then ask for it back.
		released, err := o.releaseLocked(ctx, node, l)
		return false, released, err
	case askForLease:
		return false, nil, o.requestHandover(ctx, l)
	default: // leaveLease, awaitLease
		return false, nil, nil
	}
}

// caughtUp waits for the decisions of the Lease's previous holders (catchUp) and returns until
// when this replica's Bindings may be posted; it drops the hold when the wait fails.
func (o *owner) caughtUp(ctx context.Context, node string) (time.Time, error) {
	if err := o.catchUp(ctx, node); err != nil {
		o.dropHold(node)
		return time.Time{}, err
	}
	return o.holdDeadline(node), nil
}

// reread returns the Lease as the API server has it now, nil when it cannot be read.
func (o *owner) reread(ctx context.Context, node string, l *coordinationv1.Lease) *coordinationv1.Lease {
	got, err := o.client.CoordinationV1().Leases(o.namespace).Get(ctx, l.Name, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	o.observe(node, got)
	return got
}

func (o *owner) hasHold(node string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.holds[node] != nil
}

func (o *owner) dropHold(node string) {
	o.mu.Lock()
	delete(o.holds, node)
	o.mu.Unlock()
}

func (o *owner) setHold(node string, l *coordinationv1.Lease, start time.Time) {
	o.mu.Lock()
	o.holds[node] = &hold{lease: l, until: start.Add(ownWindow)}
	o.mu.Unlock()
}

func (o *owner) holdDeadline(node string) time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	if h := o.holds[node]; h != nil {
		return h.until.Add(postTimeout)
	}
	return o.now().Add(postTimeout)
}

// writeHold writes the Lease with this replica as holder, based on base (whose resourceVersion
// is the precondition), and holds it from the time the write was sent.
func (o *owner) writeHold(ctx context.Context, node string, base *coordinationv1.Lease, reason string) error {
	next := base.DeepCopy()
	start := o.now()
	now := metav1.NewMicroTime(start)
	if holderOf(base) != o.identity {
		next.Spec.AcquireTime = &now
		next.Spec.LeaseTransitions = ptr.To(ptr.Deref(base.Spec.LeaseTransitions, 0) + 1)
	}
	next.Spec.HolderIdentity = ptr.To(o.identity)
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
	updated, err := o.client.CoordinationV1().Leases(o.namespace).Update(ctx, next, metav1.UpdateOptions{FieldManager: "neuron-scheduler-extender"})
	if err != nil {
		if !apierrors.IsConflict(err) {
			err = fmt.Errorf("updating the bind lease of node %s in namespace %s (check the extender's RBAC for leases): %w", node, o.namespace, err)
		}
		return err
	}
	o.writes.WithLabelValues(reason).Inc()
	o.observe(node, updated)
	o.setHold(node, updated, start)
	return nil
}

// currentLease returns the node's Lease as the informer shows it, else read; a node that has
// none yet gets one held by this replica (created reports that).
func (o *owner) currentLease(ctx context.Context, node string) (l *coordinationv1.Lease, created bool, err error) {
	name := LeaseName(node)
	if obj, ok, _ := o.leases.GetByKey(o.namespace + "/" + name); ok {
		return obj.(*coordinationv1.Lease), false, nil
	}
	// The informer has synced: a Lease it does not show most likely does not exist yet.
	leases := o.client.CoordinationV1().Leases(o.namespace)
	start := o.now()
	now := metav1.NewMicroTime(start)
	l, err = leases.Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Labels:      map[string]string{leaseLabel: leaseLabelValue},
			Annotations: map[string]string{nodeAnnotation: node},
		},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(o.identity),
			LeaseDurationSeconds: ptr.To(int32(leaseDuration / time.Second)),
			AcquireTime:          &now,
			RenewTime:            &now,
		},
	}, metav1.CreateOptions{FieldManager: "neuron-scheduler-extender"})
	if err == nil {
		o.writes.WithLabelValues("acquire").Inc()
		o.observe(node, l)
		o.setHold(node, l, start)
		return l, true, nil
	}
	if apierrors.IsAlreadyExists(err) {
		l, err = leases.Get(ctx, name, metav1.GetOptions{})
	}
	if err != nil {
		return nil, false, fmt.Errorf("reading the bind lease of node %s in namespace %s (check the extender's RBAC for leases): %w", node, o.namespace, err)
	}
	o.observe(node, l)
	return l, false, nil
}

// observe notes when this replica first saw the Lease's holder and renewal time.
func (o *owner) observe(node string, l *coordinationv1.Lease) {
	renew := ""
	if l.Spec.RenewTime != nil {
		renew = l.Spec.RenewTime.UTC().Format(time.RFC3339Nano)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if ob, ok := o.observed[node]; ok && ob.holder == holderOf(l) && ob.renew == renew {
		return
	}
	o.observed[node] = observation{holder: holderOf(l), renew: renew, at: o.now()}
}

// unchanged returns how long this replica has seen the Lease's holder and renewal time as they
// are in l. Only this replica's clock is used: a holder silent for the Lease's duration, if
// alive, has stopped deciding and its Bindings have been answered.
func (o *owner) unchanged(node string, l *coordinationv1.Lease) time.Duration {
	o.observe(node, l)
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.now().Sub(o.observed[node].at)
}

// catchUp waits until the pod informer shows every allocation record on the node that the API
// server has now: decisions made by the Lease's previous holders.
func (o *owner) catchUp(ctx context.Context, node string) error {
	list, err := o.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(),
	})
	if err != nil {
		return fmt.Errorf("listing the pods of node %s after taking its bind lease: %w", node, err)
	}
	deadline := o.now().Add(catchUpTimeout)
	for i := range list.Items {
		p := &list.Items[i]
		if !recordedOn(p, node) {
			continue
		}
		for !o.visible(node, p) {
			if o.now().After(deadline) {
				return fmt.Errorf("%w: the extender's cache does not show pod %s/%s on node %s yet", errRetry, p.Namespace, p.Name, node)
			}
			if err := pause(ctx, leasePoll); err != nil {
				return err
			}
		}
	}
	return nil
}

// recordedOn reports whether the pod, as listed from the API server, is bound to the node with
// an allocation record for it and still holds its devices.
func recordedOn(p *corev1.Pod, node string) bool {
	if p.Spec.NodeName != node || p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return false
	}
	r, err := allocation.RecordOf(p)
	return err == nil && r != nil && r.Node == node
}

// startBind counts a Binding of this replica's decisions for the node as posting: a release
// waits for it.
func (o *owner) startBind(node string) {
	o.mu.Lock()
	o.inflight[node]++
	o.mu.Unlock()
}

func (o *owner) endBind(node string) {
	o.mu.Lock()
	if o.inflight[node]--; o.inflight[node] <= 0 {
		delete(o.inflight, node)
	}
	o.mu.Unlock()
}

func (o *owner) inflightBinds(node string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.inflight[node]
}

// nodeLocks serialise the decisions for each node, and a release of its Lease with them.
type nodeLocks struct {
	mu sync.Mutex
	m  map[string]*sync.Mutex
}

func (l *nodeLocks) of(node string) *sync.Mutex {
	l.mu.Lock()
	defer l.mu.Unlock()
	m, ok := l.m[node]
	if !ok {
		m = &sync.Mutex{}
		l.m[node] = m
	}
	return m
}

// pause waits for d, or until ctx ends.
func pause(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
