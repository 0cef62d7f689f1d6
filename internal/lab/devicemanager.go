package lab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// deviceManager plays the kubelet's device manager for one simulated node: the Registration
// service on kubelet.sock, ListAndWatch into the node's capacity, and per-container allocation
// with GetPreferredAllocation, Allocate and PreStartContainer, over the real v1beta1 protocol.
type deviceManager struct {
	pluginapi.UnimplementedRegistrationServer

	dir      string // the device-plugins directory: kubelet.sock and the plugins' sockets
	onChange func() // called after the advertised devices changed

	mu        sync.Mutex
	server    *grpc.Server
	endpoints map[string]*endpoint
	// allocated maps resource -> device id -> the container holding it.
	allocated map[string]map[string]containerRef
	// byContainer remembers what a container got, so that admission is idempotent.
	byContainer map[containerRef]map[string][]string
}

type containerRef struct {
	podUID, podNamespace, podName, container string
}

// endpoint is one registered plugin.
type endpoint struct {
	resource string
	options  *pluginapi.DevicePluginOptions
	conn     *grpc.ClientConn
	client   pluginapi.DevicePluginClient
	cancel   context.CancelFunc
	devices  map[string]string // id -> health
	stopped  bool
}

// ResourceCount is what the node advertises for one extended resource.
type ResourceCount struct {
	Capacity, Allocatable int
}

func newDeviceManager(dir string, onChange func()) *deviceManager {
	return &deviceManager{
		dir: dir, onChange: onChange,
		endpoints:   map[string]*endpoint{},
		allocated:   map[string]map[string]containerRef{},
		byContainer: map[containerRef]map[string][]string{},
	}
}

// SocketPath is the kubelet registration socket.
func (m *deviceManager) SocketPath() string { return filepath.Join(m.dir, "kubelet.sock") }

// start removes what a previous kubelet left in the directory, as the kubelet does, and serves
// the Registration service.
func (m *deviceManager) start(ctx context.Context) error {
	if err := os.MkdirAll(m.dir, 0o755); err != nil {
		return err
	}
	entries, err := os.ReadDir(m.dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(m.dir, e.Name())); err != nil {
			return fmt.Errorf("cleaning the device plugin directory: %w", err)
		}
	}
	lis, err := net.Listen("unix", m.SocketPath())
	if err != nil {
		return fmt.Errorf("serving the kubelet registration socket: %w", err)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterRegistrationServer(srv, m)
	m.mu.Lock()
	m.server = srv
	m.mu.Unlock()
	go func() {
		if err := srv.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			klog.FromContext(ctx).Error(err, "Kubelet registration server stopped")
		}
	}()
	return nil
}

// stop closes the registration socket and every plugin connection. Allocations are kept, as the
// kubelet keeps them in its checkpoint.
func (m *deviceManager) stop() {
	m.mu.Lock()
	srv := m.server
	m.server = nil
	eps := m.endpoints
	m.endpoints = map[string]*endpoint{}
	m.mu.Unlock()
	if srv != nil {
		srv.Stop()
	}
	for _, ep := range eps {
		ep.cancel()
		_ = ep.conn.Close()
	}
	_ = os.Remove(m.SocketPath())
	m.onChange()
}

// Register implements the kubelet's Registration service.
func (m *deviceManager) Register(ctx context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	logger := klog.FromContext(ctx).WithValues("resource", req.ResourceName, "endpoint", req.Endpoint)
	if req.Version != pluginapi.Version {
		return nil, fmt.Errorf("device plugin API version %q is not supported: the kubelet supports %s", req.Version, pluginapi.Version)
	}
	if !strings.Contains(req.ResourceName, "/") || strings.HasPrefix(req.ResourceName, "kubernetes.io/") {
		return nil, fmt.Errorf("resource name %q is not an extended resource name", req.ResourceName)
	}
	if req.Endpoint == "" || strings.Contains(req.Endpoint, "/") {
		return nil, fmt.Errorf("endpoint %q must be a socket file name in %s", req.Endpoint, m.dir)
	}
	conn, err := grpc.NewClient("unix://"+filepath.Join(m.dir, req.Endpoint), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("connecting to the plugin: %w", err)
	}
	options := req.Options
	if options == nil {
		options = &pluginapi.DevicePluginOptions{}
	}
	streamCtx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	ep := &endpoint{
		resource: req.ResourceName, options: options, conn: conn,
		client: pluginapi.NewDevicePluginClient(conn), cancel: cancel, devices: map[string]string{},
	}
	m.mu.Lock()
	old := m.endpoints[req.ResourceName]
	m.endpoints[req.ResourceName] = ep
	m.mu.Unlock()
	if old != nil {
		old.cancel()
		_ = old.conn.Close()
	}
	logger.V(2).Info("Device plugin registered")
	go m.listAndWatch(streamCtx, ep)
	return &pluginapi.Empty{}, nil
}

