package nodemetrics

import "github.com/prometheus/client_golang/prometheus"

// collector exports the series of the agent's current snapshot at every scrape.
type collector struct {
	snapshot func() Snapshot
	sampler  *Sampler
	descs    map[string]*prometheus.Desc
	types    map[string]prometheus.ValueType
}

var _ prometheus.Collector = (*collector)(nil)

// NewCollector returns the collector of the node agents' metrics (docs/metrics.md). snapshot is
// called once per scrape and must be safe to call concurrently with the agent; sampler gives
// the cores' utilisation (nil: 0 for every core).
func NewCollector(snapshot func() Snapshot, sampler *Sampler) prometheus.Collector {
	c := &collector{snapshot: snapshot, sampler: sampler, descs: map[string]*prometheus.Desc{}, types: map[string]prometheus.ValueType{}}
	for _, m := range metrics {
		c.descs[m.name] = prometheus.NewDesc(m.name, m.help, m.labels, nil)
		c.types[m.name] = m.typ
	}
	return c
}

// Describe sends the descriptions of every family.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range metrics {
		ch <- c.descs[m.name]
	}
}

// Collect sends the series of the current snapshot.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range buildSeries(c.snapshot(), c.sampler.utilization()) {
		desc := c.descs[s.name]
		m, err := prometheus.NewConstMetric(desc, c.types[s.name], s.value, s.labels...)
		if err != nil {
			m = prometheus.NewInvalidMetric(desc, err)
		}
		ch <- m
	}
}
