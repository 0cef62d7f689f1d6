package nodemetrics

import (
	"cmp"
	"maps"
	"slices"
	"strconv"

	"github.com/kube-neuron/kube-neuron/internal/neuron"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// Holder is one container holding Neuron devices or cores on the node.
type Holder struct {
	Namespace, Pod, Container string
	Devices                   []int // whole devices held (all their cores)
	Cores                     []int // NeuronCore ids held (node-wide, as in NEURON_RT_VISIBLE_CORES)
}

// Snapshot is what the agent knows about its node at one instant.
type Snapshot struct {
	Node, InstanceType string
	Shape              *topology.Shape // nil before the agent has discovered the node: no series
	Stats              *neuron.Stats   // the last ReadStats; nil: no counter series
	Holders            []Holder
	// Reasons are, per device, why it is unhealthy ((*neuron.Health).Reasons()): "" for a
	// healthy device, neuron.ReasonGone, neuron.ReasonECCUncorrected. Missing entries are "".
	Reasons []string
	// Used is what the agent's engine has in use (for free blocks and the device counts); nil:
	// what the holders hold. Devices and cores of holders count as used either way.
	Used *topology.Usage
}

// holderKey is the identity a series carries; the zero value is "free".
type holderKey struct{ Namespace, Pod, Container string }

func (h Holder) key() holderKey { return holderKey{h.Namespace, h.Pod, h.Container} }

func compareHolders(a, b holderKey) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Pod, b.Pod), cmp.Compare(a.Container, b.Container))
}

// series is one sample: the family's name, its label values in the family's label order, and
// its value.
type series struct {
	name   string
	labels []string
	value  float64
}

// buildSeries returns every series of the snapshot. util is each physical core's utilisation
// (a core missing from it has 0).
func buildSeries(snap Snapshot, util map[physicalCore]float64) []series {
	sh := snap.Shape
	if sh == nil {
		return nil
	}
	n, cpd := sh.Devices(), sh.CoresPerDevice
	lnc := sh.Type.PhysicalCoresPerDevice / cpd // physical cores per NeuronCore
	deviceHolders, coreHolders := holdersOf(sh, snap.Holders)
	stats := map[int]*neuron.DeviceStats{}
	if snap.Stats != nil {
		for i := range snap.Stats.Devices {
			stats[snap.Stats.Devices[i].Index] = &snap.Stats.Devices[i]
		}
	}

	var out []series
	add := func(name string, value float64, labels ...string) {
		out = append(out, series{name, labels, value})
	}
	for d := range n {
		dev := strconv.Itoa(d)
		reason := reasonOf(snap.Reasons, d)
		healthy := 0.0
		if reason == "" {
			healthy = 1
		}
		for _, h := range deviceHolders[d] {
			add(DeviceHealthy, healthy, snap.Node, snap.InstanceType, dev, h.Namespace, h.Pod, h.Container, reason)
		}
		ds := stats[d]
		if reason == neuron.ReasonGone || ds == nil {
			continue
		}
		for _, h := range deviceHolders[d] {
			labels := []string{snap.Node, snap.InstanceType, dev, h.Namespace, h.Pod, h.Container}
			if ds.Power.Valid {
				add(DevicePowerUtilization, ds.Power.Avg/100, labels...)
			}
			add(DeviceECCErrors, float64(ds.MemECCUncorrected), append(labels, CounterMemECCUncorrected)...)
			add(DeviceECCErrors, float64(ds.MemECCRepairableUncorrected), append(labels, CounterMemECCRepairableUncorrected)...)
			add(DeviceECCErrors, float64(ds.SRAMECCUncorrected), append(labels, CounterSRAMECCUncorrected)...)
		}
		for _, c := range sh.CoresOf(d) {
			core, ok := coreValues(ds, (c%cpd)*lnc, lnc, util)
			if !ok {
				continue
			}
			for _, h := range coreHolders[c] {
				labels := []string{snap.Node, snap.InstanceType, dev, h.Namespace, h.Pod, h.Container, strconv.Itoa(c)}
				add(CoreMemoryUsed, float64(core.memory), labels...)
				add(CoreTimeInUse, core.timeInUse, labels...)
				add(CoreUtilization, core.utilization, labels...)
				for _, st := range slices.Sorted(maps.Keys(core.executions)) {
					add(CoreExecutions, float64(core.executions[st]), append(labels, st)...)
				}
			}
		}
	}

	usage := nodeUsage(snap)
	counts := map[string]int{}
	for d := range n {
		switch {
		case reasonOf(snap.Reasons, d) != "":
			counts[StateUnhealthy]++
		case !usage.DeviceFree(d):
			counts[StateUsed]++
		default:
			counts[StateFree]++
		}
	}
	for _, state := range []string{StateFree, StateUsed, StateUnhealthy} {
		add(NodeDevices, float64(counts[state]), snap.Node, snap.InstanceType, state)
	}
	for _, b := range usage.FreeBlocks() {
		add(NodeFreeBlocks, float64(b.Count), snap.Node, snap.InstanceType, strconv.Itoa(b.Devices))
	}
	return out
}

