package topology

import "slices"

// The placement algorithm as it was before the allocation-free rewrite, kept to check that the
// rewrite places every request exactly as it did.

func placeOld(p Policy, u *Usage, r Request) (Fit, error) {
	s := u.shape
	if err := s.Validate(r); err != nil {
		return Fit{}, err
	}
	e := newEvaluatorOld(u)
	best := candidateOld{start: -1}
	var bestVec []int
	consider := func(c candidateOld) {
		if best.start < 0 {
			best, bestVec = c.clone(), e.vector(c, nil)
			return
		}
		if p == FirstFit {
			if c.less(best) {
				best = c.clone()
			}
			return
		}
		vec := e.vector(c, e.scratchVec)
		cmp := slices.Compare(vec, bestVec)
		if cmp > 0 || (cmp == 0 && c.less(best)) {
			best = c.clone()
			bestVec = append(bestVec[:0], vec...)
		}
	}
	e.candidates(r, consider)
	if best.start < 0 {
		return Fit{}, &InsufficientError{
			InstanceType: s.Type.Name, Request: r,
			FreeDevices: u.FreeDevices(), FreeCores: u.FreeCores(),
			Hint: s.describeSets(r.Count),
		}
	}
	if bestVec == nil {
		bestVec = e.vector(best, nil)
	}
	fit := Fit{Allocation: e.allocation(best, r.Unit)}
	fit.Damage = e.damage(bestVec)
	fit.FreeAfter = float64(u.FreeCoreCount()-len(fit.Cores)) / float64(s.Cores())
	if p == BestFit {
		fit.Score = score(fit.Damage, fit.FreeAfter)
	}
	return fit, nil
}

// candidateOld is one valid free set: devices for a device request, or the core range
// [start, start+count) for a core request.
type candidateOld struct {
	devices []int // ascending
	start   int   // first core; -1 for "none"
	count   int   // cores, for core candidates; 0 for device candidates
}

func (c candidateOld) clone() candidateOld {
	c.devices = slices.Clone(c.devices)
	return c
}

// less orders candidates by their device ids, then core ids: the deterministic tie-break.
func (c candidateOld) less(o candidateOld) bool {
	if cmp := slices.Compare(c.devices, o.devices); cmp != 0 {
		return cmp < 0
	}
	return c.start < o.start
}

type evaluatorOld struct {
	u          *Usage
	s          *Shape
	full       uint64
	after      []uint64
	before     []int
	scratchVec []int
	sizes      []int // device sizes, descending, then core sizes cpd-1..1 (as negative numbers)
	devBuf     []int
}

func newEvaluatorOld(u *Usage) *evaluatorOld {
	s := u.shape
	e := &evaluatorOld{u: u, s: s, full: u.full(), after: make([]uint64, len(u.used))}
	for i := len(s.deviceSizes) - 1; i >= 0; i-- {
		e.sizes = append(e.sizes, s.deviceSizes[i])
	}
	for k := s.CoresPerDevice - 1; k >= 1; k-- {
		e.sizes = append(e.sizes, -k)
	}
	e.scratchVec = make([]int, len(e.sizes))
	copy(e.after, u.used)
	e.before = e.capability(e.after, nil)
	return e
}

// candidates calls yield for every valid set of the request that is free now.
func (e *evaluatorOld) candidates(r Request, yield func(candidateOld)) {
	s, u := e.s, e.u
	n := s.Devices()
	if r.Unit == UnitCore {
		cpd := s.CoresPerDevice
		want := s.DevicesNeeded(r)
		for start := 0; start+r.Count <= s.Cores(); start++ {
			first, last := start/cpd, (start+r.Count-1)/cpd
			if last-first+1 != want {
				continue
			}
			free := true
			for d := first; d <= last && free; d++ {
				lo, hi := 0, cpd-1
				if d == first {
					lo = start % cpd
				}
				if d == last {
					hi = (start + r.Count - 1) % cpd
				}
				mask := uint64(1)<<(hi+1) - uint64(1)<<lo
				free = u.used[d]&mask == 0
			}
			if !free {
				continue
			}
			e.devBuf = e.devBuf[:0]
			for d := first; d <= last; d++ {
				e.devBuf = append(e.devBuf, d)
			}
			if want > 1 && !s.IsValidDeviceSet(e.devBuf) {
				continue
			}
			yield(candidateOld{devices: e.devBuf, start: start, count: r.Count})
		}
		return
	}
	k := r.Count
	emit := func(devs []int) {
		for _, d := range devs {
			if u.used[d] != 0 {
				return
			}
		}
		yield(candidateOld{devices: devs, start: devs[0] * s.CoresPerDevice})
	}
	switch {
	case k == n:
		emit(seqOld(0, n))
	case k == 1:
		for d := range n {
			emit([]int{d})
		}
	case s.Kind() == KindTorus:
		for start := 0; start < n; start += k {
			emit(seqOld(start, k))
		}
	case s.Kind() == KindChain || s.Kind() == KindRing:
		last := n - k
		if s.Kind() == KindRing {
			last = n - 1
		}
		order := s.graph.order
		for p := 0; p <= last; p++ {
			devs := make([]int, k)
			for i := range k {
				devs[i] = order[(p+i)%n]
			}
			slices.Sort(devs)
			emit(devs)
		}
	case s.Kind() == KindSwitched:
		// Every subset is valid and every free device is alike: take the lowest free ones.
		devs := make([]int, 0, k)
		for d := 0; d < n && len(devs) < k; d++ {
			if u.used[d] == 0 {
				devs = append(devs, d)
			}
		}
		if len(devs) == k {
			emit(devs)
		}
	}
}

