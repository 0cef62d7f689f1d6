package extender

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/labels"
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

// Extender decides with the topology engine over usage derived from pods.
type Extender struct {
	o        Options
	pods     cache.SharedIndexInformer
	nodes    corelisters.NodeLister
	recorder record.EventRecorder
	metrics  *metrics
	synced   chan struct{}

	warnMu sync.Mutex
	warned map[string]time.Time // pod UID + message -> when the pod was told

	shapes sync.Map // instance type + capacities -> *topology.Shape (immutable)

	nodeShapesMu sync.RWMutex
	nodeShapes   map[string]nodeShapeEntry // node name -> its shape or why not, from the node informer

	usageCache *usageCache
	memo       scoreMemo
	// argPods and lastPassed spare prioritize decoding what filter decoded (see reuse).
	argPods    podMemo
	lastPassed atomic.Pointer[[]string]
	placements placementCache
	// wholeScores caches wholeScore: shape and placementKey -> the score on the empty node.
	wholeScores sync.Map

	owner  *owner   // the per-node bind Leases
	reread rereads // pods whose cached copy lost a conflict
}

const byRecordNode = "recordNode"

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
	e := &Extender{o: o, metrics: newMetrics(), synced: make(chan struct{}), warned: map[string]time.Time{}, usageCache: newUsageCache(), nodeShapes: map[string]nodeShapeEntry{}}
	e.owner = newOwner(o, e.metrics.leaseWrites, e.bindVisible)
	return e, nil
}

// Start runs the informers and returns once their caches have synced.
func (e *Extender) Start(ctx context.Context) error {
	factory := informers.NewSharedInformerFactoryWithOptions(e.o.Client, 0, informers.WithTransform(stripManagedFields))
	e.pods = factory.Core().V1().Pods().Informer()
	if err := e.pods.AddIndexers(cache.Indexers{byNominatedNode: nominatedNodeIndex, byRecordNode: func(obj any) ([]string, error) {
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return nil, nil
		}
		r, err := e.usageCache.records.RecordOf(pod)
		if err != nil || r == nil {
			return nil, nil
		}
		return []string{r.Node}, nil
	}}); err != nil {
		return err
	}
	if _, err := e.pods.AddEventHandler(e.usageCache.handler()); err != nil {
		return err
	}
	nodeInf := factory.Core().V1().Nodes()
	e.nodes = nodeInf.Lister()
	nodeShapesReg, err := nodeInf.Informer().AddEventHandler(e.nodeShapesHandler())
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
	// Serving starts once the handlers have seen every node too: before, nodeShape would call
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

// nodeShape returns the node's shape, or why the node cannot take Neuron pods from the extender.
// Filter asks for every node the scheduler sends, for every pod: the answer is worked out once
// per node object, when the node informer delivers it (see nodeShapes).
func (e *Extender) nodeShape(name string) (*topology.Shape, error) {
	e.nodeShapesMu.RLock()
	defer e.nodeShapesMu.RUnlock()
	return e.nodeShapeLocked(name)
}

// nodeShapeLocked is nodeShape for a caller that holds nodeShapesMu.
func (e *Extender) nodeShapeLocked(name string) (*topology.Shape, error) {
	ns, ok := e.nodeShapes[name]
	if !ok {
		return nil, fmt.Errorf("node %s is not known to the extender yet", name)
	}
	return ns.shape, ns.err
}

// nodeShapeEntry is a node's shape, or why the extender cannot serve the node.
type nodeShapeEntry struct {
	name  string // the node's name (internName hands it out)
	shape *topology.Shape
	err   error
}

// nodeShapes keeps nodeShape's answers current from the node informer's events.
func (e *Extender) nodeShapesHandler() cache.ResourceEventHandler {
	set := func(obj any) {
		node, ok := obj.(*corev1.Node)
		if !ok {
			return
		}
		shape, err := e.shapeOf(node)
		e.nodeShapesMu.Lock()
		e.nodeShapes[node.Name] = nodeShapeEntry{name: node.Name, shape: shape, err: err}
		e.nodeShapesMu.Unlock()
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    set,
		UpdateFunc: func(_, obj any) { set(obj) },
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if node, ok := obj.(*corev1.Node); ok {
				e.nodeShapesMu.Lock()
				delete(e.nodeShapes, node.Name)
				e.nodeShapesMu.Unlock()
			}
		},
	}
}

