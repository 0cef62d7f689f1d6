package neuron

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// Simulator defaults.
const (
	DefaultDriverVersion = "2.26.5.0"
	DefaultEFABusBase    = 0x10
)

// SimOptions describes the node Simulate writes.
type SimOptions struct {
	Root          string                // directory to write into (created)
	InstanceType  topology.InstanceType // any catalog entry
	LNC           int                   // 0: no logical_nc_config (the catalog default applies); 1 or 2: write it
	DriverVersion string                // default DefaultDriverVersion
	UltraServer   *UltraServer          // only for types with UltraServerNodes > 0; nil: not in an UltraServer
	EFA           bool                  // write synthetic EFA PCI devices (families trn1, trn1n, trn2, trn2u, trn3)
	EFABusBase    int                   // first EFA PCI bus; 0 means DefaultEFABusBase. Vary it to tell simulated nodes apart

	// CoreStats also writes every per-core usage counter of the driver, zero, at the start (each
	// memory category, each execution status, nc_time_in_use). Without it a core's counter files
	// appear when the Simulator first moves them, and readers take the absent ones as 0. It
	// costs about 30 directories per core (seconds for a trn2.48xlarge tree on a slow disk).
	CoreStats bool
}

// Simulator is a simulated node's sysfs tree. Its methods change the tree the way the driver
// would, each file replaced atomically, so a concurrent Sysfs reader never sees a half-written
// file. It is safe for concurrent use. The tree itself is the state (counters are read back
// before they are raised, a device is removed when its directory is absent), so several
// Simulators, in several processes (see OpenSimulator), can act on one tree.
type Simulator struct {
	mu   sync.Mutex
	root string
	t    topology.InstanceType
	adj  [][]int
	// comeBack holds, per device, the counters (indexed by Counter-1) RestoreDevice writes: those
	// the device had when this Simulator removed it, zero after ClearErrors.
	comeBack  [][3]uint64
	coreStats bool // SimOptions.CoreStats: RestoreDevice writes every core counter too
	lnc       int  // SimOptions.LNC, or the type's default
	now       func() time.Time
}

// Simulate writes the sysfs tree of a node of opts.InstanceType under opts.Root (start readers
// after it returns; later changes through the Simulator are atomic):
//
//   - per device: core_count (PhysicalCoresPerDevice), connected_devices (topology.Adjacency in
//     the driver's format), info/architecture/{instance_type,device_name,arch_type} and the
//     mem/sram uncorrectable ECC counters (0);
//   - dmi product_name (the type name), the module version, logical_nc_config when opts.LNC is set;
//   - the /sys/class/neuron_device UltraServer attributes: opts.UltraServer, or the values the
//     driver reports on a node outside any UltraServer (server id 0000000000000000, node id -1);
//   - PCI devices: a host bridge and the ENA device, which the reader must skip, and with opts.EFA
//     the EFA devices at EFAAddresses.
//
// Device names by family: inf1 Inferentia/NCv1, inf2 Inferentia2/NCv2, trn1 and trn1n
// Trainium/NCv2, trn2 and trn2u Trainium2/NCv3, trn3 Trainium3/NCv4; other families get no
// device_name or arch_type file.
func Simulate(opts SimOptions) (*Simulator, error) {
	t := opts.InstanceType
	if opts.Root == "" {
		return nil, fmt.Errorf("simulating a Neuron node: SimOptions.Root is empty: give the directory to write the tree into")
	}
	if t.Name == "" || strings.ContainsAny(t.Name, " \t\r\n") {
		return nil, fmt.Errorf("simulating a Neuron node: instance type name %q is empty or has whitespace: pass an entry of the catalog", t.Name)
	}
	if t.PhysicalCoresPerDevice < 1 || t.PhysicalCoresPerDevice > maxCoreCount {
		return nil, fmt.Errorf("simulating %s: physicalCoresPerDevice %d is outside 1..%d", t.Name, t.PhysicalCoresPerDevice, maxCoreCount)
	}
	adj, err := topology.Adjacency(t.Topology, t.Devices)
	if err != nil {
		return nil, fmt.Errorf("simulating %s: %w", t.Name, err)
	}
	if opts.LNC != 0 {
		if err := t.CheckLNC(opts.LNC); err != nil {
			return nil, fmt.Errorf("simulating %s: SimOptions.LNC: %w", t.Name, err)
		}
		if opts.LNC != 1 && opts.LNC != 2 {
			return nil, fmt.Errorf("simulating %s: SimOptions.LNC is %d: use 0 (no file), 1 or 2", t.Name, opts.LNC)
		}
	}
	if opts.DriverVersion == "" {
		opts.DriverVersion = DefaultDriverVersion
	}
	if strings.TrimSpace(opts.DriverVersion) != opts.DriverVersion || strings.ContainsAny(opts.DriverVersion, "\r\n") {
		return nil, fmt.Errorf("simulating %s: SimOptions.DriverVersion %q has surrounding whitespace or a line break", t.Name, opts.DriverVersion)
	}
	if opts.EFABusBase < 0 || opts.EFABusBase > 0xffff {
		return nil, fmt.Errorf("simulating %s: SimOptions.EFABusBase %#x is outside 0..0xffff", t.Name, opts.EFABusBase)
	}
	if err := checkSimUltraServer(t, opts.UltraServer); err != nil {
		return nil, fmt.Errorf("simulating %s: %w", t.Name, err)
	}

	s := newSimulator(opts.Root, t, adj)
	s.coreStats = opts.CoreStats
	s.lnc = opts.LNC
	if s.lnc == 0 {
		s.lnc = t.DefaultLNC
	}
	if err := s.writeNode(opts); err != nil {
		return nil, fmt.Errorf("simulating %s in %s: %w", t.Name, opts.Root, err)
	}
	return s, nil
}

