package lab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// draManager plays the kubelet's side of DRA for one simulated node: the plugin watcher's
// registration (GetInfo, NotifyRegistrationStatus) for sockets that appear in the node's
// registry directory, and NodePrepareResources / NodeUnprepareResources over the plugin's
// own socket, with the real protobuf API.
type draManager struct {
	registryDir string
	onChange    func()

	mu      sync.Mutex
	sockets map[string]string     // registration socket path -> driver name
	plugins map[string]*draPlugin // driver name -> plugin
}

type draPlugin struct {
	driver, endpoint string
	conn             *grpc.ClientConn
	client           drapb.DRAPluginClient
}

func newDRAManager(registryDir string, onChange func()) *draManager {
	return &draManager{registryDir: registryDir, onChange: onChange, sockets: map[string]string{}, plugins: map[string]*draPlugin{}}
}

// run watches the registry directory until ctx ends. Sockets raise no useful inotify events on
// every file system, so it polls, as often as the kubelet's plugin watcher reacts in practice.
func (m *draManager) run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		entries, err := os.ReadDir(m.registryDir)
		if err != nil && !os.IsNotExist(err) {
			logger.Error(err, "Reading the plugin registry directory")
		}
		seen := map[string]bool{}
		for _, e := range entries {
			if e.Type()&os.ModeSocket == 0 || !strings.HasSuffix(e.Name(), ".sock") {
				continue
			}
			path := filepath.Join(m.registryDir, e.Name())
			seen[path] = true
			m.mu.Lock()
			_, known := m.sockets[path]
			m.mu.Unlock()
			if !known {
				if err := m.register(ctx, path); err != nil {
					logger.Error(err, "Registering DRA plugin failed", "socket", path)
				}
			}
		}
		m.mu.Lock()
		for path, driver := range m.sockets {
			if !seen[path] {
				delete(m.sockets, path)
				if p := m.plugins[driver]; p != nil {
					_ = p.conn.Close()
					delete(m.plugins, driver)
					logger.V(2).Info("DRA plugin deregistered", "driver", driver)
				}
			}
		}
		m.mu.Unlock()
		select {
		case <-ctx.Done():
			m.mu.Lock()
			for _, p := range m.plugins {
				_ = p.conn.Close()
			}
			m.plugins = map[string]*draPlugin{}
			m.sockets = map[string]string{}
			m.mu.Unlock()
			return
		case <-tick.C:
		}
	}
}

func (m *draManager) register(ctx context.Context, socket string) error {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	reg := registerapi.NewRegistrationClient(conn)
	rpcCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	info, err := reg.GetInfo(rpcCtx, &registerapi.InfoRequest{})
	if err != nil {
		return fmt.Errorf("GetInfo: %w", err)
	}
	m.mu.Lock()
	m.sockets[socket] = info.Name // known now, whatever the outcome: the kubelet does not retry a socket
	m.mu.Unlock()
	fail := func(msg string) error {
		_, _ = reg.NotifyRegistrationStatus(rpcCtx, &registerapi.RegistrationStatus{PluginRegistered: false, Error: msg})
		return fmt.Errorf("%s", msg)
	}
	if info.Type != registerapi.DRAPlugin {
		return fail(fmt.Sprintf("plugin type %q is not handled by the lab kubelet (it handles %s)", info.Type, registerapi.DRAPlugin))
	}
	if !slices.Contains(info.SupportedVersions, drapb.DRAPluginService) {
		return fail(fmt.Sprintf("plugin %s offers %v; the lab kubelet speaks %s", info.Name, info.SupportedVersions, drapb.DRAPluginService))
	}
	pc, err := grpc.NewClient("unix://"+info.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fail(fmt.Sprintf("connecting to %s: %v", info.Endpoint, err))
	}
	m.mu.Lock()
	if old := m.plugins[info.Name]; old != nil {
		_ = old.conn.Close()
	}
	m.plugins[info.Name] = &draPlugin{driver: info.Name, endpoint: info.Endpoint, conn: pc, client: drapb.NewDRAPluginClient(pc)}
	m.mu.Unlock()
	if _, err := reg.NotifyRegistrationStatus(rpcCtx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		return fmt.Errorf("NotifyRegistrationStatus: %w", err)
	}
	klog.FromContext(ctx).V(2).Info("DRA plugin registered", "driver", info.Name, "endpoint", info.Endpoint)
	m.onChange()
	return nil
}

// Drivers returns the registered DRA drivers.
func (m *draManager) Drivers() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for d := range m.plugins {
		out = append(out, d)
	}
	slices.Sort(out)
	return out
}

func (m *draManager) plugin(driver string) (*draPlugin, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, ok := m.plugins[driver]
	if !ok {
		return nil, fmt.Errorf("DRA driver %s is not registered on this node", driver)
	}
	return p, nil
}

// ClaimRef names one ResourceClaim.
type ClaimRef struct {
	Namespace, Name, UID string
}

// prepare calls NodePrepareResources on the driver for the claims and returns the CDI device ids
// per claim UID.
func (m *draManager) prepare(ctx context.Context, driver string, claims []ClaimRef) (map[string][]string, error) {
	p, err := m.plugin(driver)
	if err != nil {
		return nil, err
	}
	req := &drapb.NodePrepareResourcesRequest{}
	for _, c := range claims {
		req.Claims = append(req.Claims, &drapb.Claim{Namespace: c.Namespace, Name: c.Name, Uid: c.UID})
	}
	rpcCtx, cancel := context.WithTimeout(ctx, 45*time.Second)
	defer cancel()
	resp, err := p.client.NodePrepareResources(rpcCtx, req)
	if err != nil {
		return nil, fmt.Errorf("NodePrepareResources: %w", err)
	}
	out := map[string][]string{}
	var errs []string
	for _, c := range claims {
		r, ok := resp.Claims[c.UID]
		switch {
		case !ok:
			errs = append(errs, fmt.Sprintf("claim %s/%s was not prepared", c.Namespace, c.Name))
		case r.Error != "":
			errs = append(errs, r.Error)
		default:
			for _, d := range r.Devices {
				out[c.UID] = append(out[c.UID], d.CdiDeviceIds...)
			}
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return out, nil
}

// unprepare calls NodeUnprepareResources.
func (m *draManager) unprepare(ctx context.Context, driver string, claims []ClaimRef) error {
	p, err := m.plugin(driver)
	if err != nil {
		return err
	}
	req := &drapb.NodeUnprepareResourcesRequest{}
	for _, c := range claims {
		req.Claims = append(req.Claims, &drapb.Claim{Namespace: c.Namespace, Name: c.Name, Uid: c.UID})
	}
	rpcCtx, cancel := context.WithTimeout(ctx, 45*time.Second)
	defer cancel()
	resp, err := p.client.NodeUnprepareResources(rpcCtx, req)
	if err != nil {
		return fmt.Errorf("NodeUnprepareResources: %w", err)
	}
	var errs []string
	for uid, r := range resp.Claims {
		if r.Error != "" {
			errs = append(errs, fmt.Sprintf("claim %s: %s", uid, r.Error))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}
