package nodemetrics

import (
	"context"
	"time"

	"k8s.io/klog/v2"

	"github.com/kube-neuron/kube-neuron/internal/neuron"
)

// DefaultSampleInterval is how often the node agents read the Neuron counters unless told
// otherwise (--metrics-sample-interval).
const DefaultSampleInterval = 10 * time.Second

// StatsReader reads the Neuron driver's usage counters (neuron.Sysfs).
type StatsReader interface {
	ReadStats(ctx context.Context) (*neuron.Stats, error)
}

// StartSampling reads the counters of hw into the sampler now and every interval (0:
// DefaultSampleInterval) until stop is called or ctx ends; stop waits for the loop to end. The
// agents run it apart from their health checks: reading every core's counters is far more than
// health needs, and core utilisation is the rate over a steady interval whatever the scrape
// rate. Hardware that is not a StatsReader (a test's fake) is never sampled.
func StartSampling(ctx context.Context, hw any, sampler *Sampler, interval time.Duration) (stop func()) {
	reader, ok := hw.(StatsReader)
	if !ok {
		return func() {}
	}
	if interval <= 0 {
		interval = DefaultSampleInterval
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			if st, err := reader.ReadStats(ctx); err != nil {
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
	}()
	return func() {
		cancel()
		<-done
	}
}
