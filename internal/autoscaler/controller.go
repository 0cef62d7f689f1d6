package autoscaler

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	klabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/autoscaler/plan"
	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// More event reasons: FailedScaleUp on a pod (Warning), ScaleDown on a node (Normal).
const (
	// ReasonFailedScaleUp: the node launched for the pod could not be launched, or never
	// registered and was deleted; the pod is planned again.
	ReasonFailedScaleUp = "FailedScaleUp"
	// ReasonScaleDown: an empty node the autoscaler launched is removed.
	ReasonScaleDown = "ScaleDown"
	// ReasonScaleDownCancelled: a pod arrived on an empty node while it was being removed (found
	// by the check after the cordon): the node is uncordoned and kept.
	ReasonScaleDownCancelled = "ScaleDownCancelled"
)

// LeaseName is the leader election Lease: only its holder plans and launches.
const LeaseName = "neuron-autoscaler"

// Defaults of ControllerOptions.
const (
	DefaultRegisterTimeout = 15 * time.Minute
	// eventInterval: an object's event of one reason is not repeated sooner with the same
	// message (cluster-autoscaler's spam filter: one per message and 5 minutes).
	eventInterval = 5 * time.Minute
	// resyncInterval: a round runs at least this often (scale-down, launch timeouts, pods
	// that stay pending).
	resyncInterval = 30 * time.Second
	// settleAfterReady: a node that turned Ready (and was released: LaunchingTaint removed)
	// still counts as launching for this long, so that the scheduler has time to place the
	// pods planned onto it before they are planned again.
	settleAfterReady = 30 * time.Second
	// releaseWait: a launched node that is up and has its planned pods nominated waits this
	// long at most for the other launching nodes before its LaunchingTaint is removed (see
	// Controller.release).
	releaseWait = time.Minute
)

// podsByNode indexes pods by spec.nodeName.
const podsByNode = "nodeName"

// ControllerOptions configure the autoscaler's controller.
type ControllerOptions struct {
	Client kubernetes.Interface
	// ReleaseClient removes LaunchingTaint from the nodes released together; nil means Client.
	// A client with a rate limiter of its own keeps that burst of patches, which should reach
	// the scheduler as close together as can be, from waiting behind the round's nominations and
	// events in Client's.
	ReleaseClient kubernetes.Interface
	Provider      Provider
	// Catalog is the instance catalog; nil means topology.DefaultCatalog().
	Catalog *topology.Catalog
	// Policy places requests in the simulation, as the scheduler extender does; "" is best-fit.
	Policy topology.Policy
	// BatchWindow is how long the controller waits after the first new pending pod before it
	// plans, so that pods created together are planned together.
	BatchWindow time.Duration
	// ScaleDownAfter is how long a node the autoscaler launched stays empty (no pod but DaemonSet
	// and mirror pods, see Controller.empty) before it is cordoned and removed; 0 disables
	// scale-down.
	ScaleDownAfter time.Duration
	// ResyncInterval is how often a round runs without a new pending pod (scale-down, launch
	// timeouts, pods still pending); 0 means 30s.
	ResyncInterval time.Duration
	// MaxNodes and MaxDevices cap the Neuron nodes and devices in the cluster; 0 means no limit.
	MaxNodes, MaxDevices int
	// Families the autoscaler may launch; empty allows every family of the catalog.
	Families []string
	// DryRun only logs and emits events: nothing is launched, cordoned or removed.
	DryRun bool
	// Now is the clock; nil means time.Now.
	Now func() time.Time

	// RegisterTimeout: a launched node that is not a Ready Node this long after its launch is
	// deleted and its pods are planned again. 0 means DefaultRegisterTimeout.
	RegisterTimeout time.Duration
	// LeaderElect: only the holder of the Lease LeaseName in LeaseNamespace runs the loop.
	LeaderElect bool
	// LeaseNamespace holds the Lease; "" means kube-system.
	LeaseNamespace string
	// Identity names this replica in the Lease; "" means the hostname.
	Identity string
	// MetricsAddress serves /metrics, /healthz and /readyz; empty serves nothing.
	MetricsAddress string
}

// Controller watches pending Neuron pods, launches nodes for them through a Provider and
// removes the nodes it launched once they stay empty.
//
// A round starts BatchWindow after the first pending pod it has not seen (and at least every 30
// seconds). It lists the provider's nodes first: a node counts as launching, with the pods its
// PlannedPodsAnnotation names (later rounds add pods to it through Provider.SetPlannedPods, and
// keep them in memory should that fail), until it is a Ready Node that has
// settled (released and Ready for 30 seconds and, with the device plugin, advertising Neuron
// capacity), so a round, or a restarted controller, never launches a second node for a pod. A
// node that does not become Ready within RegisterTimeout is deleted and its pods planned again.
// Pods that fail Check get one NotTriggerScaleUp event that lists its problems; the others go to
// Plan, and every decision is an event on the pod and a nomination of the pod to its node. An
// event is repeated when its message changes, else after five minutes. A node launches with LaunchingTaint and takes pods only
// once release removes it: when it serves and its pods are nominated to it. A node the
// autoscaler launched that holds no pod (DaemonSet and mirror pods, and finished pods, aside)
// and no pending pod planned onto it for ScaleDownAfter is cordoned, checked again against the
// API server, and removed; nothing is ever evicted.
type Controller struct {
	o        ControllerOptions
	metrics  *metrics
	recorder record.EventRecorder
	resync   time.Duration

	pods      corelisters.PodLister
	podIndex  cache.Indexer
	nodes     corelisters.NodeLister
	daemons   appslisters.DaemonSetLister
	claims    resourcelisters.ResourceClaimLister
	templates resourcelisters.ResourceClaimTemplateLister
	rslices   resourcelisters.ResourceSliceLister

	kick chan struct{}
	mu   sync.Mutex
	seen map[types.UID]bool // pending Neuron pods that have started a batch
	// restore: the pods planned onto a node this controller released, by key (see
	// nominationCleared); under mu.
	restore map[string]restoreNomination

	// Only the work loop touches these.
	tracked    map[string]*tracked                                                                     // launching nodes by name
	plan       func([]plan.PodDemand, []plan.NodeOption, plan.Options) (plan.ScaleUp, []plan.Decision) // Plan (tests replace it)
	registered map[string]bool                                                                         // nodes that have registered: never launching again
	retired    map[string]bool                                                                         // names of nodes this controller deleted
	emptySince map[string]time.Time                                                                    // empty launched nodes, since when
	// cordoned are the nodes this controller cordoned to remove them and has neither removed
	// nor uncordoned yet (an uncordon that failed is retried at the next round).
	cordoned map[string]bool
	emitted  map[eventKey]emission // the last event of each reason on each object
	// upSince: launched nodes that still carry LaunchingTaint and serve Neuron hardware, since
	// when this controller has seen them so (a restarted controller waits releaseWait again).
	upSince map[string]time.Time
	// released: when this controller removed a node's LaunchingTaint; the node settles
	// settleAfterReady after that.
	released map[string]time.Time
	// placedLast is the node the last round's plan put each pending pod on, by pod key. A pod
	// the plan moved off a launching node (the scheduler took its room) is still listed in that
	// node's planned pods: it is offered to the plan on the node it was moved to only.
	placedLast map[string]string

	leading, synced atomic.Bool
}

// tracked is a launching node as this controller knows it.
type tracked struct {
	since time.Time // launched, or first seen launching
	// launched is what this controller launched: it counts even while the provider does not
	// list it yet (EC2's eventual consistency).
	launched *Instance
	// added are the pods later rounds planned onto it. They count on it even when recording
	// them through the provider failed, until this controller stops.
	added []string
	// listed are the planned pods the provider listed for it this round (its annotation);
	// written is the list this controller last recorded with SetPlannedPods.
	listed, written []string
}

