package lab

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	podresv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/utils/ptr"

	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/neuron"
)

// KubeletVersion is what simulated nodes report.
const KubeletVersion = "v1.36.3"

// leaseDuration and leaseRenew follow the kubelet's defaults.
const (
	leaseDuration = 40 * time.Second
	leaseRenew    = 10 * time.Second
)

// SimNode is one simulated Neuron node: its Node object and Lease, its sysfs tree, and a kubelet
// that speaks the device plugin and DRA protocols with the components running for it.
type SimNode struct {
	Spec   NodeSpec
	client kubernetes.Interface

	root      string // state: sysfs tree
	socketDir string // sockets: device-plugins, plugins_registry, plugins (short path)
	hw        *neuron.Simulator
	dm        *deviceManager
	dra       *draManager
	pods      *podWorker

	podRes   *grpc.Server
	statusMu sync.Mutex
	// statusEvery is how often the node posts its device plugins' capacity and allocatable once
	// each resource has been posted (SimulatorOptions.StatusUpdateFrequency); posted says which
	// were; dirty, that one changed since the last post.
	statusEvery time.Duration
	posted      map[string]bool
	dirty       bool
	cancel      context.CancelFunc
	done        sync.WaitGroup
}

// SysfsRoot is the root of the node's simulated sysfs tree (the --sysfs-root of its components).
func (n *SimNode) SysfsRoot() string { return filepath.Join(n.root, "sysfs") }

// DevicePluginDir holds kubelet.sock and the device plugins' sockets.
func (n *SimNode) DevicePluginDir() string { return filepath.Join(n.socketDir, "device-plugins") }

// DevicePluginStateDir is neuron-device-plugin's own state directory (its --state-dir): a host
// directory outside the kubelet's, which survives the plugin's and the kubelet's restarts.
func (n *SimNode) DevicePluginStateDir() string {
	return filepath.Join(n.root, "state", "device-plugin")
}

// RegistryDir is the kubelet plugin watcher's directory (plugins_registry).
func (n *SimNode) RegistryDir() string { return filepath.Join(n.socketDir, "plugins_registry") }

// PluginsDir is where DRA plugins put their service sockets (kubelet's plugins directory).
func (n *SimNode) PluginsDir() string { return filepath.Join(n.socketDir, "plugins") }

// PodResourcesSocket is the kubelet's PodResources API socket.
func (n *SimNode) PodResourcesSocket() string {
	return filepath.Join(n.socketDir, "pod-resources", "kubelet.sock")
}

// CDIDir is the node's CDI spec directory.
func (n *SimNode) CDIDir() string { return filepath.Join(n.root, "cdi") }

// Hardware returns the node's simulated devices, for error injection.
func (n *SimNode) Hardware() *neuron.Simulator { return n.hw }

// RestartKubelet simulates a kubelet restart: the registration socket goes away with every
// plugin connection and the device plugin directory is emptied; plugins must register again.
func (n *SimNode) RestartKubelet(ctx context.Context) error {
	n.dm.stop()
	return n.dm.start(ctx)
}

// DeviceManagerAllocated returns the device ids the simulated kubelet has given out, per resource.
func (n *SimNode) DeviceManagerAllocated() map[string][]string { return n.dm.Allocated() }

// Registered reports whether a device plugin serves the resource on the node.
func (n *SimNode) Registered(resource string) bool { return n.dm.Registered(resource) }

// DRADrivers returns the DRA drivers registered with the simulated kubelet.
func (n *SimNode) DRADrivers() []string { return n.dra.Drivers() }

