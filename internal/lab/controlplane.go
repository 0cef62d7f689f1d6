package lab

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"

	"github.com/kube-neuron/kube-neuron/internal/lab/netns"
)

// Process names of the control plane (log files are Dir/logs/<name>.log).
const (
	EtcdName              = "etcd"
	APIServerName         = "kube-apiserver"
	ControllerManagerName = "kube-controller-manager"
	SchedulerName         = "kube-scheduler"
)

// KubeControllerManagerControllers are the controllers the lab's kube-controller-manager runs
// (names as `kube-controller-manager --help` lists them for v1.36): those the lab's workloads
// need, and those real nodes need (DaemonSets, the kube-root-ca.crt ConfigMap every pod mounts,
// the aggregated ClusterRoles the chart's RBAC may extend, EndpointSlices for Services). No node
// lifecycle controller runs, so nodes are never tainted or evicted for missing heartbeats. The
// device-taint eviction controller evicts the pods of claims whose devices carry a NoExecute DRA
// device taint (the DRA driver's uncorrectable-error taint; DRADeviceTaints is on by default in
// v1.36).
const KubeControllerManagerControllers = "resourceclaim-controller,garbage-collector-controller," +
	"namespace-controller,serviceaccount-controller,serviceaccount-token-controller," +
	"deployment-controller,replicaset-controller,statefulset-controller,job-controller,pod-garbage-collector-controller," +
	"daemonset-controller,root-ca-certificate-publisher-controller,clusterrole-aggregation-controller,endpointslice-controller," +
	"device-taint-eviction-controller"

// Client settings of the admin config and of every control-plane component.
const (
	ClientQPS   = 500
	ClientBurst = 1000
)

const (
	readyTimeout = 60 * time.Second
	pollInterval = 100 * time.Millisecond
	logTailLines = 20
)

// requiredBinaries are the binaries ControlPlaneOptions.BinDir must hold.
func requiredBinaries() []string {
	return []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"}
}

// processNameRE restricts process names, which become file names.
var processNameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`)

// ControlPlaneOptions configure StartControlPlane.
type ControlPlaneOptions struct {
	// BinDir holds etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kubectl
	// (hack/build-tools.sh prints it).
	BinDir string
	// Dir is the state directory: pki/, etcd/ (data), logs/, config/, kubeconfig, state.json.
	// It is created if missing; etcd data, logs and PKI of an earlier run are replaced.
	Dir string
	// Detach makes the processes outlive the calling process (own session via Setsid, no
	// parent-death signal), for `make lab-up`; otherwise every child gets Pdeathsig SIGKILL so
	// that nothing is left behind when a test binary dies or is interrupted.
	Detach bool
	// Network runs the control plane inside the lab's network namespace (real nodes reach it at
	// netns.Gateway), relayed to the host on 127.0.0.1 so that Kubeconfig and RESTConfig work
	// unchanged. nil runs it on the host's 127.0.0.1 (a lab of simulated nodes only).
	Network *netns.Network
	// AuditLog makes kube-apiserver write an audit log of every request at level Metadata (user,
	// user agent, verb, resource, subresource, namespace, name; no bodies) to
	// Dir/logs/audit.log, one JSON event per line (AuditLogPath). Tests compare the calls each
	// component makes with the RBAC rules the chart grants it.
	AuditLog bool
}

// auditPolicy records every request once, when it arrives (a watch completes only when it
// ends), without bodies.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["ResponseStarted", "ResponseComplete", "Panic"]
rules:
- level: Metadata
`

// ControlPlane is a running etcd, kube-apiserver, kube-controller-manager and kube-scheduler
// on 127.0.0.1, started by StartControlPlane.
type ControlPlane struct {
	dir        string
	binDir     string
	detach     bool
	pki        *PKI
	server     string
	kubeconfig string
	restConfig *rest.Config
	auditLog   string

	// network is ControlPlaneOptions.Network; inside it the processes talk to the API server at
	// internalServer with internalKubeconfig, and health checks dial through it.
	network            *netns.Network
	internalServer     string
	internalKubeconfig string
	stopRelay          context.CancelFunc
	nextSchedulerPort  int

	mu         sync.Mutex
	procs      []labProcess   // in start order
	schedPorts map[string]int // secure ports of the schedulers StartScheduler started
	stopped    bool
	stopErr    error
}

