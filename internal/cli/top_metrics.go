package cli

import (
	"bytes"
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metric families and labels of the node agents (docs/metrics.md) that top reads.
const (
	metricCoreMemory      = "neuron_core_memory_used_bytes"
	metricCoreUtilization = "neuron_core_utilization_ratio"
	metricDeviceHealthy   = "neuron_device_healthy"
	metricNodeDevices     = "neuron_node_devices"

	metricPrefixCore   = "neuron_core_"
	metricPrefixDevice = "neuron_device_"

	labelNode         = "node"
	labelInstanceType = "instance_type"
	labelDevice       = "neuron_device"
	labelCore         = "neuron_core"
	labelNamespace    = "namespace"
	labelPod          = "pod"
	labelContainer    = "container"
	labelReason       = "reason"
	labelState        = "state"
)

// agentFamilies are the node metrics' families (docs/metrics.md). The agents export metrics of
// their own beside them (neuron_device_plugin_*, neuron_dra_driver_*): top reads only these.
var agentFamilies = map[string]bool{
	"neuron_device_power_utilization_ratio": true,
	"neuron_device_ecc_errors_total":        true,
	metricDeviceHealthy:                     true,
	metricCoreMemory:                        true,
	"neuron_core_time_in_use_seconds_total": true,
	metricCoreUtilization:                   true,
	"neuron_core_executions_total":          true,
	metricNodeDevices:                       true,
	"neuron_node_free_blocks":               true,
}

// TopPod is one element of `kubectl-neuron top pods -o json`: a container holding Neuron
// hardware, with what it holds (ids ascending, never null), the device memory its cores use
// and the mean utilisation of its cores (0 to 1).
type TopPod struct {
	Namespace       string  `json:"namespace"`
	Pod             string  `json:"pod"`
	Container       string  `json:"container"`
	Node            string  `json:"node"`
	Devices         []int   `json:"devices"`
	Cores           []int   `json:"cores"`
	MemoryUsedBytes uint64  `json:"memoryUsedBytes"`
	Utilization     float64 `json:"utilization"`

	sampled bool // some core of the container has a utilisation sample
}

// TopNode is one element of `kubectl-neuron top nodes -o json`.
type TopNode struct {
	Node             string         `json:"node"`
	InstanceType     string         `json:"instanceType"`
	DevicesUsed      int            `json:"devicesUsed"`
	DevicesFree      int            `json:"devicesFree"`
	DevicesUnhealthy int            `json:"devicesUnhealthy"`
	CoresUsed        int            `json:"coresUsed"`
	Cores            int            `json:"cores"`
	MemoryUsedBytes  uint64         `json:"memoryUsedBytes"`
	Utilization      float64        `json:"utilization"`
	Unhealthy        []TopUnhealthy `json:"unhealthy"`

	sampled bool
}

// TopUnhealthy is an unhealthy device of a node and the agent's reason ("gone",
// "ecc-uncorrected", ...; empty when the agent gives none).
type TopUnhealthy struct {
	Device int    `json:"device"`
	Reason string `json:"reason"`
}

// topHolder is who holds a device or core: a container of a pod. The free holder is all empty.
type topHolder struct{ namespace, pod, container string }

func (h topHolder) free() bool { return h.pod == "" }

type topCore struct {
	device      int
	holders     map[topHolder]bool
	memory      uint64
	utilization float64
	sampled     bool
}

type topDevice struct {
	holders map[topHolder]bool
	health  string // "" unknown, "healthy", "unhealthy"
	reason  string
}

type topNodeMetrics struct {
	instanceType string
	counts       map[string]int // neuron_node_devices by state
	cores        map[int]*topCore
	devices      map[int]*topDevice
}

// topMetrics is what the node agents' /metrics say, reduced to what top shows, per node.
type topMetrics struct {
	nodes map[string]*topNodeMetrics
}

func newTopMetrics() *topMetrics { return &topMetrics{nodes: map[string]*topNodeMetrics{}} }

// add parses one agent's answer, Prometheus text format, adds its series and returns the nodes
// they name. Series of the node metrics' families without a node or with an id that is not a
// non-negative number are left out and counted in skipped; other families are ignored.
// An answer that is not the text format is an error and adds nothing.
func (m *topMetrics) add(text []byte) (nodes []string, skipped int, err error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		return nil, 0, fmt.Errorf("not the Prometheus text format: %w", err)
	}
	seen := map[string]bool{}
	for _, name := range slices.Sorted(maps.Keys(families)) {
		if !agentFamilies[name] {
			continue
		}
		for _, s := range families[name].GetMetric() {
			if node := m.addSeries(name, s); node != "" {
				seen[node] = true
			} else {
				skipped++
			}
		}
	}
	return slices.Sorted(maps.Keys(seen)), skipped, nil
}

