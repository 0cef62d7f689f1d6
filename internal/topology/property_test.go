package topology

import (
	"cmp"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
)

// bruteForceFits lists every valid set of the request that is free, straight from the rules
// (IsValidDeviceSet over all subsets of the size; every contiguous core range), without the
// enumerator Place uses.
func bruteForceFits(u *Usage, r Request) [][]int {
	s := u.Shape()
	var out [][]int
	if r.Unit == UnitCore {
		cpd := s.CoresPerDevice
		want := (r.Count + cpd - 1) / cpd
		for start := 0; start+r.Count <= s.Cores(); start++ {
			cores := seq(start, r.Count)
			free := true
			var devs []int
			for _, c := range cores {
				free = free && u.CoreFree(c)
				if d := s.DeviceOf(c); !slices.Contains(devs, d) {
					devs = append(devs, d)
				}
			}
			if free && len(devs) == want && s.IsValidDeviceSet(devs) {
				out = append(out, cores)
			}
		}
		return out
	}
	n := s.Devices()
	var rec func(start int, cur []int)
	rec = func(start int, cur []int) {
		if len(out) > 0 && s.Kind() == KindSwitched {
			return // any subset is valid there; one is enough to know it fits
		}
		if len(cur) == r.Count {
			if s.IsValidDeviceSet(cur) {
				out = append(out, slices.Clone(cur))
			}
			return
		}
		for d := start; d < n; d++ {
			if u.DeviceFree(d) {
				rec(d+1, append(cur, d))
			}
		}
	}
	rec(0, nil)
	return out
}

// TestPropertyRandomSequences allocates and releases at random on every instance type under
// both policies and checks: no core is handed out twice, every chosen set is valid and was
// free, Place refuses only when nothing fits, and releasing restores the state exactly.
func TestPropertyRandomSequences(t *testing.T) {
	cat := DefaultCatalog()
	for _, it := range cat.Types() {
		lncs := []int{0}
		if it.LNCConfigurable {
			lncs = []int{1, 2}
		}
		for _, lnc := range lncs {
			for _, p := range Policies {
				s, err := NewShape(it, lnc)
				if err != nil {
					t.Fatal(err)
				}
				t.Run(it.Name+"/"+string(p), func(t *testing.T) {
					rng := rand.New(rand.NewPCG(uint64(len(it.Name)), uint64(lnc)))
					u := NewUsage(s)
					owner := make([]int, s.Cores()) // 0 free, else allocation number
					var live []Allocation
					steps := 300
					if testing.Short() {
						steps = 80
					}
					for step := 1; step <= steps; step++ {
						if len(live) > 0 && rng.IntN(3) == 0 {
							i := rng.IntN(len(live))
							before := slices.Clone(u.used)
							a := live[i]
							if err := u.Release(a); err != nil {
								t.Fatalf("step %d: release %v: %v", step, a, err)
							}
							for _, c := range a.Cores {
								owner[c] = 0
							}
							if err := u.Release(a); err == nil {
								t.Fatalf("step %d: releasing %v twice succeeded", step, a.Cores)
							}
							if err := u.Allocate(a); err != nil {
								t.Fatalf("step %d: re-allocate after release: %v", step, err)
							}
							if !slices.Equal(u.used, before) {
								t.Fatalf("step %d: release+allocate did not restore the state", step)
							}
							if err := u.Release(a); err != nil {
								t.Fatal(err)
							}
							live = slices.Delete(live, i, i+1)
							continue
						}
						r := Request{Unit: UnitDevice, Count: 1 + rng.IntN(s.Devices())}
						if rng.IntN(2) == 0 {
							r = Request{Unit: UnitCore, Count: 1 + rng.IntN(min(s.Cores(), 3*s.CoresPerDevice))}
						}
						fit, err := p.Place(u, r)
						var uc *UnsupportedCountError
						var ie *InsufficientError
						switch {
						case errors.As(err, &uc):
							if s.Validate(r) == nil {
								t.Fatalf("step %d: %v refused as unsupported but Validate accepts it", step, r)
							}
							continue
						case errors.As(err, &ie):
							if fits := bruteForceFits(u, r); len(fits) > 0 {
								t.Fatalf("step %d: %v refused but %v fits", step, r, fits[0])
							}
							continue
						case err != nil:
							t.Fatalf("step %d: %v", step, err)
						}
						a := fit.Allocation
						if r.Unit == UnitDevice && len(a.Devices) != r.Count || r.Unit == UnitCore && len(a.Cores) != r.Count {
							t.Fatalf("step %d: %v got %v", step, r, a)
						}
						if !s.IsValidDeviceSet(a.Devices) {
							t.Fatalf("step %d: %v got invalid device set %v", step, r, a.Devices)
						}
						if !slices.IsSorted(a.Devices) || !slices.IsSorted(a.Cores) {
							t.Fatalf("step %d: ids not ascending: %v", step, a)
						}
						if r.Unit == UnitCore {
							if a.Cores[len(a.Cores)-1]-a.Cores[0] != len(a.Cores)-1 {
								t.Fatalf("step %d: cores %v not contiguous", step, a.Cores)
							}
							if len(a.Devices) != (r.Count+s.CoresPerDevice-1)/s.CoresPerDevice {
								t.Fatalf("step %d: %d cores on %d devices", step, r.Count, len(a.Devices))
							}
						}
						for _, c := range a.Cores {
							if owner[c] != 0 {
								t.Fatalf("step %d: core %d handed out twice", step, c)
							}
							owner[c] = step
						}
						if err := u.Allocate(a); err != nil {
							t.Fatalf("step %d: allocate %v: %v", step, a, err)
						}
						if err := u.Allocate(a); err == nil {
							t.Fatalf("step %d: allocating %v twice succeeded", step, a)
						}
						live = append(live, a)
					}
					for _, a := range live {
						if err := u.Release(a); err != nil {
							t.Fatal(err)
						}
					}
					if u.FreeCoreCount() != s.Cores() {
						t.Fatalf("after releasing everything %d of %d cores are free", u.FreeCoreCount(), s.Cores())
					}
				})
			}
		}
	}
}