type labProcess struct {
	p     *Process
	order int
}

// StartControlPlane starts etcd, kube-apiserver, kube-controller-manager and kube-scheduler
// and returns once etcd is healthy, the apiserver's /readyz and the components' /healthz
// answer ok and the default ServiceAccount exists in namespace default. On error it stops
// what it started; the error carries the tail of the failing process's log.
func StartControlPlane(ctx context.Context, o ControlPlaneOptions) (*ControlPlane, error) {
	logger := klog.FromContext(ctx)
	begin := time.Now()
	if o.BinDir == "" || o.Dir == "" {
		return nil, errors.New("start control plane: BinDir and Dir are required (BinDir is printed by hack/build-tools.sh)")
	}
	binDir, err := filepath.Abs(o.BinDir)
	if err != nil {
		return nil, fmt.Errorf("start control plane: absolute BinDir: %w", err)
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, fmt.Errorf("start control plane: absolute Dir: %w", err)
	}
	for _, b := range requiredBinaries() {
		if fi, err := os.Stat(filepath.Join(binDir, b)); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return nil, fmt.Errorf("start control plane: %s missing or not executable in %s: run `hack/build-tools.sh %s`",
				b, binDir, strings.Join(requiredBinaries(), " "))
		}
	}
	if err := prepareDir(dir); err != nil {
		return nil, err
	}
	pki, err := GeneratePKI(filepath.Join(dir, "pki"))
	if err != nil {
		return nil, fmt.Errorf("start control plane: %w", err)
	}
	c := &ControlPlane{
		dir:        dir,
		binDir:     binDir,
		detach:     o.Detach,
		pki:        pki,
		kubeconfig: filepath.Join(dir, "kubeconfig"),
		network:    o.Network,
	}
	// Addresses: on the host, free ports of 127.0.0.1; inside the lab namespace, the usual ports,
	// the API server on every address of the namespace (its loopback and the lab bridge).
	var etcdClient, etcdPeer, apiPort, kcmPort int
	apiBind, advertise := "127.0.0.1", "127.0.0.1"
	if c.network == nil {
		ports, err := freePorts(4)
		if err != nil {
			return nil, fmt.Errorf("start control plane: %w", err)
		}
		etcdClient, etcdPeer, apiPort, kcmPort = ports[0], ports[1], ports[2], ports[3]
		c.server = "https://127.0.0.1:" + strconv.Itoa(apiPort)
		c.internalServer, c.internalKubeconfig = c.server, c.kubeconfig
	} else {
		etcdClient, etcdPeer, apiPort, kcmPort = 2379, 2380, 6443, 10257
		c.nextSchedulerPort = 10259
		apiBind, advertise = "0.0.0.0", netns.Gateway.String()
		c.internalServer = "https://127.0.0.1:" + strconv.Itoa(apiPort)
		c.internalKubeconfig = filepath.Join(dir, "kubeconfig-internal")
		relayCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
		addr, err := c.network.Relay(relayCtx, c.internalServer[len("https://"):])
		if err != nil {
			stop()
			return nil, fmt.Errorf("start control plane: %w", err)
		}
		c.stopRelay = stop
		c.server = "https://" + addr
		if err := WriteKubeconfig(c.internalKubeconfig, c.internalServer, pki.CACert, pki.AdminCert, pki.AdminKey, AdminUser); err != nil {
			stop()
			return nil, fmt.Errorf("start control plane: %w", err)
		}
	}
	if err := WriteKubeconfig(c.kubeconfig, c.server, pki.CACert, pki.AdminCert, pki.AdminKey, AdminUser); err != nil {
		return nil, fmt.Errorf("start control plane: %w", err)
	}
	if c.restConfig, err = c.newRESTConfig(); err != nil {
		return nil, fmt.Errorf("start control plane: %w", err)
	}

	fail := func(err error) (*ControlPlane, error) {
		if stopErr := c.Stop(); stopErr != nil {
			logger.Error(stopErr, "Stopping the partly started control plane failed")
		}
		return nil, fmt.Errorf("start control plane in %s: %w", dir, err)
	}

	// etcd.
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(etcdClient)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(etcdPeer)
	etcd, err := c.start(ctx, EtcdName, "etcd", StopOrderEtcd, []string{
		"--name=lab",
		"--data-dir=" + filepath.Join(dir, "etcd"),
		"--listen-client-urls=" + etcdURL,
		"--advertise-client-urls=" + etcdURL,
		"--listen-peer-urls=" + peerURL,
		"--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=lab=" + peerURL,
		"--initial-cluster-state=new",
		"--unsafe-no-fsync=true",
		"--log-level=warn",
	})
	if err != nil {
		return fail(err)
	}
	httpClient := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: c.dial}}
	defer httpClient.CloseIdleConnections()
	if err := waitReady(ctx, etcd, "/health", func(ctx context.Context) error {
		return httpGetOK(ctx, httpClient, etcdURL+"/health", `"health":"true"`)
	}); err != nil {
		return fail(err)
	}

	// kube-apiserver.
	var auditArgs []string
	if o.AuditLog {
		policy := filepath.Join(dir, "config", "audit-policy.yaml")
		if err := os.MkdirAll(filepath.Dir(policy), 0o755); err != nil {
			return fail(err)
		}
		if err := os.WriteFile(policy, []byte(auditPolicy), 0o644); err != nil {
			return fail(err)
		}
		c.auditLog = filepath.Join(dir, "logs", "audit.log")
		// The default mode, blocking: an event is in the file before its request is served.
		auditArgs = []string{"--audit-policy-file=" + policy, "--audit-log-path=" + c.auditLog, "--audit-log-format=json"}
	}
	// The API server calls kubelets (logs, exec, the pod proxy) with a client certificate and
	// checks their serving certificates, which the lab issues (IssueNodeCerts).
	kubeletClientCert, kubeletClientKey, err := pki.IssueClientCert("apiserver-kubelet-client", "kube-apiserver-kubelet-client", AdminGroup)
	if err != nil {
		return fail(err)
	}
	reconciler := "none" // no kubernetes Service endpoint on the host's loopback
	if c.network != nil {
		reconciler = "lease" // pods reach the API server at netns.Gateway through the Service
	}
	api, err := c.start(ctx, APIServerName, "kube-apiserver", StopOrderAPIServer, append([]string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=" + apiBind,
		"--advertise-address=" + advertise,
		"--secure-port=" + strconv.Itoa(apiPort),
		"--cert-dir=" + pki.Dir,
		"--tls-cert-file=" + pki.ServingCert,
		"--tls-private-key-file=" + pki.ServingKey,
		"--client-ca-file=" + pki.CACert,
		"--service-account-key-file=" + pki.ServiceAccountPubKey,
		"--service-account-signing-key-file=" + pki.ServiceAccountKey,
		"--service-account-issuer=" + ServiceAccountIssuer,
		"--service-cluster-ip-range=" + ServiceClusterIPRange,
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--endpoint-reconciler-type=" + reconciler,
		"--disable-admission-plugins=TaintNodesByCondition",
		"--allow-privileged=true",
		"--kubelet-client-certificate=" + kubeletClientCert,
		"--kubelet-client-key=" + kubeletClientKey,
		"--kubelet-certificate-authority=" + pki.CACert,
		"--kubelet-preferred-address-types=InternalIP,Hostname",
	}, auditArgs...))
	if err != nil {
		return fail(err)
	}
	probeConfig := rest.CopyConfig(c.restConfig)
	probeConfig.Timeout = 5 * time.Second
	if c.network != nil {
		probeConfig.Host = c.internalServer
		probeConfig.Dial = c.dial
	}
	client, err := kubernetes.NewForConfig(probeConfig)
	if err != nil {
		return fail(fmt.Errorf("admin client: %w", err))
	}
	if err := waitReady(ctx, api, "/readyz", func(ctx context.Context) error {
		body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).Raw()
		if err != nil {
			return err
		}
		if string(body) != "ok" {
			return fmt.Errorf("/readyz answered %q", body)
		}
		return nil
	}); err != nil {
		return fail(err)
	}

	// kube-controller-manager and kube-scheduler start together.
	kcm, err := c.start(ctx, ControllerManagerName, "kube-controller-manager", StopOrderControllers, []string{
		"--kubeconfig=" + c.internalKubeconfig,
		"--authentication-kubeconfig=" + c.internalKubeconfig,
		"--authorization-kubeconfig=" + c.internalKubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(kcmPort),
		"--controllers=" + KubeControllerManagerControllers,
		"--service-account-private-key-file=" + pki.ServiceAccountKey,
		"--root-ca-file=" + pki.CACert,
		"--leader-elect=false",
		"--use-service-account-credentials=false",
		"--kube-api-qps=" + strconv.Itoa(ClientQPS),
		"--kube-api-burst=" + strconv.Itoa(ClientBurst),
	})
	if err != nil {
		return fail(err)
	}
	if err := c.StartScheduler(ctx, SchedulerName, []byte("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n")); err != nil {
		return fail(err)
	}
	if err := waitReady(ctx, kcm, "/healthz", func(ctx context.Context) error {
		return c.httpsHealthz(ctx, kcmPort)
	}); err != nil {
		return fail(err)
	}

	// Pods are rejected by the ServiceAccount admission plugin until default/default exists.
	if err := waitReady(ctx, kcm, "the default ServiceAccount in namespace default", func(ctx context.Context) error {
		_, err := client.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return errors.New("serviceaccount default/default not created yet")
		}
		return err
	}); err != nil {
		return fail(err)
	}
	logger.Info("Control plane ready", "dir", dir, "server", c.server, "kubeconfig", c.kubeconfig,
		"duration", time.Since(begin).Round(time.Millisecond))
	return c, nil
}

