package topology

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
)

// equivalenceShapes is every catalog type at every LNC it accepts, plus shapes the catalog does
// not have: a ring whose link order is not the id order, a ring larger than the evaluator's
// inline buffers, and a switched node with 64 cores per device.
func equivalenceShapes(t *testing.T) map[string]*Shape {
	t.Helper()
	out := map[string]*Shape{}
	for _, it := range DefaultCatalog().Types() {
		for lnc := 1; lnc <= it.PhysicalCoresPerDevice; lnc++ {
			if it.CheckLNC(lnc) != nil {
				continue
			}
			s, err := NewShape(it, lnc)
			if err != nil {
				t.Fatal(err)
			}
			out[fmt.Sprintf("%s/lnc%d", it.Name, lnc)] = s
		}
	}
	inf2, err := DefaultCatalog().Get("inf2.48xlarge")
	if err != nil {
		t.Fatal(err)
	}
	perm := rand.New(rand.NewPCG(3, 5)).Perm(inf2.Devices)
	adj := make([][]int, inf2.Devices)
	for i, d := range perm {
		next, prev := perm[(i+1)%len(perm)], perm[(i+len(perm)-1)%len(perm)]
		adj[d] = []int{next, prev}
	}
	g, err := NewGraph(adj)
	if err != nil {
		t.Fatal(err)
	}
	if out["inf2.48xlarge/permuted-links"], err = NewShapeWithGraph(inf2, 0, g); err != nil {
		t.Fatal(err)
	}
	for _, it := range []InstanceType{
		{Name: "big-ring", Devices: 20, PhysicalCoresPerDevice: 4, DefaultLNC: 1, Topology: KindRing},
		{Name: "big-chain", Devices: 18, PhysicalCoresPerDevice: 2, DefaultLNC: 1, Topology: KindChain},
		{Name: "switched-64", Devices: 4, PhysicalCoresPerDevice: 64, DefaultLNC: 1, Topology: KindSwitched},
	} {
		if out[it.Name], err = NewShape(it, 0); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestPlaceMatchesOldAlgorithm checks that Place and PlaceInto choose what the previous
// algorithm (placeOld) chose, with the same damage, score and errors, over random usages of
// every shape, every request count the shape accepts and a few it does not, under both policies.
func TestPlaceMatchesOldAlgorithm(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 1))
	compared := 0
	for name, s := range equivalenceShapes(t) {
		var reqs []Request
		for _, n := range s.DeviceSizes() {
			reqs = append(reqs, Request{Unit: UnitDevice, Count: n})
		}
		// Every core count when there are few, else an even sample with the largest.
		sizes := s.CoreSizes()
		step := max(len(sizes)/24, 1)
		for i, n := range sizes {
			if i%step == 0 || i == len(sizes)-1 {
				reqs = append(reqs, Request{Unit: UnitCore, Count: n})
			}
		}
		reqs = append(reqs, Request{Unit: UnitDevice, Count: 0}, Request{Unit: UnitCore, Count: s.Cores() + 1})
		if s.Devices() > 2 && !slicesContains(s.DeviceSizes(), 3) {
			reqs = append(reqs, Request{Unit: UnitDevice, Count: 3})
		}
		var reused Fit
		var placer Placer
		for trial := range 18 {
			u := NewUsage(s)
			// Densities from empty to nearly full, mixing whole devices and single cores.
			density := float64(trial%6) / 6
			for d := range s.Devices() {
				switch x := rng.Float64(); {
				case x < density/2:
					_ = u.MarkDevices([]int{d})
				case x < density:
					for k := range s.CoresPerDevice {
						if rng.IntN(2) == 0 {
							_ = u.MarkCores([]int{d*s.CoresPerDevice + k})
						}
					}
				}
			}
			for _, r := range reqs {
				for _, p := range Policies {
					want, wantErr := placeOld(p, u, r)
					got, gotErr := p.Place(u, r)
					intoErr := p.PlaceInto(u, r, &reused)
					var placed Fit
					if err := placer.Place(p, u, r, &placed); fmt.Sprint(err) != fmt.Sprint(wantErr) || (err == nil && !reflect.DeepEqual(placed, reused)) {
						t.Fatalf("%s %v %s: the Placer gave %+v, %v; PlaceInto %+v, %v", name, r, p, placed, err, reused, intoErr)
					}
					if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) || reflect.TypeOf(gotErr) != reflect.TypeOf(wantErr) || fmt.Sprint(intoErr) != fmt.Sprint(wantErr) {
						t.Fatalf("%s %v %s on %v: error %v (into: %v), the old algorithm %v", name, r, p, u.UsedCores(), gotErr, intoErr, wantErr)
					}
					tried := Fit{Score: -1}
					o := placer.TryPlace(p, u, r, &tried)
					if err := o.Err(u, r); fmt.Sprint(err) != fmt.Sprint(wantErr) || reflect.TypeOf(err) != reflect.TypeOf(wantErr) || o != outcomeOf(wantErr) {
						t.Fatalf("%s %v %s on %v: TryPlace %v, its error %v; the old algorithm %v", name, r, p, u.UsedCores(), o, err, wantErr)
					}
					if o != Fits && !reflect.DeepEqual(tried, Fit{Score: -1}) {
						t.Fatalf("%s %v %s: TryPlace changed the fit to %+v without a fit", name, r, p, tried)
					}
					if o == Fits && !reflect.DeepEqual(tried, reused) {
						t.Fatalf("%s %v %s: TryPlace placed %+v, PlaceInto %+v", name, r, p, tried, reused)
					}
					if wantErr != nil {
						continue
					}
					if p == FirstFit {
						// The old algorithm reported, under first-fit, the damage of the first
						// candidate it met rather than of the one it chose; compare with the
						// damage of the chosen set as the old evaluator counts it.
						eo := newEvaluatorOld(u)
						c := candidateOld{devices: want.Devices, start: want.Cores[0]}
						if r.Unit == UnitCore {
							c.count = len(want.Cores)
						}
						want.Damage = eo.damage(eo.vector(c, nil))
					}
					if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(reused, want) {
						t.Fatalf("%s %v %s on %v: placed %+v (into: %+v), the old algorithm %+v", name, r, p, u.UsedCores(), got, reused, want)
					}
					compared++
				}
			}
		}
	}
	if compared < 5000 {
		t.Fatalf("only %d placements compared", compared)
	}
	t.Logf("%d placements compared", compared)
}