func reasonOf(reasons []string, d int) string {
	if d < len(reasons) {
		return reasons[d]
	}
	return ""
}

// holdersOf returns the holders of each device and of each NeuronCore, sorted, without
// duplicates, and the free holder (all labels empty) for what nobody holds. A device's holders
// are those of any of its cores; a device holder holds all its cores. Ids outside the node are
// ignored.
func holdersOf(sh *topology.Shape, holders []Holder) (devices, cores [][]holderKey) {
	devices = make([][]holderKey, sh.Devices())
	cores = make([][]holderKey, sh.Cores())
	add := func(list []holderKey, k holderKey) []holderKey {
		if slices.Contains(list, k) {
			return list
		}
		return append(list, k)
	}
	for _, h := range holders {
		k := h.key()
		for _, d := range h.Devices {
			if d < 0 || d >= sh.Devices() {
				continue
			}
			devices[d] = add(devices[d], k)
			for _, c := range sh.CoresOf(d) {
				cores[c] = add(cores[c], k)
			}
		}
		for _, c := range h.Cores {
			if c < 0 || c >= sh.Cores() {
				continue
			}
			cores[c] = add(cores[c], k)
			devices[sh.DeviceOf(c)] = add(devices[sh.DeviceOf(c)], k)
		}
	}
	for _, lists := range [][][]holderKey{devices, cores} {
		for i := range lists {
			if len(lists[i]) == 0 {
				lists[i] = []holderKey{{}}
			}
			slices.SortFunc(lists[i], compareHolders)
		}
	}
	return devices, cores
}

// coreStats is what one NeuronCore's series say.
type coreStats struct {
	memory      uint64
	timeInUse   float64 // seconds, mean over the physical cores
	utilization float64 // mean over the physical cores
	executions  map[string]uint64
}

// coreValues combines the physical cores first..first+count-1 of a device into one NeuronCore:
// memory and executions summed, time in use and utilisation averaged. ok is false when the
// driver reported none of them.
func coreValues(ds *neuron.DeviceStats, first, count int, util map[physicalCore]float64) (coreStats, bool) {
	out := coreStats{executions: map[string]uint64{}}
	found := 0
	for _, c := range ds.Cores {
		if c.Index < first || c.Index >= first+count {
			continue
		}
		found++
		out.memory = addSaturating(out.memory, c.MemoryUsedBytes)
		out.timeInUse += c.TimeInUse.Seconds()
		out.utilization += util[physicalCore{ds.Index, c.Index}]
		for st, v := range c.Executions {
			out.executions[st] = addSaturating(out.executions[st], v)
		}
	}
	if found == 0 {
		return coreStats{}, false
	}
	out.timeInUse /= float64(found)
	out.utilization /= float64(found)
	return out, true
}

// nodeUsage is what is in use for the node-level series: snap.Used (when it is of the
// snapshot's shape) plus what the holders hold, plus every unhealthy device (it cannot be given).
func nodeUsage(snap Snapshot) *topology.Usage {
	sh := snap.Shape
	var u *topology.Usage
	if snap.Used != nil && snap.Used.Shape().Devices() == sh.Devices() && snap.Used.Shape().CoresPerDevice == sh.CoresPerDevice {
		u = snap.Used.Clone()
	} else {
		u = topology.NewUsage(sh)
	}
	markDevice := func(d int) {
		if d >= 0 && d < sh.Devices() && u.DeviceFree(d) {
			_ = u.MarkDevices([]int{d}) // cannot fail: in range and free
		}
	}
	for _, h := range snap.Holders {
		for _, d := range h.Devices {
			for _, c := range validCores(sh, d) {
				if u.CoreFree(c) {
					_ = u.MarkCores([]int{c}) // cannot fail: in range and free
				}
			}
		}
		for _, c := range h.Cores {
			if c >= 0 && c < sh.Cores() && u.CoreFree(c) {
				_ = u.MarkCores([]int{c})
			}
		}
	}
	for d := range sh.Devices() {
		if reasonOf(snap.Reasons, d) != "" {
			markDevice(d)
		}
	}
	return u
}

// validCores returns the cores of device d, none when d is not a device of the node.
func validCores(sh *topology.Shape, d int) []int {
	if d < 0 || d >= sh.Devices() {
		return nil
	}
	return sh.CoresOf(d)
}

func addSaturating(a, b uint64) uint64 {
	if a > ^uint64(0)-b {
		return ^uint64(0)
	}
	return a + b
}
