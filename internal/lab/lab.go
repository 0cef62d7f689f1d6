package lab

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// Options configure a lab: a control plane on 127.0.0.1 and a fleet of simulated Neuron nodes.
type Options struct {
	// BinDir holds the pinned etcd and Kubernetes binaries (hack/build-tools.sh prints it).
	BinDir string
	// Dir is the lab's state directory (the control plane's files, each node's sysfs tree).
	Dir string
	// Fleet is the simulated fleet; DefaultFleet when nil.
	Fleet *FleetFile
	// Catalog resolves instance types; the default catalog when nil.
	Catalog *topology.Catalog
	// ComponentBinDir holds kube-neuron's binaries (make build puts them in bin/). The lab runs
	// those of Components from there as host processes, as their DaemonSets and Deployments
	// would run them on a cluster.
	ComponentBinDir string
	// Components names the components to run: ComponentDevicePlugin, ComponentExtender or
	// ComponentKubeScheduler (the two ways to run my-scheduler), ComponentDRADriver,
	// ComponentAutoscaler.
	Components []string
	// Verbosity is the -v of the components' logs.
	Verbosity int
	// Manifests are YAML files applied once the nodes run (the chart rendered by helm, so that
	// the lab's API shows the DaemonSets and classes a real installation has). Namespaced objects
	// without a namespace go to kube-system.
	Manifests []string
	// AutoscalerArgs are extra arguments of neuron-autoscaler (ComponentAutoscaler), after the
	// lab's own (--provider=local, --batch-window=1s, no leader election).
	AutoscalerArgs []string
	// AuditLog writes the API server's audit log (ControlPlaneOptions.AuditLog).
	AuditLog bool

	// For a fleet with `kubelet: real` nodes (docs/lab.md): NodeBinDir holds containerd, runc and
	// the CNI plugins (hack/node/build.sh prints it; BinDir must hold kubelet and kube-proxy, and
	// ComponentBinDir neuron-lab); ImagesDir the components' image archives (make images
	// PLATFORMS=linux/amd64) and LabImagesDir the nodes' (pause, stand-in, kube-scheduler,
	// coredns: go run ./hack/images -lab). hack/lab-images.sh builds both.
	NodeBinDir, ImagesDir, LabImagesDir string
	// Chart installs the Helm chart with helm once the nodes run (ChartOptions).
	Chart *ChartOptions
	// LWS runs the LeaderWorkerSet controller (sigs.k8s.io/lws) with its CRDs and webhooks, from
	// LWSDir: the directory hack/lws/build.sh prints (see lws.go and docs/lab.md). Not with real
	// nodes.
	LWS    bool
	LWSDir string
	// StatusUpdateFrequency is how often simulated nodes post changes of their device plugins'
	// capacity and allocatable (SimulatorOptions.StatusUpdateFrequency); 0 is a kubelet's 10 s.
	StatusUpdateFrequency time.Duration
}

// Components the lab can run.
const (
	// ComponentDevicePlugin runs neuron-device-plugin on every node in device-plugin mode.
	ComponentDevicePlugin = "neuron-device-plugin"
	// ComponentExtender runs neuron-scheduler-extender and a second kube-scheduler, my-scheduler,
	// that calls it (the EKS way: pods opt in with schedulerName: my-scheduler).
	ComponentExtender = "neuron-scheduler-extender"
	// ComponentKubeScheduler runs neuron-kube-scheduler as my-scheduler instead: kube-scheduler
	// with the NeuronTopology plugin (PluginSchedulerConfig("best-fit")), the other way to run
	// my-scheduler; not with ComponentExtender. hack/build-scheduler.sh builds it.
	ComponentKubeScheduler = "neuron-kube-scheduler"
	// ComponentDRADriver runs neuron-dra-driver on every node in dra mode.
	ComponentDRADriver = "neuron-dra-driver"
	// ComponentAutoscaler runs neuron-autoscaler with the local provider: the nodes it launches
	// are adopted by the lab (see LocalProviderIDPrefix).
	ComponentAutoscaler = "neuron-autoscaler"
	// CustomSchedulerName is the second scheduler's name.
	CustomSchedulerName = "my-scheduler"
)