func (m *deviceManager) listAndWatch(ctx context.Context, ep *endpoint) {
	logger := klog.FromContext(ctx)
	stream, err := ep.client.ListAndWatch(ctx, &pluginapi.Empty{})
	for err == nil {
		var resp *pluginapi.ListAndWatchResponse
		if resp, err = stream.Recv(); err != nil {
			break
		}
		devices := map[string]string{}
		for _, d := range resp.Devices {
			devices[d.ID] = d.Health
		}
		m.mu.Lock()
		if m.endpoints[ep.resource] == ep {
			ep.devices = devices
		}
		m.mu.Unlock()
		logger.V(5).Info("ListAndWatch update", "devices", len(devices))
		m.onChange()
	}
	// The plugin went away: its devices are no longer allocatable until it registers again.
	m.mu.Lock()
	ep.stopped = true
	m.mu.Unlock()
	if ctx.Err() == nil {
		logger.V(2).Info("Device plugin stream ended", "err", err)
	}
	m.onChange()
}

// Resources returns what the node advertises per registered resource.
func (m *deviceManager) Resources() map[string]ResourceCount {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]ResourceCount{}
	for name, ep := range m.endpoints {
		rc := ResourceCount{Capacity: len(ep.devices)}
		if !ep.stopped {
			for _, h := range ep.devices {
				if h == pluginapi.Healthy {
					rc.Allocatable++
				}
			}
		}
		out[name] = rc
	}
	return out
}

// Registered reports whether a plugin serves the resource.
func (m *deviceManager) Registered(resource string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	ep, ok := m.endpoints[resource]
	return ok && !ep.stopped
}

// ContainerAllocation is what one container got for one resource.
type ContainerAllocation struct {
	Resource  string                               `json:"resource"`
	DeviceIDs []string                             `json:"deviceIDs"`
	Response  *pluginapi.ContainerAllocateResponse `json:"response"`
	Preferred []string                             `json:"preferred,omitempty"`
}

// allocate gives a container n devices of a resource, as the kubelet does at pod admission.
func (m *deviceManager) allocate(ctx context.Context, ref containerRef, resource string, n int) (*ContainerAllocation, error) {
	m.mu.Lock()
	ep, ok := m.endpoints[resource]
	if !ok || ep.stopped {
		m.mu.Unlock()
		return nil, fmt.Errorf("no device plugin serves %s on this node", resource)
	}
	if ids, done := m.byContainer[ref][resource]; done {
		m.mu.Unlock()
		return &ContainerAllocation{Resource: resource, DeviceIDs: ids}, nil
	}
	var available []string
	for id, h := range ep.devices {
		if _, taken := m.allocated[resource][id]; !taken && h == pluginapi.Healthy {
			available = append(available, id)
		}
	}
	slices.Sort(available)
	m.mu.Unlock()
	if len(available) < n {
		//lint:ignore ST1005 the kubelet's own message, kept verbatim
		return nil, fmt.Errorf("Allocate failed due to requested number of devices unavailable for %s. Requested: %d, Available: %d, which is unexpected", resource, n, len(available))
	}
	rpcCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	chosen := available[:n]
	var preferred []string
	if ep.options.GetPreferredAllocationAvailable {
		resp, err := ep.client.GetPreferredAllocation(rpcCtx, &pluginapi.PreferredAllocationRequest{
			ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{AvailableDeviceIDs: available, MustIncludeDeviceIDs: []string{}, AllocationSize: int32(n)}},
		})
		if err != nil {
			return nil, fmt.Errorf("GetPreferredAllocation for %s: %w", resource, err)
		}
		if len(resp.ContainerResponses) == 1 {
			preferred = resp.ContainerResponses[0].DeviceIDs
		}
		// The kubelet takes the preferred ids that are available, then fills up in its own order.
		chosen = nil
		for _, id := range preferred {
			if slices.Contains(available, id) && !slices.Contains(chosen, id) && len(chosen) < n {
				chosen = append(chosen, id)
			}
		}
		for _, id := range available {
			if len(chosen) < n && !slices.Contains(chosen, id) {
				chosen = append(chosen, id)
			}
		}
	}
	m.mu.Lock()
	for _, id := range chosen {
		if owner, taken := m.allocated[resource][id]; taken {
			m.mu.Unlock()
			return nil, fmt.Errorf("device %s of %s was taken by pod %s while allocating: retry", id, resource, owner.podUID)
		}
	}
	if m.allocated[resource] == nil {
		m.allocated[resource] = map[string]containerRef{}
	}
	for _, id := range chosen {
		m.allocated[resource][id] = ref
	}
	m.mu.Unlock()
	resp, err := ep.client.Allocate(rpcCtx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: chosen}}})
	if err == nil && len(resp.ContainerResponses) != 1 {
		err = fmt.Errorf("the plugin answered %d container responses for 1 request", len(resp.ContainerResponses))
	}
	if err == nil && ep.options.PreStartRequired {
		_, err = ep.client.PreStartContainer(rpcCtx, &pluginapi.PreStartContainerRequest{DevicesIds: chosen})
	}
	if err != nil {
		m.mu.Lock()
		for _, id := range chosen {
			delete(m.allocated[resource], id)
		}
		m.mu.Unlock()
		return nil, fmt.Errorf("%s: %w", resource, err)
	}
	m.mu.Lock()
	if m.byContainer[ref] == nil {
		m.byContainer[ref] = map[string][]string{}
	}
	m.byContainer[ref][resource] = chosen
	m.mu.Unlock()
	klog.FromContext(ctx).V(2).Info("Allocated devices", "podUID", ref.podUID, "container", ref.container, "resource", resource, "ids", chosen)
	return &ContainerAllocation{Resource: resource, DeviceIDs: chosen, Response: resp.ContainerResponses[0], Preferred: preferred}, nil
}

