package deviceplugin

import (
	"testing"

	"github.com/kube-neuron/kube-neuron/internal/deviceplugin/ledger"
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
	a, err := ledger.HardwareOf(s, res, ids)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestResponse(t *testing.T) {
	s := trn1(t)
	r := response(topology.UnitDevice, hw(t, s, topology.ResourceNeuron, "4", "5"))
	if r.Envs["NEURON_RT_VISIBLE_CORES"] != "8,9,10,11" || r.Envs["AWS_NEURON_VISIBLE_DEVICES"] != "4,5" {
		t.Errorf("envs %v", r.Envs)
	}
	if len(r.Devices) != 2 || r.Devices[0].HostPath != "/dev/neuron4" || r.Devices[1].ContainerPath != "/dev/neuron5" || r.Devices[0].Permissions != "rw" {
		t.Errorf("devices %v", r.Devices)
	}
	r = response(topology.UnitCore, hw(t, s, topology.ResourceNeuronCore, "3", "4"))
	if r.Envs["NEURON_RT_VISIBLE_CORES"] != "3,4" || r.Envs["AWS_NEURON_VISIBLE_DEVICES"] != "" || len(r.Devices) != 2 {
		t.Errorf("core response %v %v", r.Envs, r.Devices)
	}
}
