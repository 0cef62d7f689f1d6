package extender

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/kube-neuron/kube-neuron/internal/observe"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// Options configure the extender.
type Options struct {
	Client  kubernetes.Interface
	Catalog *topology.Catalog
	Policy  topology.Policy
	// LeaseNamespace holds the per-node bind Leases (kube-neuron-bind-<node>).
	LeaseNamespace string
	// Identity names this replica in the Leases; the hostname and a random suffix by default.
	Identity string
	// Now returns the time; time.Now by default.
	Now func() time.Time
}

// Extender is the scheduler extender: a composition of three parts, each with its own state
// and locks. scores places pods over each node's usage (scoring.go, usage.go, placement.go,
// nominated.go, shapes.go); owner runs the per-node bind Lease protocol (lease.go,
// ownership.go, handover.go); api speaks HTTP (server.go, wire.go, tls.go). Filter,
// Prioritize and Bind (filter.go, bind.go) join them; MirrorUsage (mirror.go) writes the
// published usage annotations.
type Extender struct {
	o        Options
	pods     cache.SharedIndexInformer
	nodes    corelisters.NodeLister
	recorder record.EventRecorder
	metrics  *metrics
	synced   chan struct{}

	scores *scorer // placement over usage, and its caches
	owner  *owner  // the per-node bind Leases
	api    *api    // the HTTP layer's request state

	warnings observe.Throttle // when each pod was last warned
	reread   rereads  // pods whose cached copy lost a conflict
}

// New creates the extender; Start runs its informers.
func New(o Options) (*Extender, error) {
	if o.Client == nil {
		return nil, errors.New("the extender needs a Kubernetes client")
	}
	if o.Catalog == nil {
		o.Catalog = topology.DefaultCatalog()
	}
	if o.Policy == "" {
		o.Policy = topology.BestFit
	}
	if o.LeaseNamespace == "" {
		o.LeaseNamespace = metav1.NamespaceSystem
	}
	if o.Identity == "" {
		// A restarted process is a new holder: it does not know its predecessor's decisions.
		host, _ := os.Hostname()
		o.Identity = host + "_" + string(uuid.NewUUID())
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	e := &Extender{o: o, metrics: newMetrics(), synced: make(chan struct{}), scores: newScorer(o)}
	e.owner = newOwner(o, e.metrics.leaseWrites, e.bindVisible)
	e.api = &api{core: e, registry: e.metrics.registry}
	return e, nil
}

// Start runs the informers and returns once their caches have synced.
func (e *Extender) Start(ctx context.Context) error {
	factory := informers.NewSharedInformerFactoryWithOptions(e.o.Client, 0, informers.WithTransform(stripManagedFields))
	e.pods = factory.Core().V1().Pods().Informer()
	if err := e.pods.AddIndexers(e.scores.indexers()); err != nil {
		return err
	}
	e.scores.pods = e.pods.GetIndexer()
	if _, err := e.pods.AddEventHandler(e.scores.usage.handler()); err != nil {
		return err
	}
	nodeInf := factory.Core().V1().Nodes()
	e.nodes = nodeInf.Lister()
	nodeShapesReg, err := nodeInf.Informer().AddEventHandler(e.scores.shapes.handler())
	if err != nil {
		return err
	}
	leaseFactory, err := e.owner.informers(ctx)
	if err != nil {
		return err
	}
	factory.Start(ctx.Done())
	leaseFactory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("the %v cache did not sync: check the extender's RBAC (pods and nodes get/list/watch)", typ)
		}
	}
	for typ, ok := range leaseFactory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("the %v cache did not sync: check the extender's RBAC (leases get/list/watch in namespace %s)", typ, e.o.LeaseNamespace)
		}
	}
	// Serving starts once the handlers have seen every node too: before, nodeShapes would call
	// existing nodes unknown.
	if !cache.WaitForCacheSync(ctx.Done(), nodeShapesReg.HasSynced) {
		return errors.New("the extender stopped before its node handler had seen every node")
	}
	bcast := record.NewBroadcaster(record.WithContext(ctx))
	bcast.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: e.o.Client.CoreV1().Events("")})
	go func() {
		<-ctx.Done()
		bcast.Shutdown()
	}()
	e.recorder = bcast.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "neuron-scheduler-extender"})
	close(e.synced)
	klog.FromContext(ctx).Info("Caches synced; serving", "policy", e.o.Policy, "leaseNamespace", e.o.LeaseNamespace)
	return nil
}

// stripManagedFields drops what no decision reads and every cached pod and node would carry.
// It changes a shallow copy, never the object it is given: an object from the API server is
// decoded for this informer alone, but the fake clientset of the tests hands out objects it
// still reads (and fills their managedFields), and writing to them raced with its List.
func stripManagedFields(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		if o.ManagedFields != nil {
			c := *o
			c.ManagedFields = nil
			return &c, nil
		}
	case *corev1.Node:
		if o.ManagedFields != nil {
			c := *o
			c.ManagedFields = nil
			return &c, nil
		}
	}
	return obj, nil
}

// Ready reports whether the caches have synced.
func (e *Extender) Ready() bool {
	select {
	case <-e.synced:
		return true
	default:
		return false
	}
}
