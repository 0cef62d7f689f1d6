package extender

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// requestHandover asks the Lease's holder to release it.
func (o *owner) requestHandover(ctx context.Context, l *coordinationv1.Lease) error {
	next := l.DeepCopy()
	if next.Annotations == nil {
		next.Annotations = map[string]string{}
	}
	next.Annotations[handoverAnnotation] = o.identity
	_, err := o.client.CoordinationV1().Leases(o.namespace).Update(ctx, next, metav1.UpdateOptions{FieldManager: "neuron-scheduler-extender"})
	if err == nil {
		o.writes.WithLabelValues("request").Inc()
	} else if !apierrors.IsConflict(err) {
		err = fmt.Errorf("asking for the bind lease of node %s in namespace %s: %w", nodeOfLease(l), o.namespace, err)
	}
	return err
}

// releaseLocked gives the node's Lease up: no new decision, and once every Binding of this
// replica's decisions for the node has been answered, the Lease without holder. The caller holds
// the node's lock; base is a recent copy of the Lease.
func (o *owner) releaseLocked(ctx context.Context, node string, base *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	o.dropHold(node)
	for wait := o.now().Add(postTimeout + time.Second); o.inflightBinds(node) > 0 && o.now().Before(wait); {
		if err := pause(ctx, time.Millisecond); err != nil {
			return nil, err
		}
	}
	leases := o.client.CoordinationV1().Leases(o.namespace)
	for attempt := 0; ; attempt++ {
		if holderOf(base) != o.identity {
			return base, nil // taken over already (this replica was too slow)
		}
		next := released(base, o.now())
		updated, err := leases.Update(ctx, next, metav1.UpdateOptions{FieldManager: "neuron-scheduler-extender"})
		if err == nil {
			o.writes.WithLabelValues("release").Inc()
			o.observe(node, updated)
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

// released returns the Lease without holder, released for the replica that asked for it.
func released(base *coordinationv1.Lease, now time.Time) *coordinationv1.Lease {
	next := base.DeepCopy()
	next.Spec.HolderIdentity = nil
	next.Spec.RenewTime = ptr.To(metav1.NewMicroTime(now))
	if next.Annotations == nil {
		next.Annotations = map[string]string{}
	}
	if to := next.Annotations[handoverAnnotation]; to != "" {
		next.Annotations[releasedForAnnotation] = to
	}
	delete(next.Annotations, handoverAnnotation)
	return next
}

// release releases the node's Lease if this replica still holds it (from the Lease informer,
// when another replica asks for it).
func (o *owner) release(ctx context.Context, node string) {
	defer func() {
		o.mu.Lock()
		delete(o.releasing, node)
		o.mu.Unlock()
	}()
	lock := o.locks.of(node)
	lock.Lock()
	defer lock.Unlock()
	if !o.hasHold(node) {
		return
	}
	l, err := o.client.CoordinationV1().Leases(o.namespace).Get(ctx, LeaseName(node), metav1.GetOptions{})
	if err == nil {
		_, err = o.releaseLocked(ctx, node, l)
	}
	if err != nil {
		klog.FromContext(ctx).Error(err, "Could not release the bind lease; the other replica takes it when it expires", "node", node)
	}
}

// shutdown releases every Lease this replica holds, after the Bindings in flight have been
// answered, and makes no decision after.
func (o *owner) shutdown(ctx context.Context) {
	o.closing.Store(true)
	o.mu.Lock()
	nodes := make([]string, 0, len(o.holds))
	for n := range o.holds {
		nodes = append(nodes, n)
	}
	o.mu.Unlock()
	for _, n := range nodes {
		o.release(ctx, n)
	}
}

// leaseHandler watches the bind Leases: it notes when each was seen as it is (for expiry) and
// releases a Lease this replica holds when another replica asks for it.
func (o *owner) leaseHandler(ctx context.Context) cache.ResourceEventHandler {
	on := func(obj any) {
		l, ok := obj.(*coordinationv1.Lease)
		if !ok {
			return
		}
		node := nodeOfLease(l)
		o.observe(node, l)
		req := l.Annotations[handoverAnnotation]
		if holderOf(l) != o.identity || req == "" || req == o.identity {
			return
		}
		o.mu.Lock()
		start := o.holds[node] != nil && !o.releasing[node]
		if start {
			o.releasing[node] = true
		}
		o.mu.Unlock()
		if start {
			go o.release(context.WithoutCancel(ctx), node)
		}
	}
	return cache.ResourceEventHandlerFuncs{AddFunc: on, UpdateFunc: func(_, obj any) { on(obj) }}
}
