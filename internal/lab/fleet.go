package lab

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/kube-neuron/kube-neuron/internal/neuron"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// Allocation modes: which component serves a node's Neuron devices.
const (
	ModeDevicePlugin = "device-plugin"
	ModeDRA          = "dra"
)

// DefaultDriverVersion is the Neuron driver version simulated nodes report by default.
const DefaultDriverVersion = neuron.DefaultDriverVersion

// FleetFile is a fleet description, as `FLEET=path make lab-up` reads it:
//
//	nodes:
//	- {name: trn1-a, instanceType: trn1.32xlarge, mode: device-plugin}
//	- {name: trn2-a, instanceType: trn2.48xlarge, mode: dra, lnc: 2, driverVersion: 2.26.5.0}
//	- {name: us, instanceType: trn2u.48xlarge, mode: dra, count: 4, ultraserver: us-1}
//	reservations:
//	- {id: cr-lab-1, instanceType: trn1.32xlarge, count: 2}
//	- {id: cr-lab-2, instanceType: trn1.32xlarge, count: 1, endTime: "2026-11-27T01:00:00Z"}
type FleetFile struct {
	Nodes []FleetEntry `json:"nodes"`
	// Reservations is the reserved capacity neuron-autoscaler's local provider launches into
	// (Lab.StartAutoscaler passes them with --local-reservations).
	Reservations []FleetReservation `json:"reservations,omitempty"`
}

// FleetReservation is a capacity reservation the lab pretends was bought: Count instances of
// InstanceType that neuron-autoscaler may launch into it at once. With EndTime (RFC 3339) it is
// a Capacity Block for ML, whose nodes are drained and removed before it ends; without, an
// On-Demand Capacity Reservation. The same fields, as JSON, make the file of the autoscaler's
// --local-reservations flag.
type FleetReservation struct {
	ID           string `json:"id"`
	InstanceType string `json:"instanceType"`
	Count        int    `json:"count"`
	EndTime      string `json:"endTime,omitempty"`
}

// FleetEntry is one line of a fleet file.
type FleetEntry struct {
	Name          string `json:"name"`
	InstanceType  string `json:"instanceType"`
	Mode          string `json:"mode,omitempty"`
	LNC           int    `json:"lnc,omitempty"`
	DriverVersion string `json:"driverVersion,omitempty"`
	Count         int    `json:"count,omitempty"`
	UltraServer   string `json:"ultraserver,omitempty"`
	// Kubelet is simulated (the default: the lab's node simulator) or real (a real kubelet,
	// containerd and runc in namespaces of their own: docs/lab.md).
	Kubelet string `json:"kubelet,omitempty"`
}

// NodeSpec is one simulated Neuron node, with every default filled in.
type NodeSpec struct {
	Name          string
	InstanceType  topology.InstanceType
	Mode          string
	LNC           int
	DriverVersion string
	// UltraServer is the identity of the node in its UltraServer (trn2u), nil otherwise.
	UltraServer *neuron.UltraServer
	// UltraServerName is the fleet file's ultraserver value.
	UltraServerName string
	// Kubelet is KubeletSimulated or KubeletReal.
	Kubelet string
}

// DefaultFleet is the lab's fleet when no file is given: one node per accelerator generation.
var DefaultFleet = FleetFile{Nodes: []FleetEntry{
	{Name: "inf2-a", InstanceType: "inf2.48xlarge"},
	{Name: "trn1-a", InstanceType: "trn1.32xlarge"},
	{Name: "trn2-a", InstanceType: "trn2.48xlarge", Mode: ModeDRA},
}}

// LoadFleet reads a fleet file. Unknown fields are errors that name them.
func LoadFleet(path string) (FleetFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return FleetFile{}, fmt.Errorf("reading fleet file: %w", err)
	}
	f, err := ParseFleet(data)
	if err != nil {
		return FleetFile{}, fmt.Errorf("fleet file %s: %w", path, err)
	}
	return f, nil
}

