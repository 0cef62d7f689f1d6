package nodemetrics

import "github.com/prometheus/client_golang/prometheus"

// Metric names (docs/metrics.md describes them).
const (
	DevicePowerUtilization = "neuron_device_power_utilization_ratio"
	DeviceECCErrors        = "neuron_device_ecc_errors_total"
	DeviceHealthy          = "neuron_device_healthy"
	CoreMemoryUsed         = "neuron_core_memory_used_bytes"
	CoreTimeInUse          = "neuron_core_time_in_use_seconds_total"
	CoreUtilization        = "neuron_core_utilization_ratio"
	CoreExecutions         = "neuron_core_executions_total"
	NodeDevices            = "neuron_node_devices"
	NodeFreeBlocks         = "neuron_node_free_blocks"
)

// Label names.
const (
	LabelNode         = "node"
	LabelInstanceType = "instance_type"
	LabelDevice       = "neuron_device"
	LabelNamespace    = "namespace"
	LabelPod          = "pod"
	LabelContainer    = "container"
	LabelCore         = "neuron_core"
	LabelCounter      = "counter"
	LabelReason       = "reason"
	LabelStatus       = "status"
	LabelState        = "state"
	LabelDevices      = "devices"
)

// Values of the counter label of DeviceECCErrors (the driver's stats/hardware directory names).
const (
	CounterMemECCUncorrected           = "mem_ecc_uncorrected"
	CounterMemECCRepairableUncorrected = "mem_ecc_repairable_uncorrected"
	CounterSRAMECCUncorrected          = "sram_ecc_uncorrected"
)

// Values of the state label of NodeDevices.
const (
	StateFree      = "free"
	StateUsed      = "used"
	StateUnhealthy = "unhealthy"
)

var (
	deviceLabels = []string{LabelNode, LabelInstanceType, LabelDevice, LabelNamespace, LabelPod, LabelContainer}
	coreLabels   = append(append([]string{}, deviceLabels...), LabelCore)
)

// metric is one metric family: its name, help, type and label names in the order a series
// gives its label values.
type metric struct {
	name   string
	help   string
	typ    prometheus.ValueType
	labels []string
}

// metrics are every family the collector exports.
var metrics = []metric{
	{DevicePowerUtilization, "Average power of the Neuron device over the driver's last one-minute window, as a fraction of its maximum power (0 to 1; stats/power/utilization average / 100). Absent while the driver does not report POWER_STATUS_VALID.",
		prometheus.GaugeValue, deviceLabels},
	{DeviceECCErrors, "ECC events of the Neuron device since the driver was loaded (stats/hardware/<counter>/total): uncorrected HBM, repairable uncorrected HBM, uncorrected SRAM.",
		prometheus.CounterValue, append(append([]string{}, deviceLabels...), LabelCounter)},
	{DeviceHealthy, "1 when the Neuron device is healthy, 0 when it is not; reason says why (gone: the driver no longer reports it, ecc-uncorrected: its uncorrectable ECC count rose), empty when healthy. A gone device has only this series.",
		prometheus.GaugeValue, append(append([]string{}, deviceLabels...), LabelReason)},
	{CoreMemoryUsed, "Device memory in use by the NeuronCore, in bytes: the sum of the driver's device_mem categories (stats/memory_usage/device_mem/*/total) over the physical cores the NeuronCore covers.",
		prometheus.GaugeValue, coreLabels},
	{CoreTimeInUse, "Time the NeuronCore was in use since the driver was loaded, in seconds: the driver's nc_time_in_use, averaged over the physical cores the NeuronCore covers.",
		prometheus.CounterValue, coreLabels},
	{CoreUtilization, "Utilisation of the NeuronCore, 0 to 1. sysfs has no utilisation file: this is the rate of nc_time_in_use (seconds in use per second) between the agent's last two samples, averaged over the physical cores the NeuronCore covers; 0 until the agent has two samples.",
		prometheus.GaugeValue, coreLabels},
	{CoreExecutions, "Executions on the NeuronCore by result status (the driver's stats/status/<status>/total), summed over the physical cores the NeuronCore covers.",
		prometheus.CounterValue, append(append([]string{}, coreLabels...), LabelStatus)},
	{NodeDevices, "Neuron devices of the node by state: unhealthy, used (some core held, healthy) or free (nothing held, healthy).",
		prometheus.GaugeValue, []string{LabelNode, LabelInstanceType, LabelState}},
	{NodeFreeBlocks, "Disjoint free connected sets of this many whole healthy devices the node can still give (the placement engine's capability), for each device count the instance type accepts.",
		prometheus.GaugeValue, []string{LabelNode, LabelInstanceType, LabelDevices}},
}