func newSimNode(spec NodeSpec, client kubernetes.Interface, root, socketDir string, statusEvery time.Duration) (*SimNode, error) {
	n := &SimNode{Spec: spec, client: client, root: root, socketDir: socketDir, statusEvery: statusEvery, posted: map[string]bool{}}
	for _, d := range []string{n.DevicePluginDir(), n.RegistryDir(), n.PluginsDir(), n.CDIDir(), filepath.Dir(n.PodResourcesSocket())} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	if p := filepath.Join(n.DevicePluginDir(), "kubelet.sock"); len(p) > 100 {
		return nil, fmt.Errorf("socket path %s is %d bytes: Unix sockets allow 108; use a shorter socket directory", p, len(p))
	}
	lnc := 0
	if spec.LNC != spec.InstanceType.DefaultLNC {
		lnc = spec.LNC
	}
	hw, err := neuron.Simulate(neuron.SimOptions{
		Root: n.SysfsRoot(), InstanceType: spec.InstanceType, LNC: lnc, DriverVersion: spec.DriverVersion,
		UltraServer: spec.UltraServer, EFA: true,
	})
	if err != nil {
		return nil, fmt.Errorf("node %s: simulating sysfs: %w", spec.Name, err)
	}
	n.hw = hw
	n.dm = newDeviceManager(n.DevicePluginDir(), n.syncStatusAsync)
	n.dra = newDRAManager(n.RegistryDir(), func() {})
	return n, nil
}

// simNodeLabels are the labels of a lab node of spec: those EKS and Karpenter give a Neuron
// node, the allocation mode, and the lab's own (simulated kubelet).
func simNodeLabels(spec NodeSpec) map[string]string {
	it := spec.InstanceType
	l := map[string]string{
		labels.InstanceType:       it.Name,
		labels.InstanceFamily:     it.Family,
		labels.Hostname:           spec.Name,
		labels.AllocationMode:     spec.Mode,
		"kubernetes.io/os":        "linux",
		"kubernetes.io/arch":      "amd64",
		"kube-neuron.io/lab-node": "true",
		LabKubeletLabel:           KubeletSimulated,
	}
	for k, v := range labels.UltraServerLabels(spec.UltraServer) {
		l[k] = v
	}
	for i, nn := range networkNodes(spec) {
		l[fmt.Sprintf("topology.k8s.aws/network-node-layer-%d", i+1)] = nn
	}
	return l
}

// NodeObject returns the Node as the simulator creates it.
func (n *SimNode) NodeObject() *corev1.Node {
	it := n.Spec.InstanceType
	l := simNodeLabels(n.Spec)
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewQuantity(int64(max(it.VCPU, 1)), resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(int64(max(it.MemoryGiB, 1))<<30, resource.BinarySI),
		corev1.ResourcePods:   *resource.NewQuantity(110, resource.DecimalSI),
	}
	now := metav1.Now()
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Spec.Name, Labels: l},
		Spec: corev1.NodeSpec{
			ProviderID: "kube-neuron-lab:///" + n.Spec.Name,
			Taints:     []corev1.Taint{{Key: labels.NeuronTaintKey, Value: labels.NeuronTaintValue, Effect: corev1.TaintEffectNoSchedule}},
		},
		Status: corev1.NodeStatus{
			Capacity:    capacity,
			Allocatable: capacity.DeepCopy(),
			Conditions: []corev1.NodeCondition{{
				Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
				Message: "kube-neuron lab kubelet is posting ready status", LastHeartbeatTime: now, LastTransitionTime: now,
			}},
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}, {Type: corev1.NodeHostName, Address: n.Spec.Name}},
			NodeInfo: corev1.NodeSystemInfo{
				KubeletVersion: KubeletVersion, OperatingSystem: "linux", Architecture: "amd64",
				ContainerRuntimeVersion: "kube-neuron-lab://1", OSImage: "kube-neuron lab (simulated Neuron driver " + n.Spec.DriverVersion + ")",
			},
		},
	}
}

