package deviceplugin

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kube-neuron/kube-neuron/internal/deviceplugin/ledger"
)

// pool serves one resource over the kubelet's DevicePlugin API.
type pool struct {
	pluginapi.UnimplementedDevicePluginServer
	p        *Plugin
	resource string
	socket   string // file name in the device-plugins directory
	srv      *grpc.Server

	mu   sync.Mutex
	subs map[chan struct{}]struct{}
	// withdrawn are the ids reported unhealthy, with the reason.
	withdrawn map[string]string
}

var _ pluginapi.DevicePluginServer = (*pool)(nil)

// socketName is the pool's socket file: kube-neuron-neuron.sock, -neurondevice, -neuroncore.
func socketName(resource string) string {
	return "kube-neuron-" + strings.TrimPrefix(resource, "aws.amazon.com/") + ".sock"
}

func (p *Plugin) startPools(ctx context.Context) error {
	pools := map[string]*pool{}
	for _, res := range Resources {
		p.mu.Lock()
		withdrawn := p.lastHealth[res]
		p.mu.Unlock()
		pl := &pool{p: p, resource: res, socket: socketName(res), subs: map[chan struct{}]struct{}{}, withdrawn: withdrawn}
		path := filepath.Join(p.o.DevicePluginDir, pl.socket)
		_ = os.Remove(path)
		lis, err := net.Listen("unix", path)
		if err != nil {
			for _, other := range pools {
				other.srv.Stop()
			}
			return fmt.Errorf("serving %s on %s (is --device-plugin-dir the kubelet's device-plugins directory?): %w", res, path, err)
		}
		pl.srv = grpc.NewServer()
		pluginapi.RegisterDevicePluginServer(pl.srv, pl)
		go func() { _ = pl.srv.Serve(lis) }()
		pools[res] = pl
	}
	p.mu.Lock()
	p.pools = pools
	p.mu.Unlock()
	for _, res := range Resources {
		if err := p.register(ctx, pools[res]); err != nil {
			return err
		}
	}
	return nil
}

func (p *Plugin) register(ctx context.Context, pl *pool) error {
	sock := filepath.Join(p.o.DevicePluginDir, "kubelet.sock")
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	rpcCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(rpcCtx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: pl.socket, ResourceName: pl.resource,
		Options: &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true},
	})
	if err != nil {
		return fmt.Errorf("registering %s with the kubelet at %s: %w", pl.resource, sock, err)
	}
	klog.FromContext(ctx).V(2).Info("Registered with the kubelet", "resource", pl.resource, "socket", pl.socket)
	return nil
}

func (p *Plugin) stopPools() {
	p.mu.Lock()
	pools := p.pools
	p.pools = map[string]*pool{}
	p.mu.Unlock()
	for _, pl := range pools {
		pl.srv.Stop()
		_ = os.Remove(filepath.Join(p.o.DevicePluginDir, pl.socket))
	}
}

func (p *Plugin) socketsPresent() bool {
	for _, res := range Resources {
		if _, err := os.Stat(filepath.Join(p.o.DevicePluginDir, socketName(res))); err != nil {
			return false
		}
	}
	return true
}

// setWithdrawn sets the ids the pool reports unhealthy and sends them to every ListAndWatch.
func (pl *pool) setWithdrawn(withdrawn map[string]string) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	pl.withdrawn = withdrawn
	for ch := range pl.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// GetDevicePluginOptions implements the DevicePlugin API.
func (pl *pool) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}, nil
}

// ListAndWatch sends the pool's ids with their health, again on every change.
func (pl *pool) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	ch := make(chan struct{}, 1)
	pl.mu.Lock()
	pl.subs[ch] = struct{}{}
	pl.mu.Unlock()
	defer func() {
		pl.mu.Lock()
		delete(pl.subs, ch)
		pl.mu.Unlock()
	}()
	for {
		pl.mu.Lock()
		withdrawn := pl.withdrawn
		pl.mu.Unlock()
		resp := &pluginapi.ListAndWatchResponse{}
		for _, id := range ledger.PoolIDs(pl.p.shape, pl.resource) {
			health := pluginapi.Healthy
			if _, out := withdrawn[id]; out {
				health = pluginapi.Unhealthy
			}
			resp.Devices = append(resp.Devices, &pluginapi.Device{ID: id, Health: health})
		}
		pl.p.metrics.withdrawn.WithLabelValues(pl.resource).Set(float64(len(withdrawn)))
		if err := stream.Send(resp); err != nil {
			return err
		}
		select {
		case <-stream.Context().Done():
			return nil
		case <-ch:
		}
	}
}

// GetPreferredAllocation implements the DevicePlugin API.
func (pl *pool) GetPreferredAllocation(ctx context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, c := range req.ContainerRequests {
		ids := pl.p.preferred(ctx, pl.resource, c.AvailableDeviceIDs, c.MustIncludeDeviceIDs, int(c.AllocationSize))
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids})
	}
	return resp, nil
}

// Allocate implements the DevicePlugin API.
func (pl *pool) Allocate(ctx context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, c := range req.ContainerRequests {
		r, err := pl.p.allocate(ctx, pl.resource, c.DevicesIds)
		if err != nil {
			pl.p.metrics.failures.WithLabelValues(pl.resource).Inc()
			klog.FromContext(ctx).Error(err, "Allocate failed", "resource", pl.resource, "ids", c.DevicesIds)
			return nil, err
		}
		resp.ContainerResponses = append(resp.ContainerResponses, r)
	}
	return resp, nil
}

// PreStartContainer implements the DevicePlugin API (not required by this plugin).
func (pl *pool) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}
