// Package deviceplugin is neuron-device-plugin: it advertises a node's Neuron devices to the
// kubelet as aws.amazon.com/neuron, aws.amazon.com/neurondevice (the same devices) and
// aws.amazon.com/neuroncore (logical cores at the node's LNC), health-checks them, and serves
// Allocate either from the scheduler extender's allocation record or from the kubelet's ids.
//
// The kubelet keeps the three resources in separate pools over the same hardware. Once hardware
// is taken through one pool, the plugin reports the overlapping ids of the other pools unhealthy
// (withdraws them) and gives them back when the hardware is free, so the kubelet can never hand
// out a device twice. It learns what the kubelet handed out from the kubelet's PodResources API.
//
// The decisions are the ledger's (package ledger); this package does the I/O around them: the
// kubelet's gRPC APIs, the pod informer, record patches, the checkpoint file, health checks and
// events. One mutex guards the ledger, held throughout each refresh and each kubelet call.
package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	podresv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/kube-neuron/kube-neuron/internal/deviceplugin/ledger"
	"github.com/kube-neuron/kube-neuron/internal/neuron"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// Source says where Allocate takes the devices from.
type Source string

// Allocation sources.
const (
	// SourceAuto looks for the scheduler extender's allocation record of a matching container
	// first, and serves the kubelet's ids when there is none.
	SourceAuto Source = "auto"
	// SourceExtender requires an allocation record: without one Allocate fails.
	SourceExtender Source = "extender"
	// SourceKubelet always serves the kubelet's ids (no scheduler extender in the cluster).
	SourceKubelet Source = "kubelet"
)

// ParseSource parses an allocation source.
func ParseSource(s string) (Source, error) {
	switch Source(s) {
	case SourceAuto, SourceExtender, SourceKubelet:
		return Source(s), nil
	}
	return "", fmt.Errorf("allocation source %q: use auto, extender or kubelet", s)
}

// Options configure the device plugin.
type Options struct {
	NodeName           string
	SysfsRoot          string
	DevicePluginDir    string // the kubelet's device-plugins directory (kubelet.sock)
	PodResourcesSocket string // the kubelet's PodResources API socket
	// StateDir keeps the checkpoint of Allocate's answers (CheckpointFile); "" keeps none.
	StateDir       string
	HealthInterval time.Duration
	Source         Source
	MetricsAddress string // "" disables the metrics and health endpoint
	// MetricsSampleInterval is how often the Neuron counters are read for the node metrics
	// (nodemetrics.go); 10 s when 0.
	MetricsSampleInterval time.Duration
	Client                kubernetes.Interface
	Catalog               *topology.Catalog
	// Hardware overrides the sysfs reader (tests); nil reads SysfsRoot.
	Hardware neuron.Hardware
}

// Resources the plugin advertises.
var Resources = topology.Resources

// Plugin is a running device plugin.
type Plugin struct {
	o        Options
	shape    *topology.Shape
	hw       neuron.Hardware
	pods     corelisters.PodLister
	recorder record.EventRecorder
	metrics  *metrics

	// mu guards everything below. It is held throughout a refresh and throughout a kubelet call:
	// each reads the ledger, asks it, and writes what it decided (record fixes, the checkpoint)
	// before another begins, so that none sees half of another's work (one pod's record of a
	// swap fixed, the other's not yet).
	mu     sync.Mutex
	ledger *ledger.Ledger
	health *neuron.Health
	pools  map[string]*pool
	// lastHealth is each pool's withdrawn ids as last sent to the kubelet.
	lastHealth map[string]map[string]string
	reported   map[string]bool // pod UID + message: problems of published-stack annotations already reported
	// savedCheckpoint is the checkpoint's content as last written or read.
	savedCheckpoint []byte
	// nodeCondition is NodeCondition as last written (only the health check uses it).
	nodeCondition nodeConditionState

	refreshCh chan struct{}
	// podResources lists the kubelet's PodResources; nil calls listPodResources (tests set it).
	podResources func(context.Context) ([]*podresv1.PodResources, error)
}

