package deviceplugin

import (
	"context"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/kube-neuron/kube-neuron/internal/neuron"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// checkHealth reads the devices again: a device whose uncorrectable error counters rose, or
// that disappeared, turns unhealthy; it is healthy again once its counters are back at or below
// what they were when it was last healthy (a driver reset clears them) and it is present. The
// Node condition NeuronDevicesHealthy follows: False while every device is unhealthy.
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
	reasons := p.health.Reasons()
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
	if p.o.Client != nil {
		p.syncNodeCondition(ctx, reasons)
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
