package topology

import (
	"fmt"
	"slices"
	"sync"
)

// Policy chooses one valid set among those that fit.
type Policy string

// Policies.
const (
	// BestFit leaves the node least fragmented: partly used blocks and devices first, free
	// segments split as little as possible. The default.
	BestFit Policy = "best-fit"
	// FirstFit takes the lowest-index valid set, as the published Neuron scheduler extension does.
	FirstFit Policy = "first-fit"
)

// Policies lists the placement policies.
var Policies = []Policy{BestFit, FirstFit}

// ParsePolicy parses a policy name.
func ParsePolicy(s string) (Policy, error) {
	switch Policy(s) {
	case BestFit, FirstFit:
		return Policy(s), nil
	}
	return "", fmt.Errorf("unknown placement policy %q: use %s or %s", s, BestFit, FirstFit)
}

// Fit is where a request goes on one node, and how well it fits there.
type Fit struct {
	Allocation
	// Damage is the size, in devices, of the largest free structure the placement breaks: the
	// free ring segment or aligned block it takes from, or a fraction of a device when it only
	// fills part of a partly used device. Smaller is tighter.
	Damage float64
	// FreeAfter is the fraction of the node's cores still free after the placement.
	FreeAfter float64
	// Score ranks nodes for the request, 0 to 100, higher first. Under best-fit it orders nodes
	// by Damage, then by FreeAfter (tightest fit first); under first-fit every node that fits
	// scores 0 and the first node in order wins.
	Score float64
}

// maxScoredDamage is the damage at which the best-fit score bottoms out (a whole 16-device node
// is 16; 17 keeps it above 0).
const maxScoredDamage = 17

func score(damage, freeAfter float64) float64 {
	// Damage differences are at least 1/coresPerDevice of a device (1/8 on trn2 at LNC 1):
	// 99/17/8 = 0.73 per step, so the FreeAfter term (at most 0.7) only breaks ties.
	return 100 - 99*min(damage, maxScoredDamage)/maxScoredDamage - 0.7*freeAfter
}

// Place chooses where the request goes on the node under policy p. It returns an
// *UnsupportedCountError when the instance type never accepts the count, and an
// *InsufficientError when no valid set is free now. Place does not change u.
func (p Policy) Place(u *Usage, r Request) (Fit, error) {
	var fit Fit
	if err := p.PlaceInto(u, r, &fit); err != nil {
		return Fit{}, err
	}
	return fit, nil
}

// PlaceInto is Place writing the result into dst, reusing the capacity of dst.Devices and
// dst.Cores. Its scratch space comes from a pool, so that in steady state it allocates nothing;
// a caller that owns a Placer per goroutine avoids the pool too.
func (p Policy) PlaceInto(u *Usage, r Request, dst *Fit) error {
	e := evaluators.Get().(*evaluator)
	defer putEvaluator(e)
	return e.place(p, u, r, dst)
}

// Placer holds the scratch space of placement decisions, for a caller that makes many of them:
// after the first decision on a node of a given size it allocates nothing. The zero value is
// ready to use. A Placer is not safe for concurrent use.
type Placer struct {
	e evaluator
}

// Place is p.PlaceInto using the Placer's scratch space.
func (pl *Placer) Place(p Policy, u *Usage, r Request, dst *Fit) error {
	defer func() { pl.e.u, pl.e.s = nil, nil }()
	return pl.e.place(p, u, r, dst)
}

// place is PlaceInto on this evaluator. On error dst is left unchanged.
func (e *evaluator) place(p Policy, u *Usage, r Request, dst *Fit) error {
	return e.decide(p, u, r, dst).Err(u, r)
}

