package extender

import (
	"errors"
	"testing"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/testkit"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

func usageWith(t *testing.T, s *topology.Shape, devices ...int) *topology.Usage {
	t.Helper()
	u := topology.NewUsage(s)
	if len(devices) > 0 {
		a, err := s.DeviceAllocation(devices)
		if err != nil {
			t.Fatal(err)
		}
		if err := u.Allocate(a); err != nil {
			t.Fatal(err)
		}
	}
	return u
}

func TestPlanPrefersPartlyUsedNode(t *testing.T) {
	s := testkit.Shape(t, trn1)
	reqs := []allocation.Request{{Container: "a", Resource: topology.ResourceNeuron, Count: 4}}
	_, empty, err := allocation.Plan(topology.NewUsage(s), reqs, topology.BestFit)
	if err != nil {
		t.Fatal(err)
	}
	_, partly, err := allocation.Plan(usageWith(t, s, 0, 1, 2, 3), reqs, topology.BestFit)
	if err != nil {
		t.Fatal(err)
	}
	if partly <= empty {
		t.Errorf("partly used node scores %v, empty node %v: best fit must prefer the partly used one", partly, empty)
	}
	if allocation.Tenths(partly) <= allocation.Tenths(empty) {
		t.Errorf("extender scores %d (partly used) <= %d (empty)", allocation.Tenths(partly), allocation.Tenths(empty))
	}
}

func TestUnresolvable(t *testing.T) {
	uc := &topology.UnsupportedCountError{InstanceType: trn1, Unit: topology.UnitDevice, Count: 7}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"unsupported count", uc, true},
		{"wrapped unsupported count", errors.Join(errors.New("x"), uc), true},
		{"insufficient", &topology.InsufficientError{InstanceType: trn1}, false},
		{"other", errors.New("boom"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Unresolvable(tc.err); got != tc.want {
				t.Errorf("Unresolvable(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}