// shapeOf returns the node's shape, or why the node cannot take Neuron pods from the extender.
func (e *Extender) shapeOf(node *corev1.Node) (*topology.Shape, error) {
	name := node.Name
	if !allocation.IsNeuronNode(e.o.Catalog, node) {
		return nil, fmt.Errorf("node %s is not a Neuron node (instance type %q is not in the catalog)", name, node.Labels[labels.InstanceType])
	}
	if node.Labels[labels.AllocationMode] == labels.AllocationModeDRA {
		return nil, fmt.Errorf("node %s is served by the DRA driver (%s=%s): request its devices with a ResourceClaim", name, labels.AllocationMode, labels.AllocationModeDRA)
	}
	// Building a shape builds its device graph: do it once per instance type and capacity.
	devices := node.Status.Capacity[corev1.ResourceName(topology.ResourceNeuron)]
	cores := node.Status.Capacity[corev1.ResourceName(topology.ResourceNeuronCore)]
	key := node.Labels[labels.InstanceType] + "|" + devices.String() + "|" + cores.String()
	if s, ok := e.shapes.Load(key); ok {
		return s.(*topology.Shape), nil
	}
	shape, err := allocation.ShapeOfNode(e.o.Catalog, node)
	if err == nil {
		e.shapes.Store(key, shape)
	}
	return shape, err
}

// Filter returns the nodes where the topology engine finds a valid set for every Neuron
// container of the pod, and why the others fail.
func (e *Extender) Filter(ctx context.Context, pod *corev1.Pod, names []string) (passed []string, failed, unresolvable map[string]string) {
	start := e.o.Now()
	defer func() { e.metrics.filterSeconds.Observe(e.o.Now().Sub(start).Seconds()) }()
	logger := klog.FromContext(ctx).WithValues("pod", klog.KObj(pod))
	failed, unresolvable = map[string]string{}, map[string]string{}
	reqs := allocation.PodRequests(pod)
	key := placementKey(pod, reqs)
	var unsupported string
	if len(reqs) == 0 {
		return slices.Clone(names), failed, unresolvable
	}
	if node := e.waitingFor(pod); node != "" {
		kept := make([]string, 0, 1)
		for _, name := range names {
			if name == node {
				kept = append(kept, name)
			} else {
				failed[name] = fmt.Sprintf("the pod waits for node %s, which neuron-autoscaler launched for it (annotation %s) and releases once it serves", node, labels.PlannedNodeAnnotation)
			}
		}
		names = kept
	}
	passed = make([]string, 0, len(names))
	gens, scores := make([]uint64, 0, len(names)), make([]int64, 0, len(names))
	for i, r := range e.placeAll(ctx, names, pod, reqs, key) {
		name := names[i]
		if r.err == nil {
			passed = append(passed, name)
			gens, scores = append(gens, r.gen), append(scores, r.score)
			continue
		}
		switch {
		case r.unknown || Unresolvable(r.err):
			unresolvable[name] = r.err.Error()
			if !r.unknown {
				unsupported = unresolvable[name]
			}
		default:
			failed[name] = r.err.Error()
		}
	}
	e.memo.put(pod.UID, memoEntry{nodes: passed, gens: gens, scores: scores}, e.o.Now())
	logger.V(5).Info("Filter", "nodes", len(names), "passed", len(passed), "failed", len(failed), "unresolvable", len(unresolvable))
	if len(passed) == 0 && unsupported != "" {
		e.metrics.refusals.WithLabelValues("unsupported").Inc()
		e.warn(pod, "UnsupportedNeuronRequest", unsupported)
	} else if len(passed) == 0 && len(names) > 0 {
		e.metrics.refusals.WithLabelValues("no-fit").Inc()
	}
	return passed, failed, unresolvable
}

// warn emits a Warning event on the pod, at most once a minute per message.
func (e *Extender) warn(pod *corev1.Pod, reason, msg string) {
	key := string(pod.UID) + "|" + msg
	e.warnMu.Lock()
	last, seen := e.warned[key]
	now := e.o.Now()
	if !seen || now.Sub(last) > time.Minute {
		e.warned[key] = now
	}
	for k, t := range e.warned {
		if now.Sub(t) > 10*time.Minute {
			delete(e.warned, k)
		}
	}
	e.warnMu.Unlock()
	if !seen || now.Sub(last) > time.Minute {
		e.recorder.Event(pod, corev1.EventTypeWarning, reason, msg)
	}
}

