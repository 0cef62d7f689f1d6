// Package neuron is how kube-neuron sees the AWS Neuron devices (Inferentia, Trainium) of a node.
//
// Components depend on the Hardware interface. Sysfs is the production implementation; Simulate
// writes the same file tree for any catalog instance type, so tests (here and in the components)
// run the production reader against it.
//
// # What Sysfs reads
//
// All paths are relative to Sysfs.Root ("/" on a node, the host root when mounted into a pod):
//
//	sys/devices/virtual/neuron_device/neuronN/       one directory per device, N = 0..count-1
//	    core_count                                   physical NeuronCores ("%d", no newline)
//	    connected_devices                            linked devices, "12, 3, 4, 1\n"; "\n" for none
//	    info/architecture/instance_type              e.g. trn2.48xlarge
//	    info/architecture/device_name                e.g. Trainium2
//	    info/architecture/arch_type                  e.g. NCv3
//	    stats/hardware/mem_ecc_uncorrected/total     uncorrectable HBM ECC errors (absent = 0)
//	    stats/hardware/sram_ecc_uncorrected/total    uncorrectable SRAM ECC errors (absent = 0)
//	    stats/hardware/mem_ecc_repairable_uncorrected/total
//	                                                 repairable HBM ECC events (ReadStats only, absent = 0)
//	    stats/power/utilization                      ReadStats: "<status>,<unix-seconds>,<min>,<max>,<avg>",
//	                                                 status POWER_STATUS_VALID, _NO_DATA or _INVALID,
//	                                                 percent of max power 0.00-100.00 over the last minute
//	    neuron_coreK/                                physical core K = 0..core_count-1 (ReadStats):
//	        stats/memory_usage/device_mem/<category>/total
//	                                                 device memory bytes in use, summed over categories
//	        stats/status/<status>/total              execution results (success, timeout, hw_error, ...)
//	        stats/other_info/nc_time_in_use/total    microseconds the core was in use (only rises)
//	sys/devices/virtual/dmi/id/product_name          instance type (else neuron0's instance_type)
//	sys/module/neuron/version                        driver version
//	sys/class/neuron_device/{server_id_2,server_id_4,node_id_2,node_id_4,ultraserver_mode}
//	                                                 UltraServer identity; server id 0000000000000000
//	                                                 or node id -1 means none, node id "busy" means
//	                                                 the driver is still electing (ErrUltraServerBusy)
//	sys/bus/pci/devices/<DDDD:BB:DD.F>/{vendor,device}
//	                                                 EFA devices: vendor 0x1d0f, device 0xefa0..0xefa3
//	opt/aws/neuron/logical_nc_config                 NEURON_LOGICAL_NC_CONFIG=1 or 2 (absent: LNC 0,
//	                                                 the instance type's default applies)
//
// Discover validates what it reads: device numbers without gaps, links in range, without self
// links or duplicates, symmetric and forming a topology topology.NewGraph recognises. EFA
// devices are sorted by PCI address and paired in blocks: with E EFAs and D devices (E dividing
// D), device i gets EFA i/(D/E) (trn1.32xlarge: 2 devices per EFA; trn1n, trn2: 1 per EFA). That
// pairing by address order is an approximation of the PCI topology, not read from it.
//
// ReadStats reads the usage counters of the devices present (absent files read as zero, power as
// not valid); category and status directories are read as found, so names a newer driver adds
// are reported too.
//
// Error counters only rise while the driver runs; consumers detect a new uncorrectable error as
// a rise of Device.ErrorCount between two discoveries. This package does not poll.
//
// Sources: the AWS Neuron Sysfs User Guide
// (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/tools/neuron-sys-tools/neuron-sysfs-user-guide.html)
// for the per-device tree and counters, and the Neuron kernel driver's neuron_cdev.c
// (https://github.com/aws-neuron/aws-neuron-driver) for the core_count and connected_devices
// formats (core_count and connected_devices are readable by root only) and the neuron_device
// class attributes. The guide notes that driver 2.31 reorganized the tree and moved some nodes;
// the paths above have not been checked against driver 2.31 or later.
//
// # What Simulate writes
//
// The tree above for one instance type: core_count, connected_devices from topology.Adjacency
// in the driver's format, architecture strings by family, the three ECC counters (total and
// present, 0), power utilization POWER_STATUS_VALID at 0 % stamped with the time of writing,
// product_name, the module version, logical_nc_config when SimOptions.LNC is set, the
// UltraServer attributes (the driver's "none" values unless SimOptions.UltraServer is set), a
// host bridge and an ENA PCI device the reader must skip, and with SimOptions.EFA synthetic EFA
// devices at EFAAddresses. A core's usage counters (neuron_coreK/...) appear when the Simulator
// first moves them (SetCoreMemory in the tensors category, AddCoreTime, AddExecutions); absent
// ones read as 0. SimOptions.CoreStats writes all of them (every memory category, every status,
// nc_time_in_use) at the start instead, at a cost of about 30 directories per core. A marker
// under .sim/ records the instance type so OpenSimulator can act on the tree from another
// process; the tree is the Simulator's state (counters are read back before they are raised,
// a device is removed when its directory is absent). Every file is replaced atomically
// (temporary file and rename), no change recreates a removed device's directory, and devices
// are removed and restored with a single directory rename, so a concurrent reader sees either
// the old or the new state.
package neuron
