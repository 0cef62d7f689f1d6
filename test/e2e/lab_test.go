//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
	cdiapi "tags.cncf.io/container-device-interface/specs-go"

	"github.com/kube-neuron/kube-neuron/internal/lab"
	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/test/e2e/framework"
)

func TestControlPlaneAndNodes(t *testing.T) {
	ctx := framework.Context(t)
	client := framework.L.Client()
	v, err := client.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if v.GitVersion != "v1.36.3" {
		t.Errorf("server version %s, want v1.36.3", v.GitVersion)
	}
	for _, spec := range framework.L.Nodes() {
		n, err := client.CoreV1().Nodes().Get(ctx, spec.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for k, want := range map[string]string{
			labels.InstanceType: spec.InstanceType.Name, labels.InstanceFamily: spec.InstanceType.Family,
			labels.Hostname: spec.Name, labels.AllocationMode: spec.Mode,
		} {
			if n.Labels[k] != want {
				t.Errorf("node %s label %s = %q, want %q", spec.Name, k, n.Labels[k], want)
			}
		}
		if len(n.Spec.Taints) != 1 || n.Spec.Taints[0].Key != labels.NeuronTaintKey || n.Spec.Taints[0].Effect != corev1.TaintEffectNoSchedule {
			t.Errorf("node %s taints %v, want only aws.amazon.com/neuron=true:NoSchedule", spec.Name, n.Spec.Taints)
		}
		if cpu := n.Status.Allocatable[corev1.ResourceCPU]; cpu.Value() != int64(spec.InstanceType.VCPU) {
			t.Errorf("node %s cpu %s, want %d", spec.Name, cpu.String(), spec.InstanceType.VCPU)
		}
		if _, err := client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, spec.Name, metav1.GetOptions{}); err != nil {
			t.Errorf("node %s has no lease: %v", spec.Name, err)
		}
	}
}

// widgetPlugin is a minimal device plugin speaking the real v1beta1 protocol.
type widgetPlugin struct {
	pluginapi.UnimplementedDevicePluginServer
	mu        sync.Mutex
	devices   []*pluginapi.Device
	updates   chan struct{}
	allocated [][]string
}

func (p *widgetPlugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}, nil
}

func (p *widgetPlugin) ListAndWatch(_ *pluginapi.Empty, s grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	for {
		p.mu.Lock()
		resp := &pluginapi.ListAndWatchResponse{}
		for _, d := range p.devices {
			resp.Devices = append(resp.Devices, &pluginapi.Device{ID: d.ID, Health: d.Health})
		}
		p.mu.Unlock()
		if err := s.Send(resp); err != nil {
			return err
		}
		select {
		case <-s.Context().Done():
			return nil
		case <-p.updates:
		}
	}
}

// GetPreferredAllocation prefers the highest ids, so that a test sees the kubelet follow it.
func (p *widgetPlugin) GetPreferredAllocation(_ context.Context, r *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, c := range r.ContainerRequests {
		ids := slices.Clone(c.AvailableDeviceIDs)
		slices.Sort(ids)
		slices.Reverse(ids)
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids[:c.AllocationSize]})
	}
	return resp, nil
}

func (p *widgetPlugin) Allocate(_ context.Context, r *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, c := range r.ContainerRequests {
		p.mu.Lock()
		p.allocated = append(p.allocated, c.DevicesIds)
		p.mu.Unlock()
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Envs:    map[string]string{"WIDGETS": strings.Join(c.DevicesIds, ",")},
			Devices: []*pluginapi.DeviceSpec{{HostPath: "/dev/widget" + c.DevicesIds[0], ContainerPath: "/dev/widget" + c.DevicesIds[0], Permissions: "rw"}},
		})
	}
	return resp, nil
}

func (p *widgetPlugin) setHealth(id, health string) {
	p.mu.Lock()
	for _, d := range p.devices {
		if d.ID == id {
			d.Health = health
		}
	}
	p.mu.Unlock()
	p.updates <- struct{}{}
}