func checkSimUltraServer(t topology.InstanceType, us *UltraServer) error {
	if us == nil {
		return nil
	}
	if t.UltraServerNodes <= 0 {
		return fmt.Errorf("SimOptions.UltraServer is set but %s is not an UltraServer type (its ultraServerNodes is 0)", t.Name)
	}
	if strings.Trim(us.ServerID4, "0") == "" {
		return fmt.Errorf("SimOptions.UltraServer.ServerID4 %q is empty or all zeros, which the driver reports for a node outside any UltraServer: give an id such as 00000000000000a1", us.ServerID4)
	}
	for name, v := range map[string]string{"ServerID2": us.ServerID2, "ServerID4": us.ServerID4, "Mode": us.Mode} {
		if strings.TrimSpace(v) != v || strings.ContainsAny(v, "\r\n") {
			return fmt.Errorf("SimOptions.UltraServer.%s %q has surrounding whitespace or a line break", name, v)
		}
	}
	if us.NodeID4 < 0 || us.NodeID4 >= t.UltraServerNodes {
		return fmt.Errorf("SimOptions.UltraServer.NodeID4 %d is outside 0..%d for %s", us.NodeID4, t.UltraServerNodes-1, t.Name)
	}
	if us.NodeID2 < -1 || us.NodeID2 > 1 {
		return fmt.Errorf("SimOptions.UltraServer.NodeID2 %d is not -1 (none), 0 or 1", us.NodeID2)
	}
	return nil
}

func newSimulator(root string, t topology.InstanceType, adj [][]int) *Simulator {
	return &Simulator{root: root, t: t, adj: adj, comeBack: make([][3]uint64, t.Devices), now: time.Now}
}

// Root returns the directory the tree is written under; pass it as Sysfs.Root.
func (s *Simulator) Root() string { return s.root }

