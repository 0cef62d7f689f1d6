// Package deviceplugin is neuron-device-plugin: it advertises a node's Neuron devices to the
// kubelet as aws.amazon.com/neuron, aws.amazon.com/neurondevice (the same devices) and
// aws.amazon.com/neuroncore (logical cores at the node's LNC), health-checks them, and serves
// Allocate either from the scheduler extender's allocation record or from the kubelet's ids.
//
// The kubelet keeps the three resources in separate pools over the same hardware. Once hardware
// is taken through one pool, the plugin reports the overlapping ids of the other pools unhealthy
// (withdraws them) and gives them back when the hardware is free, so the kubelet can never hand
// out a device twice. It learns what the kubelet handed out from the kubelet's PodResources API.
package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	podresv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
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
	Client         kubernetes.Interface
	Catalog        *topology.Catalog
	// Hardware overrides the sysfs reader (tests); nil reads SysfsRoot.
	Hardware neuron.Hardware
}

// Plugin is a running device plugin.
type Plugin struct {
	o        Options
	shape    *topology.Shape
	hw       neuron.Hardware
	pods     corelisters.PodLister
	recorder record.EventRecorder
	metrics  *metrics

	// records is held for writing while a refresh computes and writes its record fixes, and for
	// reading while a call matches a record: a call never sees half of a swap (one pod's record
	// fixed, the other's not yet).
	records sync.RWMutex

	mu       sync.Mutex
	health   *neuron.Health
	holdings []Holding
	served   map[string]servedEntry // servedKey -> what Allocate answered
	inflight map[string]time.Time   // podUID/container matched by calls whose patch is in flight
	// written holds the record entries this plugin wrote (podUID/container/resource) until the
	// informer shows them: the plugin reads its own writes, also when its watch lags.
	written    map[string]writtenEntry
	pools      map[string]*pool
	lastHealth map[string]map[string]string
	reported   map[string]bool // pod UID + message: problems of published-stack annotations already reported
	// savedCheckpoint is the checkpoint's content as last written or read.
	savedCheckpoint []byte

	refreshCh chan struct{}
	// podResources lists the kubelet's PodResources; nil calls listPodResources (tests set it).
	podResources func(context.Context) ([]*podresv1.PodResources, error)
}

// kubeletPodResources lists what the kubelet holds for each container, one ContainerDevices per
// resource with every id of it (mergeContainerDevices).
func (p *Plugin) kubeletPodResources(ctx context.Context) ([]*podresv1.PodResources, error) {
	list := p.listPodResources
	if p.podResources != nil {
		list = p.podResources
	}
	prs, err := list(ctx)
	if err != nil {
		return nil, err
	}
	return mergeContainerDevices(prs), nil
}

// mergeContainerDevices returns prs with the device ids of each container merged into one
// ContainerDevices per resource, ids ascending, resources in the order they first appear. The
// kubelet lists a container's ids as one entry per id (with the id's NUMA node, if any); the
// plugin reasons about what a container holds of a resource as a whole.
func mergeContainerDevices(prs []*podresv1.PodResources) []*podresv1.PodResources {
	out := make([]*podresv1.PodResources, 0, len(prs))
	for _, pr := range prs {
		if pr == nil {
			continue
		}
		npr := &podresv1.PodResources{Name: pr.Name, Namespace: pr.Namespace}
		for _, c := range pr.Containers {
			if c == nil {
				continue
			}
			nc := &podresv1.ContainerResources{Name: c.Name}
			byRes := map[string]*podresv1.ContainerDevices{}
			for _, d := range c.Devices {
				if d == nil {
					continue
				}
				m := byRes[d.ResourceName]
				if m == nil {
					m = &podresv1.ContainerDevices{ResourceName: d.ResourceName}
					byRes[d.ResourceName] = m
					nc.Devices = append(nc.Devices, m)
				}
				for _, id := range d.DeviceIds {
					if !slices.Contains(m.DeviceIds, id) {
						m.DeviceIds = append(m.DeviceIds, id)
					}
				}
			}
			for _, m := range nc.Devices {
				sortIDs(m.DeviceIds)
			}
			npr.Containers = append(npr.Containers, nc)
		}
		out = append(out, npr)
	}
	return out
}

// servedKey is the key of the answer for a call with these kubelet ids of resource.
func servedKey(resource string, ids []string) string {
	sorted := slices.Clone(ids)
	sortIDs(sorted)
	return resource + "|" + strings.Join(sorted, ",")
}