// NewController checks the options and returns a controller; Run starts it.
func NewController(o ControllerOptions) (*Controller, error) {
	if o.Client == nil || o.Provider == nil {
		return nil, errors.New("the autoscaler needs a Kubernetes client and a provider")
	}
	if o.Catalog == nil {
		o.Catalog = topology.DefaultCatalog()
	}
	if o.BatchWindow < 0 || o.ScaleDownAfter < 0 || o.RegisterTimeout < 0 || o.MaxNodes < 0 || o.MaxDevices < 0 {
		return nil, errors.New("the batch window, scale-down delay, register timeout, max nodes and max devices must not be negative")
	}
	known := plan.Families(o.Catalog.Types())
	for _, f := range o.Families {
		if !slices.Contains(known, f) {
			return nil, fmt.Errorf("family %q is not in the instance catalog (families: %s). Allow only families the catalog has", f, strings.Join(known, ", "))
		}
	}
	if o.RegisterTimeout == 0 {
		o.RegisterTimeout = DefaultRegisterTimeout
	}
	if o.LeaseNamespace == "" {
		o.LeaseNamespace = metav1.NamespaceSystem
	}
	if o.Identity == "" {
		o.Identity, _ = os.Hostname()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Controller{
		o: o, metrics: newMetrics(), resync: cmp.Or(o.ResyncInterval, resyncInterval), kick: make(chan struct{}, 1), seen: map[types.UID]bool{}, restore: map[string]restoreNomination{},
		plan: plan.Plan, tracked: map[string]*tracked{}, registered: map[string]bool{}, retired: map[string]bool{}, emptySince: map[string]time.Time{}, cordoned: map[string]bool{},
		emitted: map[eventKey]emission{}, upSince: map[string]time.Time{}, released: map[string]time.Time{}, placedLast: map[string]string{},
	}, nil
}

// Handler serves /metrics, /healthz and /readyz. A replica that waits for the Lease is ready; the
// leader once its caches have synced.
func (c *Controller) Handler() http.Handler {
	return c.metrics.handler(func() bool { return !c.leading.Load() || c.synced.Load() })
}

// Run serves the metrics and, as the leader when LeaderElect is set, runs the loop until ctx
// ends. Losing the Lease is an error: the process should exit and rejoin the election.
func (c *Controller) Run(ctx context.Context) error {
	if c.o.MetricsAddress != "" {
		if err := c.serve(ctx); err != nil {
			return err
		}
	}
	if !c.o.LeaderElect {
		c.leading.Store(true)
		return c.run(ctx)
	}
	return c.runElected(ctx)
}

func (c *Controller) serve(ctx context.Context) error {
	lis, err := net.Listen("tcp", c.o.MetricsAddress)
	if err != nil {
		return fmt.Errorf("listening on %s for the metrics: %w", c.o.MetricsAddress, err)
	}
	srv := &http.Server{Handler: c.Handler(), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second}
	go func() {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	}()
	go func() {
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.FromContext(ctx).Error(err, "Serving the metrics failed")
		}
	}()
	return nil
}

func (c *Controller) runElected(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: c.o.LeaseNamespace, Name: LeaseName},
		Client:     c.o.Client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: c.o.Identity},
	}
	var (
		mu               sync.Mutex
		running, stopped bool
		runErr           error
		done             = make(chan struct{})
	)
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, Name: LeaseName, ReleaseOnCancel: true,
		LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(leCtx context.Context) {
				mu.Lock()
				if stopped {
					mu.Unlock()
					return
				}
				running = true
				mu.Unlock()
				defer close(done)
				logger.Info("Leading", "lease", klog.KRef(c.o.LeaseNamespace, LeaseName), "identity", c.o.Identity)
				c.leading.Store(true)
				if err := c.run(leCtx); err != nil {
					runErr = err
					cancel()
				}
			},
			OnStoppedLeading: func() { c.leading.Store(false) },
			OnNewLeader: func(id string) {
				if id != c.o.Identity {
					logger.Info("Another replica leads", "lease", klog.KRef(c.o.LeaseNamespace, LeaseName), "leader", id)
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	le.Run(ctx)
	mu.Lock()
	stopped = true
	wasRunning := running
	mu.Unlock()
	if wasRunning {
		<-done
	}
	switch {
	case runErr != nil:
		return runErr
	case ctx.Err() != nil:
		return nil
	}
	return fmt.Errorf("lost the Lease %s/%s: exiting so that a new process rejoins the election", c.o.LeaseNamespace, LeaseName)
}

// run starts the informers and runs the work loop until ctx ends.
func (c *Controller) run(ctx context.Context) error {
	factory, err := c.start(ctx)
	if factory != nil {
		defer factory.Shutdown()
	}
	if err != nil {
		return err
	}
	logger := klog.FromContext(ctx)
	logger.Info("Autoscaler running", "provider", c.o.Provider.Name(), "batchWindow", c.o.BatchWindow, "scaleDownAfter", c.o.ScaleDownAfter,
		"maxNodes", c.o.MaxNodes, "maxDevices", c.o.MaxDevices, "families", c.o.Families, "dryRun", c.o.DryRun)
	ticker := time.NewTicker(c.resync)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		case <-c.kick:
			// The batch: wait for the pods created together with the first one.
			timer := time.NewTimer(c.o.BatchWindow)
			select {
			case <-ctx.Done():
				timer.Stop()
				return nil
			case <-timer.C:
			}
		}
		select {
		case <-c.kick:
		default:
		}
		if err := c.reconcile(ctx); err != nil {
			logger.Error(err, "Autoscaler round failed; retrying at the next one")
		}
	}
}

// start runs the informers and returns once their caches have synced.
func (c *Controller) start(ctx context.Context) (informers.SharedInformerFactory, error) {
	factory := informers.NewSharedInformerFactory(c.o.Client, 0)
	podInformer := factory.Core().V1().Pods().Informer()
	if err := podInformer.AddIndexers(cache.Indexers{podsByNode: func(obj any) ([]string, error) {
		if pod, ok := obj.(*corev1.Pod); ok && pod.Spec.NodeName != "" {
			return []string{pod.Spec.NodeName}, nil
		}
		return nil, nil
	}}); err != nil {
		return nil, err
	}
	if _, err := podInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: c.podChanged,
		UpdateFunc: func(old, obj any) {
			c.podChanged(obj)
			c.nominationCleared(ctx, old, obj)
		},
	}); err != nil {
		return nil, err
	}
	// A device plugin or DRA driver DaemonSet appearing can unblock pods refused for its absence.
	kickOnDaemonSet := func(obj any) {
		if ds, ok := obj.(*appsv1.DaemonSet); ok && (plan.IsDevicePluginDaemonSet(ds) || plan.IsDRADriverDaemonSet(ds)) {
			select {
			case c.kick <- struct{}{}:
			default:
			}
		}
	}
	if _, err := factory.Apps().V1().DaemonSets().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: kickOnDaemonSet}); err != nil {
		return nil, err
	}
	// A launched node that still holds pods off (LaunchingTaint) may have come up: a round
	// releases it, rather than the next resync. The node changes (Ready, capacity) or, on a DRA
	// node, its driver publishes its ResourceSlices.
	kick := func() {
		select {
		case c.kick <- struct{}{}:
		default:
		}
	}
	if _, err := factory.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) {
			if node, ok := obj.(*corev1.Node); ok && holdsPods(node) {
				kick()
			}
		},
	}); err != nil {
		return nil, err
	}
	if _, err := factory.Resource().V1().ResourceSlices().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if s, ok := obj.(*resourcev1.ResourceSlice); ok && s.Spec.Driver == plan.DeviceClass && s.Spec.NodeName != nil {
				if node, err := c.nodes.Get(*s.Spec.NodeName); err == nil && holdsPods(node) {
					kick()
				}
			}
		},
	}); err != nil {
		return nil, err
	}
	c.pods, c.podIndex = factory.Core().V1().Pods().Lister(), podInformer.GetIndexer()
	c.nodes = factory.Core().V1().Nodes().Lister()
	c.daemons = factory.Apps().V1().DaemonSets().Lister()
	c.claims = factory.Resource().V1().ResourceClaims().Lister()
	c.templates = factory.Resource().V1().ResourceClaimTemplates().Lister()
	c.rslices = factory.Resource().V1().ResourceSlices().Lister()
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return factory, fmt.Errorf("the %v cache did not sync: check the autoscaler's RBAC (pods, nodes, daemonsets, resourceclaims, resourceclaimtemplates and resourceslices: list and watch)", typ)
		}
	}
	if c.recorder == nil {
		bcast := record.NewBroadcaster(record.WithContext(ctx))
		bcast.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.o.Client.CoreV1().Events("")})
		go func() {
			<-ctx.Done()
			bcast.Shutdown()
		}()
		c.recorder = bcast.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "neuron-autoscaler"})
	}
	c.synced.Store(true)
	return factory, nil
}