// ParseFleet decodes a fleet document (YAML or JSON) strictly.
func ParseFleet(data []byte) (FleetFile, error) {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return FleetFile{}, fmt.Errorf("not valid YAML: %w", err)
	}
	var f FleetFile
	if bytes.Equal(bytes.TrimSpace(js), []byte("null")) {
		return f, nil
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return FleetFile{}, fmt.Errorf("%w (known fields: nodes, reservations; per node: name, instanceType, mode, lnc, driverVersion, count, ultraserver, kubelet; per reservation: id, instanceType, count, endTime)", err)
	}
	return f, nil
}

// Expand validates the fleet (its reservations too) against the catalog and returns one spec
// per node.
func (f FleetFile) Expand(cat *topology.Catalog) ([]NodeSpec, error) {
	if err := ValidateReservations(f.Reservations, cat); err != nil {
		return nil, err
	}
	var out []NodeSpec
	names := map[string]bool{}
	members := map[string][]int{} // ultraserver name -> indexes into out
	for i, e := range f.Nodes {
		where := fmt.Sprintf("nodes[%d]", i)
		if e.Name == "" {
			return nil, fmt.Errorf("%s: name is required", where)
		}
		where = fmt.Sprintf("nodes[%d] (%s)", i, e.Name)
		it, err := cat.Get(e.InstanceType)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		mode := e.Mode
		if mode == "" {
			mode = ModeDevicePlugin
		}
		if mode != ModeDevicePlugin && mode != ModeDRA {
			return nil, fmt.Errorf("%s: mode %q: use %s or %s", where, e.Mode, ModeDevicePlugin, ModeDRA)
		}
		if e.LNC != 0 {
			if err := it.CheckLNC(e.LNC); err != nil {
				return nil, fmt.Errorf("%s: %w", where, err)
			}
		}
		lnc := e.LNC
		if lnc == 0 {
			lnc = it.DefaultLNC
		}
		if e.Count < 0 {
			return nil, fmt.Errorf("%s: count must not be negative", where)
		}
		if e.UltraServer != "" && it.UltraServerNodes == 0 {
			return nil, fmt.Errorf("%s: ultraserver is only for UltraServer instance types (trn2u), not %s", where, it.Name)
		}
		kubelet := e.Kubelet
		if kubelet == "" {
			kubelet = KubeletSimulated
		}
		if kubelet != KubeletSimulated && kubelet != KubeletReal {
			return nil, fmt.Errorf("%s: kubelet %q: use %s or %s", where, e.Kubelet, KubeletSimulated, KubeletReal)
		}
		version := e.DriverVersion
		if version == "" {
			version = DefaultDriverVersion
		}
		nodeNames := []string{e.Name}
		if e.Count > 0 {
			nodeNames = nil
			for k := range e.Count {
				nodeNames = append(nodeNames, fmt.Sprintf("%s-%d", e.Name, k))
			}
		}
		for _, name := range nodeNames {
			if names[name] {
				return nil, fmt.Errorf("%s: node name %s is used twice", where, name)
			}
			if name == SystemNodeName {
				return nil, fmt.Errorf("%s: node name %s is the lab's own (its system node): pick another name", where, name)
			}
			if msgs := validNodeName(name); msgs != "" {
				return nil, fmt.Errorf("%s: node name %q is not valid: %s", where, name, msgs)
			}
			names[name] = true
			if e.UltraServer != "" {
				members[e.UltraServer] = append(members[e.UltraServer], len(out))
			}
			out = append(out, NodeSpec{Name: name, InstanceType: it, Mode: mode, LNC: lnc, DriverVersion: version, UltraServerName: e.UltraServer, Kubelet: kubelet})
		}
	}
	// Nodes with the same ultraserver value form one UltraServer, in fleet order.
	usNames := make([]string, 0, len(members))
	for name := range members {
		usNames = append(usNames, name)
	}
	sort.Strings(usNames)
	for _, us := range usNames {
		idx := members[us]
		size := out[idx[0]].InstanceType.UltraServerNodes
		if len(idx) > size {
			return nil, fmt.Errorf("ultraserver %s has %d nodes: an UltraServer of %s has at most %d", us, len(idx), out[idx[0]].InstanceType.Name, size)
		}
		sum := sha256.Sum256([]byte(us))
		server4 := hex.EncodeToString(sum[:8])
		for pos, i := range idx {
			pair := sha256.Sum256([]byte(fmt.Sprintf("%s/%d", us, pos/2)))
			out[i].UltraServer = &neuron.UltraServer{
				ServerID4: server4,
				ServerID2: hex.EncodeToString(pair[:8]),
				NodeID4:   pos,
				NodeID2:   pos % 2,
				Mode:      "1_2_4",
			}
		}
	}
	return out, nil
}