// prepareDir creates dir, refuses a directory whose recorded lab still runs, and removes the
// etcd data, logs and stale state of an earlier run.
func prepareDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("start control plane: create %s (check permissions): %w", dir, err)
	}
	entries, err := ReadState(dir)
	if err != nil {
		return fmt.Errorf("start control plane: %w", err)
	}
	for _, e := range entries {
		if pidRuns(e.PID, e.Path) {
			return fmt.Errorf("start control plane: %s already runs a lab (%s, pid %d): stop it first (lab.StopFromState / make lab-down)",
				dir, e.Name, e.PID)
		}
	}
	for _, name := range []string{StateFile, "etcd", "logs", "config"} {
		if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("start control plane: remove %s of an earlier run: %w", name, err)
		}
	}
	return nil
}

// start starts one control-plane process, records it in the state and in c.procs. binary is
// a name in BinDir or an absolute path.
func (c *ControlPlane) start(ctx context.Context, name, binary string, order int, args []string) (*Process, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return nil, fmt.Errorf("start %s: the control plane was stopped", name)
	}
	for _, lp := range c.procs {
		if lp.p.Name() == name {
			return nil, fmt.Errorf("start %s: a process of that name already runs (pid %d): pick another name", name, lp.p.PID())
		}
	}
	path := binary
	if !filepath.IsAbs(path) {
		path = filepath.Join(c.binDir, binary)
	}
	po := ProcessOptions{
		Name:    name,
		Path:    path,
		Args:    args,
		LogPath: c.LogPath(name),
		Detach:  c.detach,
	}
	if c.network != nil {
		po.NetNS = c.network.Path()
	}
	p, err := StartProcess(po)
	if err != nil {
		return nil, err
	}
	c.procs = append(c.procs, labProcess{p: p, order: order})
	klog.FromContext(ctx).V(1).Info("Started process", "name", name, "pid", p.PID(), "log", c.LogPath(name))
	if err := AddToState(c.dir, p, order); err != nil {
		return nil, fmt.Errorf("record %s: %w", name, err)
	}
	return p, nil
}

