package dra

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/neuron"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// Version is the driver's semantic version, published as draDriverVersion.
const Version = "1.0.0"

// LivenessService is the gRPC health service name the DaemonSet's liveness probe asks for.
const LivenessService = "liveness"

// Options configure the driver.
type Options struct {
	NodeName string
	Client   kubernetes.Interface
	Catalog  *topology.Catalog
	// SysfsRoot is where sys/ and opt/aws/neuron are read; Hardware, when set, replaces the
	// sysfs reader (tests).
	SysfsRoot string
	Hardware  neuron.Hardware
	// CDIRoot is the directory of the CDI specs the container runtime reads.
	CDIRoot string
	// RegistrarDir is the kubelet's plugin registration directory; PluginsDir its plugins
	// directory: the driver's socket and checkpoint go to PluginsDir/neuron.aws.com.
	RegistrarDir string
	PluginsDir   string
	// PodUID, when set, lets a new driver pod start while the old one still runs (the
	// DaemonSet's rolling update with maxSurge).
	PodUID         string
	HealthInterval time.Duration
	// MetricsAddress serves /metrics, /healthz and /readyz; "" disables it.
	MetricsAddress string
	// MetricsSampleInterval is how often the Neuron counters are read for the node metrics
	// (nodemetrics.go); 10 s when 0.
	MetricsSampleInterval time.Duration
	// HealthcheckPort serves the gRPC health service LivenessService; 0 disables it.
	HealthcheckPort int
	// UncorrectableErrorTaintEffect is the effect of the taint of a device with uncorrectable
	// errors: NoSchedule ("" too) or NoExecute. Other unhealthy devices taint NoSchedule.
	UncorrectableErrorTaintEffect string
}

// Driver is the kubelet plugin of neuron.aws.com on one node.
type Driver struct {
	o        Options
	hw       neuron.Hardware
	info     NodeInfo
	cdi      *cdiWriter
	dataDir  string
	metrics  *metrics
	recorder record.EventRecorder
	ready    atomic.Bool

	// mu guards the checkpoint and health; the kubeletplugin helper already serialises the gRPC
	// calls, the health loop runs beside them.
	mu         sync.Mutex
	checkpoint *Checkpoint
	health     *neuron.Health
	since      []time.Time // when each unhealthy device turned unhealthy
	helper     *kubeletplugin.Helper
	// taintEffect is the parsed UncorrectableErrorTaintEffect; removeUnhealthy is set once the
	// API server turned out not to serve device taints: unhealthy devices then leave the slice.
	taintEffect     resourceapi.DeviceTaintEffect
	removeUnhealthy atomic.Bool
}

var _ kubeletplugin.DRAPlugin = (*Driver)(nil)

// New discovers the node's devices, reads the checkpoint and prepares the driver; Run starts it.
func New(ctx context.Context, o Options) (*Driver, error) {
	if o.NodeName == "" {
		return nil, errors.New("the node name is required: set --node-name or NODE_NAME (the DaemonSet sets it from spec.nodeName)")
	}
	if o.Client == nil {
		return nil, errors.New("a Kubernetes client is required")
	}
	if o.Catalog == nil {
		o.Catalog = topology.DefaultCatalog()
	}
	if o.HealthInterval <= 0 {
		o.HealthInterval = time.Second
	}
	if o.CDIRoot == "" {
		o.CDIRoot = "/var/run/cdi"
	}
	if o.RegistrarDir == "" {
		o.RegistrarDir = kubeletplugin.KubeletRegistryDir
	}
	if o.PluginsDir == "" {
		o.PluginsDir = kubeletplugin.KubeletPluginsDir
	}
	hw := o.Hardware
	if hw == nil {
		hw = &neuron.Sysfs{Root: o.SysfsRoot}
	}
	node, err := discover(ctx, hw)
	if err != nil {
		return nil, err
	}
	shape, err := node.Shape(o.Catalog)
	if err != nil {
		return nil, err
	}
	effect, err := ParseTaintEffect(o.UncorrectableErrorTaintEffect)
	if err != nil {
		return nil, err
	}
	d := &Driver{
		taintEffect: effect, since: make([]time.Time, len(node.Devices)),
		o: o, hw: hw, metrics: newMetrics(),
		dataDir: filepath.Join(o.PluginsDir, DriverName),
		health:  neuron.NewHealth(len(node.Devices), node),
		info: NodeInfo{
			Name: o.NodeName, Shape: shape, Hardware: node, DriverVersion: Version,
		},
	}
	if err := os.MkdirAll(d.dataDir, 0o750); err != nil {
		return nil, fmt.Errorf("the plugin's data directory: %w", err)
	}
	if d.cdi, err = newCDIWriter(o.CDIRoot); err != nil {
		return nil, err
	}
	if d.checkpoint, err = LoadCheckpoint(d.dataDir); err != nil {
		return nil, err
	}
	d.metrics.prepared.Set(float64(len(d.checkpoint.Claims)))
	return d, nil
}