func seqOld(start, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = start + i
	}
	return out
}

func (e *evaluatorOld) allocation(c candidateOld, unit Unit) Allocation {
	a := Allocation{Unit: unit, Devices: slices.Clone(c.devices), Cores: []int{}}
	if unit == UnitDevice {
		for _, d := range c.devices {
			a.Cores = append(a.Cores, e.s.CoresOf(d)...)
		}
		return a
	}
	for i := range c.count {
		a.Cores = append(a.Cores, c.start+i)
	}
	return a
}

// vector returns the node's capability after placing c (into buf when it is large enough).
func (e *evaluatorOld) vector(c candidateOld, buf []int) []int {
	copy(e.after, e.u.used)
	cpd := e.s.CoresPerDevice
	if c.count == 0 {
		for _, d := range c.devices {
			e.after[d] = e.full
		}
	} else {
		for i := range c.count {
			core := c.start + i
			e.after[core/cpd] |= 1 << (core % cpd)
		}
	}
	return e.capability(e.after, buf)
}

// capability counts, for each set size from the largest down, how many disjoint free sets of
// that size the node could still give: whole-device sets first (ring and chain segments,
// aligned torus blocks, free devices), then core runs inside partly used devices. Comparing two
// vectors lexicographically prefers the state that keeps larger sets free.
func (e *evaluatorOld) capability(used []uint64, buf []int) []int {
	if cap(buf) < len(e.sizes) {
		buf = make([]int, len(e.sizes))
	}
	buf = buf[:len(e.sizes)]
	clear(buf)
	s := e.s
	n := len(used)
	free := 0
	for _, m := range used {
		if m == 0 {
			free++
		}
	}
	nd := len(s.deviceSizes)
	switch s.Kind() {
	case KindChain, KindRing:
		order := s.graph.order
		addRun := func(length int) {
			for i := range nd {
				buf[i] += length / e.sizes[i]
			}
		}
		if free == n {
			addRun(n)
			break
		}
		// Start after a used device so that a ring's wrapping segment is counted once.
		start := 0
		if s.Kind() == KindRing {
			for used[order[start]] == 0 {
				start++
			}
		}
		run := 0
		for i := range n {
			if used[order[(start+i)%n]] == 0 {
				run++
				continue
			}
			addRun(run)
			run = 0
		}
		addRun(run)
	case KindTorus:
		for i := range nd {
			size := e.sizes[i]
			for b := 0; b < n; b += size {
				blockFree := true
				for d := b; d < b+size; d++ {
					if used[d] != 0 {
						blockFree = false
						break
					}
				}
				if blockFree {
					buf[i]++
				}
			}
		}
	default:
		for i := range nd {
			buf[i] = free / e.sizes[i]
		}
	}
	cpd := s.CoresPerDevice
	for _, m := range used {
		if m == 0 || m == e.full {
			continue
		}
		run := 0
		for k := 0; k <= cpd; k++ {
			if k < cpd && m&(1<<k) == 0 {
				run++
				continue
			}
			for i := nd; i < len(e.sizes); i++ {
				buf[i] += run / -e.sizes[i]
			}
			run = 0
		}
	}
	return buf
}

// damage is the size, in devices, of the largest set size whose count the placement reduced.
func (e *evaluatorOld) damage(after []int) float64 {
	for i, size := range e.sizes {
		if after[i] < e.before[i] {
			if size < 0 {
				return float64(-size) / float64(e.s.CoresPerDevice)
			}
			return float64(size)
		}
	}
	return 0
}
