package lab

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/kube-neuron/kube-neuron/internal/neuron"
)

// FaultAction is what Fault does to a device.
type FaultAction string

// Fault actions.
const (
	// FaultECCUncorrected raises the device's uncorrected memory ECC counter by 1.
	FaultECCUncorrected FaultAction = "ecc-uncorrected"
	// FaultRemove makes the device vanish, as when the driver drops a failed device.
	FaultRemove FaultAction = "remove"
	// FaultClear resets the device (a driver reset): present again, uncorrectable counters 0.
	FaultClear FaultAction = "clear"
)

// FaultOptions say which device of which node of the lab in Dir Fault changes, and how.
type FaultOptions struct {
	Dir    string
	Node   string
	Device int
	Action FaultAction
}

// Fault changes a device of a node of the lab running in o.Dir (simulated or real node: both
// have a simulated sysfs tree under Dir/nodes/<name>/sysfs) and says what it did. The node
// agents see the change at their next look at the tree.
func Fault(o FaultOptions) (string, error) {
	if err := checkLabRuns(o.Dir); err != nil {
		return "", err
	}
	return faultTree(o)
}

// checkLabRuns returns an error unless a ready lab runs in dir.
func checkLabRuns(dir string) error {
	data, err := os.ReadFile(filepath.Join(dir, PIDFile))
	pid := 0
	if err == nil {
		pid, _ = strconv.Atoi(strings.TrimSpace(string(data)))
	}
	if pid <= 1 || !isLabServe(pid) {
		return fmt.Errorf("no lab runs in %s: start one with make lab-up (neuron-lab up --dir %s)", dir, dir)
	}
	if readReady(dir) == nil {
		return fmt.Errorf("the lab in %s is still starting: wait until neuron-lab status --dir %s shows it ready", dir, dir)
	}
	return nil
}

// faultTree applies o to the node's tree, without checking that the lab runs.
func faultTree(o FaultOptions) (string, error) {
	nodes, err := FaultNodes(o.Dir)
	if err != nil {
		return "", err
	}
	if !slices.Contains(nodes, o.Node) {
		if len(nodes) == 0 {
			return "", fmt.Errorf("node %q has no simulated Neuron devices: the lab in %s has no node with any", o.Node, o.Dir)
		}
		return "", fmt.Errorf("node %q has no simulated Neuron devices in the lab in %s: use one of %s", o.Node, o.Dir, strings.Join(nodes, ", "))
	}
	sim, err := neuron.OpenSimulator(nodeSysfsRoot(o.Dir, o.Node))
	if err != nil {
		return "", fmt.Errorf("node %s: %w", o.Node, err)
	}
	return ApplyFault(sim, o.Node, o.Device, o.Action)
}

// nodeSysfsRoot is where the lab writes a node's simulated tree (SimNode.SysfsRoot and the
// real nodes' tree alike).
func nodeSysfsRoot(dir, node string) string { return filepath.Join(dir, "nodes", node, "sysfs") }

// FaultNodes lists, sorted, the nodes of the lab in dir that have a simulated Neuron tree.
func FaultNodes(dir string) ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(dir, "nodes"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing the lab's nodes: %w", err)
	}
	var out []string
	for _, e := range entries {
		if _, err := neuron.OpenSimulator(nodeSysfsRoot(dir, e.Name())); e.IsDir() && err == nil {
			out = append(out, e.Name())
		}
	}
	return out, nil // os.ReadDir sorts by name
}

// ApplyFault does action to device of a simulated tree (node names it in messages).
func ApplyFault(sim *neuron.Simulator, node string, device int, action FaultAction) (string, error) {
	t := sim.InstanceType()
	if device < 0 || device >= t.Devices {
		return "", fmt.Errorf("node %s has no device %d: its devices are 0 to %d (%s)", node, device, t.Devices-1, t.Name)
	}
	what := fmt.Sprintf("node %s device %d", node, device)
	switch action {
	case FaultECCUncorrected:
		if err := sim.InjectError(device, neuron.MemECC, 1); err != nil {
			if errors.Is(err, neuron.ErrDeviceRemoved) {
				return "", fmt.Errorf("%s is removed: bring it back with --clear first", what)
			}
			return "", fmt.Errorf("%s: %w", what, err)
		}
		return what + ": uncorrected memory ECC error counted (mem_ecc_uncorrected +1)", nil
	case FaultRemove:
		if err := sim.RemoveDevice(device); err != nil {
			return "", fmt.Errorf("%s: %w", what, err)
		}
		return what + ": removed (the driver no longer shows it)", nil
	case FaultClear:
		removed, err := sim.Removed(device)
		if err == nil {
			err = sim.ClearErrors(device)
		}
		if err == nil && removed {
			err = sim.RestoreDevice(device)
		}
		if err != nil {
			return "", fmt.Errorf("%s: %w", what, err)
		}
		return what + ": reset (present, uncorrectable error counters 0)", nil
	}
	return "", fmt.Errorf("unknown fault action %q: use %s, %s or %s", action, FaultECCUncorrected, FaultRemove, FaultClear)
}

// Fault does action to a device of one of the lab's nodes, as `neuron-lab fault` does to a lab
// started by Serve (for tests, which run the lab in their own process).
func (l *Lab) Fault(node string, device int, action FaultAction) (string, error) {
	return faultTree(FaultOptions{Dir: l.cp.Dir(), Node: node, Device: device, Action: action})
}