// addSeries adds one series and returns its node, "" when it is left out.
func (m *topMetrics) addSeries(name string, s *dto.Metric) string {
	l := map[string]string{}
	for _, p := range s.GetLabel() {
		l[p.GetName()] = p.GetValue()
	}
	value, ok := seriesValue(s)
	if l[labelNode] == "" || !ok || !m.addValue(name, l, value) {
		return ""
	}
	return l[labelNode]
}

func (m *topMetrics) addValue(name string, l map[string]string, value float64) bool {
	n := m.node(l[labelNode], l[labelInstanceType])
	h := topHolder{namespace: l[labelNamespace], pod: l[labelPod], container: l[labelContainer]}
	switch {
	case name == metricNodeDevices:
		if l[labelState] == "" || value < 0 || value > math.MaxInt32 {
			return false
		}
		n.counts[l[labelState]] = int(value)
	case strings.HasPrefix(name, metricPrefixCore):
		core, okC := topID(l[labelCore])
		device, okD := topID(l[labelDevice])
		if !okC || !okD {
			return false
		}
		c := n.cores[core]
		if c == nil {
			c = &topCore{device: device, holders: map[topHolder]bool{}}
			n.cores[core] = c
		}
		c.holders[h] = true
		n.device(device) // a device with cores exists
		switch name {
		case metricCoreMemory:
			if value < 0 {
				return false
			}
			c.memory = uint64(min(value, 1<<62))
		case metricCoreUtilization:
			c.utilization, c.sampled = min(max(value, 0), 1), true
		}
	case strings.HasPrefix(name, metricPrefixDevice):
		device, ok := topID(l[labelDevice])
		if !ok {
			return false
		}
		d := n.device(device)
		d.holders[h] = true
		if name == metricDeviceHealthy {
			if value == 0 {
				d.health, d.reason = "unhealthy", l[labelReason]
			} else if d.health == "" {
				d.health = "healthy"
			}
		}
	case strings.HasPrefix(name, "neuron_node_"):
		// neuron_node_free_blocks: not shown.
	default:
		return false
	}
	return true
}

// addBytes adds without wrapping around.
func addBytes(a, b uint64) uint64 {
	if a > math.MaxUint64-b {
		return math.MaxUint64
	}
	return a + b
}

func (m *topMetrics) node(name, instanceType string) *topNodeMetrics {
	n := m.nodes[name]
	if n == nil {
		n = &topNodeMetrics{counts: map[string]int{}, cores: map[int]*topCore{}, devices: map[int]*topDevice{}}
		m.nodes[name] = n
	}
	if n.instanceType == "" {
		n.instanceType = instanceType
	}
	return n
}

func (n *topNodeMetrics) device(id int) *topDevice {
	d := n.devices[id]
	if d == nil {
		d = &topDevice{holders: map[topHolder]bool{}}
		n.devices[id] = d
	}
	return d
}

// seriesValue is a gauge's, counter's or untyped series' value, when it is a finite number.
func seriesValue(s *dto.Metric) (float64, bool) {
	var v float64
	switch {
	case s.Gauge != nil:
		v = s.Gauge.GetValue()
	case s.Counter != nil:
		v = s.Counter.GetValue()
	case s.Untyped != nil:
		v = s.Untyped.GetValue()
	default:
		return 0, false
	}
	return v, !math.IsNaN(v) && !math.IsInf(v, 0)
}

// topID reads a device or core id label.
func topID(s string) (int, bool) {
	id, err := strconv.Atoi(s)
	return id, err == nil && id >= 0 && id < 1<<20
}

