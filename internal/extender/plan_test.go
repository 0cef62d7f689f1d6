package extender

import (
	"errors"
	"math"
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
	if ExtenderScore(partly) <= ExtenderScore(empty) {
		t.Errorf("extender scores %d (partly used) <= %d (empty)", ExtenderScore(partly), ExtenderScore(empty))
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

func TestExtenderScore(t *testing.T) {
	for _, tc := range []struct {
		in   float64
		want int64
	}{
		{-50, 0}, {-0.1, 0}, {0, 0}, {9.99, 0}, {10, 1}, {55, 5}, {99.9, 9}, {100, 10}, {150, 10},
	} {
		if got := ExtenderScore(tc.in); got != tc.want {
			t.Errorf("ExtenderScore(%v) = %d, want %d", tc.in, got, tc.want)
		}
	}
	for _, s := range []float64{math.Inf(1), math.Inf(-1), math.NaN(), math.MaxFloat64, -math.MaxFloat64} {
		if got := ExtenderScore(s); got < 0 || got > 10 {
			t.Errorf("ExtenderScore(%v) = %d out of 0-10", s, got)
		}
	}
	for s := -20.0; s <= 120; s += 0.5 {
		if got := ExtenderScore(s); got < 0 || got > 10 {
			t.Errorf("ExtenderScore(%v) = %d out of 0-10", s, got)
		}
	}
}
