package ledger

import (
	"strings"
	"testing"

	"github.com/kube-neuron/kube-neuron/internal/topology"
)

func trn1(t testing.TB) *topology.Shape {
	t.Helper()
	it, _ := topology.DefaultCatalog().Lookup("trn1.32xlarge")
	s, err := topology.NewShape(it, 0)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func hw(t testing.TB, s *topology.Shape, res string, ids ...string) topology.Allocation {
	t.Helper()
	a, err := HardwareOf(s, res, ids)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestHardwareOfErrors(t *testing.T) {
	s := trn1(t)
	for _, tc := range []struct {
		res string
		ids []string
		msg string
	}{
		{topology.ResourceNeuron, []string{"neuron0"}, "is not a number"},
		{topology.ResourceNeuron, []string{"16"}, "does not exist"},
		{topology.ResourceNeuronCore, []string{"32"}, "does not exist"},
		{topology.ResourceNeuron, []string{"1", "1"}, "listed twice"},
	} {
		if _, err := HardwareOf(s, tc.res, tc.ids); err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%v: %v", tc.ids, err)
		}
	}
}

// FuzzKubeletIDs feeds arbitrary kubelet ids to the id decoding Allocate uses: it never panics,
// and what it accepts is hardware of the node.
func FuzzKubeletIDs(f *testing.F) {
	s := trn1(f)
	f.Add("0,1,2,3", true)
	f.Add("31", false)
	f.Add("-1", true)
	f.Add("99999999999999999999", false)
	f.Fuzz(func(t *testing.T, list string, devices bool) {
		res := topology.ResourceNeuronCore
		if devices {
			res = topology.ResourceNeuron
		}
		a, err := HardwareOf(s, res, strings.Split(list, ","))
		if err != nil {
			return
		}
		for _, c := range a.Cores {
			if c < 0 || c >= s.Cores() {
				t.Fatalf("%q gave core %d", list, c)
			}
		}
	})
}