// StartScheduler starts one more kube-scheduler process named name with the given
// KubeSchedulerConfiguration YAML (kubescheduler.config.k8s.io/v1: profiles and extenders as
// the caller writes them). It sets clientConnection.kubeconfig (the admin kubeconfig),
// clientConnection.qps/burst (ClientQPS/ClientBurst) and leaderElection.leaderElect=false,
// writes the result to Dir/config/<name>.yaml, serves /healthz on a free 127.0.0.1 port and
// returns once /healthz answers ok. Its log is LogPath(name). Extenders of a configuration
// apply to all its profiles: give a scheduler with extenders its own process.
func (c *ControlPlane) StartScheduler(ctx context.Context, name string, config []byte) error {
	return c.StartSchedulerBinary(ctx, name, "", config)
}

// StartSchedulerBinary is StartScheduler with another scheduler binary: path is an absolute
// path of a kube-scheduler built with plugins of its own (neuron-kube-scheduler takes the same
// flags and configuration file), "" the pinned kube-scheduler of BinDir.
func (c *ControlPlane) StartSchedulerBinary(ctx context.Context, name, path string, config []byte) error {
	binary := SchedulerName
	if path != "" {
		if !filepath.IsAbs(path) {
			return fmt.Errorf("start scheduler %s: the binary %q is not an absolute path", name, path)
		}
		if _, err := os.Stat(path); err != nil {
			return fmt.Errorf("start scheduler %s: %w", name, err)
		}
		binary = path
	}
	if !processNameRE.MatchString(name) {
		return fmt.Errorf("start scheduler %q: the name must be lowercase letters, digits, '-' and '.'", name)
	}
	cfg := map[string]any{}
	if err := yaml.Unmarshal(config, &cfg); err != nil {
		return fmt.Errorf("start scheduler %s: parse the KubeSchedulerConfiguration YAML: %w", name, err)
	}
	if cfg == nil {
		cfg = map[string]any{}
	}
	if _, ok := cfg["apiVersion"]; !ok {
		cfg["apiVersion"] = "kubescheduler.config.k8s.io/v1"
	}
	if _, ok := cfg["kind"]; !ok {
		cfg["kind"] = "KubeSchedulerConfiguration"
	}
	cc, _ := cfg["clientConnection"].(map[string]any)
	if cc == nil {
		cc = map[string]any{}
	}
	cc["kubeconfig"] = c.internalKubeconfig
	cc["qps"] = ClientQPS
	cc["burst"] = ClientBurst
	cfg["clientConnection"] = cc
	le, _ := cfg["leaderElection"].(map[string]any)
	if le == nil {
		le = map[string]any{}
	}
	le["leaderElect"] = false
	cfg["leaderElection"] = le
	data, err := yaml.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("start scheduler %s: encode configuration: %w", name, err)
	}
	cfgPath := filepath.Join(c.dir, "config", name+".yaml")
	if err := os.MkdirAll(filepath.Dir(cfgPath), 0o700); err != nil {
		return fmt.Errorf("start scheduler %s: create config directory: %w", name, err)
	}
	if err := writeFile0600(cfgPath, data); err != nil {
		return fmt.Errorf("start scheduler %s: %w", name, err)
	}
	port, err := c.schedulerPort()
	if err != nil {
		return fmt.Errorf("start scheduler %s: %w", name, err)
	}
	ports := []int{port}
	p, err := c.start(ctx, name, binary, StopOrderControllers, []string{
		"--config=" + cfgPath,
		"--authentication-kubeconfig=" + c.internalKubeconfig,
		"--authorization-kubeconfig=" + c.internalKubeconfig,
		"--client-ca-file=" + c.pki.CACert, // lab client certificates authenticate (SchedulerURL)
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(ports[0]),
	})
	if err != nil {
		return err
	}
	if err := waitReady(ctx, p, "/healthz", func(ctx context.Context) error {
		return c.httpsHealthz(ctx, ports[0])
	}); err != nil {
		c.stopOne(p)
		return err
	}
	c.mu.Lock()
	if c.schedPorts == nil {
		c.schedPorts = map[string]int{}
	}
	c.schedPorts[name] = ports[0]
	c.mu.Unlock()
	return nil
}