// ExtenderSchedulerConfig is my-scheduler's KubeSchedulerConfiguration for an extender at url;
// the Helm chart renders the same.
func ExtenderSchedulerConfig(url string) []byte {
	return []byte(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: ` + CustomSchedulerName + `
extenders:
- urlPrefix: ` + url + `
  filterVerb: filter
  prioritizeVerb: prioritize
  bindVerb: bind
  weight: 10
  enableHTTPS: false
  nodeCacheCapable: true
  httpTimeout: 30s
  ignorable: false
  managedResources:
  - {name: aws.amazon.com/neuron, ignoredByScheduler: false}
  - {name: aws.amazon.com/neuroncore, ignoredByScheduler: false}
  - {name: aws.amazon.com/neurondevice, ignoredByScheduler: false}
`)
}

// PluginSchedulerConfig is the KubeSchedulerConfiguration of neuron-kube-scheduler running as
// my-scheduler: the default plugins and NeuronTopology (weight 10, as the extender's), whose Bind
// runs before DefaultBinder (it skips pods without Neuron requests) so that a Neuron pod's
// allocation record lands with its binding, and whose PostFilter runs before DefaultPreemption
// (a narrowed pod that found no node is tried on every node before anything is preempted);
// PreFilter narrows a pod to the 10 nodes NeuronTopology ranks best (args.candidateNodes, the
// chart's customScheduler.pluginCandidateNodes), and pods it does not narrow are checked on 10 %
// of the nodes (at least 100; customScheduler.pluginPercentageOfNodesToScore). policy is
// best-fit or first-fit. The Helm chart renders the same.
func PluginSchedulerConfig(policy string) []byte {
	return []byte(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: ` + CustomSchedulerName + `
  percentageOfNodesToScore: 10
  plugins:
    multiPoint:
      enabled:
      - name: NeuronTopology
        weight: 10
    postFilter:
      enabled:
      - name: NeuronTopology
      - name: DefaultPreemption
      disabled:
      - name: "*"
    bind:
      enabled:
      - name: NeuronTopology
      - name: DefaultBinder
      disabled:
      - name: "*"
  pluginConfig:
  - name: NeuronTopology
    args:
      policy: ` + policy + `
      candidateNodes: 10
`)
}

// Lab is a running control plane with its simulated fleet.
type Lab struct {
	cp        *ControlPlane
	sim       *Simulator
	client    kubernetes.Interface
	socketDir string
	specs     []NodeSpec
	opts      Options

	mu          sync.Mutex
	components  map[string][]*Process // node -> its component processes
	metricsAddr map[string]string     // node -> the metrics address of its simulated agent
	extender    *Process
	extenderURL string
	// kubeScheduler: neuron-kube-scheduler runs as my-scheduler (ComponentKubeScheduler).
	kubeScheduler bool
	autoscaler    *Process
	// reservations are passed to neuron-autoscaler by StartAutoscaler (the fleet's, or
	// SetReservations').
	reservations []FleetReservation
	lws          *Process
	adopted      map[string]NodeSpec // nodes created through the API (LocalProviderIDPrefix) and simulated
	stopAdopt    context.CancelFunc
	adoptDone    chan struct{}
	stopBusy     func() // stops the loop that makes held devices look busy (busy.go)

	real *realLab // nil without real nodes
}

// LocalProviderIDPrefix starts the provider ID of the nodes neuron-autoscaler's local provider
// creates (internal/autoscaler/local uses the same prefix; the autoscaler does not import the
// lab). The lab adopts such a node: it simulates its devices and kubelet from its instance-type
// and allocation-mode labels and runs its components, as a real node would start once launched;
// when the Node object is deleted, the simulation stops.
const LocalProviderIDPrefix = "kube-neuron-local:///"

// AddNode adds a simulated node and starts the per-node components that serve its mode.
func (l *Lab) AddNode(ctx context.Context, spec NodeSpec) (*SimNode, error) {
	if spec.Kubelet == KubeletReal {
		return nil, fmt.Errorf("node %s: AddNode simulates a node; real nodes start with the lab", spec.Name)
	}
	n, err := l.sim.AddNode(ctx, spec)
	if err != nil {
		return nil, err
	}
	if spec.Mode == ModeDevicePlugin && slices.Contains(l.opts.Components, ComponentDevicePlugin) {
		if _, err := l.StartDevicePlugin(ctx, spec.Name); err != nil {
			return nil, err
		}
	}
	if spec.Mode == ModeDRA && slices.Contains(l.opts.Components, ComponentDRADriver) {
		if _, err := l.StartDRADriver(ctx, spec.Name); err != nil {
			return nil, err
		}
	}
	return n, nil
}

