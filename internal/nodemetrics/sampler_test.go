package nodemetrics

import (
	"maps"
	"testing"
	"time"

	"github.com/kube-neuron/kube-neuron/internal/neuron"
)

// inUse is a one-device stats with the given in-use times per physical core.
func inUse(times ...time.Duration) *neuron.Stats {
	ds := neuron.DeviceStats{Index: 3}
	for k, d := range times {
		ds.Cores = append(ds.Cores, neuron.CoreStats{Index: k, TimeInUse: d})
	}
	return &neuron.Stats{Devices: []neuron.DeviceStats{ds}}
}

func TestSampler(t *testing.T) {
	t0 := time.Unix(1000, 0)
	type step struct {
		at    time.Duration // after t0
		stats *neuron.Stats
		want  map[physicalCore]float64
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"nothing before the second sample", []step{
			{0, inUse(time.Second), map[physicalCore]float64{}},
		}},
		{"rate over the interval", []step{
			{0, inUse(time.Second, 0, 5*time.Second), map[physicalCore]float64{}},
			{10 * time.Second, inUse(6*time.Second, 0, 15*time.Second), map[physicalCore]float64{{3, 0}: 0.5, {3, 1}: 0, {3, 2}: 1}},
			{20 * time.Second, inUse(8*time.Second, 10*time.Second, 15*time.Second), map[physicalCore]float64{{3, 0}: 0.2, {3, 1}: 1, {3, 2}: 0}},
		}},
		{"clamped to 0..1", []step{
			{0, inUse(10*time.Second, 0), nil},
			{time.Second, inUse(5*time.Second, 1100*time.Millisecond), map[physicalCore]float64{{3, 0}: 0, {3, 1}: 1}},
		}},
		{"a sample not later than the last is ignored", []step{
			{0, inUse(0), nil},
			{2 * time.Second, inUse(time.Second), map[physicalCore]float64{{3, 0}: 0.5}},
			{2 * time.Second, inUse(2 * time.Second), map[physicalCore]float64{{3, 0}: 0.5}},
			{time.Second, inUse(2 * time.Second), map[physicalCore]float64{{3, 0}: 0.5}},
			{2 * time.Second, nil, map[physicalCore]float64{{3, 0}: 0.5}},
		}},
		{"a core new in the last sample has none", []step{
			{0, inUse(0), nil},
			{time.Second, inUse(time.Second/4, time.Second), map[physicalCore]float64{{3, 0}: 0.25}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewSampler()
			if got := s.utilization(); len(got) != 0 {
				t.Fatalf("new sampler: %v", got)
			}
			var taken *neuron.Stats
			var takenAt time.Duration
			for i, st := range tt.steps {
				s.Sample(t0.Add(st.at), st.stats)
				if st.stats != nil && (taken == nil || st.at > takenAt) {
					taken, takenAt = st.stats, st.at
				}
				if s.Stats() != taken {
					t.Errorf("step %d: Stats() is not the last sample taken", i)
				}
				if st.want == nil {
					continue
				}
				if got := s.utilization(); !maps.Equal(got, st.want) {
					t.Errorf("step %d: utilization %v, want %v", i, got, st.want)
				}
			}
		})
	}
	var none *Sampler
	if got := none.utilization(); got != nil {
		t.Errorf("nil sampler: %v", got)
	}
}