// start registers the node and runs its kubelet until Stop.
func (n *SimNode) start(ctx context.Context, pods *podWorker) error {
	logger := klog.FromContext(ctx).WithValues("node", n.Spec.Name)
	ctx = klog.NewContext(ctx, logger)
	want := n.NodeObject()
	node, err := n.client.CoreV1().Nodes().Create(ctx, want, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		// A node someone else registered (neuron-autoscaler's local provider). Its status first:
		// the kubelet's (no Neuron capacity until the device plugin registers), while the node
		// still carries its not-ready taint, so that the scheduler never sees it untainted with
		// capacity no plugin serves yet.
		node, err = n.client.CoreV1().Nodes().Get(ctx, want.Name, metav1.GetOptions{})
		if err == nil {
			node.Status = want.Status
			node, err = n.client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
		}
		// Then its labels (kept, the simulator's added) and taints: the ones it was launched
		// with, as a kubelet registering with --register-with-taints has them (the autoscaler's
		// kube-neuron.io/launching, which it removes itself once the node's pods are nominated),
		// less node.kubernetes.io/not-ready, which the node lifecycle controller lifts once the
		// node is Ready, plus the simulator's own.
		if err == nil {
			if node.Labels == nil {
				node.Labels = map[string]string{}
			}
			for k, v := range want.Labels {
				node.Labels[k] = v
			}
			node.Spec.Taints = registeredTaints(node.Spec.Taints, want.Spec.Taints)
			node, err = n.client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
		}
		if err != nil {
			return fmt.Errorf("registering node %s: %w", want.Name, err)
		}
	} else if err != nil {
		return fmt.Errorf("creating node %s: %w", want.Name, err)
	} else {
		node.Status = want.Status
		if _, err := n.client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("setting the status of node %s: %w", want.Name, err)
		}
	}
	if err := n.renewLease(ctx, node.UID); err != nil {
		return err
	}
	if err := n.dm.start(ctx); err != nil {
		return err
	}
	_ = os.Remove(n.PodResourcesSocket())
	lis, err := net.Listen("unix", n.PodResourcesSocket())
	if err != nil {
		return fmt.Errorf("serving the PodResources API: %w", err)
	}
	n.podRes = grpc.NewServer()
	podresv1.RegisterPodResourcesListerServer(n.podRes, &podResourcesServer{dm: n.dm})
	go func() { _ = n.podRes.Serve(lis) }()
	ctx, n.cancel = context.WithCancel(ctx)
	n.pods = pods
	if n.statusEvery > 0 {
		n.done.Go(func() { n.postStatusEvery(ctx) })
	}
	n.done.Add(2)
	go func() {
		defer n.done.Done()
		n.dra.run(ctx)
	}()
	go func() {
		defer n.done.Done()
		t := time.NewTicker(leaseRenew)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if err := n.renewLease(ctx, node.UID); err != nil && ctx.Err() == nil {
					logger.Error(err, "Renewing the node lease")
				}
			}
		}
	}()
	logger.V(2).Info("Simulated node started", "instanceType", n.Spec.InstanceType.Name, "mode", n.Spec.Mode)
	return nil
}

// registeredTaints are the taints of an adopted node once its simulated kubelet registers: those
// it was created with but node.kubernetes.io/not-ready, and the simulator's own that it lacks.
func registeredTaints(launched, own []corev1.Taint) []corev1.Taint {
	var out []corev1.Taint
	for _, t := range launched {
		if t.Key != corev1.TaintNodeNotReady {
			out = append(out, t)
		}
	}
	for _, t := range own {
		if !slices.ContainsFunc(out, func(o corev1.Taint) bool { return o.Key == t.Key && o.Effect == t.Effect }) {
			out = append(out, t)
		}
	}
	return out
}

func (n *SimNode) stop() {
	if n.cancel != nil {
		n.cancel()
	}
	n.dm.stop()
	if n.podRes != nil {
		n.podRes.Stop()
	}
	n.done.Wait()
}

