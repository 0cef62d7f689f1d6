package testkit

import (
	"testing"

	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// Shape is the shape of a type of the default catalog at its default LNC; the test fails when
// the catalog has no such type.
func Shape(t testing.TB, name string) *topology.Shape {
	t.Helper()
	it, err := catalog().Get(name)
	if err != nil {
		t.Fatal(err)
	}
	s, err := topology.NewShape(it, 0)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