// decide is place without building an error. Unless the outcome is Fits, dst is left unchanged.
func (e *evaluator) decide(p Policy, u *Usage, r Request, dst *Fit) Outcome {
	s := u.shape
	if !s.accepts(r) {
		return NotAccepted
	}
	e.init(u)
	if !e.packed {
		e.initVectors()
	}
	found := false
	if r.Unit == UnitCore {
		found = e.coreCandidates(p, r)
	} else {
		found = e.deviceCandidates(p, r)
	}
	if !found {
		return NoFreeSet
	}
	dst.Damage = e.bestDamage()
	dst.Unit = r.Unit
	dst.Devices = append(dst.Devices[:0], e.best.devices...)
	dst.Cores = dst.Cores[:0]
	if dst.Cores == nil {
		dst.Cores = []int{}
	}
	cpd := s.CoresPerDevice
	if r.Unit == UnitDevice {
		for _, d := range e.best.devices {
			for k := range cpd {
				dst.Cores = append(dst.Cores, d*cpd+k)
			}
		}
	} else {
		for i := range e.best.count {
			dst.Cores = append(dst.Cores, e.best.start+i)
		}
	}
	dst.FreeAfter = float64(u.FreeCoreCount()-len(dst.Cores)) / float64(s.Cores())
	dst.Score = 0
	if p == BestFit {
		dst.Score = score(dst.Damage, dst.FreeAfter)
	}
	return Fits
}

// candidate is one valid free set: devices for a device request, or the core range
// [start, start+count) for a core request.
type candidate struct {
	devices []int // ascending
	start   int   // first core; -1 for "none"
	count   int   // cores, for core candidates; 0 for device candidates
}

// less orders candidates by their device ids, then core ids: the deterministic tie-break.
func (c *candidate) less(o *candidate) bool {
	if cmp := slices.Compare(c.devices, o.devices); cmp != 0 {
		return cmp < 0
	}
	return c.start < o.start
}

// evaluator scores the candidates of one request on one node. Evaluators are pooled and keep
// their buffers between uses, so that placing in steady state allocates nothing.
type evaluator struct {
	u     *Usage
	s     *Shape
	full  uint64
	after []uint64 // the usage after the candidate under evaluation
	// before is the capability now; devPart a scratch buffer for the whole-device part.
	before, devPart, vec, bestVec []int
	sizes                         []int // device sizes, descending, then core sizes cpd-1..1 (as negative numbers)
	devBuf, bestDevs              []int
	best                          candidate
	// bestHasVec says the best candidate's capability after it is known: bestVec, or bestDev
	// and bestCore when packed.
	bestHasVec bool
	// devPartFor is the set of free devices (bit d: device d) that the candidate whose
	// whole-device part devPart holds took; devPartOK says devPart is valid. Neighbouring core
	// candidates often take the same free device, and then share it.
	devPartFor uint64
	devPartOK  bool
	// packed says the shape has packed keys and candidates are compared by them: free is the
	// free-device mask now (Shape.freeBit), dev and core the keys now, bestDev and bestCore the
	// keys after the best candidate. tookMemo and devMemo remember the
	// device key of the last free devices taken (memoOK: valid).
	packed            bool
	free              uint64
	dev, core         uint64
	bestDev, bestCore uint64
	tookMemo, devMemo uint64
	memoOK            bool
}

var evaluators = sync.Pool{New: func() any { return new(evaluator) }}

// getEvaluator returns a pooled evaluator set up for u; return it with putEvaluator.
func getEvaluator(u *Usage) *evaluator {
	e := evaluators.Get().(*evaluator)
	e.init(u)
	e.initVectors()
	return e
}

func putEvaluator(e *evaluator) {
	e.u, e.s, e.best = nil, nil, candidate{}
	evaluators.Put(e)
}

// sized returns buf resliced to length n, reallocated only when too small.
func sized[T any](buf []T, n int) []T {
	if cap(buf) < n {
		return make([]T, n)
	}
	return buf[:n]
}

// init sets the evaluator up for u: with packed keys when the shape has them (the vectors
// then need initVectors).
func (e *evaluator) init(u *Usage) {
	s := u.shape
	n := len(u.used)
	e.u, e.s, e.full, e.sizes = u, s, u.full(), s.sizes
	e.best = candidate{start: -1}
	e.bestHasVec = false
	e.devPartOK, e.memoOK = false, false
	e.devBuf, e.bestDevs = sized(e.devBuf, n)[:0], sized(e.bestDevs, n)[:0]
	e.packed = s.keys != nil
	if !e.packed {
		return
	}
	e.free, e.core = 0, 0
	for d, m := range u.used {
		if m == 0 {
			e.free |= s.freeBit(d)
		}
		e.core += s.keys.core[m]
	}
	e.dev = s.deviceKey(e.free)
}