// podChanged starts a batch for a pending Neuron pod not seen before.
func (c *Controller) podChanged(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || !plan.WaitingForScaleUp(pod) || (len(allocation.PodRequests(pod)) == 0 && len(pod.Spec.ResourceClaims) == 0) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen[pod.UID] {
		return
	}
	c.seen[pod.UID] = true
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// restoreNomination is the released node a pod is planned onto: its nomination is written again
// should the scheduler clear it before until.
type restoreNomination struct {
	node  string
	until time.Time
}

// nominationCleared writes a pod's nomination again as soon as the scheduler clears it, when the
// pod is planned onto a node this controller released less than settleAfterReady ago, once per
// pod and release. The scheduler clears the nomination of a pod it failed to place (as it may
// while the nodes released together reach it one by one); written again, the pod's next attempt,
// after its backoff, tries its own node first instead of any node with room, which a round may
// come too late for (the resync is 30 seconds by default). Once only: a pod that fails on its
// own node again is planned again by the next round.
func (c *Controller) nominationCleared(ctx context.Context, oldObj, obj any) {
	old, ok := oldObj.(*corev1.Pod)
	pod, ok2 := obj.(*corev1.Pod)
	if !ok || !ok2 || old.Status.NominatedNodeName == "" || pod.Status.NominatedNodeName != "" || pod.Spec.NodeName != "" || pod.DeletionTimestamp != nil {
		return
	}
	key := pod.Namespace + "/" + pod.Name
	c.mu.Lock()
	r, found := c.restore[key]
	found = found && r.node == old.Status.NominatedNodeName && c.o.Now().Before(r.until)
	if found {
		delete(c.restore, key)
	}
	c.mu.Unlock()
	if !found {
		return
	}
	go func() {
		if c.nominate(ctx, pod, r.node) {
			klog.FromContext(ctx).V(2).Info("Nominated a pod again after the scheduler cleared its nomination", "pod", klog.KObj(pod), "node", r.node)
		}
	}()
}

// reconcile is one round: the provider's instances first (what is launching, and for which
// pods), then the scale-up for the pending pods, the pods it added to launching nodes recorded
// through the provider, the release of the launched nodes that are up, then the scale-down.
func (c *Controller) reconcile(ctx context.Context) error {
	now := c.o.Now()
	maps.DeleteFunc(c.emitted, func(_ eventKey, e emission) bool { return now.Sub(e.at) >= eventInterval })
	nodeList, err := c.nodes.List(klabels.Everything())
	if err != nil {
		return err
	}
	nodes := make(map[string]*corev1.Node, len(nodeList))
	for _, n := range nodeList {
		nodes[n.Name] = n
	}
	pending := c.pending(ctx)
	byKey := make(map[string]plan.PodDemand, len(pending))
	for _, d := range pending {
		byKey[d.Key()] = d
	}
	insts, err := c.instances(ctx, now)
	if err != nil {
		c.metrics.pending.Set(float64(len(pending)))
		return fmt.Errorf("listing the %s provider's nodes (nothing is launched or removed without them): %w", c.o.Provider.Name(), err)
	}
	launching, planned := c.launching(ctx, insts, nodes, byKey, now)
	taken := map[string]bool{}
	for _, in := range insts {
		taken[in.Name] = true
		// On EC2 the instance's node name is not the name it was requested under; requesting
		// that name again would return the same instance instead of a new node.
		if r := in.Annotations[RequestNameAnnotation]; r != "" {
			taken[r] = true
		}
	}
	for name := range nodes {
		taken[name] = true
	}
	assigned := c.scaleUp(ctx, pending, launching, nodeList, taken, now)
	clear(c.placedLast)
	for k, p := range assigned {
		c.placedLast[k] = p.node
	}
	if !c.o.DryRun {
		for _, l := range launching {
			if t := c.tracked[l.Name]; t != nil {
				c.recordPlanned(ctx, l.Name, t)
			}
		}
	}
	c.release(ctx, nodeList, assigned, now)
	c.scaleDown(ctx, nodeList, planned, byKey, now)
	return nil
}

// pending returns the pods waiting for a scale-up that ask for Neuron hardware, by key.
func (c *Controller) pending(ctx context.Context) []plan.PodDemand {
	logger := klog.FromContext(ctx)
	pods, _ := c.pods.List(klabels.Everything())
	var out []plan.PodDemand
	waiting := map[types.UID]bool{}
	var templates *plan.DeviceTemplates
	for _, pod := range pods {
		if !plan.WaitingForScaleUp(pod) {
			continue
		}
		dra, unresolved := c.draRequests(pod)
		if unresolved != "" {
			logger.V(5).Info("Pod's claim not found; its other requests only", "pod", klog.KObj(pod), "claim", unresolved)
		}
		if len(dra) > 0 {
			if templates == nil {
				rslices, _ := c.rslices.List(klabels.Everything())
				templates = plan.NewDeviceTemplates(c.o.Catalog, rslices)
			}
			dra = templates.Resolve(ctx, dra)
		}
		waiting[pod.UID] = true
		if d := plan.NewPodDemand(pod, dra); d.Neuron() {
			out = append(out, d)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key() < out[j].Key() })
	c.mu.Lock()
	for uid := range c.seen {
		if !waiting[uid] {
			delete(c.seen, uid)
		}
	}
	c.mu.Unlock()
	return out
}

// draRequests resolves the pod's ResourceClaims (the claim generated for a template when the
// pod's status names it, else the template) into Neuron requests; unresolved names a claim or
// template that is not in the cache.
func (c *Controller) draRequests(pod *corev1.Pod) (out []plan.DRARequest, unresolved string) {
	for _, rc := range pod.Spec.ResourceClaims {
		claimName := rc.ResourceClaimName
		for _, st := range pod.Status.ResourceClaimStatuses {
			if claimName == nil && st.Name == rc.Name {
				claimName = st.ResourceClaimName
			}
		}
		var spec *resourcev1.ResourceClaimSpec
		if claimName != nil {
			if claim, err := c.claims.ResourceClaims(pod.Namespace).Get(*claimName); err == nil {
				spec = &claim.Spec
			}
		}
		if spec == nil && rc.ResourceClaimTemplateName != nil {
			if t, err := c.templates.ResourceClaimTemplates(pod.Namespace).Get(*rc.ResourceClaimTemplateName); err == nil {
				spec = &t.Spec.Spec
			}
		}
		switch {
		case spec != nil:
			out = append(out, plan.DRARequestsOf(*spec)...)
		case rc.ResourceClaimTemplateName != nil:
			unresolved = *rc.ResourceClaimTemplateName
		case claimName != nil:
			unresolved = *claimName
		}
	}
	return out, unresolved
}

// instances lists the provider's nodes, adds those this controller launched that the provider
// does not list yet, and leaves out those it deleted.
func (c *Controller) instances(ctx context.Context, now time.Time) ([]Instance, error) {
	listed, err := c.o.Provider.Instances(ctx)
	if err != nil {
		return nil, err
	}
	var out []Instance
	names := map[string]bool{}
	byProviderID := map[string]string{}
	for _, in := range listed {
		if c.retired[in.Name] {
			continue
		}
		names[in.Name] = true
		if in.ProviderID != "" {
			byProviderID[in.ProviderID] = in.Name
		}
		out = append(out, in)
	}
	for name, t := range c.tracked {
		// The provider may name a node otherwise once it knows more (EC2: the private DNS name,
		// which RunInstances may not return yet): the same instance under its new name is the
		// same launching node, with the pods this controller planned onto it, not another one.
		if t.launched != nil && !names[name] && t.launched.ProviderID != "" && byProviderID[t.launched.ProviderID] != "" {
			renamed := byProviderID[t.launched.ProviderID]
			if other := c.tracked[renamed]; other != nil {
				for _, p := range other.added {
					if !slices.Contains(t.added, p) {
						t.added = append(t.added, p)
					}
				}
			}
			delete(c.tracked, name)
			t.launched.Name = renamed
			c.tracked[renamed] = t
			for k, at := range c.placedLast {
				if at == name {
					c.placedLast[k] = renamed
				}
			}
			continue
		}
		switch {
		case names[name]:
		case t.launched != nil && now.Sub(t.since) < c.o.RegisterTimeout:
			out = append(out, *t.launched)
		default:
			delete(c.tracked, name)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// launching returns the launching nodes with the pending pods planned onto them, after deleting
// those that did not register in time; planned lists, for every instance, the pods planned onto it.
func (c *Controller) launching(ctx context.Context, insts []Instance, nodes map[string]*corev1.Node, pending map[string]plan.PodDemand, now time.Time) ([]plan.NodeOption, map[string][]string) {
	var out []plan.NodeOption
	planned := map[string][]string{}
	listed := map[string]bool{}
	for _, in := range insts {
		listed[in.Name] = true
	}
	for name := range c.registered {
		if !listed[name] {
			delete(c.registered, name)
		}
	}
	for _, in := range insts {
		t := c.tracked[in.Name]
		pods := plannedPods(in)
		if t != nil {
			for _, k := range t.added {
				if !slices.Contains(pods, k) {
					pods = append(pods, k)
				}
			}
		}
		planned[in.Name] = pods
		node := nodes[in.Name]
		// A node that holds Neuron pods but has not settled yet stays a launching option: the
		// scheduler may have put pods planned elsewhere on it, and its free room is offered to
		// the pending pods before any new node.
		if c.registered[in.Name] || (!in.Launching && c.settled(node, now)) {
			// Registered: it stays so when it turns NotReady later (never deleted for it).
			c.registered[in.Name] = true
			delete(c.tracked, in.Name)
			continue
		}
		if t == nil {
			t = &tracked{since: now}
			c.tracked[in.Name] = t
		}
		t.listed = plannedPods(in)
		if (node == nil || !nodeReady(node)) && now.Sub(t.since) >= c.o.RegisterTimeout && c.timeout(ctx, in, node, pods, pending) {
			delete(planned, in.Name)
			continue
		}
		opt := plan.NodeOption{Name: in.Name, InstanceType: in.Type, Mode: in.Labels[labels.AllocationMode]}
		if opt.InstanceType == "" {
			opt.InstanceType = in.Labels[labels.InstanceType]
		}
		for _, k := range pods {
			d, ok := pending[k]
			if !ok {
				continue
			}
			at, moved := c.placedLast[k]
			if !moved && listed[d.Pod.Annotations[PlannedNodeAnnotation]] {
				// A restarted controller has no placedLast: the pod's annotation names the
				// node the last plan put it on, where an earlier node's list may still name it.
				at, moved = d.Pod.Annotations[PlannedNodeAnnotation], true
			}
			if moved && at != in.Name {
				// Moved to another node by a later plan: offered on two nodes, the planner
				// would count it on both, and on neither where it no longer fits.
				continue
			}
			opt.Pods = append(opt.Pods, d)
		}
		if node != nil {
			for _, pod := range c.podsOn(node.Name) {
				if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
					continue
				}
				if _, still := pending[pod.Namespace+"/"+pod.Name]; still {
					// Bound since the round listed it pending (the cache moved on): it counts once,
					// as the planned pod it was, or the planner finds no room for it beside itself
					// and launches a node for it.
					continue
				}
				if dra, _ := c.draRequests(pod); len(dra) > 0 || len(allocation.PodRequests(pod)) > 0 {
					opt.Bound = append(opt.Bound, plan.NewPodDemand(pod, dra))
				}
			}
		}
		out = append(out, opt)
	}
	return out, planned
}

func plannedPods(in Instance) []string {
	var out []string
	for _, k := range strings.Split(in.Annotations[PlannedPodsAnnotation], ",") {
		if k = strings.TrimSpace(k); k != "" {
			out = append(out, k)
		}
	}
	return out
}

// settled reports whether a node takes pods: Ready for a little while, released (no
// LaunchingTaint) for as long, and, on a device plugin node, advertising Neuron capacity (or
// Ready for the register timeout whatever it advertises).
func (c *Controller) settled(node *corev1.Node, now time.Time) bool {
	if node == nil || !nodeReady(node) || hasLaunchingTaint(node) {
		return false
	}
	if at, ok := c.released[node.Name]; ok && now.Sub(at) < settleAfterReady {
		return false
	}
	since := readySince(node)
	if now.Sub(since) < settleAfterReady {
		return false
	}
	if node.Labels[labels.AllocationMode] == labels.AllocationModeDRA || now.Sub(since) >= c.o.RegisterTimeout {
		return true
	}
	return hasNeuronCapacity(node)
}

func hasNeuronCapacity(node *corev1.Node) bool {
	for _, r := range topology.Resources {
		if q, ok := node.Status.Allocatable[corev1.ResourceName(r)]; ok && !q.IsZero() {
			return true
		}
	}
	return false
}

// hasLaunchingTaint reports whether the node carries LaunchingTaintKey (whatever its value or
// effect: a launch template that registers it otherwise must not keep the node held forever).
func hasLaunchingTaint(node *corev1.Node) bool {
	return slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == LaunchingTaintKey })
}

// holdsPods reports whether a node is one the autoscaler launched that still keeps pods off
// with LaunchingTaint. Nodes without LaunchedByLabel are never released, whatever their taints.
func holdsPods(node *corev1.Node) bool {
	return node.Labels[LaunchedByLabel] == LaunchedByValue && node.DeletionTimestamp == nil && hasLaunchingTaint(node)
}

// serving reports whether a launched node could take its pods but for LaunchingTaint: Ready,
// and advertising every device plugin resource its pods ask for (want; any Neuron resource when
// none) or publishing Neuron devices in a ResourceSlice (DRA); or Ready for the register timeout,
// whatever it serves, so that a node whose plugin never starts is not held forever. The device
// plugin registers its resources one after the other and the kubelet posts each when its status
// next goes out: a node released on the first would turn away pods that ask for another.
func (c *Controller) serving(node *corev1.Node, want []string, now time.Time) bool {
	switch {
	case !nodeReady(node):
		return false
	case now.Sub(readySince(node)) >= c.o.RegisterTimeout:
		return true
	case node.Labels[labels.AllocationMode] == labels.AllocationModeDRA:
		return c.publishesDevices(node.Name)
	case len(want) == 0:
		return hasNeuronCapacity(node)
	}
	for _, r := range want {
		if q, ok := node.Status.Allocatable[corev1.ResourceName(r)]; !ok || q.IsZero() {
			return false
		}
	}
	return true
}

// requestedResources returns the device plugin resources the pod asks for, sorted, once each.
func requestedResources(d plan.PodDemand) []string {
	var out []string
	for _, r := range d.Requests {
		out = append(out, r.Resource)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// publishesDevices reports whether the Neuron DRA driver published devices for the node.
func (c *Controller) publishesDevices(node string) bool {
	list, _ := c.rslices.List(klabels.Everything())
	for _, s := range list {
		if s.Spec.Driver == plan.DeviceClass && s.Spec.NodeName != nil && *s.Spec.NodeName == node && len(s.Spec.Devices) > 0 {
			return true
		}
	}
	return false
}

// release removes LaunchingTaint from the launched nodes that may take pods now.
//
// A node holds pods off until it is serving and every pending pod this round's plan puts on it
// carries its nomination (placed: scaleUp nominated them again just before). Were it released
// earlier, the scheduler would place there pods planned onto nodes still booting (or not yet
// nominated at all), and it clears the nomination of every pod it fails to place, as it does
// while a pod's node is not up. Then it waits for the other launched nodes that hold pods
// planned onto them, and they are released together: the scheduler keeps a nominated pod's room
// only per resource name (a pod asking for cores may take devices nominated pods asked for), so
// a pod whose own node is still held could take room planned for another pod on a node released
// before its own. (The scheduler extender closes that gap for the pods it schedules: it keeps a
// pod off other nodes while its PlannedNodeAnnotation node is held.) A node that has been
// serving for releaseWait is released whatever the others do and whether its pods are
// nominated or not, so nothing is held for long: not when the pods are deleted (they are no
// longer pending), nor when nominating fails, nor across a restart (the rule reads only the
// node, the pods and the plan; a restarted controller times releaseWait again).
func (c *Controller) release(ctx context.Context, nodes []*corev1.Node, placed map[string]placement, now time.Time) {
	logger := klog.FromContext(ctx)
	var holds []*hold
	present := map[string]bool{}
	for _, node := range nodes {
		present[node.Name] = true
		if !holdsPods(node) {
			delete(c.upSince, node.Name)
			continue
		}
		h := &hold{node: node}
		var want []string
		for k, p := range placed {
			if p.node == node.Name {
				h.pods = append(h.pods, k)
				want = append(want, p.resources...)
				if !p.nominated {
					h.unnominated = append(h.unnominated, k)
				}
			}
		}
		sort.Strings(h.pods)
		sort.Strings(h.unnominated)
		slices.Sort(want)
		h.serving = c.serving(node, slices.Compact(want), now)
		if !h.serving {
			delete(c.upSince, node.Name)
		} else if since, ok := c.upSince[node.Name]; !ok {
			c.upSince[node.Name] = now
		} else {
			h.waited = now.Sub(since) >= releaseWait
		}
		holds = append(holds, h)
	}
	forgetMissing(c.upSince, present)
	forgetMissing(c.released, present)
	c.mu.Lock()
	for k, r := range c.restore {
		if !now.Before(r.until) {
			delete(c.restore, k)
		}
	}
	c.mu.Unlock()
	// Ready to go: serving with its pods nominated. The group goes when every node the plan
	// puts pending pods on is ready, or takes pods already: a node still booting (no Node yet,
	// or not serving) holds the others back.
	ready := func(h *hold) bool { return h.serving && len(h.unnominated) == 0 }
	byName := map[string]*hold{}
	for _, h := range holds {
		byName[h.node.Name] = h
	}
	all := true
	for _, p := range placed {
		if h, held := byName[p.node]; (held && !ready(h)) || (!held && !present[p.node]) {
			all = false
		}
	}
	var out []*hold
	for _, h := range holds {
		switch {
		case !h.serving:
			logger.V(4).Info("Launched node not serving yet; it keeps its launching taint", "node", h.node.Name, "pods", h.pods)
		case h.waited:
			if len(h.unnominated) > 0 || !all {
				logger.Info("Releasing a launched node after waiting for its pods' nominations and the other launching nodes", "node", h.node.Name, "waited", releaseWait,
					"pods", h.pods, "notNominated", h.unnominated)
			}
			out = append(out, h)
		case len(h.pods) == 0 || (all && ready(h)):
			out = append(out, h)
		default:
			logger.V(2).Info("Launched node serving; it keeps its launching taint until its pods are nominated and the other launching nodes serve", "node", h.node.Name,
				"pods", h.pods, "notNominated", h.unnominated)
		}
	}
	if len(out) == 0 {
		return
	}
	if c.o.DryRun {
		for _, h := range out {
			logger.Info("Dry run: would remove the launching taint", "node", h.node.Name, "pods", h.pods)
		}
		return
	}
	// The scheduler tries the pending pods as soon as the first release reaches it, and a pod
	// whose own node it does not see released yet may take room planned for another on a node
	// it does: so the releases of a group should reach it as close together as can be (in
	// parallel, through a client of their own), and the node of the pod it tries first goes
	// first, alone. That pod is the one of highest priority, then the oldest (the scheduler
	// queues pods of equal priority in the order they last failed, for pods that wait together
	// the order they were created in; creation times have a one-second resolution, and pods
	// created in the same second are taken in name order, a guess). Its scheduling cycle, which
	// asks the extender, takes longer than the other releases take to arrive.
	slices.SortStableFunc(out, func(a, b *hold) int { return c.compareFirstPods(a.pods, b.pods) })
	errs := make([]error, len(out))
	errs[0] = c.untaint(ctx, out[0].node)
	var wg sync.WaitGroup
	for i, h := range out[1:] {
		wg.Go(func() { errs[i+1] = c.untaint(ctx, h.node) })
	}
	wg.Wait()
	for i, h := range out {
		if errs[i] != nil {
			logger.Error(errs[i], "Removing the launching taint failed; retrying at the next round", "node", h.node.Name)
			continue
		}
		c.released[h.node.Name] = now
		delete(c.upSince, h.node.Name)
		c.mu.Lock()
		for _, k := range h.pods {
			c.restore[k] = restoreNomination{node: h.node.Name, until: now.Add(settleAfterReady)}
		}
		c.mu.Unlock()
		logger.Info("Released a launched node: it takes pods now", "node", h.node.Name, "pods", h.pods)
	}
}

// hold is a launched node that keeps pods off with LaunchingTaint, as a round sees it.
type hold struct {
	node            *corev1.Node
	pods            []string // pending pods the round's plan puts on it
	unnominated     []string // of those, the ones whose nomination is not in place
	serving, waited bool
}

// compareFirstPods compares two nodes' pending pods (keys) by the first of them the scheduler
// will try: highest priority, then the oldest, then by name; a node without pods comes last.
func (c *Controller) compareFirstPods(a, b []string) int {
	type first struct {
		ok       bool
		priority int32
		created  time.Time
		key      string
	}
	firstOf := func(keys []string) first {
		var f first
		for _, k := range keys {
			ns, name, _ := strings.Cut(k, "/")
			pod, err := c.pods.Pods(ns).Get(name)
			if err != nil {
				continue
			}
			g := first{ok: true, priority: ptr.Deref(pod.Spec.Priority, 0), created: pod.CreationTimestamp.Time, key: k}
			if !f.ok || g.priority > f.priority || (g.priority == f.priority && (g.created.Before(f.created) || (g.created.Equal(f.created) && g.key < f.key))) {
				f = g
			}
		}
		return f
	}
	fa, fb := firstOf(a), firstOf(b)
	switch {
	case fa.ok != fb.ok:
		if fa.ok {
			return -1
		}
		return 1
	case fa.priority != fb.priority:
		return cmp.Compare(fb.priority, fa.priority)
	case !fa.created.Equal(fb.created):
		return fa.created.Compare(fb.created)
	}
	return strings.Compare(fa.key, fb.key)
}

// untaint removes LaunchingTaint from a node with a JSON patch that first tests that the taint
// is still where the cache saw it, so that a taint another client added or removed meanwhile is
// never lost (the patch then fails, and the next round tries again with the new list).
func (c *Controller) untaint(ctx context.Context, node *corev1.Node) error {
	client := c.o.Client
	if c.o.ReleaseClient != nil {
		client = c.o.ReleaseClient
	}
	// The patch removes the taint at its index only if it is still there (test): the node's
	// taints change under it (the node lifecycle controller removes node.kubernetes.io/not-ready
	// as the node turns Ready), and the round's copy may be behind. A failed test tries again
	// with the cache's newer copy, if it has one; else the next round does.
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		if attempt > 0 {
			newer, gerr := c.nodes.Get(node.Name)
			if gerr != nil || newer.ResourceVersion == node.ResourceVersion {
				break
			}
			node = newer
		}
		i := slices.IndexFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == LaunchingTaintKey })
		if i < 0 {
			return nil
		}
		path := fmt.Sprintf("/spec/taints/%d", i)
		patch, merr := json.Marshal([]map[string]any{{"op": "test", "path": path, "value": node.Spec.Taints[i]}, {"op": "remove", "path": path}})
		if merr != nil {
			return merr
		}
		_, err = client.CoreV1().Nodes().Patch(ctx, node.Name, types.JSONPatchType, patch, metav1.PatchOptions{})
		if !apierrors.IsInvalid(err) {
			break
		}
	}
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("removing the taint %s from node %s (the autoscaler needs patch on nodes): %w", LaunchingTaintKey, node.Name, err)
	}
	return nil
}

