package neuron

import (
	"reflect"
	"testing"
)

func nodeWith(counts map[int]uint64) *Node {
	n := &Node{}
	for i := range 4 {
		if c, ok := counts[i]; ok {
			n.Devices = append(n.Devices, Device{Index: i, MemECCUncorrected: c})
		}
	}
	return n
}

func TestHealth(t *testing.T) {
	all := func(c uint64) map[int]uint64 { return map[int]uint64{0: c, 1: c, 2: c, 3: c} }
	steps := []struct {
		name      string
		node      *Node
		changes   []HealthChange
		unhealthy []bool
	}{
		{"steady", nodeWith(all(2)), nil, []bool{false, false, false, false}},
		{"count rises on 1", nodeWith(map[int]uint64{0: 2, 1: 5, 2: 2, 3: 2}),
			[]HealthChange{{1, false, "its uncorrectable error count rose from 2 to 5", ReasonECCUncorrected}}, []bool{false, true, false, false}},
		{"still high: no change", nodeWith(map[int]uint64{0: 2, 1: 5, 2: 2, 3: 2}), nil, []bool{false, true, false, false}},
		{"device 3 disappears", nodeWith(map[int]uint64{0: 2, 1: 5, 2: 2}),
			[]HealthChange{{3, false, "it is no longer reported by the Neuron driver", ReasonGone}}, []bool{false, true, false, true}},
		{"driver reset clears counters, 3 back", nodeWith(all(0)),
			[]HealthChange{{1, true, "it is present and its error counters no longer rise", ""}, {3, true, "it is present and its error counters no longer rise", ""}}, []bool{false, false, false, false}},
		{"nothing readable", nil,
			[]HealthChange{{0, false, "it is no longer reported by the Neuron driver", ReasonGone}, {1, false, "it is no longer reported by the Neuron driver", ReasonGone}, {2, false, "it is no longer reported by the Neuron driver", ReasonGone}, {3, false, "it is no longer reported by the Neuron driver", ReasonGone}}, []bool{true, true, true, true}},
	}
	h := NewHealth(4, nodeWith(all(2)))
	for _, s := range steps {
		got := h.Update(s.node)
		if !reflect.DeepEqual(got, s.changes) {
			t.Fatalf("%s: changes %+v, want %+v", s.name, got, s.changes)
		}
		if u := h.Unhealthy(); !reflect.DeepEqual(u, s.unhealthy) {
			t.Fatalf("%s: unhealthy %v, want %v", s.name, u, s.unhealthy)
		}
		want := 0
		for _, u := range s.unhealthy {
			if u {
				want++
			}
		}
		for i, r := range h.Reasons() {
			if (r != "") != s.unhealthy[i] {
				t.Fatalf("%s: Reasons()[%d] = %q with unhealthy %v", s.name, i, r, s.unhealthy[i])
			}
		}
		if h.UnhealthyCount() != want {
			t.Fatalf("%s: UnhealthyCount %d, want %d", s.name, h.UnhealthyCount(), want)
		}
	}
}