func (n *SimNode) renewLease(ctx context.Context, nodeUID types.UID) error {
	leases := n.client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	now := metav1.NewMicroTime(time.Now())
	lease, err := leases.Get(ctx, n.Spec.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: n.Spec.Name, OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Node", Name: n.Spec.Name, UID: nodeUID,
			}}},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity: ptr.To(n.Spec.Name), LeaseDurationSeconds: ptr.To(int32(leaseDuration.Seconds())), RenewTime: &now,
			},
		}, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	lease.Spec.RenewTime = &now
	_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
	return err
}

// syncStatusAsync is the device manager's callback when a plugin's devices change. A resource
// the node has not reported devices of yet is posted at once (nodes come up fast); later changes wait for
// the next status tick, as the real kubelet posts its status every nodeStatusUpdateFrequency
// (10 s): until then the scheduler sees the old allocatable, as it does on a real node.
func (n *SimNode) syncStatusAsync() {
	n.statusMu.Lock()
	fresh := n.statusEvery <= 0
	for name, rc := range n.dm.Resources() {
		if !n.posted[name] && rc.Capacity > 0 {
			fresh = true
		}
	}
	if !fresh {
		n.dirty = true
	}
	n.statusMu.Unlock()
	if !fresh {
		return
	}
	go func() {
		if err := n.syncStatus(context.Background()); err != nil {
			klog.Background().Error(err, "Updating node capacity", "node", n.Spec.Name)
		}
	}()
}

// StatusPending reports whether the node has a change of capacity or allocatable it has not
// posted yet (it posts every SimulatorOptions.StatusUpdateFrequency).
func (n *SimNode) StatusPending() bool {
	n.statusMu.Lock()
	defer n.statusMu.Unlock()
	return n.dirty
}

// postStatusEvery posts a changed capacity and allocatable every statusEvery until ctx ends.
func (n *SimNode) postStatusEvery(ctx context.Context) {
	t := time.NewTicker(n.statusEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n.statusMu.Lock()
		dirty := n.dirty
		n.statusMu.Unlock()
		if dirty {
			if err := n.syncStatus(ctx); err != nil && ctx.Err() == nil {
				klog.FromContext(ctx).Error(err, "Updating node capacity")
			}
		}
	}
}

// syncStatus writes the device plugins' resources into the node's capacity and allocatable.
func (n *SimNode) syncStatus(ctx context.Context) error {
	n.statusMu.Lock()
	defer n.statusMu.Unlock()
	res := n.dm.Resources()
	names := make([]string, 0, len(res))
	for name := range res {
		names = append(names, name)
	}
	sort.Strings(names)
	capacity, allocatable := map[string]string{}, map[string]string{}
	for _, name := range names {
		capacity[name] = fmt.Sprint(res[name].Capacity)
		allocatable[name] = fmt.Sprint(res[name].Allocatable)
	}
	if len(names) == 0 {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"capacity": capacity, "allocatable": allocatable}})
	if err != nil {
		return err
	}
	if _, err = n.client.CoreV1().Nodes().PatchStatus(ctx, n.Spec.Name, patch); err != nil {
		return err
	}
	n.dirty = false
	for _, name := range names {
		// A plugin that registered but listed no devices yet is not reported: its first devices
		// are posted at once too.
		n.posted[name] = res[name].Capacity > 0
	}
	return nil
}

// networkNodes are the EC2 instance topology network nodes (layers 1 to 3) that EKS labels nodes
// with: in the lab one layer-1 node for the fleet, a layer-2 node per UltraServer (or per
// instance family), and a layer-3 node per node, named like EC2's ("nn-" and 17 hex digits).
func networkNodes(spec NodeSpec) [3]string {
	nn := func(s string) string {
		sum := sha256.Sum256([]byte(s))
		return "nn-" + hex.EncodeToString(sum[:])[:17]
	}
	group := "family/" + spec.InstanceType.Family
	if spec.UltraServerName != "" {
		group = "ultraserver/" + spec.UltraServerName
	}
	return [3]string{nn("kube-neuron-lab"), nn(group), nn("node/" + spec.Name)}
}
