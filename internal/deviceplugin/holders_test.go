package deviceplugin

import (
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kube-neuron/kube-neuron/internal/deviceplugin/ledger"
	"github.com/kube-neuron/kube-neuron/internal/nodemetrics"
	"github.com/kube-neuron/kube-neuron/internal/testkit"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

func TestHoldingHolders(t *testing.T) {
	shape := testkit.Shape(t, "trn1.32xlarge")
	devs := func(d ...int) topology.Allocation {
		a, err := shape.DeviceAllocation(d)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	cores := func(c ...int) topology.Allocation {
		a, err := shape.CoreAllocation(c)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	pod := func(name string) ledger.PodKey { return ledger.PodKey{Namespace: "ml", Name: name} }
	neuron, core := topology.ResourceNeuron, topology.ResourceNeuronCore
	for _, tc := range []struct {
		name     string
		holdings []ledger.Holding
		pods     map[types.UID]ledger.PodKey
		want     []nodemetrics.Holder
	}{
		{
			name:     "none",
			holdings: nil,
			want:     []nodemetrics.Holder{},
		},
		{
			name: "a two-container pod: one holder per container, on its own hardware",
			holdings: []ledger.Holding{
				{Pod: pod("p"), Container: "b", Resource: core, Hardware: cores(4, 5), Admitted: true},
				{Pod: pod("p"), Container: "a", Resource: neuron, Hardware: devs(0), Admitted: true},
			},
			want: []nodemetrics.Holder{
				{Namespace: "ml", Pod: "p", Container: "a", Cores: shape.CoresOf(0)},
				{Namespace: "ml", Pod: "p", Container: "b", Cores: []int{4, 5}},
			},
		},
		{
			name: "a container holding through two resources holds the union",
			holdings: []ledger.Holding{
				{Pod: pod("p"), Container: "main", Resource: core, Hardware: cores(6)},
				{Pod: pod("p"), Container: "main", Resource: neuron, Hardware: devs(0)},
			},
			want: []nodemetrics.Holder{{Namespace: "ml", Pod: "p", Container: "main", Cores: append(shape.CoresOf(0), 6)}},
		},
		{
			name: "a reservation holds; an answer since the last refresh is named through its pod UID",
			holdings: []ledger.Holding{
				{Pod: pod("r"), Container: "main", Resource: neuron, Hardware: devs(1), Reserved: true},
				{Who: "ml/q container main", PodUID: "uid-q", Container: "main", Resource: neuron, Hardware: devs(2)},
			},
			pods: map[types.UID]ledger.PodKey{"uid-q": pod("q")},
			want: []nodemetrics.Holder{
				{Namespace: "ml", Pod: "q", Container: "main", Cores: shape.CoresOf(2)},
				{Namespace: "ml", Pod: "r", Container: "main", Cores: shape.CoresOf(1)},
			},
		},
		{
			name: "holdings of pods the plugin does not know are one unnamed holder",
			holdings: []ledger.Holding{
				{Who: "published stack", Resource: neuron, Hardware: devs(3)},
				{Who: "x", PodUID: "uid-gone", Container: "main", Resource: core, Hardware: cores(0)},
				{Pod: pod("p"), Container: "main", Resource: neuron, Hardware: devs(1)},
			},
			want: []nodemetrics.Holder{
				{Cores: append([]int{0}, shape.CoresOf(3)...)},
				{Namespace: "ml", Pod: "p", Container: "main", Cores: shape.CoresOf(1)},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := holdingHolders(tc.holdings, tc.pods)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("holders =\n  %+v\nwant\n  %+v", got, tc.want)
			}
		})
	}
}