// StartDevicePlugin runs neuron-device-plugin for a node in device-plugin mode and waits until
// the node advertises its devices. Its --state-dir is the node's DevicePluginStateDir, so a
// plugin started again after StopComponent finds its checkpoint there.
func (l *Lab) StartDevicePlugin(ctx context.Context, node string) (*Process, error) {
	n := l.sim.Node(node)
	if n == nil {
		return nil, fmt.Errorf("no simulated node %s", node)
	}
	metrics, err := l.newMetricsAddress(node)
	if err != nil {
		return nil, err
	}
	p, err := l.startComponent(ComponentDevicePlugin, node, []string{
		"--node-name=" + node,
		"--kubeconfig=" + l.cp.Kubeconfig(),
		"--sysfs-root=" + n.SysfsRoot(),
		"--device-plugin-dir=" + n.DevicePluginDir(),
		"--pod-resources-socket=" + n.PodResourcesSocket(),
		"--state-dir=" + n.DevicePluginStateDir(),
		"--health-interval=500ms",
		"--metrics-address=" + metrics,
		"--metrics-sample-interval=" + MetricsSampleInterval.String(),
		fmt.Sprintf("-v=%d", l.opts.Verbosity),
	})
	if err != nil {
		return nil, err
	}
	if err := l.WaitForNodeResource(ctx, node, "aws.amazon.com/neuron", int64(n.Spec.InstanceType.Devices), 30*time.Second); err != nil {
		return nil, fmt.Errorf("%w\n%s log:\n%s", err, ComponentDevicePlugin, LogTail(p.LogPath(), 20))
	}
	return p, nil
}

// StartDRADriver runs neuron-dra-driver for a node in dra mode and waits until it has published
// every device of the node.
func (l *Lab) StartDRADriver(ctx context.Context, node string) (*Process, error) {
	n := l.sim.Node(node)
	if n == nil {
		return nil, fmt.Errorf("no simulated node %s", node)
	}
	metrics, err := l.newMetricsAddress(node)
	if err != nil {
		return nil, err
	}
	p, err := l.startComponent(ComponentDRADriver, node, []string{
		"--node-name=" + node,
		"--kubeconfig=" + l.cp.Kubeconfig(),
		"--sysfs-root=" + n.SysfsRoot(),
		"--cdi-root=" + n.CDIDir(),
		"--kubelet-registrar-directory-path=" + n.RegistryDir(),
		"--kubelet-plugins-directory-path=" + n.PluginsDir(),
		"--health-interval=500ms",
		"--metrics-address=" + metrics,
		"--metrics-sample-interval=" + MetricsSampleInterval.String(),
		"--healthcheck-port=0",
		fmt.Sprintf("-v=%d", l.opts.Verbosity),
	})
	if err != nil {
		return nil, err
	}
	// Stop waiting as soon as the driver exits: its log says why.
	waitCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-p.Exited():
			cancel()
		case <-waitCtx.Done():
		}
	}()
	if err := l.WaitForResourceSliceDevices(waitCtx, node, "neuron.aws.com", n.Spec.InstanceType.Devices, 30*time.Second); err != nil {
		return nil, fmt.Errorf("%w\n%s log:\n%s", err, ComponentDRADriver, LogTail(p.LogPath(), 20))
	}
	return p, nil
}

// MetricsSampleInterval is how often the simulated nodes' agents sample the Neuron counters
// (--metrics-sample-interval): short, so that tests see utilization soon after pods start.
const MetricsSampleInterval = time.Second