func nodeReady(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func readySince(node *corev1.Node) time.Time {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}

// timeout deletes a node that did not register in time and tells its pending pods; it reports
// whether the node is gone (in dry run, or when the delete fails, it stays launching).
func (c *Controller) timeout(ctx context.Context, in Instance, node *corev1.Node, pods []string, pending map[string]plan.PodDemand) bool {
	logger := klog.FromContext(ctx).WithValues("node", in.Name, "instanceType", in.Type)
	if c.o.DryRun {
		for _, k := range pods {
			if d, ok := pending[k]; ok {
				c.event(ctx, d.Pod, corev1.EventTypeWarning, ReasonFailedScaleUp, fmt.Sprintf("dry run: node %s (%s) did not become Ready within %s: would delete it and plan the pod again", in.Name, in.Type, c.o.RegisterTimeout))
			}
		}
		return false
	}
	logger.Info("Node did not become Ready in time; deleting it and planning its pods again", "timeout", c.o.RegisterTimeout)
	if err := c.o.Provider.Delete(ctx, in.Name); err != nil {
		logger.Error(err, "Deleting a node that did not register failed; retrying at the next round")
		return false
	}
	if node != nil {
		if err := c.o.Client.CoreV1().Nodes().Delete(ctx, in.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			logger.Error(err, "Deleting the Node object failed")
		}
	}
	c.retired[in.Name] = true
	if r := in.Annotations[RequestNameAnnotation]; r != "" {
		c.retired[r] = true
	}
	delete(c.tracked, in.Name)
	c.metrics.removed.Inc()
	for _, k := range pods {
		if d, ok := pending[k]; ok {
			c.metrics.decisions.WithLabelValues(ReasonFailedScaleUp).Inc()
			c.event(ctx, d.Pod, corev1.EventTypeWarning, ReasonFailedScaleUp, fmt.Sprintf("node %s (%s) launched for the pod did not become Ready within %s: "+
				"it was deleted and the pod is planned again. Check the provider (instance console output, kubelet logs)", in.Name, in.Type, c.o.RegisterTimeout))
		}
	}
	return true
}

// placement is where a round's plan puts a pending pod: the node it is nominated to (the name
// the node registers under), and whether the pod carries that nomination now.
type placement struct {
	node      string
	nominated bool
	resources []string // the device plugin resources the pod asks for
}

// scaleUp checks the pending pods, plans, launches and nominates; it returns, by pod key, the
// node the plan puts each pod on (launching or new; nothing in dry run).
func (c *Controller) scaleUp(ctx context.Context, pending []plan.PodDemand, launching []plan.NodeOption, nodes []*corev1.Node, taken map[string]bool, now time.Time) map[string]placement {
	logger := klog.FromContext(ctx)
	start := time.Now()
	defer func() { c.metrics.duration.Observe(time.Since(start).Seconds()) }()
	c.metrics.pending.Set(float64(len(pending)))
	if len(pending) == 0 {
		return nil
	}
	env := plan.Environment{Catalog: c.o.Catalog}
	daemons, _ := c.daemons.List(klabels.Everything())
	for _, ds := range daemons {
		env.DevicePlugin = env.DevicePlugin || plan.IsDevicePluginDaemonSet(ds)
		env.DRADriver = env.DRADriver || plan.IsDRADriverDaemonSet(ds)
	}
	var ok []plan.PodDemand
	for _, d := range pending {
		problems := plan.Check(d, env)
		if len(problems) == 0 {
			ok = append(ok, d)
			continue
		}
		c.metrics.decisions.WithLabelValues(plan.ReasonNotTriggerScaleUp).Inc()
		c.event(ctx, d.Pod, corev1.EventTypeWarning, plan.ReasonNotTriggerScaleUp, problemsMessage(problems))
	}
	if len(ok) == 0 {
		return nil
	}
	isLaunching := map[string]bool{}
	for _, l := range launching {
		isLaunching[l.Name] = true
	}
	var existing plan.Capacity
	for _, n := range nodes {
		if t, found := c.o.Catalog.Lookup(n.Labels[labels.InstanceType]); found && !isLaunching[n.Name] {
			existing.Nodes++
			existing.Devices += t.Devices
		}
	}
	up, decisions, err := safePlan(c.plan, ok, launching, plan.Options{
		Catalog: c.o.Catalog, Policy: c.o.Policy, Families: c.o.Families, MaxNodes: c.o.MaxNodes, MaxDevices: c.o.MaxDevices, Existing: existing,
	})
	if err != nil {
		klog.FromContext(ctx).Error(err, "Planning failed: nothing is launched this round; the next round plans again", "pendingPods", len(ok))
		c.metrics.decisions.WithLabelValues(reasonPlanningFailed).Inc()
		return nil
	}
	// Launch the new nodes; failed[k] says why node k was not launched. names[k] is the name node
	// k was requested under (NodeName), nodeNames[k] the name it registers under, as the
	// provider reports it: the pods are nominated to that one. They differ on EC2, where the
	// node is named after its instance (its private DNS name).
	names := make([]string, len(up.Nodes))
	nodeNames := make([]string, len(up.Nodes))
	failed := make([]error, len(up.Nodes))
	for k, n := range up.Nodes {
		pods := make([]string, len(n.Pods))
		for i, p := range n.Pods {
			pods[i] = p.Pod
		}
		sort.Strings(pods)
		if n.Launching {
			names[k], nodeNames[k] = n.Name, n.Name
			if t := c.tracked[n.Name]; t != nil && !c.o.DryRun {
				for _, p := range pods {
					if !slices.Contains(t.added, p) {
						t.added = append(t.added, p)
					}
				}
			}
			continue
		}
		names[k] = c.nodeName(n.InstanceType.Name, pods, taken)
		nodeNames[k] = names[k]
		taken[names[k]] = true
		if c.o.DryRun {
			logger.Info("Dry run: would launch a node", "node", names[k], "instanceType", n.InstanceType.Name, "mode", n.Mode, "pods", pods)
			continue
		}
		var in Instance
		if in, failed[k] = c.launch(ctx, names[k], n, pods, now); failed[k] == nil {
			nodeNames[k] = in.Name
		}
	}
	// A pod an earlier round planned onto a launching node stays there (Decision.Node is -1): it
	// is nominated to that node again, whose name may have changed since (EC2 reports the private
	// DNS name once it has it), or was never nominated (a restarted controller).
	priorNode := map[string]string{}
	for _, l := range launching {
		for _, d := range l.Pods {
			if _, seen := priorNode[d.Key()]; !seen {
				priorNode[d.Key()] = l.Name
			}
		}
	}
	placed := map[string]placement{}
	for i, dec := range decisions {
		pod := ok[i].Pod
		if dec.Node >= 0 && failed[dec.Node] != nil {
			n := up.Nodes[dec.Node]
			c.metrics.decisions.WithLabelValues(ReasonFailedScaleUp).Inc()
			c.event(ctx, pod, corev1.EventTypeWarning, ReasonFailedScaleUp, fmt.Sprintf("launching a %s node (%s) for the pod failed: %v. It is tried again at the next round",
				n.InstanceType.Name, names[dec.Node], failed[dec.Node]))
			continue
		}
		c.metrics.decisions.WithLabelValues(dec.Reason).Inc()
		switch {
		case dec.Warning() || c.o.DryRun:
		case dec.Node >= 0:
			placed[dec.Pod] = placement{node: nodeNames[dec.Node], nominated: c.nominate(ctx, pod, nodeNames[dec.Node]), resources: requestedResources(ok[i])}
		case dec.Launching && priorNode[dec.Pod] != "":
			placed[dec.Pod] = placement{node: priorNode[dec.Pod], nominated: c.nominate(ctx, pod, priorNode[dec.Pod]), resources: requestedResources(ok[i])}
		}
		eventType, msg := corev1.EventTypeNormal, dec.Message
		switch {
		case dec.Warning():
			eventType = corev1.EventTypeWarning
		case dec.Node >= 0 && !dec.Launching && c.o.DryRun:
			msg = fmt.Sprintf("dry run: would launch node %s for the pod: %s", names[dec.Node], dec.Message)
		case dec.Node >= 0 && !dec.Launching && nodeNames[dec.Node] != names[dec.Node]:
			// The name the node will have, and the one its instance carries (EC2's Name tag).
			msg = fmt.Sprintf("%s: node %s (launched as %s)", dec.Message, nodeNames[dec.Node], names[dec.Node])
		case dec.Node >= 0 && !dec.Launching:
			msg = fmt.Sprintf("%s: node %s", dec.Message, names[dec.Node])
		}
		c.event(ctx, pod, eventType, dec.Reason, msg)
	}
	return placed
}

// recordPlanned records, through the provider, the pods later rounds added to a launching node
// together with those the provider lists for it, so that a restarted controller counts them on
// the node too. Nothing is written while the provider lists them all (or this controller wrote
// the same list already). A failure is logged, and the next round tries again; meanwhile t.added
// keeps the pods on the node.
func (c *Controller) recordPlanned(ctx context.Context, name string, t *tracked) {
	want := slices.Clone(t.listed)
	missing := false
	for _, p := range t.added {
		if !slices.Contains(want, p) {
			want, missing = append(want, p), true
		}
	}
	slices.Sort(want)
	want = slices.Compact(want)
	if !missing || slices.Equal(want, t.written) {
		return
	}
	if err := c.o.Provider.SetPlannedPods(ctx, name, want); err != nil {
		klog.FromContext(ctx).Error(err, "Recording the pods planned onto a launching node failed; they stay planned there until the autoscaler restarts, and the next round tries again",
			"node", name, "pods", want)
		return
	}
	t.written = want
	klog.FromContext(ctx).V(2).Info("Recorded the pods planned onto a launching node", "node", name, "pods", want)
}

// nominate sets the pod's status.nominatedNodeName to the node planned for it, under the name
// the provider says the node registers with (on EC2 the instance's private DNS name or id, not
// the planned name), and reports whether the pod carries that nomination now. The scheduler
// tries that node first, and counts the pod there (with its priority or higher) while it
// filters that node for other pods. But it clears the nomination whenever it fails to place the
// pod (its preemption finds no victim, and tells it to), as it does while the node is not up
// yet: so every round nominates the pods again, and release lets the node take pods only once
// its pods are nominated. A name no node ever takes (a launch template that renames the node)
// makes the hint do nothing, and does no harm.
//
// The pod also gets PlannedNodeAnnotation naming the node, which the scheduler does not clear:
// the scheduler extender keeps the pod off other nodes while that node still holds pods off.
func (c *Controller) nominate(ctx context.Context, pod *corev1.Pod, node string) bool {
	if pod.Annotations[PlannedNodeAnnotation] != node {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{PlannedNodeAnnotation: node}}})
		if _, err := c.o.Client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			klog.FromContext(ctx).V(2).Info("Annotating the pod with its planned node failed; retrying at the next round", "pod", klog.KObj(pod), "node", node, "err", err)
		}
	}
	if pod.Status.NominatedNodeName == node {
		return true
	}
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"nominatedNodeName": node}})
	if _, err := c.o.Client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		klog.FromContext(ctx).V(2).Info("Nominating the pod to its planned node failed; retrying at the next round", "pod", klog.KObj(pod), "node", node, "err", err)
		return false
	}
	return true
}