// InjectError adds n to a device's error counter, as the driver does on an ECC error
// (MemECCRepairable does not change Device.ErrorCount or the device's health).
func (s *Simulator) InjectError(device int, counter Counter, n uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkDevice(device); err != nil {
		return err
	}
	if !counter.valid() {
		return fmt.Errorf("injecting an error: unknown counter %v: use MemECC, SRAMECC or MemECCRepairable", counter)
	}
	if err := s.checkPresent(device); err != nil {
		return fmt.Errorf("injecting an error: %w", err)
	}
	cur, err := readStatValue(filepath.Join(s.deviceDir(device), counterPath(counter)), "event count")
	if err != nil {
		return fmt.Errorf("injecting an error on device %d: %w", device, err)
	}
	if n > math.MaxUint64-cur {
		return fmt.Errorf("injecting an error on device %d: %s would overflow (now %d, adding %d)", device, counter, cur, n)
	}
	if err := s.writeCounter(s.deviceDir(device), counter, cur+n); err != nil {
		return fmt.Errorf("injecting an error on device %d: %w", device, err)
	}
	return nil
}

// ClearErrors resets a device's error counters to 0. The driver's counters never go down while
// it runs; this simulates a driver reload or device reset, after which consumers treat the
// device as healthy again. On a removed device it resets the counters the device comes back with.
func (s *Simulator) ClearErrors(device int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkDevice(device); err != nil {
		return err
	}
	removed, err := s.isRemoved(device)
	if err != nil {
		return fmt.Errorf("clearing the errors of device %d: %w", device, err)
	}
	if !removed {
		for _, c := range allCounters() {
			if err := s.writeCounter(s.deviceDir(device), c, 0); err != nil {
				return fmt.Errorf("clearing the errors of device %d: %w", device, err)
			}
		}
	}
	s.comeBack[device] = [3]uint64{}
	return nil
}

// RemoveDevice removes a device's directory in one step, as when the driver drops a failed
// device. Sysfs.Discover then fails with an error naming the device.
func (s *Simulator) RemoveDevice(device int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkDevice(device); err != nil {
		return err
	}
	removed, err := s.isRemoved(device)
	if err != nil {
		return fmt.Errorf("removing device %d: %w", device, err)
	}
	if removed {
		return fmt.Errorf("removing device %d: it is already removed", device)
	}
	var kept [3]uint64
	for _, c := range allCounters() {
		if kept[c-1], err = readStatValue(filepath.Join(s.deviceDir(device), counterPath(c)), "event count"); err != nil {
			return fmt.Errorf("removing device %d: %w", device, err)
		}
	}
	trash, err := s.tempDir(".sim-trash")
	if err != nil {
		return fmt.Errorf("removing device %d: %w", device, err)
	}
	defer os.RemoveAll(trash)
	if err := os.Rename(s.deviceDir(device), filepath.Join(trash, "device")); err != nil {
		return fmt.Errorf("removing device %d: %w", device, err)
	}
	s.comeBack[device] = kept
	return nil
}

// RestoreDevice brings back a removed device, in one step, with the error counters it had when
// this Simulator removed it (0 after ClearErrors, or when another Simulator removed it) and the
// usage counters of a fresh device (zero, power valid at 0 %).
func (s *Simulator) RestoreDevice(device int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkDevice(device); err != nil {
		return err
	}
	removed, err := s.isRemoved(device)
	if err != nil {
		return fmt.Errorf("restoring device %d: %w", device, err)
	}
	if !removed {
		return fmt.Errorf("restoring device %d: it is not removed", device)
	}
	staging, err := s.tempDir(".sim-staging")
	if err != nil {
		return fmt.Errorf("restoring device %d: %w", device, err)
	}
	defer os.RemoveAll(staging)
	dir := filepath.Join(staging, "device")
	if err := s.writeDevice(dir, device); err != nil { // invisible until the rename
		return fmt.Errorf("restoring device %d: %w", device, err)
	}
	if err := os.Rename(dir, s.deviceDir(device)); err != nil {
		return fmt.Errorf("restoring device %d: %w", device, err)
	}
	return nil
}

func (s *Simulator) checkDevice(device int) error {
	if device < 0 || device >= s.t.Devices {
		return fmt.Errorf("device %d does not exist: %s has devices 0 to %d", device, s.t.Name, s.t.Devices-1)
	}
	return nil
}

// Removed reports whether the device is removed (by this or another Simulator of the tree).
func (s *Simulator) Removed(device int) (bool, error) {
	if err := s.checkDevice(device); err != nil {
		return false, err
	}
	return s.isRemoved(device)
}