// schedulerPort is a port for one more scheduler: a free port of the host's 127.0.0.1, or the
// next of 10259, 10260, ... inside the lab namespace.
func (c *ControlPlane) schedulerPort() (int, error) {
	if c.network == nil {
		ports, err := freePorts(1)
		if err != nil {
			return 0, err
		}
		return ports[0], nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.nextSchedulerPort
	c.nextSchedulerPort++
	return p, nil
}

// SchedulerURL is the https URL of the secure port of a scheduler StartScheduler started (its
// /healthz, /metrics and /debug/pprof; the admin client certificate is authorized), or false.
// The port stays known after the scheduler stops. Inside the lab namespace (Network) the URL is
// an address of that namespace: dial it with Dial.
func (c *ControlPlane) SchedulerURL(name string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	port, ok := c.schedPorts[name]
	if !ok {
		return "", false
	}
	return "https://127.0.0.1:" + strconv.Itoa(port), true
}

// StopScheduler stops the scheduler StartScheduler (or StartSchedulerBinary) started as name,
// and forgets it: a scheduler of that name can start again. Its port stays known (SchedulerURL).
func (c *ControlPlane) StopScheduler(name string) error {
	c.mu.Lock()
	var p *Process
	for _, lp := range c.procs {
		if lp.p.Name() == name {
			p = lp.p
		}
	}
	_, started := c.schedPorts[name]
	c.mu.Unlock()
	if p == nil || !started {
		return fmt.Errorf("stop scheduler %s: no scheduler of that name runs", name)
	}
	err := p.Stop(StopGrace(StopOrderControllers))
	c.mu.Lock()
	c.procs = slices.DeleteFunc(c.procs, func(lp labProcess) bool { return lp.p == p })
	c.mu.Unlock()
	return errors.Join(err, RemoveFromState(c.dir, p.PID()))
}

// stopOne stops a process that failed to become ready and forgets it.
func (c *ControlPlane) stopOne(p *Process) {
	_ = p.Stop(StopGrace(StopOrderControllers))
	c.mu.Lock()
	c.procs = slices.DeleteFunc(c.procs, func(lp labProcess) bool { return lp.p == p })
	c.mu.Unlock()
	_ = RemoveFromState(c.dir, p.PID())
}

// Stop stops every process of the control plane: schedulers and kube-controller-manager
// first (SIGTERM, 5 s, SIGKILL), then kube-apiserver (SIGTERM, 10 s, SIGKILL), etcd last, and
// removes them from state.json. It is idempotent. Processes others added to the state with
// AddToState are not touched (StopFromState stops those too).
func (c *ControlPlane) Stop() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return c.stopErr
	}
	c.stopped = true
	procs := slices.Clone(c.procs)
	slices.SortStableFunc(procs, func(a, b labProcess) int { return a.order - b.order })
	var errs []error
	var pids []int
	for len(procs) > 0 {
		n := 1
		for n < len(procs) && procs[n].order == procs[0].order {
			n++
		}
		group := procs[:n]
		procs = procs[n:]
		groupErrs := make([]error, len(group))
		var wg sync.WaitGroup
		for i, lp := range group {
			wg.Go(func() { groupErrs[i] = lp.p.Stop(StopGrace(lp.order)) })
		}
		wg.Wait()
		for _, lp := range group {
			pids = append(pids, lp.p.PID())
		}
		errs = append(errs, groupErrs...)
	}
	if err := RemoveFromState(c.dir, pids...); err != nil {
		errs = append(errs, err)
	}
	if c.stopRelay != nil {
		c.stopRelay()
	}
	c.stopErr = errors.Join(errs...)
	return c.stopErr
}