// pods returns one row per container holding Neuron hardware, in namespace (all namespaces
// when it is ""), sorted by namespace, pod, container and node. A container's devices are those
// it holds and those of the cores it holds; its memory is the sum over its cores, its
// utilisation the mean over its cores that have a sample.
func (m *topMetrics) pods(namespace string) []TopPod {
	type key struct {
		holder topHolder
		node   string
	}
	rows := map[key]*TopPod{}
	row := func(h topHolder, node string) *TopPod {
		k := key{h, node}
		if rows[k] == nil {
			rows[k] = &TopPod{Namespace: h.namespace, Pod: h.pod, Container: h.container, Node: node}
		}
		return rows[k]
	}
	util := map[key]float64{}
	// Sorted, so that the sums come out the same every time.
	for _, nodeName := range slices.Sorted(maps.Keys(m.nodes)) {
		n := m.nodes[nodeName]
		for _, id := range slices.Sorted(maps.Keys(n.cores)) {
			c := n.cores[id]
			for h := range c.holders {
				if h.free() || (namespace != "" && h.namespace != namespace) {
					continue
				}
				r := row(h, nodeName)
				r.Cores = append(r.Cores, id)
				r.Devices = append(r.Devices, c.device)
				r.MemoryUsedBytes = addBytes(r.MemoryUsedBytes, c.memory)
				if c.sampled {
					r.sampled = true
					util[key{h, nodeName}] += c.utilization
				}
			}
		}
		for id, d := range n.devices {
			for h := range d.holders {
				if h.free() || (namespace != "" && h.namespace != namespace) {
					continue
				}
				r := row(h, nodeName)
				r.Devices = append(r.Devices, id)
			}
		}
	}
	out := make([]TopPod, 0, len(rows))
	for k, r := range rows {
		r.Devices = nonNil(slices.Compact(slices.Sorted(slices.Values(r.Devices))))
		r.Cores = nonNil(slices.Sorted(slices.Values(r.Cores)))
		if r.sampled {
			sampled := 0
			for _, id := range r.Cores {
				if m.nodes[k.node].cores[id].sampled {
					sampled++
				}
			}
			r.Utilization = min(util[k]/float64(sampled), 1)
		}
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b TopPod) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Pod, b.Pod), cmp.Compare(a.Container, b.Container), cmp.Compare(a.Node, b.Node))
	})
	return out
}

// nodeRows returns one row per node, sorted by name. The device counts are the agent's
// neuron_node_devices; without them they are counted from the device series. Cores used are the
// cores some container holds; memory is the sum over all cores, utilisation the mean over the
// used cores that have a sample.
func (m *topMetrics) nodeRows() []TopNode {
	out := make([]TopNode, 0, len(m.nodes))
	for _, name := range slices.Sorted(maps.Keys(m.nodes)) {
		n := m.nodes[name]
		r := TopNode{Node: name, InstanceType: n.instanceType, Cores: len(n.cores), Unhealthy: []TopUnhealthy{}}
		used := map[int]bool{}
		var util float64
		sampled := 0
		for _, id := range slices.Sorted(maps.Keys(n.cores)) {
			c := n.cores[id]
			r.MemoryUsedBytes = addBytes(r.MemoryUsedBytes, c.memory)
			if !held(c.holders) {
				continue
			}
			r.CoresUsed++
			used[c.device] = true
			if c.sampled {
				util += c.utilization
				sampled++
			}
		}
		if sampled > 0 {
			r.Utilization, r.sampled = min(util/float64(sampled), 1), true
		}
		for _, id := range slices.Sorted(maps.Keys(n.devices)) {
			d := n.devices[id]
			if d.health == "unhealthy" {
				r.Unhealthy = append(r.Unhealthy, TopUnhealthy{Device: id, Reason: d.reason})
			}
			if held(d.holders) {
				used[id] = true
			}
		}
		if len(n.counts) > 0 {
			r.DevicesUsed, r.DevicesFree, r.DevicesUnhealthy = n.counts["used"], n.counts["free"], n.counts["unhealthy"]
		} else {
			for id := range n.devices {
				switch {
				case n.devices[id].health == "unhealthy":
					r.DevicesUnhealthy++
				case used[id]:
					r.DevicesUsed++
				default:
					r.DevicesFree++
				}
			}
		}
		out = append(out, r)
	}
	return out
}

func held(holders map[topHolder]bool) bool {
	for h := range holders {
		if !h.free() {
			return true
		}
	}
	return false
}

// humanBytes writes a byte count in binary units: 0, 512B, 1.5GiB, 16GiB.
func humanBytes(b uint64) string {
	if b < 1024 {
		if b == 0 {
			return "0"
		}
		return strconv.FormatUint(b, 10) + "B"
	}
	v := float64(b)
	unit := ""
	for _, u := range []string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"} {
		v /= 1024
		unit = u
		if v < 1024 {
			break
		}
	}
	s := strconv.FormatFloat(v, 'f', 1, 64)
	return strings.TrimSuffix(s, ".0") + unit
}

// percent writes a ratio (0 to 1) as a whole percentage, "-" when there is no sample yet.
func percent(ratio float64, sampled bool) string {
	if !sampled {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", ratio*100)
}