// Prioritize scores the nodes, in the order of names: the tightest fit highest, so that large
// blocks and whole nodes stay free. A node the pod does not fit scores 0.
func (e *Extender) Prioritize(ctx context.Context, pod *corev1.Pod, names []string) []int64 {
	scores, _ := e.prioritize(ctx, pod, names)
	return scores
}

// prioritize is Prioritize, and also returns the best score the pod would get on a whole node
// (one with nothing on it) of one of the nodes' shapes, or -1 when it fits none: see
// relativeScores.
func (e *Extender) prioritize(ctx context.Context, pod *corev1.Pod, names []string) ([]int64, int64) {
	out := make([]int64, len(names))
	reqs := allocation.PodRequests(pod)
	if len(reqs) == 0 {
		return out, -1
	}
	key := placementKey(pod, reqs)
	memo := e.memo.take(pod.UID)
	var miss []string
	var missAt []int
	c := e.usageCache
	c.mu.Lock()
	for i, name := range names {
		// The scheduler sends the nodes filter passed, in filter's order: the memo's next node
		// is this one, unless the scheduler dropped or reordered some.
		j, ok := memo.find(name)
		if ok && memo.gens[j] == c.gen[name] {
			out[i] = memo.scores[j] // filter placed the pod on this node, and nothing changed since
			continue
		}
		miss, missAt = append(miss, name), append(missAt, i)
	}
	c.mu.Unlock()
	for k, r := range e.placeAll(ctx, miss, pod, reqs, key) {
		if r.err == nil {
			out[missAt[k]] = r.score
		}
	}
	preferPlanned(pod, names, out)
	return out, e.wholeNodeScore(names, reqs, key)
}

// wholeNodeScore is the best score the requests get on a whole node of one of the shapes of
// names, or -1 when they fit none.
func (e *Extender) wholeNodeScore(names []string, reqs []allocation.Request, key string) int64 {
	var shapes []*topology.Shape // shapes are shared by the nodes of one type (shapeOf): a few
	var last *topology.Shape
	e.nodeShapesMu.RLock()
	for _, name := range names {
		if s := e.nodeShapes[name].shape; s != nil && s != last {
			last = s
			if !slices.Contains(shapes, s) {
				shapes = append(shapes, s)
			}
		}
	}
	e.nodeShapesMu.RUnlock()
	best := int64(-1)
	for _, s := range shapes {
		best = max(best, e.wholeScore(s, reqs, key))
	}
	return best
}

// wholeScore is the score of the requests on an empty node of the shape, -1 when they do not
// fit there.
func (e *Extender) wholeScore(shape *topology.Shape, reqs []allocation.Request, key string) int64 {
	type wholeKey struct {
		shape *topology.Shape
		key   string
	}
	if key != "" {
		if v, ok := e.wholeScores.Load(wholeKey{shape, key}); ok {
			return v.(int64)
		}
	}
	score := int64(-1)
	if _, s, err := allocation.Plan(topology.NewUsage(shape), reqs, e.o.Policy); err == nil {
		score = ExtenderScore(s)
	}
	if key != "" {
		e.wholeScores.Store(wholeKey{shape, key}, score)
	}
	return score
}

// preferPlanned ranks the node neuron-autoscaler launched for the pod (labels.PlannedNodeAnnotation)
// first among those the pod passed: the planner packed that node for it, and a pod that took
// tighter room elsewhere would leave it part empty and displace the pod that room was planned
// for. (The scheduler tries a nominated node first, but it clears the nomination whenever it
// fails to place the pod, as while the node held pods off.)
func preferPlanned(pod *corev1.Pod, names []string, scores []int64) {
	planned := pod.Annotations[labels.PlannedNodeAnnotation]
	i := slices.Index(names, planned)
	if planned == "" || i < 0 {
		return
	}
	for j := range scores {
		scores[j] = min(scores[j], extenderv1.MaxExtenderPriority-1)
	}
	scores[i] = extenderv1.MaxExtenderPriority
}