// newMetricsAddress picks a free port of 127.0.0.1 for the metrics of a simulated node's agent
// and records it as the node's MetricsAddress. Each start takes a new port: the last agent
// started for the node is the one that serves it.
func (l *Lab) newMetricsAddress(node string) (string, error) {
	ports, err := freePorts(1)
	if err != nil {
		return "", err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.metricsAddr == nil {
		l.metricsAddr = map[string]string{}
	}
	l.metricsAddr[node] = addr
	return addr, nil
}

// MetricsAddress returns host:port of the metrics endpoint (/metrics) of the agent (device
// plugin or DRA driver) the lab runs as a host process for a simulated node; "" when it runs
// none for that node (real nodes' agents are the chart's pods: read them through the API
// server's pod proxy).
func (l *Lab) MetricsAddress(node string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.metricsAddr[node]
}

// StopComponent stops one component process of a node (tests restart components this way).
func (l *Lab) StopComponent(node string, p *Process) error {
	l.mu.Lock()
	l.components[node] = slices.DeleteFunc(l.components[node], func(q *Process) bool { return q == p })
	if p.Name() == ComponentDevicePlugin+"-"+node || p.Name() == ComponentDRADriver+"-"+node {
		delete(l.metricsAddr, node)
	}
	l.mu.Unlock()
	return p.Stop(StopGrace(StopOrderComponent))
}

// WaitForResourceSliceDevices waits until the driver's ResourceSlices of the node hold at least
// want Neuron devices (resourceType neuron_device).
func (l *Lab) WaitForResourceSliceDevices(ctx context.Context, node, driver string, want int, timeout time.Duration) error {
	got := 0
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		list, err := l.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{
			FieldSelector: "spec.nodeName=" + node + ",spec.driver=" + driver,
		})
		if err != nil {
			return false, nil
		}
		got = 0
		for _, s := range list.Items {
			for _, d := range s.Spec.Devices {
				if a, ok := d.Attributes["resourceType"]; ok && a.StringValue != nil && *a.StringValue == "neuron_device" {
					got++
				}
			}
		}
		return got >= want, nil
	})
	if err != nil {
		return fmt.Errorf("node %s: the ResourceSlices of %s hold %d Neuron devices, want %d: %w", node, driver, got, want, err)
	}
	return nil
}

// startComponent runs a component binary; one for a node is stopped with the lab (or StopComponent).
func (l *Lab) startComponent(name, node string, args []string) (*Process, error) {
	path := filepath.Join(l.opts.ComponentBinDir, name)
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("component %s: %w (run make build)", name, err)
	}
	pname := name
	if node != "" {
		pname += "-" + node
	}
	p, err := StartProcess(ProcessOptions{Name: pname, Path: path, Args: args, LogPath: l.cp.LogPath(pname)})
	if err != nil {
		return nil, err
	}
	if err := AddToState(l.cp.Dir(), p, StopOrderComponent); err != nil {
		_ = p.Stop(time.Second)
		return nil, err
	}
	if node != "" {
		l.mu.Lock()
		if l.components == nil {
			l.components = map[string][]*Process{}
		}
		l.components[node] = append(l.components[node], p)
		l.mu.Unlock()
	}
	return p, nil
}

// StartExtender runs neuron-scheduler-extender on a free port of 127.0.0.1 and my-scheduler (the
// stock kube-scheduler) calling it. It fails when my-scheduler already runs (StopScheduling).
func (l *Lab) StartExtender(ctx context.Context) error {
	if s := l.Scheduling(); s != "" {
		return fmt.Errorf("my-scheduler already runs with %s: stop it first (StopScheduling)", s)
	}
	ports, err := freePorts(1)
	if err != nil {
		return err
	}
	url := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	l.mu.Lock()
	l.extenderURL = url
	l.mu.Unlock()
	p, err := l.startComponent(ComponentExtender, "", []string{
		"--kubeconfig=" + l.cp.Kubeconfig(), "--bind-address=127.0.0.1", fmt.Sprintf("--port=%d", ports[0]),
		"--lease-namespace=kube-system", fmt.Sprintf("-v=%d", l.opts.Verbosity),
	})
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.extender = p
	l.mu.Unlock()
	if err := waitHTTP(ctx, url+"/readyz", 30*time.Second); err != nil {
		return fmt.Errorf("%s never became ready: %w\n%s", ComponentExtender, err, LogTail(p.LogPath(), 20))
	}
	return l.cp.StartScheduler(ctx, CustomSchedulerName, ExtenderSchedulerConfig(url))
}