// discover reads the devices, waiting while the Neuron driver is still forming the node's
// UltraServer.
func discover(ctx context.Context, hw neuron.Hardware) (*neuron.Node, error) {
	for {
		node, err := hw.Discover(ctx)
		if !errors.Is(err, neuron.ErrUltraServerBusy) {
			return node, err
		}
		klog.FromContext(ctx).Info("Waiting for the Neuron driver to form the UltraServer", "err", err)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %w", err, ctx.Err())
		case <-time.After(2 * time.Second):
		}
	}
}

// Run serves until ctx ends.
func Run(ctx context.Context, o Options) error {
	d, err := New(ctx, o)
	if err != nil {
		return err
	}
	return d.Run(ctx)
}

// Run labels the node, registers with the kubelet, publishes the ResourceSlices and keeps them
// in step with device health until ctx ends.
func (d *Driver) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithValues("node", d.o.NodeName)
	ctx = klog.NewContext(ctx, logger)
	logger.Info("Neuron devices discovered", "instanceType", d.info.Shape.Type.Name, "devices", len(d.info.Hardware.Devices),
		"lnc", d.info.Shape.LNC, "ultraServer", d.info.Hardware.UltraServer != nil, "preparedClaims", len(d.checkpoint.Claims))

	if d.o.MetricsAddress != "" {
		defer d.startNodeMetrics(ctx)()
		srv := &http.Server{Addr: d.o.MetricsAddress, Handler: d.metrics.handler(d.ready.Load), ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				logger.Error(err, "Metrics server stopped")
			}
		}()
		defer srv.Close()
	}
	var liveness *health.Server
	if d.o.HealthcheckPort != 0 {
		lis, err := net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(d.o.HealthcheckPort)))
		if err != nil {
			return fmt.Errorf("health check port: %w", err)
		}
		srv := grpc.NewServer()
		liveness = health.NewServer()
		liveness.SetServingStatus(LivenessService, healthpb.HealthCheckResponse_NOT_SERVING)
		healthpb.RegisterHealthServer(srv, liveness)
		go func() { _ = srv.Serve(lis) }()
		defer srv.Stop()
	}

	node, err := d.labelNode(ctx)
	if err != nil {
		return err
	}
	for i, key := range NetworkNodeLabels {
		d.info.NetworkNodes[i] = node.Labels[key]
	}

	bcast := record.NewBroadcaster(record.WithContext(ctx))
	bcast.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: d.o.Client.CoreV1().Events("")})
	defer bcast.Shutdown()
	d.recorder = bcast.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "neuron-dra-driver", Host: d.o.NodeName})

	opts := []kubeletplugin.Option{
		kubeletplugin.DriverName(DriverName),
		kubeletplugin.KubeClient(d.o.Client),
		kubeletplugin.NodeName(d.o.NodeName),
		kubeletplugin.NodeUID(node.UID),
		kubeletplugin.RegistrarDirectoryPath(d.o.RegistrarDir),
		kubeletplugin.PluginDataDirectoryPath(d.dataDir),
	}
	if d.o.PodUID != "" {
		opts = append(opts, kubeletplugin.RollingUpdate(types.UID(d.o.PodUID)))
	}
	helper, err := kubeletplugin.Start(ctx, d, opts...)
	if err != nil {
		return fmt.Errorf("starting the kubelet plugin: %w", err)
	}
	defer helper.Stop()
	d.mu.Lock()
	d.helper = helper
	d.mu.Unlock()
	if err := d.publish(ctx); err != nil {
		return err
	}
	d.ready.Store(true)
	if liveness != nil {
		liveness.SetServingStatus(LivenessService, healthpb.HealthCheckResponse_SERVING)
	}
	logger.Info("Neuron DRA driver started", "driver", DriverName, "cdiRoot", d.o.CDIRoot, "dataDir", d.dataDir)

	tick := time.NewTicker(d.o.HealthInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			logger.Info("Shutting down")
			if liveness != nil {
				liveness.Shutdown()
			}
			return nil
		case <-tick.C:
			d.checkHealth(ctx)
		}
	}
}