// servePlugin serves a device plugin on socket in dir and registers it with the kubelet there.
func servePlugin(t *testing.T, dir, socket, resourceName string, impl pluginapi.DevicePluginServer, opts *pluginapi.DevicePluginOptions) {
	t.Helper()
	lis, err := net.Listen("unix", filepath.Join(dir, socket))
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, impl)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, "kubelet.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := pluginapi.NewRegistrationClient(conn).Register(context.Background(), &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: socket, ResourceName: resourceName, Options: opts,
	}); err != nil {
		t.Fatalf("Register: %v", err)
	}
}

func tolerateNeuron() []corev1.Toleration {
	return []corev1.Toleration{{Key: labels.NeuronTaintKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
}

// TestDevicePluginHandshake registers a minimal device plugin with a simulated node's kubelet
// and follows it through capacity, scheduling, GetPreferredAllocation, Allocate, health and
// deletion.
func TestDevicePluginHandshake(t *testing.T) {
	ctx := framework.Context(t)
	client := framework.L.Client()
	node := framework.L.Simulator().Node("inf2-a")
	const res = "example.com/widget"
	p := &widgetPlugin{updates: make(chan struct{}, 10)}
	for i := range 4 {
		p.devices = append(p.devices, &pluginapi.Device{ID: fmt.Sprint(i), Health: pluginapi.Healthy})
	}
	servePlugin(t, node.DevicePluginDir(), "widget.sock", res, p, &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true})
	if err := framework.L.WaitForNodeResource(ctx, "inf2-a", res, 4, 10*time.Second); err != nil {
		t.Fatal(err)
	}

	ns := framework.CreateNamespace(t, ctx)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets", Namespace: ns},
		Spec: corev1.PodSpec{
			Tolerations:  tolerateNeuron(),
			NodeSelector: map[string]string{labels.Hostname: "inf2-a"},
			Containers: []corev1.Container{{Name: "app", Image: "busybox", Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{res: resource.MustParse("2")},
			}}},
		},
	}
	if _, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	running := framework.WaitForPod(t, ctx, ns, "widgets", corev1.PodRunning, 30*time.Second)
	var got lab.PodAllocations
	if err := json.Unmarshal([]byte(running.Annotations[lab.AllocationsAnnotation]), &got); err != nil {
		t.Fatalf("allocations annotation: %v", err)
	}
	if len(got.Containers) != 1 || len(got.Containers[0].Resources) != 1 {
		t.Fatalf("allocations %+v", got)
	}
	r := got.Containers[0].Resources[0]
	if !slices.Equal(r.DeviceIDs, []string{"3", "2"}) || r.Env["WIDGETS"] != "3,2" || !slices.Equal(r.Devices, []string{"/dev/widget3"}) {
		t.Errorf("allocation %+v: want the preferred ids 3,2 with the plugin's env and device", r)
	}

	// A device turning unhealthy leaves allocatable; capacity stays. The node posts the change
	// at its next status update (every 10 s, as a kubelet does).
	p.setHealth("0", pluginapi.Unhealthy)
	framework.WaitFor(t, ctx, 25*time.Second, "allocatable widgets to drop to 3", func(ctx context.Context) (bool, string, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, "inf2-a", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		a, c := n.Status.Allocatable[res], n.Status.Capacity[res]
		return a.Value() == 3 && c.Value() == 4, fmt.Sprintf("allocatable %s capacity %s", a.String(), c.String()), nil
	})

	// Deleting the pod frees its devices in the simulated kubelet.
	if err := client.CoreV1().Pods(ns).Delete(ctx, "widgets", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.WaitFor(t, ctx, 10*time.Second, "the pod to be gone and its widgets freed", func(ctx context.Context) (bool, string, error) {
		_, err := client.CoreV1().Pods(ns).Get(ctx, "widgets", metav1.GetOptions{})
		alloc := node.DeviceManagerAllocated()[res]
		return err != nil && len(alloc) == 0, fmt.Sprintf("get: %v; allocated %v", err, alloc), nil
	})

	// After a kubelet restart the plugin must register again.
	if err := node.RestartKubelet(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(node.DevicePluginDir(), "widget.sock")); !os.IsNotExist(err) {
		t.Errorf("the restarted kubelet left the plugin's socket in place: %v", err)
	}
}