// outcomeOf is the outcome that Place's error err stands for.
func outcomeOf(err error) Outcome {
	var ie *InsufficientError
	switch {
	case err == nil:
		return Fits
	case errors.As(err, &ie):
		return NoFreeSet
	}
	return NotAccepted
}

func slicesContains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestPlaceIntoDoesNotAllocate holds the steady-state budget: a Placer placing into a reused
// Fit on a 16-device node allocates nothing.
func TestPlaceIntoDoesNotAllocate(t *testing.T) {
	for _, tc := range benchCases {
		u := benchUsage(t, tc.instance, tc.lnc)
		for _, p := range Policies {
			var fit Fit
			var pl Placer
			if err := pl.Place(p, u, tc.req, &fit); err != nil {
				t.Fatal(err)
			}
			allocs := testing.AllocsPerRun(100, func() {
				if err := pl.Place(p, u, tc.req, &fit); err != nil {
					t.Fatal(err)
				}
			})
			if allocs != 0 {
				t.Errorf("%s %v %s: %v allocations per placement, want 0", tc.instance, tc.req, p, allocs)
			}
		}
	}
}

// TestTryPlaceDoesNotAllocate holds the budget for a node the request does not fit: a Placer
// that only asks whether it fits allocates nothing, whether the count is never accepted or no
// valid set is free, and its outcome's error is the message Place gives.
func TestTryPlaceDoesNotAllocate(t *testing.T) {
	full := NewUsage(shapeOf(t, "trn1.32xlarge", 0))
	if err := full.MarkDevices(seq(0, 16)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		u    *Usage
		r    Request
		want Outcome
		msg  string
	}{
		{"unsupported count", benchUsage(t, "trn1.32xlarge", 0), Request{Unit: UnitDevice, Count: 7}, NotAccepted,
			"Instance type trn1.32xlarge does not support requests for device: 7. Please request a different number of devices."},
		{"no free set", full, Request{Unit: UnitDevice, Count: 4}, NoFreeSet,
			"no free valid set of 4 devices on this trn1.32xlarge node (free devices: none); 4-device sets must be one of 0-3, 4-7, 8-11, 12-15"},
		{"no free set on a half-used node", benchUsage(t, "trn2.48xlarge", 1), Request{Unit: UnitDevice, Count: 8}, NoFreeSet,
			"no free valid set of 8 devices on this trn2.48xlarge node (free devices: 0,3,4,8-11); 8-device sets must be one of 0-7, 8-15"},
		{"fits", benchUsage(t, "trn2.48xlarge", 1), Request{Unit: UnitCore, Count: 3}, Fits, "<nil>"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, p := range Policies {
				var fit Fit
				var pl Placer
				if o := pl.TryPlace(p, tc.u, tc.r, &fit); o != tc.want {
					t.Fatalf("%s: outcome %v, want %v", p, o, tc.want)
				}
				if got := fmt.Sprint(p.TryPlace(tc.u, tc.r, &fit).Err(tc.u, tc.r)); got != tc.msg {
					t.Errorf("%s: error %q, want %q", p, got, tc.msg)
				}
				allocs := testing.AllocsPerRun(100, func() {
					if o := pl.TryPlace(p, tc.u, tc.r, &fit); o != tc.want {
						t.Fatalf("%s: outcome %v, want %v", p, o, tc.want)
					}
				})
				if allocs != 0 {
					t.Errorf("%s: %v allocations per decision, want 0", p, allocs)
				}
			}
		})
	}
}

// TestValidRunMatchesIsValidDeviceSet checks the shortcut the core-range walk uses for runs of
// consecutive device ids against the rules' own check, on every shape of the equivalence test.
func TestValidRunMatchesIsValidDeviceSet(t *testing.T) {
	for name, s := range equivalenceShapes(t) {
		for n := 1; n <= s.Devices(); n++ {
			for first := 0; first+n <= s.Devices(); first++ {
				if got, want := s.validRun(first, n), s.IsValidDeviceSet(seq(first, n)); got != want {
					t.Errorf("%s: validRun(%d, %d) = %v, IsValidDeviceSet = %v", name, first, n, got, want)
				}
			}
		}
	}
}