// release frees everything the pod's containers hold.
func (m *deviceManager) release(podUID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, ids := range m.allocated {
		for id, ref := range ids {
			if ref.podUID == podUID {
				delete(ids, id)
			}
		}
	}
	for ref := range m.byContainer {
		if ref.podUID == podUID {
			delete(m.byContainer, ref)
		}
	}
}

// podResources answers the kubelet's PodResources List: the device ids each container holds.
func (m *deviceManager) podResources() []*podresv1.PodResources {
	m.mu.Lock()
	defer m.mu.Unlock()
	pods := map[string]*podresv1.PodResources{}
	var order []string
	for ref, byRes := range m.byContainer {
		p := pods[ref.podUID]
		if p == nil {
			p = &podresv1.PodResources{Name: ref.podName, Namespace: ref.podNamespace}
			pods[ref.podUID] = p
			order = append(order, ref.podUID)
		}
		c := &podresv1.ContainerResources{Name: ref.container}
		resources := make([]string, 0, len(byRes))
		for res := range byRes {
			resources = append(resources, res)
		}
		slices.Sort(resources)
		// As the kubelet answers (containerDevicesFromResourceDeviceInstances, Kubernetes 1.36):
		// one entry per device id, in the order of a Go map, so in no particular order.
		for _, res := range resources {
			ids := map[string]bool{}
			for _, id := range byRes[res] {
				ids[id] = true
			}
			for id := range ids {
				c.Devices = append(c.Devices, &podresv1.ContainerDevices{ResourceName: res, DeviceIds: []string{id}})
			}
		}
		p.Containers = append(p.Containers, c)
	}
	slices.Sort(order)
	out := make([]*podresv1.PodResources, 0, len(order))
	for _, uid := range order {
		slices.SortFunc(pods[uid].Containers, func(a, b *podresv1.ContainerResources) int { return strings.Compare(a.Name, b.Name) })
		out = append(out, pods[uid])
	}
	return out
}

// podResourcesServer serves the kubelet's PodResources API (v1) from the device manager, in the
// real kubelet's shape: a container's ids of one resource come as one ContainerDevices per id.
type podResourcesServer struct {
	podresv1.UnimplementedPodResourcesListerServer
	dm *deviceManager
}

func (s *podResourcesServer) List(context.Context, *podresv1.ListPodResourcesRequest) (*podresv1.ListPodResourcesResponse, error) {
	return &podresv1.ListPodResourcesResponse{PodResources: s.dm.podResources()}, nil
}

func (s *podResourcesServer) Get(_ context.Context, r *podresv1.GetPodResourcesRequest) (*podresv1.GetPodResourcesResponse, error) {
	for _, p := range s.dm.podResources() {
		if p.Name == r.PodName && p.Namespace == r.PodNamespace {
			return &podresv1.GetPodResourcesResponse{PodResources: p}, nil
		}
	}
	return nil, fmt.Errorf("pod %s/%s has no resources on this node", r.PodNamespace, r.PodName)
}

func (s *podResourcesServer) GetAllocatableResources(context.Context, *podresv1.AllocatableResourcesRequest) (*podresv1.AllocatableResourcesResponse, error) {
	s.dm.mu.Lock()
	defer s.dm.mu.Unlock()
	resp := &podresv1.AllocatableResourcesResponse{}
	for name, ep := range s.dm.endpoints {
		var ids []string
		for id, h := range ep.devices {
			if h == pluginapi.Healthy {
				ids = append(ids, id)
			}
		}
		slices.Sort(ids)
		resp.Devices = append(resp.Devices, &podresv1.ContainerDevices{ResourceName: name, DeviceIds: ids})
	}
	return resp, nil
}

// Allocated returns the device ids in use per resource.
func (m *deviceManager) Allocated() map[string][]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string][]string{}
	for res, ids := range m.allocated {
		for id := range ids {
			out[res] = append(out[res], id)
		}
		slices.Sort(out[res])
	}
	return out
}