// StartKubeScheduler runs neuron-kube-scheduler (from Options.ComponentBinDir) as my-scheduler,
// a host process with PluginSchedulerConfig("best-fit"), and returns once its /healthz answers.
// It fails when my-scheduler already runs (StopScheduling).
func (l *Lab) StartKubeScheduler(ctx context.Context) error {
	if s := l.Scheduling(); s != "" {
		return fmt.Errorf("my-scheduler already runs with %s: stop it first (StopScheduling)", s)
	}
	path, err := filepath.Abs(l.ComponentPath(ComponentKubeScheduler))
	if err != nil {
		return err
	}
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("component %s: %w (hack/build-scheduler.sh builds it: copy it there)", ComponentKubeScheduler, err)
	}
	if err := l.cp.StartSchedulerBinary(ctx, CustomSchedulerName, path, PluginSchedulerConfig("best-fit")); err != nil {
		return err
	}
	l.mu.Lock()
	l.kubeScheduler = true
	l.mu.Unlock()
	return nil
}

// Scheduling says what runs my-scheduler: ComponentExtender (the extender and the stock
// kube-scheduler), ComponentKubeScheduler, or "" when my-scheduler does not run.
func (l *Lab) Scheduling() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.extender != nil:
		return ComponentExtender
	case l.kubeScheduler:
		return ComponentKubeScheduler
	}
	return ""
}

// StopScheduling stops my-scheduler and, in extender mode, the extender; pods bound so far keep
// their nodes and allocation records. StartExtender or StartKubeScheduler starts either again,
// which is how a test switches a running lab from one way of scheduling to the other.
func (l *Lab) StopScheduling() error {
	l.mu.Lock()
	running := l.extender != nil || l.kubeScheduler
	l.kubeScheduler = false
	l.mu.Unlock()
	if !running {
		return fmt.Errorf("my-scheduler does not run")
	}
	err := l.cp.StopScheduler(CustomSchedulerName)
	err = errors.Join(err, l.stopSlot(&l.extender))
	l.mu.Lock()
	l.extenderURL = ""
	l.mu.Unlock()
	return err
}

// RestartScheduling restarts whichever runs my-scheduler: the extender (RestartExtender; the
// stock kube-scheduler keeps running), or neuron-kube-scheduler (stopped and started again with
// the same configuration, as a rollout of its Deployment would).
func (l *Lab) RestartScheduling(ctx context.Context) error {
	switch s := l.Scheduling(); s {
	case ComponentExtender:
		return l.RestartExtender(ctx)
	case ComponentKubeScheduler:
		if err := l.cp.StopScheduler(CustomSchedulerName); err != nil {
			return err
		}
		l.mu.Lock()
		l.kubeScheduler = false
		l.mu.Unlock()
		return l.StartKubeScheduler(ctx)
	default:
		return fmt.Errorf("my-scheduler does not run: nothing to restart")
	}
}

// StartAutoscaler runs neuron-autoscaler with the local provider and extra arguments after the
// lab's (stopped with the lab, or with StopAutoscaler). The lab's reservations (the fleet's, or
// the last SetReservations') go to a file in the lab's directory, reservations.json, passed
// with --local-reservations.
func (l *Lab) StartAutoscaler(extra ...string) error {
	args := []string{
		"--provider=local", "--kubeconfig=" + l.cp.Kubeconfig(), "--leader-elect=false",
		"--batch-window=1s", "--resync-interval=2s", "--metrics-address=", fmt.Sprintf("-v=%d", l.opts.Verbosity),
	}
	l.mu.Lock()
	rs := slices.Clone(l.reservations)
	l.mu.Unlock()
	more, err := reservationArgs(l.cp.Dir(), rs)
	if err != nil {
		return err
	}
	args = append(append(args, more...), extra...)
	p, err := l.startComponent(ComponentAutoscaler, "", args)
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.autoscaler = p
	l.mu.Unlock()
	return nil
}