// New discovers the node's devices and prepares the plugin.
func New(ctx context.Context, o Options) (*Plugin, error) {
	if o.NodeName == "" {
		return nil, errors.New("the node name is required: set --node-name or NODE_NAME (the DaemonSet sets it from spec.nodeName)")
	}
	if o.Catalog == nil {
		o.Catalog = topology.DefaultCatalog()
	}
	if o.HealthInterval <= 0 {
		o.HealthInterval = time.Second
	}
	if o.Source == "" {
		o.Source = SourceAuto
	}
	hw := o.Hardware
	if hw == nil {
		hw = &neuron.Sysfs{Root: o.SysfsRoot}
	}
	node, err := hw.Discover(ctx)
	if err != nil {
		return nil, err
	}
	shape, err := node.Shape(o.Catalog)
	if err != nil {
		return nil, err
	}
	p := newPlugin(o, shape, neuron.NewHealth(shape.Devices(), node))
	p.hw = hw
	if err := p.loadCheckpoint(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

// newPlugin returns a plugin of a node with shape, knowing nothing yet of its pods.
func newPlugin(o Options, shape *topology.Shape, health *neuron.Health) *Plugin {
	return &Plugin{
		o: o, shape: shape, metrics: newMetrics(), ledger: ledger.New(shape, o.NodeName), health: health,
		pools: map[string]*pool{}, lastHealth: map[string]map[string]string{}, reported: map[string]bool{},
		refreshCh: make(chan struct{}, 1),
	}
}

// Shape returns the node's shape.
func (p *Plugin) Shape() *topology.Shape { return p.shape }

// Holdings returns the holdings of the last refresh and the answers since (for tests and
// debugging).
func (p *Plugin) Holdings() []ledger.Holding {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ledger.Holdings()
}

// Run serves the three resources until ctx ends.
func Run(ctx context.Context, o Options) error {
	p, err := New(ctx, o)
	if err != nil {
		return err
	}
	return p.Run(ctx)
}

// Run serves until ctx ends.
func (p *Plugin) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithValues("node", p.o.NodeName)
	ctx = klog.NewContext(ctx, logger)
	logger.Info("Neuron devices discovered", "instanceType", p.shape.Type.Name, "devices", p.shape.Devices(),
		"lnc", p.shape.LNC, "cores", p.shape.Cores(), "topology", p.shape.Kind(), "allocationSource", p.o.Source)
	stopInformer, err := p.startInformer(ctx)
	if err != nil {
		return err
	}
	defer stopInformer()
	bcast := record.NewBroadcaster(record.WithContext(ctx))
	bcast.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: p.o.Client.CoreV1().Events("")})
	defer bcast.Shutdown()
	p.recorder = bcast.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "neuron-device-plugin", Host: p.o.NodeName})
	if p.o.MetricsAddress != "" {
		defer p.startNodeMetrics(ctx)()
		srv := &http.Server{Addr: p.o.MetricsAddress, Handler: p.metrics.handler(), ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				logger.Error(err, "Metrics server stopped")
			}
		}()
		defer srv.Close()
	}
	p.refresh(ctx)
	if err := p.startPools(ctx); err != nil {
		return err
	}
	defer p.stopPools()
	return p.loop(ctx)
}

// startInformer starts the informer of the node's pods, which asks for a refresh on every
// change, and waits for it to sync.
func (p *Plugin) startInformer(ctx context.Context) (stop func(), err error) {
	factory := informers.NewSharedInformerFactoryWithOptions(p.o.Client, 0, informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
		lo.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", p.o.NodeName).String()
	}))
	podInformer := factory.Core().V1().Pods()
	p.pods = podInformer.Lister()
	if _, err := podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { p.requestRefresh() },
		UpdateFunc: func(any, any) { p.requestRefresh() },
		DeleteFunc: func(any) { p.requestRefresh() },
	}); err != nil {
		return nil, err
	}
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			factory.Shutdown()
			return nil, fmt.Errorf("the %v cache did not sync: check the plugin's RBAC (pods get/list/watch)", typ)
		}
	}
	return factory.Shutdown, nil
}

// loop checks health and refreshes every HealthInterval and on every pod change, and registers
// again when the kubelet restarts.
func (p *Plugin) loop(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	kubeletSock := filepath.Join(p.o.DevicePluginDir, "kubelet.sock")
	kubeletID := fileID(kubeletSock)
	tick := time.NewTicker(p.o.HealthInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			logger.Info("Shutting down")
			return nil
		case <-tick.C:
			p.checkHealth(ctx)
			p.refresh(ctx)
			// A kubelet restart recreates kubelet.sock and removes our sockets: serve and register again.
			if id := fileID(kubeletSock); id != kubeletID || !p.socketsPresent() {
				if id != "" {
					logger.Info("Kubelet restarted: registering again")
					p.stopPools()
					if err := p.startPools(ctx); err != nil {
						logger.Error(err, "Registering with the kubelet failed; retrying")
						continue
					}
				}
				kubeletID = id
			}
		case <-p.refreshCh:
			p.refresh(ctx)
		}
	}
}

func fileID(path string) string {
	fi, err := os.Stat(path)
	if err != nil {
		return ""
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return fmt.Sprintf("%d/%d", st.Ino, fi.ModTime().UnixNano())
	}
	return fi.ModTime().String()
}

func (p *Plugin) requestRefresh() {
	select {
	case p.refreshCh <- struct{}{}:
	default:
	}
}