// Bind chooses the pod's devices on the node and binds it with a Binding that carries the
// allocation record. Only the replica that holds the node's Lease decides for the node (see
// ownership.go): while it holds it, decisions cost no write but the Binding, and a replica that
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
		defer e.usageCache.forget(node, uid, seq)
	}
	deadline, err := e.owner.own(ctx, node)
	if err != nil {
		return nil, err
	}
	shape, err := e.nodeShape(node)
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
	u, err := e.freshUsage(ctx, shape, node, pod.UID)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errRetry, err)
	}
	// The pods nominated to the node keep the room filter set aside for them: the pod's set is
	// chosen together with theirs.
	var held []string
	var containers []allocation.Container
	if nominated := e.nominatedTo(node, pod); len(nominated) > 0 {
		containers, _, held, err = e.arrange(u, nominated, pod, reqs)
	} else {
		containers, _, err = allocation.Plan(u, reqs, e.o.Policy)
	}
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
	seq := e.usageCache.remember(node, uid, ns+"/"+name, rec)
	return func(ctx context.Context) error { return e.post(ctx, binding, node, rec, seq, deadline) }, nil
}

// countOpening counts, in the scores of filter and prioritize only, a tentative decision for a
// pod bound to a node with nothing on it, while the real decision waits for the node's Lease and
// its pods (the first bind to a node; 100 ms and more under load). Without it the pods the
// scheduler places meanwhile see the node empty, tied with every empty node of its type, and
// each may open another node. It returns the tentative decision's number for forget, or 0 when
// nothing was counted: the node is not empty, or the pod is not in the informer's cache.
func (e *Extender) countOpening(ctx context.Context, ns, name string, uid types.UID, node string) uint64 {
	shape, err := e.nodeShape(node)
	if err != nil {
		return 0
	}
	u, err := e.usage(ctx, shape, node, uid)
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
	containers, _, err := allocation.Plan(u, reqs, e.o.Policy)
	if err != nil {
		return 0
	}
	return e.usageCache.remember(node, uid, ns+"/"+name, &allocation.Record{Node: node, Containers: containers})
}

// post posts the Binding of a decision made by decide (seq: its number in the usage cache) and
// settles the decision. The Binding must be answered by deadline, before another replica could
// take the node's Lease over.
func (e *Extender) post(ctx context.Context, binding *corev1.Binding, node string, rec *allocation.Record, seq uint64, deadline time.Time) error {
	ns, name, uid := binding.Namespace, binding.Name, binding.UID
	logger := klog.FromContext(ctx).WithValues("pod", klog.KRef(ns, name), "node", node)
	var err error
	late := false
	if rec != nil {
		// Another replica may take the node over once this one's Lease has expired; the Binding
		// must have landed or failed by then (see ownership.go).
		if left := deadline.Sub(e.o.Now()); left > 0 {
			pctx, cancel := context.WithTimeout(ctx, left)
			err = e.o.Client.CoreV1().Pods(ns).Bind(pctx, binding, metav1.CreateOptions{FieldManager: "neuron-scheduler-extender"})
			cancel()
		} else {
			late = true
			err = fmt.Errorf("%w: the decision for pod %s/%s on node %s is older than this replica's hold on the node's Lease; deciding again", errRetry, ns, name, node)
		}
		e.owner.endBind(node)
	} else {
		err = e.o.Client.CoreV1().Pods(ns).Bind(ctx, binding, metav1.CreateOptions{FieldManager: "neuron-scheduler-extender"})
	}
	// Only a definite refusal means nothing was written; after a timeout or a server error the
	// binding may have been applied, so the decision keeps counting until the informer shows it.
	definite := late || (err != nil && (apierrors.IsConflict(err) || apierrors.IsNotFound(err) || apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err)))
	if definite && rec != nil {
		e.usageCache.failedBind(node, uid, seq)
	}
	if late {
		return err
	}
	if err != nil {
		if apierrors.IsConflict(err) && rec != nil {
			// The pod changed since it was read (or the cache was behind): read it again.
			e.reread.add(ns, name)
			return fmt.Errorf("%w: pod %s/%s changed: %v", errRetry, ns, name, err)
		}
		return fmt.Errorf("binding pod %s/%s to node %s: %w", ns, name, node, err)
	}
	if rec != nil {
		for _, c := range rec.Containers {
			e.metrics.allocations.WithLabelValues(c.Resource).Inc()
			logger.Info("Bound", "container", c.Name, "resource", c.Resource, "devices", topology.JoinIDs(c.Devices), "cores", topology.JoinIDs(c.Cores))
		}
	} else {
		logger.V(2).Info("Bound a pod without Neuron requests")
	}
	return nil
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
	if e.usageCache.known(node, uid) {
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