// initVectors sets up the capability vector now and the buffers of the vectors.
func (e *evaluator) initVectors() {
	u := e.u
	nsizes := len(e.sizes)
	e.after = sized(e.after, len(u.used))
	e.before, e.devPart = sized(e.before, nsizes), sized(e.devPart, nsizes)
	e.vec, e.bestVec = sized(e.vec, nsizes), sized(e.bestVec, nsizes)
	copy(e.after, u.used)
	e.capability(e.after, e.before)
}

// consider keeps c when it beats the best so far under policy p.
func (e *evaluator) consider(p Policy, c *candidate) {
	if e.packed {
		e.considerKeys(p, c)
		return
	}
	if e.best.start >= 0 {
		if p == FirstFit {
			if c.less(&e.best) {
				e.keep(c, false)
			}
			return
		}
		e.vectorOf(c, e.vec)
		cmp := slices.Compare(e.vec, e.bestVec)
		if cmp > 0 || (cmp == 0 && c.less(&e.best)) {
			e.keep(c, true)
		}
		return
	}
	if p == FirstFit {
		e.keep(c, false)
		return
	}
	e.vectorOf(c, e.vec)
	e.keep(c, true)
}

func (e *evaluator) keep(c *candidate, withVec bool) {
	e.bestDevs = append(e.bestDevs[:0], c.devices...)
	e.best = candidate{devices: e.bestDevs, start: c.start, count: c.count}
	e.bestHasVec = withVec
	if withVec {
		copy(e.bestVec, e.vec)
	}
}

// coreCandidates considers every free valid core range of the request and reports whether
// there was one. It walks the ranges by first device, then by first core within it: the order
// of candidate.less, so that under first-fit the first free range is the choice.
func (e *evaluator) coreCandidates(p Policy, r Request) bool {
	s, u := e.s, e.u
	cpd := s.CoresPerDevice
	want := s.DevicesNeeded(r)
	if e.packed && p == BestFit {
		if want == 1 {
			return e.bestCoresOnOneDevice(r.Count)
		}
		return e.bestCoresOverDevices(want, r.Count)
	}
	// A range over exactly want devices starts at most this far into its first device.
	lastOffset := min(cpd-1, want*cpd-r.Count)
	for first := 0; first+want <= s.Devices(); first++ {
		last := first + want - 1
		e.devBuf = e.devBuf[:0]
		for d := first; d <= last; d++ {
			e.devBuf = append(e.devBuf, d)
		}
		if want > 1 && !s.validRun(first, want) {
			continue
		}
		for start := first * cpd; start <= first*cpd+lastOffset; start++ {
			free := true
			for d := first; d <= last && free; d++ {
				free = u.used[d]&e.coreMask(d, first, last, start, r.Count) == 0
			}
			if !free {
				continue
			}
			c := candidate{devices: e.devBuf, start: start, count: r.Count}
			e.consider(p, &c)
			if p == FirstFit {
				return true
			}
		}
	}
	return e.best.start >= 0
}

// coreMask is the bits of device d that the core range [start, start+count) over devices
// first..last takes.
func (e *evaluator) coreMask(d, first, last, start, count int) uint64 {
	cpd := e.s.CoresPerDevice
	lo, hi := 0, cpd-1
	if d == first {
		lo = start - first*cpd
	}
	if d == last {
		hi = start + count - 1 - last*cpd
	}
	return uint64(1)<<(hi+1) - uint64(1)<<lo
}