// labelNode waits for the Node object and sets the labels that say what serves it: the
// allocation mode, and on UltraServer nodes their identity, which pod affinities select on.
func (d *Driver) labelNode(ctx context.Context) (*corev1.Node, error) {
	want := map[string]string{labels.AllocationMode: labels.AllocationModeDRA}
	maps.Copy(want, labels.UltraServerLabels(d.info.Hardware.UltraServer))
	var node *corev1.Node
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := d.o.Client.CoreV1().Nodes().Get(ctx, d.o.NodeName, metav1.GetOptions{})
		if err != nil {
			klog.FromContext(ctx).Info("Waiting for the Node object", "err", err)
			return false, nil
		}
		node = n
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", d.o.NodeName, err)
	}
	missing := map[string]string{}
	for k, v := range want {
		if node.Labels[k] != v {
			missing[k] = v
		}
	}
	if len(missing) == 0 {
		return node, nil
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": missing}})
	node, err = d.o.Client.CoreV1().Nodes().Patch(ctx, d.o.NodeName, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return nil, fmt.Errorf("labelling node %s: %w (the driver needs nodes patch)", d.o.NodeName, err)
	}
	klog.FromContext(ctx).V(2).Info("Node labelled", "labels", missing)
	return node, nil
}

// publish hands the node's current devices to the ResourceSlice controller.
func (d *Driver) publish(ctx context.Context) error {
	d.mu.Lock()
	res := HealthResources(d.info, DeviceHealth{
		Reasons: d.health.Reasons(), Since: d.since, UncorrectableEffect: d.taintEffect, Remove: d.removeUnhealthy.Load(),
	})
	helper := d.helper
	d.metrics.unhealthy.Set(float64(d.health.UnhealthyCount()))
	d.mu.Unlock()
	devices := 0
	for _, p := range res.Pools {
		for _, s := range p.Slices {
			devices += len(s.Devices)
		}
	}
	d.metrics.published.Set(float64(devices))
	if err := helper.PublishResources(ctx, res); err != nil {
		return fmt.Errorf("publishing ResourceSlices: %w", err)
	}
	klog.FromContext(ctx).V(2).Info("ResourceSlices published", "devices", devices)
	return nil
}

// checkHealth reads the devices again and republishes when one changed state: an unhealthy
// device gets the taint UnhealthyTaintKey (or leaves the slice when the API server does not
// serve taints), which goes when it is healthy.
func (d *Driver) checkHealth(ctx context.Context) {
	logger := klog.FromContext(ctx)
	node, err := d.hw.Discover(ctx)
	if err != nil {
		logger.V(2).Info("Reading the Neuron devices failed", "err", err)
		node = nil
		if s, ok := d.hw.(*neuron.Sysfs); ok {
			node = s.DiscoverPresent(ctx)
		}
	}
	d.mu.Lock()
	changes := d.health.Update(node)
	UpdateSince(d.since, changes, time.Now())
	d.mu.Unlock()
	if len(changes) == 0 {
		return
	}
	nodeRef := &corev1.ObjectReference{Kind: "Node", Name: d.o.NodeName, UID: types.UID(d.o.NodeName)}
	for _, c := range changes {
		if c.Healthy {
			logger.Info("Neuron device healthy again", "device", c.Device)
			d.recorder.Eventf(nodeRef, corev1.EventTypeNormal, "NeuronDeviceHealthy", "Neuron device %d (/dev/neuron%d) is healthy again: %s; %s", c.Device, c.Device, c.Reason, d.healthyAgain(c.Device))
		} else {
			logger.Info("Neuron device unhealthy", "device", c.Device, "reason", c.Reason)
			d.recorder.Eventf(nodeRef, corev1.EventTypeWarning, "NeuronDeviceUnhealthy", "Neuron device %d (/dev/neuron%d) is unhealthy: %s. %s until it recovers; claims already prepared keep it. Check the node with neuron-top or the Neuron driver's logs (dmesg | grep -i neuron)", c.Device, c.Device, c.Reason, d.unhealthyNow(c.Device, c.Code))
		}
	}
	if err := d.publish(ctx); err != nil {
		logger.Error(err, "Republishing after a health change")
	}
}

// PrepareResourceClaims prepares each claim: the plan, the conflict check against every other
// prepared claim, the CDI spec, then the checkpoint. A claim already prepared gets the same
// answer again (its CDI spec rewritten if it went missing).
//
// The checkpoint on disk is the state: it is read at the start of every call and written before
// it returns. During a rolling update two driver pods serve the node and the kubelet may call
// either; the kubeletplugin helper serialises their calls with a file lock, so each call sees
// what the other pod's last call wrote.
func (d *Driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	logger := klog.FromContext(ctx)
	start := time.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	cp, err := LoadCheckpoint(d.dataDir)
	if err != nil {
		d.metrics.failures.WithLabelValues("prepare").Add(float64(len(claims)))
		return nil, err
	}
	d.checkpoint = cp
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	var added []string
	for _, claim := range claims {
		res, isNew := d.prepare(ctx, claim)
		if res.Err != nil {
			d.metrics.failures.WithLabelValues("prepare").Inc()
			logger.Info("Claim not prepared", "claim", klog.KObj(claim), "err", res.Err)
		} else if isNew {
			added = append(added, string(claim.UID))
		}
		out[claim.UID] = res
	}
	if len(added) > 0 {
		if err := cp.Save(d.dataDir); err != nil {
			// Not recorded, so not prepared: undo, and let the kubelet retry.
			for _, uid := range added {
				_ = d.cdi.remove(cp.Claims[uid].CDISpec)
				delete(cp.Claims, uid)
				out[types.UID(uid)] = kubeletplugin.PrepareResult{Err: err}
			}
			d.metrics.failures.WithLabelValues("prepare").Add(float64(len(added)))
		}
	}
	d.metrics.prepared.Set(float64(len(cp.Claims)))
	d.observe("prepare", start, len(claims))
	return out, nil
}

