package lab

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	podresv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/kube-neuron/kube-neuron/internal/lab/netns"
	"github.com/kube-neuron/kube-neuron/internal/lab/realnode"
	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/neuron"
)

// Kubelet modes of a fleet entry.
const (
	// KubeletSimulated nodes are run by the lab's node simulator (the default): fast, many at
	// once, the lab's components as host processes.
	KubeletSimulated = "simulated"
	// KubeletReal nodes run a real kubelet, containerd and runc, isolated as a node container
	// (internal/lab/realnode); the chart's components run on them as pods.
	KubeletReal = "real"
)

// LabKubeletLabel tells a lab node's kubelet: simulated or real. The lab's chart values keep
// the chart's pods off simulated nodes.
const LabKubeletLabel = "kube-neuron.io/lab-kubelet"

// SystemNodeName is the real node the lab adds for the Deployments (the extender, my-scheduler,
// CoreDNS), as EKS clusters have a system node group: untainted and without Neuron devices.
const SystemNodeName = "lab-system"

// SystemNodeLabel marks the system node.
const SystemNodeLabel = "kube-neuron.io/lab-system"

// RealNode is a running real node.
type RealNode struct {
	Spec    NodeSpec
	Index   int    // its place on the lab network: netns.NodeIP(Index), netns.PodCIDR(Index)
	dir     string // the node's root: var/, opt/, etc/
	kubelet string // the kubelet binary
	lab     string // the lab's directory (its state file)
	proc    *Process
	hw      *neuron.Simulator
	cg      string
}

// Hardware returns the node's simulated devices (nil for the system node): errors injected and
// devices removed there are what the node's plugins read through its /sys.
func (n *RealNode) Hardware() *neuron.Simulator { return n.hw }

// IP is the node's address on the lab network.
func (n *RealNode) IP() string { return netns.NodeIP(n.Index).String() }

// RestartKubelet restarts the node's kubelet, as `systemctl restart kubelet` does on a node: its
// containers keep running.
func (n *RealNode) RestartKubelet() error {
	return syscall.Kill(n.proc.PID(), syscall.SIGHUP)
}

// KubeletPID is the host's pid of the node's kubelet (a child of the node init).
func (n *RealNode) KubeletPID() (int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so split after its last ')'.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 2 || f[1] != strconv.Itoa(n.proc.PID()) {
			continue
		}
		if pidRuns(pid, n.kubelet) {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("node %s runs no kubelet now", n.Spec.Name)
}

// KubeletDevices asks the node's kubelet (its PodResources API, GetAllocatableResources) how many
// healthy devices of each resource it has from its device plugins now: the kubelet's own view,
// which reaches the Node's allocatable only at its next status update.
func (n *RealNode) KubeletDevices(ctx context.Context) (map[string]int, error) {
	sock := filepath.Join(n.dir, "var", "lib", "kubelet", "pod-resources", "kubelet.sock")
	if len(sock) >= 108 {
		return nil, fmt.Errorf("the kubelet's PodResources socket %s is too long a path to dial (108 bytes): use a shorter lab directory", sock)
	}
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	rpcCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := podresv1.NewPodResourcesListerClient(conn).GetAllocatableResources(rpcCtx, &podresv1.AllocatableResourcesRequest{})
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, d := range resp.Devices {
		out[d.ResourceName] += len(d.DeviceIds)
	}
	return out, nil
}

// KubeletLog is the path of the node's kubelet log.
func (n *RealNode) KubeletLog() string {
	return filepath.Join(filepath.Dir(n.proc.LogPath()), n.Spec.Name+"-kubelet.log")
}

// realNodeTools are what real nodes need besides the control plane, checked before anything
// starts.
type realNodeTools struct {
	netTools netns.Tools
	kubelet  string
	proxy    string
	nodeBin  string // containerd, runc, the CNI plugins
	labBin   string // neuron-lab (the node init and the registry)
}

// RealNodesUnavailable says why this machine cannot run real nodes, "" when it can.
func RealNodesUnavailable() string {
	if os.Geteuid() != 0 {
		return "real lab nodes need root (network, mount and PID namespaces, cgroups)"
	}
	if _, err := os.Stat("/proc/self/ns/net"); err != nil {
		return "real lab nodes need namespaces: /proc/self/ns/net is missing"
	}
	if _, err := netns.FindTools(); err != nil {
		return err.Error()
	}
	return ""
}

func findRealNodeTools(o Options) (realNodeTools, error) {
	var t realNodeTools
	if why := RealNodesUnavailable(); why != "" {
		return t, fmt.Errorf("%s; run the lab without `kubelet: real` nodes (KUBE_NEURON_REAL_NODES=0 for the tests)", why)
	}
	t.netTools, _ = netns.FindTools()
	if o.NodeBinDir == "" {
		return t, errors.New("real lab nodes need containerd, runc, the CNI plugins and the images: start the lab with make lab-up (neuron-lab up with the flags hack/real-nodes.sh prints: --node-bin-dir, --images-dir, --lab-images-dir)")
	}
	t.nodeBin = o.NodeBinDir
	t.kubelet = filepath.Join(o.BinDir, "kubelet")
	t.proxy = filepath.Join(o.BinDir, "kube-proxy")
	t.labBin = filepath.Join(o.ComponentBinDir, "neuron-lab")
	for _, p := range []string{t.kubelet, t.proxy, t.labBin, filepath.Join(t.nodeBin, "containerd"), filepath.Join(t.nodeBin, "runc"), filepath.Join(t.nodeBin, "bridge")} {
		if fi, err := os.Stat(p); err != nil || fi.Mode()&0o111 == 0 {
			return t, fmt.Errorf("real lab nodes need %s: build it (hack/build-tools.sh kubelet kube-proxy, hack/node/build.sh, make build)", p)
		}
	}
	return t, nil
}

// CgroupName is the start of the cgroup (in every hierarchy, under realnode.CgroupPrefix) of the
// real nodes of a lab in dir (absolute): <hash of dir>-<pid of the lab's process>.
func CgroupName(dir string) string {
	sum := sha256.Sum256([]byte(dir))
	return hex.EncodeToString(sum[:6]) + "-"
}

// labCgroupRoot is the cgroup of this lab process's real nodes.
func labCgroupRoot(dir string) string {
	return realnode.CgroupPrefix + "/" + CgroupName(dir) + strconv.Itoa(os.Getpid())
}

// startRealNode starts one real node and waits until it is Ready.
func (l *Lab) startRealNode(ctx context.Context, spec NodeSpec, index int, system bool) (*RealNode, error) {
	begin := time.Now()
	n := &RealNode{Spec: spec, Index: index, dir: filepath.Join(l.cp.Dir(), "nodes", spec.Name, "node"), lab: l.cp.Dir(),
		kubelet: l.real.tools.kubelet, cg: labCgroupRoot(l.cp.Dir()) + "/" + spec.Name}
	cfg, err := l.writeRealNode(n, system)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", spec.Name, err)
	}
	if err := l.bootRealNode(ctx, n, cfg); err != nil {
		return nil, err
	}
	klog.FromContext(ctx).Info("Real node ready", "node", spec.Name, "ip", n.IP(), "duration", time.Since(begin).Round(time.Millisecond))
	return n, nil
}

