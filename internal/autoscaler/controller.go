package autoscaler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	klabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/kube-neuron/kube-neuron/internal/autoscaler/plan"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

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

	// ReservedOnly launches new nodes only into the provider's capacity reservations
	// (Provider.Reservations): the on-demand fallback is off.
	ReservedOnly bool
	// CapacityBlockDrainLead and UltraServerCapacityBlockDrainLead: the nodes of a Capacity
	// Block (an UltraServer block for the second) are cordoned and drained this long before the
	// block ends (blockend.go); 0 means DefaultCapacityBlockDrainLead and
	// DefaultUltraServerCapacityBlockDrainLead.
	CapacityBlockDrainLead, UltraServerCapacityBlockDrainLead time.Duration
	// NodeStartupEstimate is how long a new node takes to take pods: no pod is planned onto a
	// reservation that ends within this estimate and its drain lead. 0 means
	// DefaultNodeStartupEstimate.
	NodeStartupEstimate time.Duration
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
// event is repeated when its message changes, else after five minutes. A node launches with
// LaunchingTaint and takes pods only once release removes it: when it serves and its pods are
// nominated to it (releaseRule). A node the
// autoscaler launched that holds no pod (DaemonSet and mirror pods, and finished pods, aside)
// and no pending pod planned onto it for ScaleDownAfter is cordoned, checked again against the
// API server, and removed; scale-down evicts nothing. Each round also lists the provider's
// capacity reservations for the plan (reservations.go), and drains the launched nodes of a
// Capacity Block that ends (blockend.go).
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
	classes   resourcelisters.DeviceClassLister

	kick chan struct{}
	mu   sync.Mutex
	seen map[types.UID]bool // pending Neuron pods that have started a batch; under mu
	// renominations: the pods planned onto the nodes this controller released lately.
	renominations *renominations

	// fleet is every node this controller launched or found launched: one record each, with
	// its phase (fleet.go).
	fleet *fleet
	// Only the work loop touches these.
	plan    planFunc              // plan.Plan (tests replace it)
	emitted map[eventKey]emission // the last event of each reason on each object
	// placedLast is the node the last round's plan put each pending pod on, by pod key. A pod
	// the plan moved off a launching node (the scheduler took its room) is still listed in that
	// node's planned pods: it is offered to the plan on the node it was moved to only.
	placedLast map[string]string
	// reserved are the provider's reservations as this round lists them.
	reserved roundReservations
	// unknownReservations: the reservations (id/instance type) of a type the catalog does not
	// have, logged once.
	unknownReservations map[string]bool

	leading, synced atomic.Bool
}

// NewController checks the options and returns a controller; Run starts it.
func NewController(o ControllerOptions) (*Controller, error) {
	if o.Client == nil || o.Provider == nil {
		return nil, errors.New("the autoscaler needs a Kubernetes client and a provider")
	}
	if o.Catalog == nil {
		o.Catalog = topology.DefaultCatalog()
	}
	if o.BatchWindow < 0 || o.ScaleDownAfter < 0 || o.RegisterTimeout < 0 || o.MaxNodes < 0 || o.MaxDevices < 0 ||
		o.CapacityBlockDrainLead < 0 || o.UltraServerCapacityBlockDrainLead < 0 || o.NodeStartupEstimate < 0 {
		return nil, errors.New("the batch window, scale-down delay, register timeout, max nodes, max devices, drain leads and node startup estimate must not be negative")
	}
	o.CapacityBlockDrainLead = cmp.Or(o.CapacityBlockDrainLead, DefaultCapacityBlockDrainLead)
	o.UltraServerCapacityBlockDrainLead = cmp.Or(o.UltraServerCapacityBlockDrainLead, DefaultUltraServerCapacityBlockDrainLead)
	o.NodeStartupEstimate = cmp.Or(o.NodeStartupEstimate, DefaultNodeStartupEstimate)
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
		o: o, metrics: newMetrics(), resync: cmp.Or(o.ResyncInterval, resyncInterval), kick: make(chan struct{}, 1), seen: map[types.UID]bool{}, renominations: newRenominations(),
		fleet: newFleet(), plan: plan.Plan, emitted: map[eventKey]emission{}, placedLast: map[string]string{},
		unknownReservations: map[string]bool{},
	}, nil
}

// Handler serves /metrics, /healthz and /readyz. A replica that waits for the Lease is ready; the
// leader once its caches have synced.
func (c *Controller) Handler() http.Handler {
	return c.metrics.handler(func() bool { return !c.leading.Load() || c.synced.Load() })
}

// reconcile is one round: the provider's instances first (what is launching, and for which
// pods) and its reservations, then the scale-up for the pending pods, the pods it added to
// launching nodes recorded through the provider, the release of the launched nodes that are up,
// the drain of the nodes of ending Capacity Blocks, then the scale-down.
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
	pending, devices := c.pending(ctx)
	byKey := make(map[string]plan.PodDemand, len(pending))
	for _, d := range pending {
		byKey[d.Key()] = d
	}
	insts, err := c.instances(ctx, now)
	if err != nil {
		c.metrics.pending.Set(float64(len(pending)))
		return fmt.Errorf("listing the %s provider's nodes (nothing is launched or removed without them): %w", c.o.Provider.Name(), err)
	}
	c.reserved = c.reservations(ctx, now)
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
	assigned := c.scaleUp(ctx, pending, devices, launching, nodeList, taken, now)
	clear(c.placedLast)
	for k, p := range assigned {
		c.placedLast[k] = p.node
	}
	if !c.o.DryRun {
		for _, l := range launching {
			c.recordPlanned(ctx, l.Name)
		}
	}
	c.release(ctx, nodeList, assigned, insts, now)
	nodeList = c.drainEnding(ctx, nodeList, insts, now)
	c.scaleDown(ctx, nodeList, planned, byKey, now)
	return nil
}
