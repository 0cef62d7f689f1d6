package deviceplugin

import (
	"context"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kube-neuron/kube-neuron/internal/deviceplugin/ledger"
	"github.com/kube-neuron/kube-neuron/internal/neuron"
	"github.com/kube-neuron/kube-neuron/internal/nodemetrics"
)

// startNodeMetrics adds the node metrics (package nodemetrics) to the plugin's registry: it
// reads the counters every MetricsSampleInterval (its own loop, apart from the health checks:
// reading every core's counters is far more than health needs, and core utilisation is the
// rate over a steady interval whatever the scrape rate), and at each scrape joins the last
// reading with the ledger's holdings and the devices' health. It needs the pod informer
// (startInformer) to name pods the ledger knows only by UID.
func (p *Plugin) startNodeMetrics(ctx context.Context) (stop func()) {
	sampler := nodemetrics.NewSampler()
	p.metrics.registry.MustRegister(nodemetrics.NewCollector(func() nodemetrics.Snapshot {
		return p.metricsSnapshot(sampler.Stats())
	}, sampler))
	return nodemetrics.StartSampling(ctx, p.hw, sampler, p.o.MetricsSampleInterval)
}

// metricsSnapshot is what the node metrics show at a scrape.
func (p *Plugin) metricsSnapshot(stats *neuron.Stats) nodemetrics.Snapshot {
	byUID := map[types.UID]ledger.PodKey{}
	if p.pods != nil {
		pods, _ := p.pods.List(labels.Everything())
		for _, pod := range pods {
			byUID[pod.UID] = ledger.PodKey{Namespace: pod.Namespace, Name: pod.Name}
		}
	}
	p.mu.Lock()
	holdings := p.ledger.Holdings()
	reasons := p.health.Reasons()
	p.mu.Unlock()
	return nodemetrics.Snapshot{
		Node: p.o.NodeName, InstanceType: p.shape.Type.Name, Shape: p.shape,
		Stats: stats, Holders: holdingHolders(holdings, byUID), Reasons: reasons,
	}
}