// TestDevicePluginAllocateFailureRejectsPod checks that the simulated kubelet fails a pod
// whose Allocate fails, with UnexpectedAdmissionError, and never marks it Running.
func TestDevicePluginAllocateFailureRejectsPod(t *testing.T) {
	ctx := framework.Context(t)
	client := framework.L.Client()
	node := framework.L.Simulator().Node("trn1-a")
	const res = "example.com/broken"
	p := &failingPlugin{widgetPlugin: widgetPlugin{updates: make(chan struct{}, 1), devices: []*pluginapi.Device{{ID: "0", Health: pluginapi.Healthy}}}}
	servePlugin(t, node.DevicePluginDir(), "broken.sock", res, p, nil)
	if err := framework.L.WaitForNodeResource(ctx, "trn1-a", res, 1, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	ns := framework.CreateNamespace(t, ctx)
	_, err := client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "broken", Namespace: ns},
		Spec: corev1.PodSpec{Tolerations: tolerateNeuron(), Containers: []corev1.Container{{Name: "app", Image: "busybox",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{res: resource.MustParse("1")}}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	failed := framework.WaitForPod(t, ctx, ns, "broken", corev1.PodFailed, 30*time.Second)
	if failed.Status.Reason != "UnexpectedAdmissionError" || !strings.Contains(failed.Status.Message, "no device left") {
		t.Errorf("status %s: %s", failed.Status.Reason, failed.Status.Message)
	}
	if alloc := node.DeviceManagerAllocated()[res]; len(alloc) != 0 {
		t.Errorf("a rejected pod still holds %v", alloc)
	}
}

type failingPlugin struct{ widgetPlugin }

func (p *failingPlugin) Allocate(context.Context, *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	return nil, fmt.Errorf("no device left")
}

// testDriver is a minimal DRA driver built on kubeletplugin, as the real one is.
type testDriver struct {
	name, cdiDir string
	mu           sync.Mutex
	prepared     map[types.UID]bool
	unprepared   []string
}

func (d *testDriver) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := map[types.UID]kubeletplugin.PrepareResult{}
	for _, c := range claims {
		var devices []kubeletplugin.Device
		spec := cdiapi.Spec{Version: "0.6.0", Kind: "test.kube-neuron.io/widget"}
		var names []string
		for _, r := range c.Status.Allocation.Devices.Results {
			id := string(c.UID) + "-" + r.Device
			names = append(names, r.Device)
			spec.Devices = append(spec.Devices, cdiapi.Device{Name: id, ContainerEdits: cdiapi.ContainerEdits{
				DeviceNodes: []*cdiapi.DeviceNode{{Path: "/dev/" + r.Device, Type: "c", Major: 10, Minor: 1}},
			}})
			devices = append(devices, kubeletplugin.Device{Requests: []string{r.Request}, PoolName: r.Pool, DeviceName: r.Device, CDIDeviceIDs: []string{"test.kube-neuron.io/widget=" + id}})
		}
		slices.Sort(names)
		spec.ContainerEdits.Env = []string{"WIDGETS=" + strings.Join(names, ",")}
		data, _ := yaml.Marshal(spec)
		if err := os.WriteFile(filepath.Join(d.cdiDir, "test-"+string(c.UID)+".yaml"), data, 0o644); err != nil {
			out[c.UID] = kubeletplugin.PrepareResult{Err: err}
			continue
		}
		d.mu.Lock()
		d.prepared[c.UID] = true
		d.mu.Unlock()
		out[c.UID] = kubeletplugin.PrepareResult{Devices: devices}
	}
	return out, nil
}

func (d *testDriver) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := map[types.UID]error{}
	for _, c := range claims {
		d.mu.Lock()
		d.unprepared = append(d.unprepared, c.Name)
		delete(d.prepared, c.UID)
		d.mu.Unlock()
		out[c.UID] = os.Remove(filepath.Join(d.cdiDir, "test-"+string(c.UID)+".yaml"))
	}
	return out, nil
}

func (d *testDriver) HandleError(_ context.Context, err error, msg string) {}

