package neuron

import "testing"

// BenchmarkSimulateTrn2 measures Simulate for the largest common node (16 devices x 8 cores):
// the lab writes one such tree per simulated node.
func BenchmarkSimulateTrn2(b *testing.B) {
	it := catalogType(b, "trn2.48xlarge")
	for b.Loop() {
		if _, err := Simulate(SimOptions{Root: b.TempDir(), InstanceType: it, EFA: true}); err != nil {
			b.Fatal(err)
		}
	}
}