// reasonPlanningFailed is the decisions metric's reason for a round whose planning failed.
const reasonPlanningFailed = "PlanningFailed"

// safePlan is Plan, with a panic of the planner (an inconsistency it checks for: a bug) turned
// into an error, so that the controller logs it and goes on serving, rather than crashing in a
// loop on the same pending pods.
func safePlan(planFn func([]plan.PodDemand, []plan.NodeOption, plan.Options) (plan.ScaleUp, []plan.Decision), pending []plan.PodDemand, launching []plan.NodeOption, opts plan.Options) (up plan.ScaleUp, decisions []plan.Decision, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the planner failed on %d pending pods: %v", len(pending), r)
		}
	}()
	up, decisions = planFn(pending, launching, opts)
	return up, decisions, nil
}

// nodeName is NodeName, with an attempt number when that name is taken: a node of the same
// name exists, is launching, or was deleted by this controller (EC2 may still list it).
func (c *Controller) nodeName(instanceType string, pods []string, taken map[string]bool) string {
	name := NodeName(instanceType, pods)
	for i := 1; taken[name] || c.retired[name]; i++ {
		name = NodeName(instanceType, append(slices.Clone(pods), fmt.Sprintf("attempt-%d", i)))
	}
	return name
}

// launch launches one planned node and returns it as the provider describes it (its Name is the
// node name it registers under).
func (c *Controller) launch(ctx context.Context, name string, n plan.NodePlan, pods []string, now time.Time) (Instance, error) {
	lbls := n.Labels()
	lbls[LaunchedByLabel] = LaunchedByValue
	req := NodeRequest{
		Name: name, Type: n.InstanceType.Name, Mode: n.Mode, Labels: lbls,
		Annotations: map[string]string{PlannedPodsAnnotation: strings.Join(pods, ",")},
		Taints:      []corev1.Taint{plan.NeuronTaint(), LaunchingTaint()},
	}
	in, err := c.o.Provider.Launch(ctx, req)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Launching a node failed", "node", name, "instanceType", req.Type)
		return Instance{}, err
	}
	if in.Name == "" {
		in.Name = name
	}
	if in.Type == "" {
		in.Type = req.Type
	}
	if in.Labels == nil {
		in.Labels = req.Labels
	}
	if in.Annotations == nil {
		in.Annotations = req.Annotations
	}
	in.Launching = true
	c.tracked[in.Name] = &tracked{since: now, launched: &in}
	c.metrics.launched.WithLabelValues(req.Type).Inc()
	klog.FromContext(ctx).Info("Launched a node", "node", in.Name, "requestedAs", name, "instanceType", req.Type, "mode", req.Mode, "providerID", in.ProviderID, "pods", pods)
	return in, nil
}

