package deviceplugin

import (
	"context"
	"fmt"
	"slices"
	"time"

	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/deviceplugin/ledger"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// query is what a kubelet call brings to the ledger: the informer's pods, the API server and
// the kubelet to ask, the allocation source. The caller holds p.mu.
func (p *Plugin) query(ctx context.Context) ledger.Query {
	return ledger.Query{
		Pods: podViews(p.cachedPods()), Lookup: p.lookup(ctx),
		Records: p.o.Source != SourceKubelet, RequireRecord: p.o.Source == SourceExtender,
		Now: time.Now(), Log: klog.FromContext(ctx),
	}
}

// preferred chooses the ids the kubelet should take (ledger.Preferred).
func (p *Plugin) preferred(ctx context.Context, resource string, available, mustInclude []string, size int) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ledger.Preferred(p.query(ctx), resource, available, mustInclude, size)
}

// allocate serves one container: the ledger decides, the answer is kept in the checkpoint
// before it is given, and the matched record is marked served.
func (p *Plugin) allocate(ctx context.Context, resource string, kubeletIDs []string) (*pluginapi.ContainerAllocateResponse, error) {
	logger := klog.FromContext(ctx).WithValues("resource", resource)
	p.mu.Lock()
	defer p.mu.Unlock()
	g, err := p.ledger.Allocate(p.query(ctx), resource, kubeletIDs)
	if err != nil {
		return nil, err
	}
	if err := p.saveCheckpointLocked(); err != nil {
		p.ledger.Undo(g)
		return nil, fmt.Errorf("pod %s: %w; the plugin keeps every answer there before giving it, so that a restart does not lose which devices a container got: make the directory writable (--state-dir, the chart's devicePlugin.stateDir)", g.Who, err)
	}
	p.metrics.allocations.WithLabelValues(resource, g.Source).Inc()
	logger.Info("Allocated", "pod", g.Who, "source", g.Source, "kubeletIDs", sortedIDs(kubeletIDs), "devices", g.Hardware.Devices, "cores", g.Hardware.Cores)
	if g.Fix != nil {
		if err := p.writeFix(ctx, *g.Fix); err != nil {
			logger.Error(err, "Marking the container served; the next refresh retries", "pod", g.Fix.Pod)
		}
	}
	p.requestRefresh()
	return response(g.Unit, g.Hardware), nil
}

// response is what the container gets: the device nodes of every device touched, the global
// core ids, and the device ids for device requests.
func response(unit topology.Unit, hw topology.Allocation) *pluginapi.ContainerAllocateResponse {
	r := &pluginapi.ContainerAllocateResponse{Envs: map[string]string{allocation.EnvVisibleCores: topology.JoinIDs(hw.Cores)}}
	if unit == topology.UnitDevice {
		r.Envs[allocation.EnvVisibleDevices] = topology.JoinIDs(hw.Devices)
	}
	for _, d := range hw.Devices {
		path := fmt.Sprintf("/dev/neuron%d", d)
		r.Devices = append(r.Devices, &pluginapi.DeviceSpec{ContainerPath: path, HostPath: path, Permissions: "rw"})
	}
	return r
}

func sortedIDs(ids []string) []string {
	out := slices.Clone(ids)
	ledger.SortIDs(out)
	return out
}