// deviceCandidates considers every free valid device set of the request and reports whether
// there was one.
func (e *evaluator) deviceCandidates(p Policy, r Request) bool {
	s, u := e.s, e.u
	n := s.Devices()
	k := r.Count
	emit := func() {
		for _, d := range e.devBuf {
			if u.used[d] != 0 {
				return
			}
		}
		c := candidate{devices: e.devBuf, start: e.devBuf[0] * s.CoresPerDevice}
		e.consider(p, &c)
	}
	seqBuf := func(start, k int) {
		e.devBuf = e.devBuf[:0]
		for d := start; d < start+k; d++ {
			e.devBuf = append(e.devBuf, d)
		}
	}
	switch {
	case k == n:
		seqBuf(0, n)
		emit()
	case k == 1:
		for d := range n {
			seqBuf(d, 1)
			emit()
		}
	case s.Kind() == KindTorus:
		for start := 0; start < n; start += k {
			seqBuf(start, k)
			emit()
		}
	case s.Kind() == KindChain || s.Kind() == KindRing:
		last := n - k
		if s.Kind() == KindRing {
			last = n - 1
		}
		order := s.graph.order
		for p := 0; p <= last; p++ {
			e.devBuf = e.devBuf[:0]
			for i := range k {
				e.devBuf = append(e.devBuf, order[(p+i)%n])
			}
			slices.Sort(e.devBuf)
			emit()
		}
	case s.Kind() == KindSwitched:
		// Every subset is valid and every free device is alike: take the lowest free ones.
		e.devBuf = e.devBuf[:0]
		for d := 0; d < n && len(e.devBuf) < k; d++ {
			if u.used[d] == 0 {
				e.devBuf = append(e.devBuf, d)
			}
		}
		if len(e.devBuf) == k {
			emit()
		}
	}
	return e.best.start >= 0
}

// vectorOf writes into vec the node's capability after placing c. It starts from the
// capability now and recounts only what c changes: the core runs of the devices it touches,
// and the whole-device part when it takes a free device.
func (e *evaluator) vectorOf(c *candidate, vec []int) {
	u := e.u
	nd := len(e.s.deviceSizes)
	copy(vec, e.before)
	tookFree := false
	var took uint64 // the free devices c takes, when the node has at most 64
	for _, d := range c.devices {
		old := u.used[d]
		m := e.full
		if c.count != 0 {
			m = old | e.coreMask(d, c.devices[0], c.devices[len(c.devices)-1], c.start, c.count)
		}
		if old == 0 {
			tookFree = true
			if d < 64 {
				took |= 1 << d
			}
		}
		e.addCoreRuns(old, vec, -1)
		e.addCoreRuns(m, vec, 1)
	}
	if !tookFree {
		return
	}
	memo := len(u.used) <= 64
	if !memo || !e.devPartOK || e.devPartFor != took {
		copy(e.after, u.used)
		for _, d := range c.devices {
			e.after[d] = e.full // only whether a device is free matters to the device part
		}
		clear(e.devPart[:nd])
		e.devicePart(e.after, e.devPart)
		e.devPartFor, e.devPartOK = took, memo
	}
	copy(vec[:nd], e.devPart[:nd])
}

// capability counts, for each set size from the largest down, how many disjoint free sets of
// that size the node could still give: whole-device sets first (ring and chain segments,
// aligned torus blocks, free devices), then core runs inside partly used devices. Comparing two
// vectors lexicographically prefers the state that keeps larger sets free.
func (e *evaluator) capability(used []uint64, buf []int) {
	clear(buf)
	e.devicePart(used, buf)
	for _, m := range used {
		e.addCoreRuns(m, buf, 1)
	}
}

// devicePart adds the whole-device counts of the capability of used to buf.
func (e *evaluator) devicePart(used []uint64, buf []int) {
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
			buf[i] += free / e.sizes[i]
		}
	}
}

// addCoreRuns adds sign times the core-run counts of one device with cores m in use to buf (a
// free or full device has none).
func (e *evaluator) addCoreRuns(m uint64, buf []int, sign int) {
	if m == 0 || m == e.full {
		return
	}
	nd := len(e.s.deviceSizes)
	cpd := e.s.CoresPerDevice
	if t := e.s.coreRuns; t != nil {
		w := cpd - 1
		row := t[int(m)*w : int(m)*w+w]
		for j, v := range row {
			buf[nd+j] += sign * int(v)
		}
		return
	}
	run := 0
	for k := 0; k <= cpd; k++ {
		if k < cpd && m&(1<<k) == 0 {
			run++
			continue
		}
		if run > 0 {
			for i := nd; i < len(e.sizes); i++ {
				buf[i] += sign * (run / -e.sizes[i])
			}
		}
		run = 0
	}
}

// damage is the size, in devices, of the largest set size whose count the placement reduced.
func (e *evaluator) damage(after []int) float64 {
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

func seq(start, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = start + i
	}
	return out
}