// scaleDown removes the launched nodes that stayed empty for ScaleDownAfter.
func (c *Controller) scaleDown(ctx context.Context, nodes []*corev1.Node, planned map[string][]string, pending map[string]plan.PodDemand, now time.Time) {
	if c.o.ScaleDownAfter <= 0 {
		return
	}
	present := map[string]bool{}
	for _, node := range nodes {
		present[node.Name] = true
		due := false
		switch {
		case node.Labels[LaunchedByLabel] != LaunchedByValue || !nodeReady(node) || node.DeletionTimestamp != nil:
			delete(c.emptySince, node.Name)
		case c.empty(c.podsOn(node.Name), planned[node.Name], pending) != "":
			delete(c.emptySince, node.Name)
		default:
			since, ok := c.emptySince[node.Name]
			if !ok {
				c.emptySince[node.Name] = now
				break
			}
			if due = now.Sub(since) >= c.o.ScaleDownAfter; due {
				c.remove(ctx, node, planned[node.Name], pending, now.Sub(since))
			}
		}
		// A node this controller cordoned and then kept: its uncordon failed last time.
		if !due && c.cordoned[node.Name] {
			c.uncordon(ctx, node.Name)
		}
	}
	forgetMissing(c.emptySince, present)
	forgetMissing(c.cordoned, present)
}

