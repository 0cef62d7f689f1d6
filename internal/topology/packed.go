package topology

import "math/bits"

// packedKeys encodes a node's capability vector (see evaluator.capability) as two integers, one
// for the whole-device part and one for the core runs, whose order is the vector's
// lexicographic order: every entry has a bit field wide enough for the largest count it can
// reach, the entries of larger sets in higher bits. The encoding is linear, so the key after a
// placement is the key now plus the keys of what the placement changes, and comparing two
// placements costs two integer comparisons. A shape whose fields do not fit in 64 bits (more
// than 64 devices, more than 8 cores per device, or very many set sizes) has no packed keys and
// is placed with the vectors themselves.
type packedKeys struct {
	// off and width place entry i of the vector (the sizes of evaluator.sizes, in that order):
	// entries below nd in the device key, the others in the core key.
	off, width []uint8
	// runs is, on a chain or ring, the key of one free run of each length 0..n; on a switched
	// or single-device node the key of each count of free devices 0..n.
	runs []uint64
	// core is the key of the core runs of one device for each in-use mask (0 for a free or
	// full device).
	core []uint64
}

// newPackedKeys returns the packed keys of s, or nil when they do not fit.
func newPackedKeys(s *Shape) *packedKeys {
	n, cpd := s.Devices(), s.CoresPerDevice
	if n > 64 || cpd > 8 || (cpd >= 2 && s.coreRuns == nil) {
		return nil
	}
	sizes := s.vectorSizes()
	nd := len(s.deviceSizes)
	k := &packedKeys{off: make([]uint8, len(sizes)), width: make([]uint8, len(sizes))}
	// Lay the fields out from the last entry of each part upwards.
	devBits, coreBits := 0, 0
	for i := len(sizes) - 1; i >= 0; i-- {
		size := sizes[i]
		var most int
		if size > 0 {
			most = n / size // disjoint sets of size devices
		} else {
			most = n * ((cpd - 1) / -size) // runs inside partly used devices
		}
		w := bits.Len(uint(most))
		k.width[i] = uint8(w)
		if i < nd {
			k.off[i] = uint8(devBits)
			devBits += w
		} else {
			k.off[i] = uint8(coreBits)
			coreBits += w
		}
	}
	if devBits > 64 || coreBits > 64 {
		return nil
	}
	k.runs = make([]uint64, n+1)
	for l := range k.runs {
		for i := range nd {
			k.runs[l] += uint64(l/sizes[i]) << k.off[i]
		}
	}
	k.core = make([]uint64, 1<<cpd)
	for m := 1; m < len(k.core)-1; m++ {
		row := s.coreRuns[m*(cpd-1) : (m+1)*(cpd-1)]
		for j, v := range row {
			k.core[m] += uint64(v) << k.off[nd+j]
		}
	}
	return k
}

// field is entry i of the vector that the keys dev and core encode.
func (k *packedKeys) field(i, nd int, dev, core uint64) int {
	key := dev
	if i >= nd {
		key = core
	}
	return int(key >> k.off[i] & (1<<k.width[i] - 1))
}

// freeBit is device d's bit in a free-device mask: its position along the links on a chain or
// ring, its id otherwise.
func (s *Shape) freeBit(d int) uint64 { return 1 << s.graph.pos[d] }

// deviceKey is the key of the whole-device part of the capability of a node whose free
// devices are free (bits as freeBit sets them).
func (s *Shape) deviceKey(free uint64) uint64 {
	k := s.keys
	n := s.Devices()
	switch s.Kind() {
	case KindChain:
		return k.runsKey(free)
	case KindRing:
		all := uint64(1)<<n - 1
		if n == 64 {
			all = ^uint64(0)
		}
		if free == all {
			return k.runs[n]
		}
		// Rotate a used position to bit 0, so that the segment that wraps around is one run.
		z := bits.TrailingZeros64(^free)
		return k.runsKey((free>>z | free<<(n-z)) & all)
	case KindTorus:
		var key uint64
		for i, size := range s.deviceSizes {
			block := uint64(1)<<size - 1
			count := uint64(0)
			if size == 1 {
				count = uint64(bits.OnesCount64(free))
			} else {
				for b := 0; b < n; b += size {
					if free>>b&block == block {
						count++
					}
				}
			}
			key += count << k.off[len(s.deviceSizes)-1-i]
		}
		return key
	}
	return k.runs[bits.OnesCount64(free)]
}

// runsKey is the sum of the keys of the runs of set bits of free.
func (k *packedKeys) runsKey(free uint64) uint64 {
	var key uint64
	for free != 0 {
		free >>= bits.TrailingZeros64(free)
		run := bits.TrailingZeros64(^free)
		key += k.runs[run]
		free >>= run
	}
	return key
}

// considerKeys is consider by packed keys.
func (e *evaluator) considerKeys(p Policy, c *candidate) {
	if p == FirstFit {
		if e.best.start < 0 || c.less(&e.best) {
			e.keep(c, false)
		}
		return
	}
	dev, core := e.keysOf(c)
	if e.best.start >= 0 {
		if dev != e.bestDev {
			if dev < e.bestDev {
				return
			}
		} else if core < e.bestCore || (core == e.bestCore && !c.less(&e.best)) {
			return
		}
	}
	e.keep(c, false)
	e.bestDev, e.bestCore, e.bestHasVec = dev, core, true
}