// realNodeIdentity is what a real node registers with: the labels of a simulated node of its
// spec (less those the kubelet sets itself) and the Neuron taint, or for the system node only the
// lab's labels.
func realNodeIdentity(spec NodeSpec, system bool) (map[string]string, []corev1.Taint) {
	l := map[string]string{LabKubeletLabel: KubeletReal, "kube-neuron.io/lab-node": "true"}
	if system {
		l[SystemNodeLabel] = "true"
		return l, nil
	}
	for k, v := range simNodeLabels(spec) {
		l[k] = v
	}
	for _, own := range []string{labels.Hostname, "kubernetes.io/os", "kubernetes.io/arch"} {
		delete(l, own)
	}
	l[LabKubeletLabel] = KubeletReal
	return l, []corev1.Taint{{Key: labels.NeuronTaintKey, Value: labels.NeuronTaintValue, Effect: corev1.TaintEffectNoSchedule}}
}

// writeRealNode writes everything of a node in its directory: the simulated Neuron tree (not for
// the system node), its certificates, the configuration of its daemons and of its node init.
func (l *Lab) writeRealNode(n *RealNode, system bool) (realnode.Config, error) {
	spec := n.Spec
	base := filepath.Dir(n.dir)
	if err := os.RemoveAll(base); err != nil {
		return realnode.Config{}, err
	}
	if err := os.MkdirAll(n.dir, 0o755); err != nil {
		return realnode.Config{}, err
	}
	cfg := realnode.Config{
		Name: spec.Name, Dir: n.dir, LogDir: filepath.Join(l.cp.Dir(), "logs"), CgroupRoot: n.cg,
		Containerd: filepath.Join(l.real.tools.nodeBin, "containerd"), Kubelet: l.real.tools.kubelet, KubeProxy: l.real.tools.proxy,
		ContainerdConfig: realnode.ContainerdConfigPath(n.dir),
		Sysctls:          map[string]string{"net/ipv4/ip_forward": "1", "net/bridge/bridge-nf-call-iptables": "1"},
	}
	if !system {
		cfg.Sysfs, cfg.Devices = filepath.Join(base, "sysfs"), spec.InstanceType.Devices
		cfg.CPUs, cfg.MemoryBytes = max(spec.InstanceType.VCPU, 1), uint64(max(spec.InstanceType.MemoryGiB, 1))<<30
		lnc := 0
		if spec.LNC != spec.InstanceType.DefaultLNC {
			lnc = spec.LNC
		}
		hw, err := neuron.Simulate(neuron.SimOptions{Root: cfg.Sysfs, InstanceType: spec.InstanceType, LNC: lnc,
			DriverVersion: spec.DriverVersion, UltraServer: spec.UltraServer, EFA: true})
		if err != nil {
			return cfg, fmt.Errorf("simulating sysfs: %w", err)
		}
		n.hw = hw
	}
	pki := l.cp.PKI()
	ip := netns.NodeIP(n.Index)
	kubeletCert, kubeletKey, err := pki.IssueClientCert("node-"+spec.Name, "system:node:"+spec.Name, "system:nodes")
	if err != nil {
		return cfg, err
	}
	servingCert, servingKey, err := pki.IssueServingCert("kubelet-"+spec.Name, []string{spec.Name}, []net.IP{net.IP(ip.AsSlice())})
	if err != nil {
		return cfg, err
	}
	proxyCert, proxyKey, err := pki.IssueClientCert("kube-proxy", "system:kube-proxy")
	if err != nil {
		return cfg, err
	}
	nodeLabels, taints := realNodeIdentity(spec, system)
	files, kubeletArgs, proxyArgs, err := realnode.Files(realnode.FileOptions{
		Name: spec.Name, Dir: n.dir,
		NodeIP: ip.String(), PodCIDR: netns.PodCIDR(n.Index).String(), ClusterCIDR: netns.PodNetwork.String(),
		APIServer: "https://" + net.JoinHostPort(netns.Gateway.String(), "6443"), CACert: pki.CACert,
		KubeletCert: kubeletCert, KubeletKey: kubeletKey, ServingCert: servingCert, ServingKey: servingKey,
		ProxyCert: proxyCert, ProxyKey: proxyKey,
		ClusterDNS: ClusterDNSIP, Registry: l.real.registryAddr, SandboxImage: l.real.sandboxImage,
		CNIBin: l.real.tools.nodeBin, Runc: filepath.Join(l.real.tools.nodeBin, "runc"),
		SizeShown: !system, Labels: nodeLabels, Taints: taints, Verbosity: 2,
	})
	if err != nil {
		return cfg, err
	}
	if err := realnode.WriteFiles(n.dir, files); err != nil {
		return cfg, err
	}
	cfg.KubeletArgs, cfg.KubeProxyArgs = kubeletArgs, proxyArgs
	return cfg, cfg.Write()
}