// podsOn returns the pods bound to a node, from the cache.
func (c *Controller) podsOn(node string) []*corev1.Pod {
	objs, _ := c.podIndex.ByIndex(podsByNode, node)
	out := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok {
			out = append(out, p)
		}
	}
	return out
}

// empty returns "" when a node may be removed: none of the pods planned onto it is still
// pending, and every pod on it is a DaemonSet pod, a mirror pod or finished (Succeeded or
// Failed). Else it names what keeps the node, for the log and the events. Any other pod keeps
// the node, whether it asks for Neuron hardware or not, and a pod being deleted keeps it until
// it has stopped: the autoscaler evicts nothing, so a node with such a pod is not empty, and
// removing it would kill the pod. DaemonSet and mirror pods belong to the node and go with it.
func (c *Controller) empty(pods []*corev1.Pod, planned []string, pending map[string]plan.PodDemand) string {
	for _, k := range planned {
		if _, ok := pending[k]; ok {
			return "pod " + k + ", planned onto it, is still pending"
		}
	}
	for _, pod := range pods {
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		if _, mirror := pod.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
			continue
		}
		if ref := metav1.GetControllerOf(pod); ref != nil && ref.Kind == "DaemonSet" {
			continue
		}
		return "pod " + pod.Namespace + "/" + pod.Name + " runs on it"
	}
	return ""
}

