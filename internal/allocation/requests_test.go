package allocation

import (
	"errors"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/kube-neuron/kube-neuron/internal/topology"
)

func qty(n int64) resource.Quantity { return *resource.NewQuantity(n, resource.DecimalSI) }

func TestPodRequests(t *testing.T) {
	neuron := corev1.ResourceName(topology.ResourceNeuron)
	device := corev1.ResourceName(topology.ResourceNeuronDevice)
	core := corev1.ResourceName(topology.ResourceNeuronCore)
	for _, tc := range []struct {
		name string
		init []corev1.Container
		ctrs []corev1.Container
		want []Request
	}{
		{name: "no containers"},
		{
			name: "no neuron resources",
			ctrs: []corev1.Container{{Name: "a", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: qty(4)}}}},
		},
		{
			name: "limits",
			ctrs: []corev1.Container{{Name: "a", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{neuron: qty(4)}}}},
			want: []Request{{Container: "a", Resource: topology.ResourceNeuron, Count: 4}},
		},
		{
			name: "limits win over requests",
			ctrs: []corev1.Container{{Name: "a", Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{neuron: qty(2)}, Requests: corev1.ResourceList{neuron: qty(8)},
			}}},
			want: []Request{{Container: "a", Resource: topology.ResourceNeuron, Count: 2}},
		},
		{
			name: "requests when there is no limit",
			ctrs: []corev1.Container{{Name: "a", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{core: qty(3)}}}},
			want: []Request{{Container: "a", Resource: topology.ResourceNeuronCore, Count: 3}},
		},
		{
			name: "zero is no request",
			ctrs: []corev1.Container{{Name: "a", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{neuron: qty(0)}}}},
		},
		{
			name: "init containers first, then containers, in spec order",
			init: []corev1.Container{{Name: "init", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{core: qty(1)}}}},
			ctrs: []corev1.Container{
				{Name: "b", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{device: qty(2)}}},
				{Name: "sidecar"},
				{Name: "a", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{neuron: qty(1)}}},
			},
			want: []Request{
				{Container: "init", Resource: topology.ResourceNeuronCore, Count: 1},
				{Container: "b", Resource: topology.ResourceNeuronDevice, Count: 2},
				{Container: "a", Resource: topology.ResourceNeuron, Count: 1},
			},
		},
		{
			name: "several resources in one container, in topology.Resources order",
			ctrs: []corev1.Container{{Name: "a", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
				core: qty(2), neuron: qty(1), device: qty(4),
			}}}},
			want: []Request{
				{Container: "a", Resource: topology.ResourceNeuron, Count: 1},
				{Container: "a", Resource: topology.ResourceNeuronDevice, Count: 4},
				{Container: "a", Resource: topology.ResourceNeuronCore, Count: 2},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: corev1.PodSpec{InitContainers: tc.init, Containers: tc.ctrs}}
			before := len(pod.Spec.InitContainers)
			got := PodRequests(pod)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("PodRequests = %+v, want %+v", got, tc.want)
			}
			if len(pod.Spec.InitContainers) != before {
				t.Errorf("PodRequests changed the pod's init containers")
			}
		})
	}
}

const (
	trn1 = "trn1.32xlarge" // 16 devices, 2 cores each, 4x4 torus
	inf2 = "inf2.48xlarge" // 12 devices, 2 cores each, ring
)

func testShape(t *testing.T, name string) *topology.Shape {
	t.Helper()
	it, err := topology.DefaultCatalog().Get(name)
	if err != nil {
		t.Fatal(err)
	}
	s, err := topology.NewShape(it, 0)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

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

func seqInts(start, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = start + i
	}
	return out
}