// Kubeconfig is the path of the admin kubeconfig (Dir/kubeconfig).
func (c *ControlPlane) Kubeconfig() string { return c.kubeconfig }

// InternalKubeconfig is the admin kubeconfig of processes inside the lab namespace (the
// control plane's own); Kubeconfig without a Network.
func (c *ControlPlane) InternalKubeconfig() string { return c.internalKubeconfig }

// Network is the lab namespace the control plane runs in, nil on the host.
func (c *ControlPlane) Network() *netns.Network { return c.network }

// dial connects to an address of the control plane's processes: inside the lab namespace with
// a Network, on the host otherwise.
func (c *ControlPlane) dial(ctx context.Context, network, address string) (net.Conn, error) {
	if c.network != nil {
		return c.network.Dial(ctx, network, address)
	}
	return (&net.Dialer{}).DialContext(ctx, network, address)
}

// RESTConfig returns a copy of the admin config (QPS ClientQPS, Burst ClientBurst).
func (c *ControlPlane) RESTConfig() *rest.Config { return rest.CopyConfig(c.restConfig) }

// Dir is the absolute state directory.
func (c *ControlPlane) Dir() string { return c.dir }

// AuditLogPath is the API server's audit log (JSON lines, one event per request at its stage
// RequestReceived), "" without ControlPlaneOptions.AuditLog.
func (c *ControlPlane) AuditLogPath() string { return c.auditLog }

// Server is the apiserver URL (https://127.0.0.1:<port>).
func (c *ControlPlane) Server() string { return c.server }

// PKI gives the lab's certificates and lets callers issue more client certificates.
func (c *ControlPlane) PKI() *PKI { return c.pki }