// validNodeName checks a node name is a DNS subdomain short enough for socket paths.
func validNodeName(name string) string {
	if len(name) > 40 {
		return "at most 40 characters in the lab"
	}
	for i, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || (r == '-' || r == '.') && i > 0 && i < len(name)-1
		if !ok {
			return "use lower-case letters, digits, '-' and '.', starting and ending with a letter or digit"
		}
	}
	if strings.Contains(name, "..") {
		return "no empty labels"
	}
	return ""
}

// ValidateReservations checks that every reservation has an id used once, an instance type of
// the catalog, a count of at least 1 and, if given, an RFC 3339 end time.
func ValidateReservations(rs []FleetReservation, cat *topology.Catalog) error {
	ids := map[string]bool{}
	for i, r := range rs {
		where := fmt.Sprintf("reservations[%d]", i)
		if r.ID == "" {
			return fmt.Errorf("%s: id is required", where)
		}
		where = fmt.Sprintf("reservations[%d] (%s)", i, r.ID)
		if ids[r.ID] {
			return fmt.Errorf("%s: id %s is used twice", where, r.ID)
		}
		ids[r.ID] = true
		if _, err := cat.Get(r.InstanceType); err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		if r.Count < 1 {
			return fmt.Errorf("%s: count %d: a reservation holds at least 1 instance", where, r.Count)
		}
		if r.EndTime != "" {
			if _, err := time.Parse(time.RFC3339, r.EndTime); err != nil {
				return fmt.Errorf("%s: endTime %q is not an RFC 3339 time such as 2026-11-27T01:00:00Z", where, r.EndTime)
			}
		}
	}
	return nil
}

// reservationsJSON is the --local-reservations file of the reservations: the same fields, the
// end time in UTC.
func reservationsJSON(rs []FleetReservation) ([]byte, error) {
	out := make([]FleetReservation, 0, len(rs))
	for _, r := range rs {
		if r.EndTime != "" {
			end, err := time.Parse(time.RFC3339, r.EndTime)
			if err != nil {
				return nil, fmt.Errorf("reservation %s: endTime %q is not an RFC 3339 time", r.ID, r.EndTime)
			}
			r.EndTime = end.UTC().Format(time.RFC3339)
		}
		out = append(out, r)
	}
	return json.MarshalIndent(out, "", "  ")
}

// ReservationsFile is the name of the file, in the lab's directory, of the reservations the lab
// passes to neuron-autoscaler.
const ReservationsFile = "reservations.json"

// reservationArgs writes the reservations to dir/ReservationsFile and returns the autoscaler's
// flag naming it; nothing without reservations.
func reservationArgs(dir string, rs []FleetReservation) ([]string, error) {
	if len(rs) == 0 {
		return nil, nil
	}
	data, err := reservationsJSON(rs)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, ReservationsFile)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return nil, fmt.Errorf("writing the autoscaler's reservations: %w", err)
	}
	return []string{"--local-reservations=" + path}, nil
}