// keysOf returns the device and core keys of the node after placing c. The core key changes
// by the core runs of the devices c touches; the device key only when c takes a free device.
func (e *evaluator) keysOf(c *candidate) (dev, core uint64) {
	s, used := e.s, e.u.used
	k := s.keys
	core = e.core
	var took uint64
	for _, d := range c.devices {
		old := used[d]
		m := e.full
		if c.count != 0 {
			m = old | e.coreMask(d, c.devices[0], c.devices[len(c.devices)-1], c.start, c.count)
		}
		core += k.core[m] - k.core[old]
		if old == 0 {
			took |= s.freeBit(d)
		}
	}
	return e.devKeyTaking(took), core
}

// devKeyTaking is the device key after taking the free devices took (bits as freeBit sets
// them). Neighbouring candidates often take the same free devices, and then share it.
func (e *evaluator) devKeyTaking(took uint64) uint64 {
	if took == 0 {
		return e.dev
	}
	if !e.memoOK || e.tookMemo != took {
		e.tookMemo, e.devMemo, e.memoOK = took, e.s.deviceKey(e.free&^took), true
	}
	return e.devMemo
}

// bestDamage is the damage of the best candidate.
func (e *evaluator) bestDamage() float64 {
	if !e.packed {
		if !e.bestHasVec {
			e.vectorOf(&e.best, e.bestVec)
		}
		return e.damage(e.bestVec)
	}
	if !e.bestHasVec {
		e.bestDev, e.bestCore = e.keysOf(&e.best)
	}
	k, nd := e.s.keys, len(e.s.deviceSizes)
	for i, size := range e.sizes {
		if k.field(i, nd, e.bestDev, e.bestCore) < k.field(i, nd, e.dev, e.core) {
			if size < 0 {
				return float64(-size) / float64(e.s.CoresPerDevice)
			}
			return float64(size)
		}
	}
	return 0
}

// bestCoresOnOneDevice is coreCandidates under best-fit, by packed keys, for a request whose
// cores fit on one device. It walks the ranges in the order of candidate.less, so that a later
// range with the same keys never wins, and skips what cannot win: a partly used device with
// the same cores in use as an earlier one (each of its ranges ties with the same range there),
// and a device whose device key is already below the best's.
func (e *evaluator) bestCoresOnOneDevice(count int) bool {
	s, k := e.s, e.s.keys
	cpd := s.CoresPerDevice
	base := uint64(1)<<count - 1
	var seen [4]uint64 // bit m: a partly used device with cores m in use was walked (cpd <= 8)
	for d, old := range e.u.used {
		if old == e.full {
			continue
		}
		dev := e.dev
		if old == 0 {
			dev = s.deviceKey(e.free &^ s.freeBit(d))
		} else {
			if seen[old>>6]&(1<<(old&63)) != 0 {
				continue
			}
			seen[old>>6] |= 1 << (old & 63)
		}
		if e.best.start >= 0 && dev < e.bestDev {
			continue
		}
		for off := 0; off+count <= cpd; off++ {
			m := base << off
			if old&m != 0 {
				continue
			}
			core := e.core - k.core[old] + k.core[old|m]
			if e.best.start >= 0 && (dev < e.bestDev || (dev == e.bestDev && core <= e.bestCore)) {
				continue
			}
			e.devBuf = append(e.devBuf[:0], d)
			e.keep(&candidate{devices: e.devBuf, start: d*cpd + off, count: count}, false)
			e.bestDev, e.bestCore, e.bestHasVec = dev, core, true
		}
	}
	return e.best.start >= 0
}

// bestCoresOverDevices is coreCandidates under best-fit, by packed keys, for a request whose
// cores span want > 1 devices: a range takes the top of its first device, every core of the
// devices between, and the bottom of its last device. It walks the ranges in the order of
// candidate.less, so that a later range with the same keys never wins.
func (e *evaluator) bestCoresOverDevices(want, count int) bool {
	s, k, used := e.s, e.s.keys, e.u.used
	cpd := s.CoresPerDevice
	lastOffset := min(cpd-1, want*cpd-count)
	for first := 0; first+want <= s.Devices(); first++ {
		last := first + want - 1
		var between uint64 // the devices between first and last, which must be free
		blocked := false
		for d := first + 1; d < last && !blocked; d++ {
			between |= s.freeBit(d)
			blocked = used[d] != 0
		}
		if blocked {
			continue
		}
		if !s.validRun(first, want) {
			continue
		}
		e.devBuf = e.devBuf[:0]
		for d := first; d <= last; d++ {
			e.devBuf = append(e.devBuf, d)
		}
		oldFirst, oldLast := used[first], used[last]
		for off := 0; off <= lastOffset; off++ {
			mFirst := e.full &^ (uint64(1)<<off - 1)
			mLast := uint64(1)<<(off+count-(want-1)*cpd) - 1
			if oldFirst&mFirst != 0 || oldLast&mLast != 0 {
				continue
			}
			core := e.core - k.core[oldFirst] + k.core[oldFirst|mFirst] - k.core[oldLast] + k.core[oldLast|mLast]
			took := between
			if oldFirst == 0 {
				took |= s.freeBit(first)
			}
			if oldLast == 0 {
				took |= s.freeBit(last)
			}
			dev := e.devKeyTaking(took)
			if e.best.start >= 0 && (dev < e.bestDev || (dev == e.bestDev && core <= e.bestCore)) {
				continue
			}
			e.keep(&candidate{devices: e.devBuf, start: first*cpd + off, count: count}, false)
			e.bestDev, e.bestCore, e.bestHasVec = dev, core, true
		}
	}
	return e.best.start >= 0
}