// BinDir is the absolute directory of the control-plane binaries (and kubectl).
func (c *ControlPlane) BinDir() string { return c.binDir }

// LogPath is Dir/logs/<name>.log, the log of the process called name.
func (c *ControlPlane) LogPath(name string) string {
	return filepath.Join(c.dir, "logs", name+".log")
}

// Processes lists the control-plane processes started and not stopped, in start order.
func (c *ControlPlane) Processes() []State {
	c.mu.Lock()
	defer c.mu.Unlock()
	var s []State
	for _, lp := range c.procs {
		select {
		case <-lp.p.Exited():
			continue
		default:
		}
		s = append(s, State{Name: lp.p.Name(), PID: lp.p.PID(), Path: lp.p.Path(), StopOrder: lp.order})
	}
	return s
}

func (c *ControlPlane) newRESTConfig() (*rest.Config, error) {
	ca, err := os.ReadFile(c.pki.CACert)
	if err != nil {
		return nil, fmt.Errorf("read lab CA: %w", err)
	}
	cert, err := os.ReadFile(c.pki.AdminCert)
	if err != nil {
		return nil, fmt.Errorf("read admin certificate: %w", err)
	}
	key, err := os.ReadFile(c.pki.AdminKey)
	if err != nil {
		return nil, fmt.Errorf("read admin key: %w", err)
	}
	return &rest.Config{
		Host:            c.server,
		TLSClientConfig: rest.TLSClientConfig{CAData: ca, CertData: cert, KeyData: key},
		QPS:             ClientQPS,
		Burst:           ClientBurst,
	}, nil
}

// waitReady polls check until it succeeds, p exits, ctx ends or readyTimeout passes. Its
// errors name the process and carry the tail of its log.
func waitReady(ctx context.Context, p *Process, what string, check func(context.Context) error) error {
	logger := klog.FromContext(ctx)
	begin := time.Now()
	deadline := time.NewTimer(readyTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	var last error
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		last = check(cctx)
		cancel()
		if last == nil {
			logger.V(1).Info("Process ready", "name", p.Name(), "pid", p.PID(), "check", what,
				"duration", time.Since(begin).Round(time.Millisecond))
			return nil
		}
		select {
		case <-p.Exited():
			return fmt.Errorf("%s (pid %d) exited before %s was ready (%v); fix the cause in its log %s:\n%s",
				p.Name(), p.PID(), what, p.ExitError(), p.LogPath(), LogTail(p.LogPath(), logTailLines))
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s of %s: %w", what, p.Name(), ctx.Err())
		case <-deadline.C:
			return fmt.Errorf("%s of %s (pid %d) not ready after %v (last error: %v); see its log %s:\n%s",
				what, p.Name(), p.PID(), readyTimeout, last, p.LogPath(), LogTail(p.LogPath(), logTailLines))
		case <-tick.C:
		}
	}
}

// LogTail returns the last n lines of the file at path (at most the last 64 KiB), or a note
// saying why it cannot.
func LogTail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer f.Close()
	const maxTail = 64 << 10
	if fi, err := f.Stat(); err == nil && fi.Size() > maxTail {
		if _, err := f.Seek(fi.Size()-maxTail, io.SeekStart); err != nil {
			return fmt.Sprintf("(cannot read log: %v)", err)
		}
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "    " + strings.Join(lines, "\n    ")
}

func httpGetOK(ctx context.Context, client *http.Client, url, want string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte(want)) {
		return fmt.Errorf("GET %s: %s %q", url, resp.Status, body)
	}
	return nil
}

// httpsHealthz checks https://127.0.0.1:port/healthz of a component serving a self-signed
// certificate.
func (c *ControlPlane) httpsHealthz(ctx context.Context, port int) error {
	tr := &http.Transport{DialContext: c.dial, TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} // loopback probe of a self-signed server
	defer tr.CloseIdleConnections()
	return httpGetOK(ctx, &http.Client{Transport: tr, Timeout: 2 * time.Second},
		"https://127.0.0.1:"+strconv.Itoa(port)+"/healthz", "ok")
}

// freePorts returns n distinct free TCP ports on 127.0.0.1 (all listeners are held until every
// port is chosen, so they differ).
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port on 127.0.0.1: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
