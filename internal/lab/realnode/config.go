// Package realnode runs real Kubernetes nodes in the lab: a real kubelet with a real containerd
// and runc, each node isolated as a node container would be. A node's first process (the node
// init, `neuron-lab node-init`) is started in new mount, PID, UTS, IPC and network namespaces;
// it gives the node its own /var, /opt, /run, /tmp, /dev (with /dev/neuronN) and a sysfs of its
// network namespace with the simulated Neuron tree merged in, moves itself into the node's
// cgroup, then runs containerd, the kubelet and kube-proxy and restarts them when they exit, as
// systemd does on a node. When the node init ends, the kernel ends every process of the node's
// PID namespace, and the node's mounts and network namespaces go with them: a killed lab leaves
// nothing running.
//
// Start (the host side) writes the node's configuration, starts the node init and attaches its
// network namespace to the lab's bridge (netns.Network.AttachNode).
package realnode

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// Config is what the node init reads (Dir/config.json): every path and setting of one node,
// made by the host side.
type Config struct {
	// Name is the node's name (its hostname too).
	Name string `json:"name"`
	// Dir is the node's state directory on the host; the node's /var and /opt are Dir/var and
	// Dir/opt, its configuration files are in Dir/etc.
	Dir string `json:"dir"`
	// LogDir receives <name>-containerd.log, <name>-kubelet.log and <name>-kube-proxy.log.
	LogDir string `json:"logDir"`
	// Sysfs is the root of the node's simulated Neuron tree (sys/..., opt/aws/neuron/...), merged
	// into the node's /sys and /opt/aws/neuron; empty for a node without Neuron devices.
	Sysfs string `json:"sysfs,omitempty"`
	// Devices is the number of /dev/neuronN device nodes.
	Devices int `json:"devices"`
	// CPUs and MemoryBytes are the size the node reports (its instance type's vCPUs and memory),
	// through the node's view of /sys/devices/system/cpu, node0 and /proc/meminfo; 0 reports the
	// host's. The node's pods share the host's CPUs and memory whatever it reports.
	CPUs        int    `json:"cpus,omitempty"`
	MemoryBytes uint64 `json:"memoryBytes,omitempty"`
	// CgroupRoot is the node's cgroup in every hierarchy (/kube-neuron-lab/<lab>/<node>), the root
	// of the node's cgroup namespace: its daemons run in <CgroupRoot>/system, its pods beside.
	CgroupRoot string `json:"cgroupRoot"`
	// Containerd, Kubelet, KubeProxy are the binaries; PATH gets the directory of Containerd
	// (containerd-shim-runc-v2 and runc are found there).
	Containerd string `json:"containerd"`
	Kubelet    string `json:"kubelet"`
	KubeProxy  string `json:"kubeProxy"`
	// KubeletArgs are the kubelet's flags (its configuration file is one of them).
	KubeletArgs []string `json:"kubeletArgs"`
	// KubeProxyArgs are kube-proxy's flags; kube-proxy does not run without them.
	KubeProxyArgs []string `json:"kubeProxyArgs,omitempty"`
	// ContainerdConfig is containerd's configuration file.
	ContainerdConfig string `json:"containerdConfig"`
	// Sysctls are written inside the node's network namespace before containerd starts (keys as
	// paths under /proc/sys).
	Sysctls map[string]string `json:"sysctls,omitempty"`
}

// ConfigFile is the name of the configuration file in a node's directory.
const ConfigFile = "config.json"

// Write writes c to c.Dir/config.json.
func (c Config) Write() error {
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(c.Dir, ConfigFile), data, 0o600)
}

// ReadConfig reads a node's configuration file.
func ReadConfig(path string) (Config, error) {
	var c Config
	data, err := os.ReadFile(path)
	if err != nil {
		return c, fmt.Errorf("read the node configuration: %w", err)
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return c, fmt.Errorf("node configuration %s: %w", path, err)
	}
	if c.Name == "" || c.Dir == "" || c.Kubelet == "" || c.Containerd == "" || c.CgroupRoot == "" {
		return c, fmt.Errorf("node configuration %s: name, dir, kubelet, containerd and cgroupRoot are required", path)
	}
	return c, nil
}