// observe records a call's duration, spread over its claims.
func (d *Driver) observe(op string, start time.Time, claims int) {
	if claims == 0 {
		return
	}
	per := time.Since(start).Seconds() / float64(claims)
	for range claims {
		d.metrics.duration.WithLabelValues(op).Observe(per)
	}
}

func (d *Driver) prepare(ctx context.Context, claim *resourceapi.ResourceClaim) (kubeletplugin.PrepareResult, bool) {
	logger := klog.FromContext(ctx)
	uid := string(claim.UID)
	pc := d.checkpoint.Claims[uid]
	isNew := pc == nil
	if isNew {
		plan, err := PlanClaim(d.info, claim)
		if err != nil {
			return kubeletplugin.PrepareResult{Err: err}, false
		}
		if other, dev := d.checkpoint.Holder(uid, plan.Indexes()); other != "" {
			o := d.checkpoint.Claims[other]
			return kubeletplugin.PrepareResult{Err: fmt.Errorf("neuron device %d is already prepared for claim %s/%s (uid %s): a device is never given to two claims; the claim waits until that claim is unprepared", dev, o.Namespace, o.Name, other)}, false
		}
		pc = &PreparedClaim{Plan: *plan}
	}
	name, ids, err := d.cdi.write(uid, &pc.Plan)
	if err != nil {
		return kubeletplugin.PrepareResult{Err: err}, false
	}
	if !isNew && (name != pc.CDISpec || !sameIDs(ids, pc.CDIDevices)) {
		logger.Info("Prepared claim's CDI spec rewritten with a different layout", "claim", klog.KObj(claim))
	}
	pc.CDISpec, pc.CDIDevices = name, ids
	d.checkpoint.Claims[uid] = pc
	res := kubeletplugin.PrepareResult{}
	for i, dev := range pc.Devices {
		res.Devices = append(res.Devices, kubeletplugin.Device{
			Requests: []string{dev.Request}, PoolName: dev.Pool, DeviceName: dev.Device, CDIDeviceIDs: ids[i],
		})
	}
	if isNew {
		logger.V(2).Info("Claim prepared", "claim", klog.KObj(claim), "devices", topology.FormatList(pc.Indexes()), "env", pc.Env)
	}
	return res, isNew
}

// UnprepareResourceClaims removes what prepare made; claims it does not know are already done.
// Like prepare, it reads the checkpoint first and writes it before returning: when the write
// fails, the kubelet's retry finds the claims still recorded and removes them again.
func (d *Driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	logger := klog.FromContext(ctx)
	start := time.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	cp, err := LoadCheckpoint(d.dataDir)
	if err != nil {
		d.metrics.failures.WithLabelValues("unprepare").Add(float64(len(claims)))
		return nil, err
	}
	d.checkpoint = cp
	out := make(map[types.UID]error, len(claims))
	changed := false
	for _, c := range claims {
		uid := string(c.UID)
		pc := cp.Claims[uid]
		if pc == nil {
			out[c.UID] = nil
			continue
		}
		if err := d.cdi.remove(pc.CDISpec); err != nil {
			d.metrics.failures.WithLabelValues("unprepare").Inc()
			out[c.UID] = err
			continue
		}
		delete(cp.Claims, uid)
		changed = true
		out[c.UID] = nil
		logger.V(2).Info("Claim unprepared", "claim", c.String(), "devices", topology.FormatList(pc.Indexes()))
	}
	if changed {
		if err := cp.Save(d.dataDir); err != nil {
			d.metrics.failures.WithLabelValues("unprepare").Add(float64(len(claims)))
			return nil, err
		}
	}
	d.metrics.prepared.Set(float64(len(cp.Claims)))
	d.observe("unprepare", start, len(claims))
	return out, nil
}

// HandleError logs errors of the background work (ResourceSlice publishing); all are retried.
// When the API server dropped the device taints (it does not serve them) the driver falls back,
// once, to leaving unhealthy devices out of the slice.
func (d *Driver) HandleError(ctx context.Context, err error, msg string) {
	if TaintsDropped(err) && d.removeUnhealthy.CompareAndSwap(false, true) {
		d.taintsNotServed(ctx)
		return
	}
	klog.FromContext(ctx).Error(err, msg)
}
