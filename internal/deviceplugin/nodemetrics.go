package deviceplugin

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/kube-neuron/kube-neuron/internal/deviceplugin/ledger"
	"github.com/kube-neuron/kube-neuron/internal/neuron"
	"github.com/kube-neuron/kube-neuron/internal/nodemetrics"
)

// DefaultMetricsSampleInterval is how often the Neuron counters are read when
// Options.MetricsSampleInterval is 0.
const DefaultMetricsSampleInterval = 10 * time.Second

// statsReader reads the Neuron driver's usage counters (neuron.Sysfs).
type statsReader interface {
	ReadStats(ctx context.Context) (*neuron.Stats, error)
}

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
	reader, ok := p.hw.(statsReader)
	if !ok {
		return func() {}
	}
	interval := p.o.MetricsSampleInterval
	if interval <= 0 {
		interval = DefaultMetricsSampleInterval
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		sampleStats(ctx, reader, sampler, interval)
	}()
	return func() {
		cancel()
		<-done
	}
}

// sampleStats reads the counters now and every interval until ctx ends.
func sampleStats(ctx context.Context, reader statsReader, sampler *nodemetrics.Sampler, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		st, err := reader.ReadStats(ctx)
		if err != nil {
			klog.FromContext(ctx).V(2).Info("Reading the Neuron counters failed", "err", err)
		} else {
			sampler.Sample(time.Now(), st)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
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