// SetReservations validates and replaces the reservations that StartAutoscaler passes to
// neuron-autoscaler; a running autoscaler keeps its own until it is restarted.
func (l *Lab) SetReservations(rs []FleetReservation) error {
	cat := l.opts.Catalog
	if cat == nil {
		cat = topology.DefaultCatalog()
	}
	if err := ValidateReservations(rs, cat); err != nil {
		return err
	}
	l.mu.Lock()
	l.reservations = slices.Clone(rs)
	l.mu.Unlock()
	return nil
}

// StopAutoscaler stops neuron-autoscaler (a test restarts it with StartAutoscaler).
func (l *Lab) StopAutoscaler() error { return l.stopSlot(&l.autoscaler) }

// stopSlot stops the process *slot holds (under l.mu), if any, and empties the slot.
func (l *Lab) stopSlot(slot **Process) error {
	l.mu.Lock()
	p := *slot
	*slot = nil
	l.mu.Unlock()
	if p == nil {
		return nil
	}
	err := p.Stop(StopGrace(StopOrderComponent))
	_ = RemoveFromState(l.cp.Dir(), p.PID())
	return err
}

// Autoscaler returns the running neuron-autoscaler process, nil when none runs.
func (l *Lab) Autoscaler() *Process {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.autoscaler
}

// RestartExtender stops the extender and starts it again on the same port (my-scheduler keeps
// calling the same URL).
func (l *Lab) RestartExtender(ctx context.Context) error {
	l.mu.Lock()
	p := l.extender
	l.mu.Unlock()
	if p == nil {
		return fmt.Errorf("the lab runs no extender")
	}
	if err := p.Stop(StopGrace(StopOrderComponent)); err != nil {
		return err
	}
	_ = RemoveFromState(l.cp.Dir(), p.PID())
	np, err := l.startComponent(ComponentExtender, "", p.args)
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.extender = np
	url := l.extenderURL
	l.mu.Unlock()
	return waitHTTP(ctx, url+"/readyz", 30*time.Second)
}

// ComponentPath is the path of a kube-neuron binary the lab runs (Options.ComponentBinDir), for
// tests that start one of their own.
func (l *Lab) ComponentPath(name string) string {
	return filepath.Join(l.opts.ComponentBinDir, name)
}

// ExtenderURL is the extender's URL, "" when it does not run.
func (l *Lab) ExtenderURL() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.extenderURL
}

func waitHTTP(ctx context.Context, url string, timeout time.Duration) error {
	return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}

// Component returns the processes of the components running for a node.
func (l *Lab) Component(node string) []*Process {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.components[node])
}

