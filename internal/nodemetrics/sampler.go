package nodemetrics

import (
	"sync"
	"time"

	"github.com/kube-neuron/kube-neuron/internal/neuron"
)

// physicalCore names a physical core: its device and its index within the device.
type physicalCore struct{ Device, Core int }

// sample is the cumulative in-use time of every physical core at one instant.
type sample struct {
	at    time.Time
	inUse map[physicalCore]time.Duration
}

// Sampler keeps the agent's last two samples of the cores' nc_time_in_use to compute their
// utilisation. The agent calls Sample from its own loop; scrapes only read. It is safe for
// concurrent use.
type Sampler struct {
	mu         sync.Mutex
	prev, last sample
	stats      *neuron.Stats // the stats of the last sample
}

// NewSampler returns a sampler without samples: every core's utilisation is 0 until it has two.
func NewSampler() *Sampler { return &Sampler{} }

// Sample records the cores' in-use time read at now. A sample not later than the last one is
// ignored (no interval to divide by); a nil stats is ignored.
func (s *Sampler) Sample(now time.Time, stats *neuron.Stats) {
	if stats == nil {
		return
	}
	next := sample{at: now, inUse: map[physicalCore]time.Duration{}}
	for _, d := range stats.Devices {
		for _, c := range d.Cores {
			next.inUse[physicalCore{d.Index, c.Index}] = c.TimeInUse
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.last.at.IsZero() && !now.After(s.last.at) {
		return
	}
	s.prev, s.last, s.stats = s.last, next, stats
}

// Stats returns the stats of the last sample taken (nil before the first), for the agent's
// Snapshot. The caller must not modify them.
func (s *Sampler) Stats() *neuron.Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// utilization returns each physical core's utilisation between the last two samples.
func (s *Sampler) utilization() map[physicalCore]float64 {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return utilization(s.prev, s.last)
}

// utilization is the rate of in-use time between two samples, clamped to 0..1: a counter that
// went back (the driver was reloaded) gives 0, one that rose by slightly more than the interval
// (the two reads are not instantaneous) gives 1. A core absent from either sample gives 0 (it
// is left out).
func utilization(prev, last sample) map[physicalCore]float64 {
	out := map[physicalCore]float64{}
	interval := last.at.Sub(prev.at)
	if prev.at.IsZero() || interval <= 0 {
		return out
	}
	for core, now := range last.inUse {
		before, ok := prev.inUse[core]
		if !ok {
			continue
		}
		out[core] = min(1, max(0, float64(now-before)/float64(interval)))
	}
	return out
}
