package dra

import (
	"context"

	k8slabels "k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"

	"github.com/kube-neuron/kube-neuron/internal/neuron"
	"github.com/kube-neuron/kube-neuron/internal/nodemetrics"
)

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
	stopSampling := nodemetrics.StartSampling(ctx, d.hw, sampler, d.o.MetricsSampleInterval)
	return func() {
		stopSampling()
		cancel()
		stopInformer()
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