// isRemoved reports whether the device's directory is absent (removed by this or another
// Simulator).
func (s *Simulator) isRemoved(device int) (bool, error) {
	_, err := os.Stat(s.deviceDir(device))
	if errors.Is(err, fs.ErrNotExist) {
		return true, nil
	}
	return false, err
}

// checkPresent returns an error when the device is removed.
func (s *Simulator) checkPresent(device int) error {
	removed, err := s.isRemoved(device)
	if err != nil {
		return err
	}
	if removed {
		return fmt.Errorf("device %d: %w", device, ErrDeviceRemoved)
	}
	return nil
}

func (s *Simulator) deviceDir(device int) string {
	return filepath.Join(s.root, devicesDir, fmt.Sprintf("neuron%d", device))
}

// tempDir makes a fresh directory under root/parent, on the tree's file system so renames
// between it and the tree are atomic; the reader never looks there.
func (s *Simulator) tempDir(parent string) (string, error) {
	p := filepath.Join(s.root, parent)
	if err := os.MkdirAll(p, 0o755); err != nil {
		return "", err
	}
	return os.MkdirTemp(p, "neuron")
}

func (s *Simulator) writeNode(opts SimOptions) error {
	t := s.t
	for i := range t.Devices {
		if err := s.writeDevice(s.deviceDir(i), i); err != nil {
			return err
		}
	}
	if err := writeSimMarker(s.root, t, opts.LNC); err != nil {
		return err
	}
	files := map[string]string{
		productNameFile:   t.Name + "\n",
		driverVersionFile: opts.DriverVersion + "\n",
	}
	if opts.LNC != 0 {
		files[lncConfigFile] = fmt.Sprintf("%s=%d\n", lncKey, opts.LNC)
	}
	us := UltraServer{ServerID2: "0000000000000000", ServerID4: "0000000000000000", NodeID2: -1, NodeID4: -1}
	if opts.UltraServer != nil {
		us = *opts.UltraServer
		if us.ServerID2 == "" {
			us.ServerID2 = "0000000000000000"
		}
	}
	files[filepath.Join(classDir, "server_id_2")] = us.ServerID2 + "\n"
	files[filepath.Join(classDir, "server_id_4")] = us.ServerID4 + "\n"
	files[filepath.Join(classDir, "node_id_2")] = strconv.Itoa(us.NodeID2) + "\n"
	files[filepath.Join(classDir, "node_id_4")] = strconv.Itoa(us.NodeID4) + "\n"
	files[filepath.Join(classDir, "ultraserver_mode")] = us.Mode + "\n"

	pci := map[string][2]string{
		"0000:00:00.0": {"0x8086", "0x1237"},        // host bridge
		"0000:00:05.0": {amazonPCIVendor, "0xec20"}, // ENA: Amazon's vendor id, not an EFA
	}
	if opts.EFA {
		id := efaDeviceIDOf(t.Family)
		for _, a := range EFAAddresses(t, opts.EFABusBase) {
			if a != "" {
				pci[a] = [2]string{amazonPCIVendor, id}
			}
		}
	}
	for addr, ids := range pci {
		files[filepath.Join(pciDevicesDir, addr, "vendor")] = ids[0] + "\n"
		files[filepath.Join(pciDevicesDir, addr, "device")] = ids[1] + "\n"
	}
	for rel, content := range files {
		if err := writeFilePlain(filepath.Join(s.root, rel), []byte(content)); err != nil {
			return err
		}
	}
	return nil
}