// listNodePods reads the node's pods from the API server, for when the informer may lag.
func (p *Plugin) listNodePods(ctx context.Context) ([]*corev1.Pod, error) {
	list, err := p.o.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + p.o.NodeName})
	if err != nil {
		return nil, err
	}
	pods := make([]*corev1.Pod, len(list.Items))
	for i := range list.Items {
		pods[i] = &list.Items[i]
	}
	return pods, nil
}

type servedEntry struct {
	hw        topology.Allocation
	resource  string
	kubelet   []string
	podUID    string // the container matched from a record, if any
	pod       string // its namespace/name
	container string
	at        time.Time
	// seen is set once the kubelet's PodResources showed the ids: from then on, their
	// disappearance there means the pod is gone.
	seen bool
}

// Resources the plugin advertises.
var Resources = []string{topology.ResourceNeuron, topology.ResourceNeuronDevice, topology.ResourceNeuronCore}

// servedTTL bounds how long an Allocate answer counts as in use before the kubelet's
// PodResources API shows it.
const servedTTL = 2 * time.Minute

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
	p := &Plugin{
		o: o, shape: shape, hw: hw, metrics: newMetrics(),
		health: neuron.NewHealth(shape.Devices(), node),
		served: map[string]servedEntry{}, inflight: map[string]time.Time{}, written: map[string]writtenEntry{}, pools: map[string]*pool{},
		lastHealth: map[string]map[string]string{}, reported: map[string]bool{}, refreshCh: make(chan struct{}, 1),
	}
	if err := p.loadCheckpoint(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

// Shape returns the node's shape.
func (p *Plugin) Shape() *topology.Shape { return p.shape }

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
		return err
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("the %v cache did not sync: check the plugin's RBAC (pods get/list/watch)", typ)
		}
	}
	bcast := record.NewBroadcaster(record.WithContext(ctx))
	bcast.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: p.o.Client.CoreV1().Events("")})
	defer bcast.Shutdown()
	p.recorder = bcast.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "neuron-device-plugin", Host: p.o.NodeName})

	if p.o.MetricsAddress != "" {
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

// checkHealth reads the devices again: a device whose uncorrectable error counters rose, or
// that disappeared, turns unhealthy; it is healthy again once its counters are back at or below
// what they were when it was last healthy (a driver reset clears them) and it is present.
func (p *Plugin) checkHealth(ctx context.Context) {
	logger := klog.FromContext(ctx)
	node, err := p.hw.Discover(ctx)
	if err != nil {
		logger.V(2).Info("Reading the Neuron devices failed", "err", err)
		// Read what can be read: a missing device makes Discover fail as a whole.
		node = p.discoverPartial(ctx)
	}
	p.mu.Lock()
	changes := p.health.Update(node)
	bad := p.health.UnhealthyCount()
	p.mu.Unlock()
	p.metrics.unhealthy.Set(float64(bad))
	nodeRef := &corev1.ObjectReference{Kind: "Node", Name: p.o.NodeName, UID: types.UID(p.o.NodeName)}
	for _, c := range changes {
		cores := topology.FormatList(p.shape.CoresOf(c.Device))
		if c.Healthy {
			logger.Info("Neuron device healthy again", "device", c.Device)
			p.recorder.Eventf(nodeRef, corev1.EventTypeNormal, "NeuronDeviceHealthy", "Neuron device %d (/dev/neuron%d) is healthy again: %s; it and its cores %s are allocatable again", c.Device, c.Device, c.Reason, cores)
		} else {
			logger.Info("Neuron device unhealthy", "device", c.Device, "reason", c.Reason)
			p.recorder.Eventf(nodeRef, corev1.EventTypeWarning, "NeuronDeviceUnhealthy", "Neuron device %d (/dev/neuron%d) is unhealthy: %s. It and its cores %s are withdrawn from %s until it recovers; pods already using it keep it. Check the node with neuron-top or the Neuron driver's logs (dmesg | grep -i neuron)", c.Device, c.Device, c.Reason, cores, strings.Join(Resources, ", "))
		}
	}
}

// discoverPartial reads the devices that are there when Discover fails as a whole.
func (p *Plugin) discoverPartial(ctx context.Context) *neuron.Node {
	s, ok := p.hw.(*neuron.Sysfs)
	if !ok {
		return nil
	}
	return s.DiscoverPresent(ctx)
}

// refresh recomputes the holdings, fixes allocation records that disagree with what the kubelet
// runs, and pushes new health views to the kubelet.
func (p *Plugin) refresh(ctx context.Context) {
	logger := klog.FromContext(ctx)
	podRes, podResErr := p.kubeletPodResources(ctx)
	if podResErr != nil {
		logger.V(4).Info("The kubelet's PodResources API is not available", "err", podResErr)
	}
	pods, _ := p.pods.List(labels.Everything())
	p.reportPublished(ctx, pods)
	p.reconcile(ctx, pods, podRes, podResErr == nil)
	p.mu.Lock()
	holdings := p.holdings
	views := map[string]map[string]string{}
	changed := map[string]bool{}
	for _, res := range Resources {
		views[res] = Withdrawn(p.shape, res, p.health.Unhealthy(), holdings)
		if !mapsEqual(views[res], p.lastHealth[res]) {
			changed[res] = true
			p.lastHealth[res] = views[res]
		}
	}
	pools := p.pools
	p.mu.Unlock()
	for res := range changed {
		logger.V(5).Info("Pool health changed", "resource", res, "withdrawn", len(views[res]))
		if pl := pools[res]; pl != nil {
			pl.notify()
		}
	}
}

// reconcile computes the holdings, writes the record fixes and sets p.holdings, holding records
// for writing throughout: calls wait for the fixes rather than match half-fixed records.
func (p *Plugin) reconcile(ctx context.Context, pods []*corev1.Pod, podRes []*podresv1.PodResources, podResOK bool) {
	p.records.Lock()
	defer p.records.Unlock()
	cached := true
	if who := p.answeredUnseen(pods, podRes); who != "" {
		// The kubelet admitted a pod this plugin answered for that the informer does not show
		// yet: its answer may have been matched to another pod's record (the oldest waiting),
		// and a refresh that fixed that record without this pod's would leave both naming the
		// same hardware. Read the node's pods from the API server instead.
		if listed, err := p.listNodePods(ctx); err != nil {
			klog.FromContext(ctx).V(2).Info("Listing the node's pods for a pod the informer does not show yet failed", "pod", who, "err", err)
		} else {
			pods, cached = listed, false
		}
	}
	holdings, fixes := p.computeHoldings(pods, podRes, podResOK, cached)
	for _, f := range fixes {
		if err := p.fixRecord(ctx, f); err != nil {
			klog.FromContext(ctx).Error(err, "Updating an allocation record", "pod", f.pod)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.saveCheckpointLocked(); err != nil {
		klog.FromContext(ctx).Error(err, "Keeping the answers that still count; the next refresh retries")
	}
	p.holdings = holdings
	// Answers given while the holdings were computed are not in them yet: add them, so that the
	// withdrawal already covers them.
	for _, e := range p.served {
		if !servedIn(holdings, e) {
			p.holdings = append(p.holdings, Holding{Pod: e.holder("(served by this plugin)"), PodUID: e.podUID, Container: e.container, Resource: e.resource, KubeletIDs: e.kubelet, Hardware: e.hw})
		}
	}
}

// reportPublished tells, once per pod and problem, what is wrong with the allocation the
// published Neuron stack left on a pod of this node (allocation.PublishedRecord): in the log and
// as a Warning event on the pod.
func (p *Plugin) reportPublished(ctx context.Context, pods []*corev1.Pod) {
	for _, pod := range pods {
		if !allocation.FromPublishedStack(pod) {
			continue
		}
		_, warnings, err := allocation.PublishedRecord(pod)
		if err != nil {
			warnings = append(warnings, err.Error())
		}
		for _, msg := range warnings {
			key := string(pod.UID) + "|" + msg
			p.mu.Lock()
			seen := p.reported[key]
			if len(p.reported) > 1000 {
				p.reported = map[string]bool{}
			}
			p.reported[key] = true
			p.mu.Unlock()
			if seen {
				continue
			}
			klog.FromContext(ctx).Info("Allocation of the published Neuron stack on a pod", "pod", klog.KObj(pod), "problem", msg)
			if p.recorder != nil {
				p.recorder.Event(pod, corev1.EventTypeWarning, "PublishedNeuronAllocation", msg)
			}
		}
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if bv, ok := b[k]; !ok || bv != v {
			return false
		}
	}
	return true
}

func (p *Plugin) listPodResources(ctx context.Context) ([]*podresv1.PodResources, error) {
	if p.o.PodResourcesSocket == "" {
		return nil, errors.New("no PodResources socket configured")
	}
	if _, err := os.Stat(p.o.PodResourcesSocket); err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient("unix://"+p.o.PodResourcesSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	rpcCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := podresv1.NewPodResourcesListerClient(conn).List(rpcCtx, &podresv1.ListPodResourcesRequest{})
	if err != nil {
		return nil, err
	}
	return resp.PodResources, nil
}

// recordFix rewrites one container entry of a pod's allocation record to what runs.
type recordFix struct {
	pod       string
	podUID    string
	container string
	resource  string
	hw        topology.Allocation
	served    bool
}

// computeHoldings derives what is in use from the kubelet's PodResources, the allocation records
// of the node's pods and the Allocate answers not yet visible there.
// cached says the pods are the informer's (see candidatesOf).
func (p *Plugin) computeHoldings(pods []*corev1.Pod, podRes []*podresv1.PodResources, podResOK, cached bool) ([]Holding, []recordFix) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	type key struct{ ns, name string }
	byName := map[key]*corev1.Pod{}
	records := map[string]*allocation.Record{}
	published := map[string]bool{} // pods whose record is derived from the published stack's annotations
	deleting := map[string]bool{}  // pods being deleted
	for _, pod := range pods {
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		if pod.DeletionTimestamp != nil {
			deleting[string(pod.UID)] = true
		}
		byName[key{pod.Namespace, pod.Name}] = pod
		r, err := allocation.RecordOf(pod)
		if cached {
			r, err = p.recordOfLocked(pod, now)
		}
		if err == nil && r != nil && r.Node == p.o.NodeName {
			records[string(pod.UID)] = r
			published[string(pod.UID)] = allocation.FromPublishedStack(pod)
		}
	}
	var holdings []Holding
	var fixes []recordFix
	covered := map[string]bool{} // podUID/container/resource held by the kubelet
	seenServed := map[string]bool{}
	for _, pr := range podRes {
		pod := byName[key{pr.Namespace, pr.Name}]
		if pod == nil {
			continue
		}
		for _, c := range pr.Containers {
			for _, d := range c.Devices {
				if !slices.Contains(Resources, d.ResourceName) {
					continue
				}
				ids := slices.Clone(d.DeviceIds)
				sortIDs(ids)
				skey := servedKey(d.ResourceName, ids)
				var hw topology.Allocation
				var err error
				entry, haveServed := p.served[skey]
				rec := records[string(pod.UID)]
				var recC *allocation.Container
				if rec != nil {
					for i := range rec.Containers {
						if rec.Containers[i].Name == c.Name && rec.Containers[i].Resource == d.ResourceName {
							recC = &rec.Containers[i]
						}
					}
				}
				switch {
				case haveServed:
					hw = entry.hw
					seenServed[skey] = true
					entry.seen = true
					// The answer may have been matched to another pod's record (the kubelet
					// admitted the pods in another order): from now on it is this container's.
					entry.podUID, entry.pod, entry.container = string(pod.UID), pr.Namespace+"/"+pr.Name, c.Name
					p.served[skey] = entry
					if recC == nil || !recC.Served || !sameHardware(p.shape, *recC, hw) {
						fixes = append(fixes, recordFix{pod: pr.Namespace + "/" + pr.Name, podUID: string(pod.UID), container: c.Name, resource: d.ResourceName, hw: hw, served: true})
					}
				case recC != nil && (recC.Served || published[string(pod.UID)]):
					// A container the kubelet admitted with what its record says. A pod of the
					// published stack that the kubelet admitted was served its AWS_NEURON_IDS by
					// the published device plugin, whatever ids the kubelet holds for it.
					hw, err = recC.Hardware(p.shape)
				default:
					// Served from the kubelet's ids, by this plugin before a restart: record it, so
					// that the scheduler extender counts it too.
					if hw, err = hardwareOf(p.shape, d.ResourceName, ids); err == nil {
						fixes = append(fixes, recordFix{pod: pr.Namespace + "/" + pr.Name, podUID: string(pod.UID), container: c.Name, resource: d.ResourceName, hw: hw, served: true})
					}
				}
				if err != nil {
					continue
				}
				covered[string(pod.UID)+"/"+c.Name+"/"+d.ResourceName] = true
				holdings = append(holdings, Holding{Pod: pr.Namespace + "/" + pr.Name, PodUID: string(pod.UID), Container: c.Name, Resource: d.ResourceName, KubeletIDs: ids, Hardware: hw, Admitted: true})
			}
		}
	}
	// Swap: a record fixed to hardware that another pod's record claims as served, while that
	// other pod is not running on it, gives that pod hardware nobody got: the fixed pod's old
	// hardware, or, when a container admitted since got that (the kubelet admitted several pods
	// in another order than their records were matched, and the swaps chain), the old hardware
	// of that container's record, and so on down the chain.
	fixes = append(fixes, p.displaced(records, covered, fixes, pods, holdings)...)
	fixed := map[string]recordFix{}
	for _, f := range fixes {
		fixed[f.podUID+"/"+f.container+"/"+f.resource] = f
	}
	for uid, r := range records {
		if deleting[uid] && podResOK {
			// Its containers are gone from the kubelet's PodResources (else they would be
			// covered above): the kubelet has released their ids, and withdrawing them from the
			// other pools until the informer drops the pod refused the pod placed there next.
			continue
		}
		for _, c := range r.Containers {
			k := uid + "/" + c.Name + "/" + c.Resource
			if covered[k] {
				continue
			}
			hw, err := c.Hardware(p.shape)
			served := c.Served
			if f, ok := fixed[k]; ok {
				hw, served = f.hw, f.served
			}
			if err != nil {
				continue
			}
			holdings = append(holdings, Holding{Pod: podByUID(pods, uid), PodUID: uid, Container: c.Name, Resource: c.Resource, Hardware: hw, Reserved: !served})
		}
	}
	for k, e := range p.served {
		if seenServed[k] {
			continue
		}
		// An answer for a pod that is gone (or finished) holds nothing, also when the kubelet
		// admitted and tore the pod down between two looks at its PodResources. The pod may reach
		// the informer after the kubelet asked for it, hence the few seconds' grace.
		gone := e.podUID != "" && now.Sub(e.at) > servedGrace && !podLive(pods, e.podUID)
		if e.seen && podResOK || gone || now.Sub(e.at) > servedTTL || (podResOK && now.Sub(e.at) > 30*time.Second) {
			delete(p.served, k)
			continue
		}
		holdings = append(holdings, Holding{Pod: e.holder("(being admitted)"), PodUID: e.podUID, Container: e.container, Resource: e.resource, KubeletIDs: e.kubelet, Hardware: e.hw})
	}
	for k, t := range p.inflight {
		if now.Sub(t) > 30*time.Second {
			delete(p.inflight, k)
		}
	}
	return holdings, fixes
}

// answeredUnseen names a pod the kubelet's PodResources show holding ids this plugin answered
// for and that pods (the informer's) do not have, or returns "".
func (p *Plugin) answeredUnseen(pods []*corev1.Pod, podRes []*podresv1.PodResources) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.served) == 0 {
		return ""
	}
	known := make(map[string]bool, len(pods))
	for _, pod := range pods {
		known[pod.Namespace+"/"+pod.Name] = true
	}
	for _, pr := range podRes {
		if known[pr.Namespace+"/"+pr.Name] {
			continue
		}
		for _, c := range pr.Containers {
			for _, d := range c.Devices {
				if _, ok := p.served[servedKey(d.ResourceName, d.DeviceIds)]; ok {
					return pr.Namespace + "/" + pr.Name
				}
			}
		}
	}
	return ""
}

// servedIn reports whether the holdings already have the answer e.
func servedIn(holdings []Holding, e servedEntry) bool {
	for _, h := range holdings {
		if h.Resource == e.resource && slices.Equal(h.KubeletIDs, e.kubelet) {
			return true
		}
	}
	return false
}

// servedGrace is how long an answer counts whatever the informer shows of its pod.
const servedGrace = 5 * time.Second

// holder names the pod an answer was for (namespace/name, which confirm can look up), or what.
func (e servedEntry) holder(what string) string {
	if e.pod != "" {
		return e.pod
	}
	return what
}

// podLive reports whether the pod with uid is among pods and has not finished.
func podLive(pods []*corev1.Pod, uid string) bool {
	for _, p := range pods {
		if string(p.UID) == uid {
			return p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
		}
	}
	return false
}

func podByUID(pods []*corev1.Pod, uid string) string {
	for _, p := range pods {
		if string(p.UID) == uid {
			return p.Namespace + "/" + p.Name
		}
	}
	return uid
}

func sameHardware(shape *topology.Shape, c allocation.Container, hw topology.Allocation) bool {
	rhw, err := c.Hardware(shape)
	return err == nil && slices.Equal(rhw.Cores, hw.Cores) && slices.Equal(rhw.Devices, hw.Devices)
}

func sortIDs(ids []string) {
	slices.SortFunc(ids, func(a, b string) int {
		x, errA := strconv.Atoi(a)
		y, errB := strconv.Atoi(b)
		if errA != nil || errB != nil {
			return strings.Compare(a, b)
		}
		return x - y
	})
}

// Holdings returns the holdings of the last refresh (for tests and debugging).
func (p *Plugin) Holdings() []Holding {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.holdings)
}