func TestPlan(t *testing.T) {
	dev := func(c string, n int) Request {
		return Request{Container: c, Resource: topology.ResourceNeuron, Count: n}
	}
	cores := func(c string, n int) Request {
		return Request{Container: c, Resource: topology.ResourceNeuronCore, Count: n}
	}
	for _, tc := range []struct {
		name         string
		typ          string
		used         []int
		reqs         []Request
		policy       topology.Policy
		wantDevices  [][]int // per request, in request order; nil: do not check
		wantErr      string
		unresolve    bool
		insufficient bool
	}{
		{name: "no requests", typ: trn1, reqs: nil, wantDevices: [][]int{}},
		{name: "4 devices on an empty trn1: an aligned block", typ: trn1, reqs: []Request{dev("a", 4)}, wantDevices: [][]int{{0, 1, 2, 3}}},
		{name: "best fit fills the partly used 8-block", typ: trn1, used: []int{0, 1, 2, 3}, reqs: []Request{dev("a", 4)}, wantDevices: [][]int{{4, 5, 6, 7}}},
		{
			// Largest first: the 8-device request takes 0-7 before the 1-device request is
			// placed; the record still lists the small one first, as requested.
			name: "largest first, entries in request order", typ: trn1,
			reqs:        []Request{dev("small", 1), dev("big", 8)},
			wantDevices: [][]int{{8}, {0, 1, 2, 3, 4, 5, 6, 7}},
		},
		{
			// Free: the aligned block 4-7 and the lone device 8. In request order first-fit
			// would give the small request device 4 and leave no block for the big one.
			name: "largest first keeps the pod placeable", typ: trn1, policy: topology.FirstFit,
			used:        []int{0, 1, 2, 3, 9, 10, 11, 12, 13, 14, 15},
			reqs:        []Request{dev("small", 1), dev("big", 4)},
			wantDevices: [][]int{{8}, {4, 5, 6, 7}},
		},
		{name: "cores", typ: inf2, reqs: []Request{cores("a", 3)}, wantDevices: [][]int{nil}},
		{
			name: "7 devices on trn1 is unresolvable", typ: trn1, reqs: []Request{dev("a", 7)},
			wantErr:   "Instance type trn1.32xlarge does not support requests for device: 7. Please request a different number of devices.",
			unresolve: true,
		},
		{
			name: "an unsupported count in a multi-container pod is still unresolvable", typ: trn1,
			reqs:    []Request{dev("a", 1), dev("b", 7)},
			wantErr: "container b: Instance type trn1.32xlarge", unresolve: true,
		},
		{
			name: "a full node is insufficient, not unresolvable", typ: trn1, used: seqInts(0, 16),
			reqs: []Request{dev("a", 1)}, wantErr: "no free valid set of 1 device", insufficient: true,
		},
		{
			name: "together the requests do not fit", typ: inf2, used: seqInts(0, 8),
			reqs: []Request{dev("a", 4), dev("b", 1)}, wantErr: "container b: no free valid set", insufficient: true,
		},
		{name: "unknown resource", typ: trn1, reqs: []Request{{Container: "a", Resource: "nvidia.com/gpu", Count: 1}}, wantErr: "not a Neuron resource"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			policy := tc.policy
			if policy == "" {
				policy = topology.BestFit
			}
			u := usageWith(t, testShape(t, tc.typ), tc.used...)
			before := u.Clone()
			out, score, err := Plan(u, tc.reqs, policy)
			if !reflect.DeepEqual(u, before) {
				t.Errorf("Plan changed the usage")
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				var uc *topology.UnsupportedCountError
				if got := errors.As(err, &uc); got != tc.unresolve {
					t.Errorf("errors.As(UnsupportedCountError) = %v, want %v", got, tc.unresolve)
				}
				var ie *topology.InsufficientError
				if got := errors.As(err, &ie); got != tc.insufficient {
					t.Errorf("errors.As(InsufficientError) = %v, want %v", got, tc.insufficient)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(out) != len(tc.reqs) {
				t.Fatalf("%d entries for %d requests", len(out), len(tc.reqs))
			}
			for i, c := range out {
				r := tc.reqs[i]
				if c.Name != r.Container || c.Resource != r.Resource || c.Count() != r.Count {
					t.Errorf("entry %d = %+v for request %+v", i, c, r)
				}
				if tc.wantDevices[i] != nil && !slices.Equal(c.Devices, tc.wantDevices[i]) {
					t.Errorf("entry %d devices %v, want %v", i, c.Devices, tc.wantDevices[i])
				}
			}
			// The entries must be applicable together on the node: no device or core twice.
			check := u.Clone()
			for _, c := range out {
				var a topology.Allocation
				var err error
				if c.Resource == topology.ResourceNeuronCore {
					a, err = u.Shape().CoreAllocation(c.Cores)
				} else {
					a, err = u.Shape().DeviceAllocation(c.Devices)
				}
				if err == nil {
					err = check.Allocate(a)
				}
				if err != nil {
					t.Errorf("entry %+v: %v", c, err)
				}
			}
			if score < 0 || score > 100 {
				t.Errorf("score %v out of 0-100", score)
			}
			if len(tc.reqs) == 0 && score != 100 {
				t.Errorf("no requests: score %v, want 100", score)
			}
		})
	}
}

// TestPlanScoreIsTheMinimum checks that a pod's score is the lowest of its placements' scores.
func TestPlanScoreIsTheMinimum(t *testing.T) {
	s := testShape(t, trn1)
	u := usageWith(t, s, 0, 1, 2, 3)
	small := Request{Container: "small", Resource: topology.ResourceNeuron, Count: 1}
	big := Request{Container: "big", Resource: topology.ResourceNeuron, Count: 8}

	_, bigAlone, err := Plan(u, []Request{big}, topology.BestFit)
	if err != nil {
		t.Fatal(err)
	}
	out, both, err := Plan(u, []Request{small, big}, topology.BestFit)
	if err != nil {
		t.Fatal(err)
	}
	// The small one is placed second, on the usage after the big one.
	after := u.Clone()
	a, _ := s.DeviceAllocation(out[1].Devices)
	if err := after.Allocate(a); err != nil {
		t.Fatal(err)
	}
	fit, err := topology.BestFit.Place(after, topology.Request{Unit: topology.UnitDevice, Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	if want := math.Min(bigAlone, fit.Score); both != want {
		t.Errorf("score %v, want min(%v, %v) = %v", both, bigAlone, fit.Score, want)
	}
	if both > bigAlone {
		t.Errorf("adding a request raised the score from %v to %v", bigAlone, both)
	}
}

func TestCoresNeeded(t *testing.T) {
	shape := func(typ string, lnc int) *topology.Shape {
		it, err := topology.DefaultCatalog().Get(typ)
		if err != nil {
			t.Fatal(err)
		}
		s, err := topology.NewShape(it, lnc)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for _, tc := range []struct {
		name  string
		shape *topology.Shape
		reqs  []Request
		want  int
	}{
		{"none", shape("trn1.32xlarge", 0), nil, 0},
		{"cores count as themselves", shape("trn1.32xlarge", 0), []Request{{Resource: topology.ResourceNeuronCore, Count: 3}}, 3},
		{"devices: every core", shape("trn1.32xlarge", 0), []Request{{Resource: topology.ResourceNeuron, Count: 4}}, 8},
		{"neurondevice alike", shape("trn1.32xlarge", 0), []Request{{Resource: topology.ResourceNeuronDevice, Count: 1}}, 2},
		{"at LNC 2", shape("trn2.48xlarge", 0), []Request{{Resource: topology.ResourceNeuron, Count: 2}, {Resource: topology.ResourceNeuronCore, Count: 5}}, 13},
		{"at LNC 1", shape("trn2.48xlarge", 1), []Request{{Resource: topology.ResourceNeuron, Count: 2}, {Resource: topology.ResourceNeuronCore, Count: 5}}, 21},
		{"another resource counts as devices", shape("inf1.6xlarge", 0), []Request{{Resource: "example.com/gpu", Count: 1}}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := CoresNeeded(tc.shape, tc.reqs); got != tc.want {
				t.Errorf("CoresNeeded = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestTenths(t *testing.T) {
	for _, tc := range []struct {
		in   float64
		want int64
	}{
		{-50, 0}, {-0.1, 0}, {0, 0}, {9.99, 0}, {10, 1}, {55, 5}, {99.9, 9}, {100, 10}, {150, 10},
	} {
		if got := Tenths(tc.in); got != tc.want {
			t.Errorf("Tenths(%v) = %d, want %d", tc.in, got, tc.want)
		}
	}
	for _, s := range []float64{math.Inf(1), math.Inf(-1), math.NaN(), math.MaxFloat64, -math.MaxFloat64} {
		if got := Tenths(s); got < 0 || got > 10 {
			t.Errorf("Tenths(%v) = %d out of 0-10", s, got)
		}
	}
}
