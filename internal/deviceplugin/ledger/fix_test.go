package ledger

import (
	"errors"
	"testing"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

func TestApplyFix(t *testing.T) {
	s := trn1(t)
	fix := Fix{Pod: PodKey{"ns", "a"}, Key: ContainerKey{UID: "uid-a", Container: "app", Resource: topology.ResourceNeuron}, Hardware: hw(t, s, topology.ResourceNeuron, "2"), Served: true}
	entry := func(name string, served bool, devices ...int) allocation.Container {
		return allocation.Container{Name: name, Resource: topology.ResourceNeuron, Devices: devices, Cores: nil, Served: served}
	}
	tests := []struct {
		name    string
		record  *allocation.Record
		changed bool
		want    []allocation.Container
		err     bool
	}{
		{name: "no record: it starts", changed: true, want: []allocation.Container{{Name: "app", Resource: topology.ResourceNeuron, Devices: []int{2}, Cores: []int{4, 5}, Served: true}}},
		{name: "another container's entry stays", record: &allocation.Record{Node: node, Containers: []allocation.Container{entry("side", false, 7), entry("app", false, 3)}}, changed: true,
			want: []allocation.Container{entry("side", false, 7), {Name: "app", Resource: topology.ResourceNeuron, Devices: []int{2}, Cores: []int{4, 5}, Served: true}}},
		{name: "already so", record: &allocation.Record{Node: node, Containers: []allocation.Container{{Name: "app", Resource: topology.ResourceNeuron, Devices: []int{2}, Cores: []int{4, 5}, Served: true}}},
			want: []allocation.Container{{Name: "app", Resource: topology.ResourceNeuron, Devices: []int{2}, Cores: []int{4, 5}, Served: true}}},
		{name: "another node's record", record: &allocation.Record{Node: "other"}, err: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, changed, err := ApplyFix(tc.record, node, fix)
			var other *OtherNodeError
			if tc.err {
				if !errors.As(err, &other) {
					t.Errorf("error %v, want the other node's", err)
				}
				return
			}
			if err != nil || changed != tc.changed || got.Node != node || len(got.Containers) != len(tc.want) {
				t.Fatalf("got %+v changed %v err %v, want %+v changed %v", got, changed, err, tc.want, tc.changed)
			}
			for i, c := range got.Containers {
				w := tc.want[i]
				if c.Name != w.Name || c.Served != w.Served || topology.FormatList(c.Devices) != topology.FormatList(w.Devices) || topology.FormatList(c.Cores) != topology.FormatList(w.Cores) {
					t.Errorf("entry %d: %+v, want %+v", i, c, w)
				}
			}
			if tc.record != nil && len(tc.record.Containers) > 0 && tc.changed && tc.record.Containers[len(tc.record.Containers)-1].Served {
				t.Error("ApplyFix changed the record it was given")
			}
		})
	}
}