// Start starts the control plane and every node of the fleet, and returns when the nodes are
// registered and their kubelets serve. On error it stops what it started.
func Start(ctx context.Context, o Options) (*Lab, error) {
	logger := klog.FromContext(ctx)
	begin := time.Now()
	cat := o.Catalog
	if cat == nil {
		cat = topology.DefaultCatalog()
	}
	fleet := DefaultFleet
	if o.Fleet != nil {
		fleet = *o.Fleet
	}
	specs, err := fleet.Expand(cat)
	if err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	if err := checkScheduling(o.Components); err != nil {
		return nil, err
	}
	if HasRealNodes(specs) && slices.Contains(o.Components, ComponentKubeScheduler) {
		return nil, fmt.Errorf("component %s runs as a host process in a lab of simulated nodes only: "+
			"with real nodes the chart runs my-scheduler, with %s", ComponentKubeScheduler, ComponentExtender)
	}
	var real *realLab
	if HasRealNodes(specs) {
		if real, err = startRealLab(ctx, o); err != nil {
			return nil, err
		}
	}
	cpOpts := ControlPlaneOptions{BinDir: o.BinDir, Dir: o.Dir, AuditLog: o.AuditLog}
	if real != nil {
		cpOpts.Network = real.network
	}
	cp, err := StartControlPlane(ctx, cpOpts)
	if err != nil {
		if real != nil {
			real.stopNetwork()
		}
		return nil, err
	}
	l := &Lab{cp: cp, specs: specs, real: real, reservations: slices.Clone(fleet.Reservations)}
	fail := func(err error) (*Lab, error) {
		return nil, errors.Join(err, l.Stop())
	}
	if l.client, err = kubernetes.NewForConfig(cp.RESTConfig()); err != nil {
		return fail(err)
	}
	// Unix sockets allow 108 bytes: keep them under a short directory of their own.
	if l.socketDir, err = os.MkdirTemp("/tmp", "kn-"); err != nil {
		return fail(err)
	}
	if err := os.WriteFile(filepath.Join(o.Dir, "socket-dir"), []byte(l.socketDir+"\n"), 0o644); err != nil {
		return fail(err)
	}
	l.sim, err = StartSimulator(ctx, SimulatorOptions{Client: l.client, Dir: o.Dir, SocketDir: l.socketDir, StatusUpdateFrequency: o.StatusUpdateFrequency})
	if err != nil {
		return fail(err)
	}
	l.opts = o
	if real != nil {
		if err := l.startRegistry(ctx, o); err != nil {
			return fail(err)
		}
		if err := l.startRealNodes(ctx, realOnly(specs, true)); err != nil {
			return fail(err)
		}
		if err := l.startClusterDNS(ctx); err != nil {
			return fail(err)
		}
	}
	for _, spec := range realOnly(specs, false) {
		if _, err := l.AddNode(ctx, spec); err != nil {
			return fail(err)
		}
	}
	// With real nodes the chart's Deployments run the extender and my-scheduler as pods.
	if real == nil && slices.Contains(o.Components, ComponentExtender) {
		if err := l.StartExtender(ctx); err != nil {
			return fail(err)
		}
	}
	if slices.Contains(o.Components, ComponentKubeScheduler) {
		if err := l.StartKubeScheduler(ctx); err != nil {
			return fail(err)
		}
	}
	if slices.Contains(o.Components, ComponentAutoscaler) {
		if err := l.StartAutoscaler(o.AutoscalerArgs...); err != nil {
			return fail(err)
		}
	}
	adoptCtx, stopAdopt := context.WithCancel(klog.NewContext(context.Background(), logger))
	l.stopAdopt, l.adoptDone = stopAdopt, make(chan struct{})
	go l.adoptLoop(adoptCtx, cat)
	l.stopBusy = startBusy(klog.NewContext(context.Background(), logger), l.client, cp.Dir())
	if o.LWS {
		if err := l.startLWS(ctx, o.LWSDir); err != nil {
			return fail(err)
		}
	}
	for _, m := range o.Manifests {
		if _, err := ApplyFile(ctx, cp.RESTConfig(), "kube-neuron-lab", m, metav1.NamespaceSystem); err != nil {
			return fail(err)
		}
	}
	if o.Chart != nil {
		if err := l.InstallChart(ctx, *o.Chart); err != nil {
			return fail(err)
		}
		if err := l.WaitForRealNodesServing(ctx, 90*time.Second); err != nil {
			return fail(err)
		}
	}
	logger.V(1).Info("Lab ready", "nodes", len(specs), "duration", time.Since(begin).Round(time.Millisecond))
	return l, nil
}

// Stop stops the simulated nodes' kubelets, then the control plane, and removes the sockets.
func (l *Lab) Stop() error {
	var err error
	err = errors.Join(err, l.StopAutoscaler())
	err = errors.Join(err, l.stopLWS())
	if l.stopAdopt != nil {
		l.stopAdopt()
		<-l.adoptDone
	}
	if l.stopBusy != nil {
		l.stopBusy()
	}
	l.mu.Lock()
	comps := l.components
	l.components = nil
	l.mu.Unlock()
	for _, ps := range comps {
		for _, p := range ps {
			err = errors.Join(err, p.Stop(StopGrace(StopOrderComponent)))
		}
	}
	l.mu.Lock()
	ext := l.extender
	l.extender = nil
	l.mu.Unlock()
	if ext != nil {
		err = errors.Join(err, ext.Stop(StopGrace(StopOrderComponent)))
	}
	if l.sim != nil {
		l.sim.Stop()
	}
	if l.real != nil && l.cp != nil {
		err = errors.Join(err, l.real.stop(context.Background(), l.cp.Dir()))
	}
	if l.cp != nil {
		err = errors.Join(err, l.cp.Stop())
	}
	if l.real != nil {
		l.real.stopNetwork()
	}
	if l.socketDir != "" {
		err = errors.Join(err, os.RemoveAll(l.socketDir))
	}
	return err
}