// remove cordons an empty node, lists its pods again from the API server, and removes it if it
// is still empty. The informer's view of the node may be behind: a pod the scheduler bound to it
// after the round began (but before the cordon, which stops further binds) is in the fresh list,
// and then the node is uncordoned and kept rather than removed with the pod on it.
func (c *Controller) remove(ctx context.Context, node *corev1.Node, planned []string, pending map[string]plan.PodDemand, emptyFor time.Duration) {
	logger := klog.FromContext(ctx).WithValues("node", node.Name, "instanceType", node.Labels[labels.InstanceType])
	if c.o.DryRun {
		logger.Info("Dry run: would remove an empty node", "emptyFor", emptyFor)
		c.event(ctx, node, corev1.EventTypeNormal, ReasonScaleDown, fmt.Sprintf("dry run: would remove node %s: empty for %s", node.Name, c.o.ScaleDownAfter))
		return
	}
	nodes := c.o.Client.CoreV1().Nodes()
	if !node.Spec.Unschedulable {
		if _, err := nodes.Patch(ctx, node.Name, types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{}); err != nil {
			logger.Error(err, "Cordoning an empty node failed; retrying at the next round")
			return
		}
		c.cordoned[node.Name] = true
	}
	list, err := c.o.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node.Name).String()})
	if err != nil {
		logger.Error(err, "Listing the node's pods after cordoning it failed; keeping the node, its emptiness is timed again")
		c.keep(ctx, node.Name)
		return
	}
	var onNode []*corev1.Pod
	for i := range list.Items {
		if list.Items[i].Spec.NodeName == node.Name {
			onNode = append(onNode, &list.Items[i])
		}
	}
	if why := c.empty(onNode, planned, pending); why != "" {
		c.metrics.cancelled.Inc()
		if c.cordoned[node.Name] {
			logger.Info("The node is no longer empty after its cordon; uncordoning and keeping it", "reason", why)
			c.event(ctx, node, corev1.EventTypeNormal, ReasonScaleDownCancelled, fmt.Sprintf("node %s was cordoned for removal after it was empty for %s, but %s: uncordoned and kept", node.Name, c.o.ScaleDownAfter, why))
		} else {
			logger.Info("The node is no longer empty; keeping it, cordoned as it was", "reason", why)
			c.event(ctx, node, corev1.EventTypeNormal, ReasonScaleDownCancelled, fmt.Sprintf("node %s was to be removed after it was empty for %s, but %s: kept (its cordon, which the autoscaler did not set, stays)", node.Name, c.o.ScaleDownAfter, why))
		}
		c.keep(ctx, node.Name)
		return
	}
	if err := c.o.Provider.Delete(ctx, node.Name); err != nil {
		logger.Error(err, "Removing an empty node failed; it stays cordoned and is retried at the next round")
		return
	}
	if err := nodes.Delete(ctx, node.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		logger.Error(err, "Deleting the Node object failed; the provider removed the node")
	}
	c.retired[node.Name] = true
	delete(c.emptySince, node.Name)
	delete(c.tracked, node.Name)
	delete(c.cordoned, node.Name)
	c.metrics.removed.Inc()
	logger.Info("Removed an empty node", "emptyFor", emptyFor)
	c.event(ctx, node, corev1.EventTypeNormal, ReasonScaleDown, fmt.Sprintf("node %s was empty for %s (no pod but DaemonSet and mirror pods): cordoned and removed", node.Name, c.o.ScaleDownAfter))
}

// keep stops the removal of a node: its emptiness is timed again from the next round, and the
// cordon is lifted if this controller set it (a node an administrator cordoned stays so).
func (c *Controller) keep(ctx context.Context, name string) {
	delete(c.emptySince, name)
	if c.cordoned[name] {
		c.uncordon(ctx, name)
	}
}

// uncordon lifts a cordon this controller set; a failure is retried at the next round.
func (c *Controller) uncordon(ctx context.Context, name string) {
	if _, err := c.o.Client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(`{"spec":{"unschedulable":false}}`), metav1.PatchOptions{}); err != nil {
		if !apierrors.IsNotFound(err) {
			klog.FromContext(ctx).Error(err, "Uncordoning a node the autoscaler kept failed; retrying at the next round", "node", name)
			return
		}
	}
	delete(c.cordoned, name)
}

// eventKey is an object and an event reason: the object's latest event of that reason is kept
// in Controller.emitted.
type eventKey struct {
	UID             types.UID
	Namespace, Name string
	Reason          string
}

// emission is an event this controller recorded, and when.
type emission struct {
	msg string
	at  time.Time
}

// event records an event on the object unless the object's last event of that reason, recorded
// less than eventInterval ago, has the same message: a decision that stays the same is told
// once in eventInterval, a changed one at once (also when it changes back). Each caller records
// one event per object, reason and round, so that alternating messages are not repeated every
// round.
func (c *Controller) event(ctx context.Context, obj runtime.Object, eventType, reason, msg string) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return
	}
	key := eventKey{UID: m.GetUID(), Namespace: m.GetNamespace(), Name: m.GetName(), Reason: reason}
	now := c.o.Now()
	if last, ok := c.emitted[key]; ok && last.msg == msg && now.Sub(last.at) < eventInterval {
		return
	}
	c.emitted[key] = emission{msg: msg, at: now}
	klog.FromContext(ctx).V(2).Info("Event", "object", klog.KObj(m), "type", eventType, "reason", reason, "message", msg)
	c.recorder.Event(obj, eventType, reason, msg)
}

// problemsMessage is the message of a pod's NotTriggerScaleUp event: its one problem, or every
// problem, numbered.
func problemsMessage(problems []plan.Problem) string {
	if len(problems) == 1 {
		return problems[0].Message
	}
	parts := make([]string, len(problems))
	for i, p := range problems {
		parts[i] = fmt.Sprintf("(%d) %s", i+1, p.Message)
	}
	return fmt.Sprintf("%d problems: %s", len(problems), strings.Join(parts, "; "))
}

// forgetMissing drops the entries of nodes that are no longer there.
func forgetMissing[V any](m map[string]V, present map[string]bool) {
	maps.DeleteFunc(m, func(name string, _ V) bool { return !present[name] })
}
