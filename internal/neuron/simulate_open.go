package neuron

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// simMarkerFile, under a simulated tree's root, records what Simulate wrote so OpenSimulator can
// act on the tree later; Sysfs never reads it.
const simMarkerFile = ".sim/node.json"

// simMarker is the content of simMarkerFile.
type simMarker struct {
	InstanceType topology.InstanceType `json:"instanceType"`
	LNC          int                   `json:"lnc"` // as the node runs: SimOptions.LNC, else the type's default
}

func writeSimMarker(root string, t topology.InstanceType, lnc int) error {
	if lnc == 0 {
		lnc = t.DefaultLNC
	}
	data, err := json.Marshal(simMarker{InstanceType: t, LNC: lnc})
	if err != nil {
		return err
	}
	return writeFilePlain(filepath.Join(root, simMarkerFile), append(data, '\n'))
}

// OpenSimulator returns a Simulator for a tree Simulate wrote earlier under root, possibly in
// another process (a running lab): its changes are seen by every reader and Simulator of the
// tree. It fails when root holds no simulated tree, so it never writes into a real /sys.
func OpenSimulator(root string) (*Simulator, error) {
	path := filepath.Join(root, simMarkerFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s holds no simulated Neuron tree (%s does not exist): give the root a Simulate call wrote", root, path)
	}
	if err != nil {
		return nil, fmt.Errorf("opening the simulated Neuron tree: %w", err)
	}
	var m simMarker
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("opening the simulated Neuron tree: %s: %w", path, err)
	}
	t := m.InstanceType
	if t.Name == "" || t.Devices < 1 || t.PhysicalCoresPerDevice < 1 || t.PhysicalCoresPerDevice > maxCoreCount {
		return nil, fmt.Errorf("opening the simulated Neuron tree: %s describes no usable instance type (name %q, %d devices, %d cores per device)", path, t.Name, t.Devices, t.PhysicalCoresPerDevice)
	}
	adj, err := topology.Adjacency(t.Topology, t.Devices)
	if err != nil {
		return nil, fmt.Errorf("opening the simulated Neuron tree of %s: %w", t.Name, err)
	}
	if _, err := os.Stat(filepath.Join(root, devicesDir)); err != nil {
		return nil, fmt.Errorf("opening the simulated Neuron tree: %w", err)
	}
	s := newSimulator(root, t, adj)
	s.lnc = m.LNC
	return s, nil
}

// InstanceType returns the instance type the tree simulates.
func (s *Simulator) InstanceType() topology.InstanceType { return s.t }

// LNC returns the node's logical NeuronCore config: SimOptions.LNC, or the type's default when
// that was 0 (0 for a tree written before Simulate recorded it).
func (s *Simulator) LNC() int { return s.lnc }
