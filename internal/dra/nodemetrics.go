package dra

import (
	"context"
	"time"

	k8slabels "k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/klog/v2"

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

// startNodeMetrics adds the node metrics (package nodemetrics) to the driver's registry: it
// reads the counters every MetricsSampleInterval (its own loop, so that core utilisation is
// the rate over a steady interval whatever the scrape rate), and at each scrape joins the last
// reading with the holders of the prepared claims (the node's pods) and the devices' health.
func (d *Driver) startNodeMetrics(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx) // the informer's Shutdown waits for it to end
	pods, stopInformer := d.startPodInformer(ctx)
	sampler := nodemetrics.NewSampler()
	d.metrics.registry.MustRegister(nodemetrics.NewCollector(func() nodemetrics.Snapshot {
		return d.metricsSnapshot(pods, sampler.Stats())
	}, sampler))
	reader, ok := d.hw.(statsReader)
	if !ok {
		return func() {
			cancel()
			stopInformer()
		}
	}
	interval := d.o.MetricsSampleInterval
	if interval <= 0 {
		interval = DefaultMetricsSampleInterval
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sampleStats(ctx, reader, sampler, interval)
	}()
	return func() {
		cancel()
		<-done
		stopInformer()
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
func (d *Driver) metricsSnapshot(pods corelisters.PodLister, stats *neuron.Stats) nodemetrics.Snapshot {
	holders := d.holders(pods)
	d.mu.Lock()
	reasons := d.health.Reasons()
	d.mu.Unlock()
	return nodemetrics.Snapshot{
		Node: d.o.NodeName, InstanceType: d.info.Shape.Type.Name, Shape: d.info.Shape,
		Stats: stats, Holders: holders, Reasons: reasons,
	}
}

// holders joins the prepared claims (the checkpoint on disk, which a second driver pod may
// have written during a rolling update; the one in memory when it cannot be read) with the
// node's pods.
func (d *Driver) holders(pods corelisters.PodLister) []nodemetrics.Holder {
	list, _ := pods.List(k8slabels.Everything())
	cp, err := LoadCheckpoint(d.dataDir)
	if err != nil {
		d.mu.Lock() // prepare changes the checkpoint in memory
		defer d.mu.Unlock()
		cp = d.checkpoint
	}
	return claimHolders(cp, list)
}