// TestDRAMatchAttribute runs a minimal kubeletplugin driver on a DRA node: its ResourceSlice
// carries a group attribute, a ResourceClaimTemplate asks for 4 devices that share it, the real
// scheduler allocates them, and the simulated kubelet prepares the claim over the DRA gRPC API
// and starts the pod with the CDI edits; deleting the pod unprepares it.
func TestDRAMatchAttribute(t *testing.T) {
	ctx := framework.Context(t)
	client := framework.L.Client()
	node := framework.L.Simulator().Node("trn2-a")
	const driver = "test.kube-neuron.io"
	n, err := client.CoreV1().Nodes().Get(ctx, "trn2-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d := &testDriver{name: driver, cdiDir: node.CDIDir(), prepared: map[types.UID]bool{}}
	if err := os.MkdirAll(filepath.Join(node.PluginsDir(), driver), 0o750); err != nil { // a DaemonSet's hostPath DirectoryOrCreate does this
		t.Fatal(err)
	}
	helper, err := kubeletplugin.Start(ctx, d,
		kubeletplugin.DriverName(driver), kubeletplugin.NodeName("trn2-a"), kubeletplugin.NodeUID(n.UID),
		kubeletplugin.KubeClient(client),
		kubeletplugin.RegistrarDirectoryPath(node.RegistryDir()),
		kubeletplugin.PluginDataDirectoryPath(filepath.Join(node.PluginsDir(), driver)))
	if err != nil {
		t.Fatalf("kubeletplugin.Start: %v", err)
	}
	t.Cleanup(helper.Stop)
	var devices []resourceapi.Device
	for i := range 8 {
		devices = append(devices, resourceapi.Device{Name: fmt.Sprintf("widget%d", i), Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"group": {StringValue: ptr.To(fmt.Sprintf("g%d", i/4))},
			"index": {IntValue: ptr.To(int64(i))},
		}})
	}
	if err := helper.PublishResources(ctx, resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		"trn2-a": {Slices: []resourceslice.Slice{{Devices: devices}}},
	}}); err != nil {
		t.Fatal(err)
	}
	framework.WaitFor(t, ctx, 10*time.Second, "the driver to register with the simulated kubelet", func(context.Context) (bool, string, error) {
		return slices.Contains(node.DRADrivers(), driver), fmt.Sprint(node.DRADrivers()), nil
	})
	if _, err := client.ResourceV1().DeviceClasses().Create(ctx, &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: driver},
		Spec:       resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "` + driver + `"`}}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.ResourceV1().DeviceClasses().Delete(context.Background(), driver, metav1.DeleteOptions{})
	})

	ns := framework.CreateNamespace(t, ctx)
	framework.Apply(t, ctx, "test/e2e/testdata/connected-widgets.yaml", ns)
	for _, name := range []string{"pod-a", "pod-b"} {
		pod := framework.WaitForPod(t, ctx, ns, name, corev1.PodRunning, 60*time.Second)
		var got lab.PodAllocations
		if err := json.Unmarshal([]byte(pod.Annotations[lab.AllocationsAnnotation]), &got); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(got.Claims) != 1 || len(got.Claims[0].Devices) != 4 {
			t.Fatalf("%s: claims %+v", name, got.Claims)
		}
		group := map[string]bool{}
		for _, dev := range got.Claims[0].Devices {
			var i int
			fmt.Sscanf(dev, "widget%d", &i)
			group[fmt.Sprintf("g%d", i/4)] = true
		}
		if len(group) != 1 {
			t.Errorf("%s got devices %v from groups %v: matchAttribute must keep them in one group", name, got.Claims[0].Devices, group)
		}
		c := got.Claims[0]
		if c.Env["WIDGETS"] == "" || len(c.DeviceNodes) != 4 || len(c.CDIDevices) != 4 {
			t.Errorf("%s: the CDI spec was not applied: %+v", name, c)
		}
	}
	if err := client.CoreV1().Pods(ns).Delete(ctx, "pod-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.WaitFor(t, ctx, 20*time.Second, "the claim of pod-a to be unprepared", func(context.Context) (bool, string, error) {
		d.mu.Lock()
		defer d.mu.Unlock()
		return len(d.unprepared) == 1 && len(d.prepared) == 1, fmt.Sprintf("unprepared %v, still prepared %d", d.unprepared, len(d.prepared)), nil
	})
}