// writeDevice writes device i's files into dir, which no reader sees yet.
func (s *Simulator) writeDevice(dir string, i int) error {
	name, arch := familyArch(s.t.Family)
	files := map[string]string{
		coreCountFile:        strconv.Itoa(s.t.PhysicalCoresPerDevice), // the driver prints no newline
		connectedDevicesFile: formatConnectedDevices(s.adj[i]),
		filepath.Join(architectureDir, "instance_type"): s.t.Name + "\n",
	}
	if name != "" {
		files[filepath.Join(architectureDir, "device_name")] = name + "\n"
		files[filepath.Join(architectureDir, "arch_type")] = arch + "\n"
	}
	for _, c := range allCounters() {
		v := strconv.FormatUint(s.comeBack[i][c-1], 10) + "\n"
		files[counterPath(c)] = v
		files[filepath.Join(hardwareStatsDir, c.String(), counterPresentFile)] = v
	}
	files[powerUtilizationFile] = formatPower(s.now(), 0)
	w := newTreeWriter(dir)
	for rel, content := range files {
		if err := w.write(rel, []byte(content)); err != nil {
			return err
		}
	}
	if !s.coreStats {
		return nil
	}
	return s.writeCoreStats(w)
}

func counterPath(c Counter) string {
	return filepath.Join(hardwareStatsDir, c.String(), counterTotalFile)
}

// writeCounter replaces a counter file of a live device atomically.
func (s *Simulator) writeCounter(deviceDir string, c Counter, v uint64) error {
	return writeFileAtomic(filepath.Join(deviceDir, counterPath(c)), []byte(strconv.FormatUint(v, 10)+"\n"))
}

// formatConnectedDevices formats a connected_devices list as the driver does: "12, 3, 4, 1\n",
// "\n" when empty.
func formatConnectedDevices(l []int) string {
	parts := make([]string, len(l))
	for i, d := range l {
		parts[i] = strconv.Itoa(d)
	}
	return strings.Join(parts, ", ") + "\n"
}

func familyArch(family string) (deviceName, archType string) {
	switch family {
	case "inf1":
		return "Inferentia", "NCv1"
	case "inf2":
		return "Inferentia2", "NCv2"
	case "trn1", "trn1n":
		return "Trainium", "NCv2"
	case "trn2", "trn2u":
		return "Trainium2", "NCv3"
	case "trn3":
		return "Trainium3", "NCv4"
	}
	return "", ""
}

// efaCount is the number of EFA devices the simulator gives a type: trn1 one per two devices,
// trn1n, trn2, trn2u and trn3 one per device, other families none.
func efaCount(t topology.InstanceType) int {
	switch t.Family {
	case "trn1":
		if t.Devices%2 == 0 {
			return t.Devices / 2
		}
	case "trn1n", "trn2", "trn2u", "trn3":
		return t.Devices
	}
	return 0
}

func efaDeviceIDOf(family string) string {
	switch family {
	case "trn2", "trn2u":
		return "0xefa2"
	case "trn3":
		return "0xefa3"
	}
	return "0xefa1"
}

// EFAAddresses returns, per device of t, the PCI address of the EFA device Simulate (with EFA
// set) writes for it and that Sysfs pairs it with; "" for every device of a family without EFA
// devices in the simulator (see SimOptions.EFA). EFA k is at bus busBase+k of domain 0000 (carried
// into the domain past bus ff); busBase <= 0 means DefaultEFABusBase, and it should not exceed
// 0xffff (Simulate rejects larger values).
func EFAAddresses(t topology.InstanceType, busBase int) []string {
	if busBase <= 0 {
		busBase = DefaultEFABusBase
	}
	out := make([]string, max(t.Devices, 0))
	e := efaCount(t)
	if e == 0 {
		return out
	}
	per := t.Devices / e
	for i := range out {
		bus := busBase + i/per
		out[i] = fmt.Sprintf("%04x:%02x:00.0", bus>>8, bus&0xff)
	}
	return out
}

// writeFilePlain writes a file no reader can see yet (a new tree, a staging directory).
func writeFilePlain(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

// writeFileAtomic replaces a file of the live tree through a temporary file in the same
// directory and a rename. It creates no directory: a file of a device removed meanwhile fails
// (with fs.ErrNotExist) instead of bringing part of the device back.
func writeFileAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	_, werr := f.Write(data)
	merr := f.Chmod(0o644)
	if err := errors.Join(werr, merr, f.Close()); err != nil {
		os.Remove(f.Name())
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		os.Remove(f.Name())
		return err
	}
	return nil
}