// TestBestFitNeverWorseThanAlternatives checks, on random states, that the set best-fit picks
// leaves a capability vector at least as good as every other valid free set.
func TestBestFitIsOptimalByItsMeasure(t *testing.T) {
	for _, name := range []string{"inf2.48xlarge", "trn1.32xlarge", "inf1.6xlarge", "trn2.48xlarge"} {
		s := shapeOf(t, name, 0)
		rng := rand.New(rand.NewPCG(7, 11))
		for trial := range 200 {
			u := NewUsage(s)
			for _, c := range rng.Perm(s.Cores())[:rng.IntN(s.Cores())] {
				_ = u.MarkCores([]int{c})
			}
			r := Request{Unit: UnitCore, Count: s.CoreSizes()[rng.IntN(len(s.CoreSizes()))]}
			if trial%2 == 0 {
				r = Request{Unit: UnitDevice, Count: s.DeviceSizes()[rng.IntN(len(s.DeviceSizes()))]}
			}
			fit, err := BestFit.Place(u, r)
			if err != nil {
				continue
			}
			e := &evaluator{}
			e.init(u)
			e.initVectors()
			fc := toCandidate(s, fit.Allocation)
			chosen := make([]int, len(e.before))
			e.vectorOf(&fc, chosen)
			chosenDev, chosenCore := e.keysOf(&fc)
			v := make([]int, len(e.before))
			for _, alt := range bruteForceFits(u, r) {
				var a Allocation
				if r.Unit == UnitCore {
					a, _ = s.CoreAllocation(alt)
				} else {
					a, _ = s.DeviceAllocation(alt)
				}
				ac := toCandidate(s, a)
				e.vectorOf(&ac, v)
				vecCmp := slices.Compare(v, chosen)
				if vecCmp > 0 {
					t.Fatalf("%s %v: best-fit chose %v (%v) but %v leaves %v", name, r, fit.Allocation, chosen, alt, v)
				}
				// The packed keys order the two placements as their vectors do.
				dev, core := e.keysOf(&ac)
				keyCmp := cmp.Compare(dev, chosenDev)
				if keyCmp == 0 {
					keyCmp = cmp.Compare(core, chosenCore)
				}
				if keyCmp != vecCmp {
					t.Fatalf("%s %v: the keys of %v and %v compare %d, their vectors %v and %v %d", name, r, alt, fit.Allocation, keyCmp, v, chosen, vecCmp)
				}
			}
		}
	}
}

func toCandidate(s *Shape, a Allocation) candidate {
	if a.Unit == UnitCore {
		return candidate{devices: a.Devices, start: a.Cores[0], count: len(a.Cores)}
	}
	return candidate{devices: a.Devices, start: a.Devices[0] * s.CoresPerDevice}
}