// bootRealNode starts the node init in the node's namespaces, attaches its network namespace to
// the lab's bridge, tells it so, and waits until the kubelet has registered the node Ready.
func (l *Lab) bootRealNode(ctx context.Context, n *RealNode, cfg realnode.Config) error {
	if err := realnode.RemoveCgroups(n.cg, 10*time.Second); err != nil {
		return err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer w.Close()
	n.proc, err = StartProcess(ProcessOptions{
		Name: "node-" + n.Spec.Name, Path: l.real.tools.labBin,
		Args:       []string{"node-init", "--config", filepath.Join(cfg.Dir, realnode.ConfigFile)},
		LogPath:    l.cp.LogPath(n.Spec.Name + "-init"),
		Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWUTS | syscall.CLONE_NEWIPC | syscall.CLONE_NEWNET,
		ExtraFiles: []*os.File{r},
	})
	r.Close()
	if err != nil {
		return err
	}
	fail := func(err error) error {
		_ = n.stop(ctx)
		return err
	}
	if err := AddToState(l.cp.Dir(), n.proc, StopOrderComponent); err != nil {
		return fail(err)
	}
	if err := l.real.network.AttachNode(ctx, n.proc.PID(), n.Index, ServiceClusterIPRange); err != nil {
		return fail(fmt.Errorf("node %s: attach to the lab network: %w", n.Spec.Name, err))
	}
	if _, err := w.Write([]byte("go\n")); err != nil {
		return fail(fmt.Errorf("node %s: the node init is gone: %w\n%s", n.Spec.Name, err, LogTail(n.proc.LogPath(), 20)))
	}
	if err := l.waitNodeReady(ctx, n, 90*time.Second); err != nil {
		return fail(err)
	}
	return nil
}

// waitNodeReady waits until the node's kubelet has registered it Ready.
func (l *Lab) waitNodeReady(ctx context.Context, n *RealNode, timeout time.Duration) error {
	last := "not registered"
	waitCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-n.proc.Exited():
			cancel()
		case <-waitCtx.Done():
		}
	}()
	err := wait.PollUntilContextTimeout(waitCtx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		node, err := l.client.CoreV1().Nodes().Get(ctx, n.Spec.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				last = fmt.Sprintf("Ready=%s (%s)", c.Status, c.Message)
				return c.Status == corev1.ConditionTrue, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("real node %s not Ready after %v (last seen: %s): %w\nnode init log:\n%s\nkubelet log:\n%s",
			n.Spec.Name, timeout, last, err, LogTail(n.proc.LogPath(), 15), LogTail(n.KubeletLog(), 15))
	}
	return nil
}

// stop ends the node (its init stops the kubelet and containerd; the kernel ends the rest of
// the node) and removes its cgroups and route.
func (n *RealNode) stop(ctx context.Context) error {
	var errs []error
	if n.proc != nil {
		errs = append(errs, n.proc.Stop(15*time.Second))
		_ = RemoveFromState(n.lab, n.proc.PID())
	}
	errs = append(errs, realnode.RemoveCgroups(n.cg, 20*time.Second))
	return errors.Join(errs...)
}

// ClusterDNSIP is the cluster DNS Service's address (CoreDNS on the system node).
const ClusterDNSIP = "10.0.0.10"
