package ledger

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/kube-neuron/kube-neuron/internal/topology"
)

func TestWithdrawn(t *testing.T) {
	s := trn1(t)
	const (
		dev  = topology.ResourceNeuron
		alt  = topology.ResourceNeuronDevice
		core = topology.ResourceNeuronCore
	)
	tests := []struct {
		name      string
		holdings  []Holding
		unhealthy []int
		want      map[string][]string // resource -> withdrawn ids
	}{
		{name: "nothing", want: map[string][]string{dev: nil, alt: nil, core: nil}},
		{
			name:     "a device through neuron",
			holdings: []Holding{{Who: "a", Resource: dev, KubeletIDs: []string{"3"}, Hardware: hw(t, s, dev, "3")}},
			want:     map[string][]string{dev: nil, alt: {"3"}, core: {"6", "7"}},
		},
		{
			name:     "a core makes its device unavailable whole",
			holdings: []Holding{{Who: "a", Resource: core, KubeletIDs: []string{"9"}, Hardware: hw(t, s, core, "9")}},
			want:     map[string][]string{dev: {"4"}, alt: {"4"}, core: nil},
		},
		{
			name:     "extender record served on other hardware than the kubelet's ids",
			holdings: []Holding{{Who: "a", Resource: dev, KubeletIDs: []string{"0"}, Hardware: hw(t, s, dev, "8")}},
			// the kubelet holds id 0 of neuron; the container runs on device 8
			want: map[string][]string{dev: {"8"}, alt: {"8"}, core: {"16", "17"}},
		},
		{
			// The kubelet admitted b before a, but the call was matched to a's record: b holds
			// kubelet id 3 and runs on device 4, and a's record was swapped to device 3, whose id
			// the kubelet holds for b. Id 4 stands in for device 3, or the kubelet finds no id
			// for a ("requested number of devices unavailable" on a full inf2.24xlarge, seen in
			// the autoscaler e2e).
			name: "an id stands in for hardware reserved for a waiting pod when the kubelet holds its id",
			holdings: []Holding{
				{Who: "b", Resource: dev, KubeletIDs: []string{"3"}, Hardware: hw(t, s, dev, "4"), Admitted: true},
				{Who: "a", Resource: dev, Hardware: hw(t, s, dev, "3"), Reserved: true},
			},
			want: map[string][]string{dev: nil, alt: {"3", "4"}, core: {"6", "7", "8", "9"}},
		},
		{
			// Two swaps in a row (the autoscaler e2e, three pods bound to a new trn1.32xlarge
			// within 110 ms): c holds kubelet ids 12-15 and runs on devices 8-11, b holds
			// kubelet ids 0-3 and runs on devices 12-15, and devices 0-7 wait for a. Ids 8-11
			// stand in for 0-3, or the kubelet finds 4 ids of the 8 a asks for.
			name: "ids stand in across chained swaps",
			holdings: []Holding{
				{Who: "c", Resource: dev, KubeletIDs: []string{"12", "13", "14", "15"}, Hardware: hw(t, s, dev, "8", "9", "10", "11"), Admitted: true},
				{Who: "b", Resource: dev, KubeletIDs: []string{"0", "1", "2", "3"}, Hardware: hw(t, s, dev, "12", "13", "14", "15"), Admitted: true},
				{Who: "a", Resource: dev, Hardware: hw(t, s, dev, "0", "1", "2", "3", "4", "5", "6", "7"), Reserved: true},
			},
			want: map[string][]string{
				dev: nil,
				alt: {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15"},
				core: {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15",
					"16", "17", "18", "19", "20", "21", "22", "23", "24", "25", "26", "27", "28", "29", "30", "31"},
			},
		},
		{
			name: "no stand-in when the kubelet's id's hardware is not reserved through the pool",
			holdings: []Holding{
				{Who: "b", Resource: dev, KubeletIDs: []string{"3"}, Hardware: hw(t, s, dev, "4"), Admitted: true},
				{Who: "a", Resource: alt, Hardware: hw(t, s, alt, "3"), Reserved: true},
			},
			want: map[string][]string{dev: {"4"}, alt: {"4"}, core: {"6", "7", "8", "9"}},
		},
		{
			name:     "reserved for a pod waiting to be admitted through the same pool",
			holdings: []Holding{{Who: "a", Resource: dev, Hardware: hw(t, s, dev, "4", "5", "6", "7"), Reserved: true}},
			want:     map[string][]string{dev: nil, alt: {"4", "5", "6", "7"}, core: {"8", "9", "10", "11", "12", "13", "14", "15"}},
		},
		{
			name:      "unhealthy device",
			unhealthy: []int{2},
			want:      map[string][]string{dev: {"2"}, alt: {"2"}, core: {"4", "5"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bad := make([]bool, s.Devices())
			for _, d := range tc.unhealthy {
				bad[d] = true
			}
			for res, want := range tc.want {
				got := slices.Collect(maps.Keys(Withdrawn(s, res, bad, tc.holdings)))
				SortIDs(got)
				if !slices.Equal(got, want) {
					t.Errorf("%s: withdrawn %v, want %v", res, got, want)
				}
			}
		})
	}
	reasons := Withdrawn(s, topology.ResourceNeuronCore, make([]bool, 16), []Holding{{Pod: PodKey{"ns", "p"}, Container: "c", Resource: dev, KubeletIDs: []string{"1"}, Hardware: hw(t, s, dev, "1")}})
	if !strings.Contains(reasons["2"], "in use by ns/p (container c, aws.amazon.com/neuron)") {
		t.Errorf("reason %q", reasons["2"])
	}
}

func TestConflicts(t *testing.T) {
	s := trn1(t)
	holdings := []Holding{
		{Pod: PodKey{"ns", "a"}, PodUID: "a", Resource: topology.ResourceNeuron, Hardware: hw(t, s, topology.ResourceNeuron, "0", "1", "2", "3")},
		{Pod: PodKey{"ns", "b"}, PodUID: "b", Resource: topology.ResourceNeuronCore, Hardware: hw(t, s, topology.ResourceNeuronCore, "9")},
	}
	if got := Conflicts(hw(t, s, topology.ResourceNeuron, "4"), "x", holdings); len(got) != 1 || got[0].Pod.String() != "ns/b" {
		t.Errorf("device 4 vs core 9: %v", got)
	}
	if got := Conflicts(hw(t, s, topology.ResourceNeuron, "0", "1", "2", "3"), "a", holdings); len(got) != 0 {
		t.Errorf("a pod does not conflict with itself: %v", got)
	}
	if got := Conflicts(hw(t, s, topology.ResourceNeuron, "12"), "x", holdings); len(got) != 0 {
		t.Errorf("free device: %v", got)
	}
	// A call matched to the record of a pod whose container the kubelet already admitted on that
	// hardware is for another pod (a call for the same ids again never gets here).
	admitted := []Holding{{Pod: PodKey{"ns", "a"}, PodUID: "a", Resource: topology.ResourceNeuron, KubeletIDs: []string{"0"}, Hardware: hw(t, s, topology.ResourceNeuron, "0"), Admitted: true}}
	if got := Conflicts(hw(t, s, topology.ResourceNeuron, "0"), "a", admitted); len(got) != 1 {
		t.Errorf("device 0 again for a call matched to a's record, a admitted on it: %v", got)
	}
	// Calls for unknown pods (kubelet ids) conflict with other unknown pods' holdings.
	unknown := []Holding{{Who: "(being admitted)", Resource: topology.ResourceNeuron, KubeletIDs: []string{"2"}, Hardware: hw(t, s, topology.ResourceNeuron, "2")}}
	if got := Conflicts(hw(t, s, topology.ResourceNeuronCore, "4", "5"), "", unknown); len(got) != 1 {
		t.Errorf("cores 4,5 against device 2 held by an unknown pod: %v", got)
	}
}