// Client returns an admin client.
func (l *Lab) Client() kubernetes.Interface { return l.client }

// RESTConfig returns the admin REST config.
func (l *Lab) RESTConfig() *rest.Config { return l.cp.RESTConfig() }

// Kubeconfig returns the path of the admin kubeconfig.
func (l *Lab) Kubeconfig() string { return l.cp.Kubeconfig() }

// ControlPlane returns the lab's control plane.
func (l *Lab) ControlPlane() *ControlPlane { return l.cp }

// Simulator returns the lab's node simulator.
func (l *Lab) Simulator() *Simulator { return l.sim }

// Nodes returns the fleet's node specs.
func (l *Lab) Nodes() []NodeSpec { return l.specs }

// WaitForNodeResource waits until node advertises at least want allocatable units of resource.
func (l *Lab) WaitForNodeResource(ctx context.Context, node string, resource corev1.ResourceName, want int64, timeout time.Duration) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		n, err := l.client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		q := n.Status.Allocatable[resource]
		last = fmt.Sprintf("allocatable %s = %s", resource, q.String())
		return q.Value() >= want, nil
	})
	if err != nil {
		return fmt.Errorf("node %s never advertised %d %s (last seen: %s): %w", node, want, resource, last, err)
	}
	return nil
}

// adoptLoop simulates the nodes created through the API with LocalProviderIDPrefix, and stops
// simulating them when their Node object is deleted.
func (l *Lab) adoptLoop(ctx context.Context, cat *topology.Catalog) {
	defer close(l.adoptDone)
	logger := klog.FromContext(ctx)
	// A node informer wakes the loop; the loop itself adopts and removes one node at a time.
	factory := informers.NewSharedInformerFactory(l.client, 0)
	lister := factory.Core().V1().Nodes().Lister()
	wake := make(chan struct{}, 1)
	kick := func(any) {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	if _, err := factory.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: kick, UpdateFunc: func(_, obj any) { kick(obj) }, DeleteFunc: kick,
	}); err != nil {
		logger.Error(err, "Watching nodes for adoption")
		return
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	factory.WaitForCacheSync(ctx.Done())
	for {
		select {
		case <-ctx.Done():
			return
		case <-wake:
		}
		nodes, err := lister.List(k8slabels.Everything())
		if err != nil {
			continue
		}
		present := map[string]bool{}
		for _, node := range nodes {
			if !strings.HasPrefix(node.Spec.ProviderID, LocalProviderIDPrefix) || node.DeletionTimestamp != nil {
				continue
			}
			present[node.Name] = true
			if l.sim.Node(node.Name) != nil {
				continue
			}
			spec, err := adoptedSpec(cat, node)
			if err != nil {
				logger.Error(err, "Cannot simulate a node created through the API", "node", node.Name)
				continue
			}
			logger.Info("Adopting a node created through the API", "node", node.Name, "instanceType", spec.InstanceType.Name, "mode", spec.Mode)
			if _, err := l.AddNode(ctx, spec); err != nil {
				logger.Error(err, "Simulating an adopted node; trying again in a second", "node", node.Name)
				time.AfterFunc(time.Second, func() { kick(nil) })
				continue
			}
			l.mu.Lock()
			if l.adopted == nil {
				l.adopted = map[string]NodeSpec{}
			}
			l.adopted[node.Name] = spec
			l.mu.Unlock()
		}
		l.mu.Lock()
		var gone []string
		for name := range l.adopted {
			if !present[name] {
				gone = append(gone, name)
				delete(l.adopted, name)
			}
		}
		l.mu.Unlock()
		for _, name := range gone {
			logger.Info("Adopted node deleted: stopping its simulation", "node", name)
			for _, p := range l.Component(name) {
				_ = l.StopComponent(name, p)
			}
			if err := l.sim.RemoveNode(ctx, name); err != nil && !apierrors.IsNotFound(err) {
				logger.Error(err, "Removing an adopted node", "node", name)
			}
		}
	}
}

// Adopted returns the specs of the nodes the lab adopted (see LocalProviderIDPrefix).
func (l *Lab) Adopted() []NodeSpec {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]NodeSpec, 0, len(l.adopted))
	for _, s := range l.adopted {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
