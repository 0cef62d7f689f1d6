package neuron

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// Paths relative to the root; see the package documentation.
const (
	devicesDir        = "sys/devices/virtual/neuron_device"
	productNameFile   = "sys/devices/virtual/dmi/id/product_name"
	lncConfigFile     = "opt/aws/neuron/logical_nc_config"
	driverVersionFile = "sys/module/neuron/version"
	classDir          = "sys/class/neuron_device"
	pciDevicesDir     = "sys/bus/pci/devices"

	coreCountFile        = "core_count"
	connectedDevicesFile = "connected_devices"
	architectureDir      = "info/architecture"
	hardwareStatsDir     = "stats/hardware"
	counterTotalFile     = "total"

	lncKey = "NEURON_LOGICAL_NC_CONFIG"

	amazonPCIVendor = "0x1d0f"

	maxAttributeSize = 64 << 10 // sysfs attributes are at most a page; anything larger is not one
	maxCoreCount     = 64       // the catalog's bound on physical cores per device
	maxDeviceIndex   = 4095     // device numbers above this are not Neuron devices
)

// isEFADeviceID reports whether a PCI device id (as sysfs prints it) is an EFA device.
func isEFADeviceID(id string) bool {
	switch id {
	case "0xefa0", "0xefa1", "0xefa2", "0xefa3":
		return true
	}
	return false
}

// Sysfs reads the Neuron devices from sysfs (and the LNC setting from /opt/aws/neuron). Root is
// the directory the paths are relative to: "" or "/" for the real root, the host root mounted
// into a container, or a simulated tree (see Simulate).
type Sysfs struct {
	Root string
}

var _ Hardware = (*Sysfs)(nil)

func (s *Sysfs) path(rel ...string) string {
	root := s.Root
	if root == "" {
		root = "/"
	}
	return filepath.Join(append([]string{root}, rel...)...)
}

// Discover reads the node. Devices must be numbered neuron0..neuronN-1 without gaps; a device
// that has disappeared is an error naming it (a vanished highest-numbered device is found through
// the links of the others, or, on a single-device node, as no devices at all).
func (s *Sysfs) Discover(ctx context.Context) (*Node, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("discovering Neuron devices: %w", err)
	}
	count, err := s.deviceCount()
	if err != nil {
		return nil, err
	}
	node := &Node{Devices: make([]Device, count)}
	adj := make([][]int, count)
	for i := range count {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("discovering Neuron devices: %w", err)
		}
		d, err := s.readDevice(i)
		if err != nil {
			return nil, err
		}
		node.Devices[i] = d
		adj[i] = d.Connected
	}
	if err := s.checkLinks(adj); err != nil {
		return nil, err
	}
	if node.InstanceType, err = s.instanceType(node.Devices[0]); err != nil {
		return nil, err
	}
	if node.LNC, err = s.lnc(); err != nil {
		return nil, err
	}
	version, _, err := readAttribute(s.path(driverVersionFile))
	if err != nil {
		return nil, err
	}
	node.DriverVersion = strings.TrimSpace(string(version))
	if node.UltraServer, err = s.ultraServer(); err != nil {
		return nil, err
	}
	efas, err := s.efaAddresses()
	if err != nil {
		return nil, err
	}
	if len(efas) > 0 {
		if count%len(efas) != 0 {
			return nil, fmt.Errorf("found %d EFA devices under %s (%s) for %d Neuron devices: the EFA count must divide the device count to pair each device with an EFA; check that every EFA interface of the instance is attached (fi_info -p efa)",
				len(efas), s.path(pciDevicesDir), strings.Join(efas, ", "), count)
		}
		per := count / len(efas)
		for i := range node.Devices {
			node.Devices[i].EFAAddress = efas[i/per]
		}
	}
	return node, nil
}

// deviceCount lists the neuronN directories and checks they are numbered without gaps.
func (s *Sysfs) deviceCount() (int, error) {
	dir := s.path(devicesDir)
	noDevices := fmt.Errorf("no Neuron devices were found under %s: check that the Neuron driver is loaded (lsmod | grep neuron) or that --sysfs-root points at the right place", dir)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, noDevices
	}
	if err != nil {
		return 0, fmt.Errorf("listing Neuron devices: %w", err)
	}
	present := map[int]bool{}
	highest := -1
	for _, e := range entries {
		n, ok := parseDeviceDirName(e.Name())
		if !ok {
			continue
		}
		info, err := os.Stat(filepath.Join(dir, e.Name())) // follows symlinks
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed while listing
		}
		if err != nil {
			return 0, fmt.Errorf("listing Neuron devices: %w", err)
		}
		if !info.IsDir() {
			continue
		}
		present[n] = true
		highest = max(highest, n)
	}
	if highest < 0 {
		return 0, noDevices
	}
	for i := range highest {
		if !present[i] {
			return 0, fmt.Errorf("device neuron%d is missing under %s although neuron%d exists: devices must be numbered from 0 without gaps; check dmesg for Neuron driver errors about that device", i, dir, highest)
		}
	}
	return highest + 1, nil
}

// parseDeviceDirName returns N for a directory named neuronN (N in canonical decimal).
func parseDeviceDirName(name string) (int, bool) {
	digits, ok := strings.CutPrefix(name, "neuron")
	if !ok || !isDigits(digits) || (len(digits) > 1 && digits[0] == '0') || len(digits) > 4 {
		return 0, false
	}
	n, err := strconv.Atoi(digits)
	if err != nil || n > maxDeviceIndex {
		return 0, false
	}
	return n, true
}

func (s *Sysfs) readDevice(i int) (Device, error) {
	dir := s.path(devicesDir, fmt.Sprintf("neuron%d", i))
	d := Device{Index: i}

	path := filepath.Join(dir, coreCountFile)
	data, err := readRequired(path)
	if err != nil {
		return Device{}, err
	}
	if d.PhysicalCores, err = parseCoreCount(data); err != nil {
		return Device{}, fmt.Errorf("%s: %w", path, err)
	}

	path = filepath.Join(dir, connectedDevicesFile)
	if data, err = readRequired(path); err != nil {
		return Device{}, err
	}
	if d.Connected, err = parseConnectedDevices(data); err != nil {
		return Device{}, fmt.Errorf("%s: %w", path, err)
	}

	for _, f := range []struct {
		name string
		dst  *string
	}{{"instance_type", &d.InstanceType}, {"device_name", &d.DeviceName}, {"arch_type", &d.ArchType}} {
		data, _, err := readAttribute(filepath.Join(dir, architectureDir, f.name))
		if err != nil {
			return Device{}, err
		}
		*f.dst = strings.TrimSpace(string(data))
	}

	for _, c := range []struct {
		counter Counter
		dst     *uint64
	}{{MemECC, &d.MemECCUncorrected}, {SRAMECC, &d.SRAMECCUncorrected}} {
		path := filepath.Join(dir, hardwareStatsDir, c.counter.String(), counterTotalFile)
		data, ok, err := readAttribute(path)
		if err != nil {
			return Device{}, err
		}
		if !ok {
			continue // absent: the driver does not report this counter; 0
		}
		if *c.dst, err = parseCounter(data); err != nil {
			return Device{}, fmt.Errorf("%s: %w", path, err)
		}
	}
	return d, nil
}

// checkLinks validates the connected_devices lists against the device count and each other.
func (s *Sysfs) checkLinks(adj [][]int) error {
	n := len(adj)
	for i, l := range adj {
		path := s.path(devicesDir, fmt.Sprintf("neuron%d", i), connectedDevicesFile)
		for _, j := range l {
			if j == i {
				return fmt.Errorf("%s lists the device itself (%d): a device cannot be connected to itself; the driver or the file is broken", path, j)
			}
			if j >= n {
				return fmt.Errorf("%s lists device %d, but only neuron0 to neuron%d exist under %s: device neuron%d is missing (check dmesg for Neuron driver errors) or the file is corrupt",
					path, j, n-1, s.path(devicesDir), j)
			}
		}
	}
	if _, err := topology.NewGraph(adj); err != nil {
		return fmt.Errorf("the connected_devices files under %s are inconsistent: %w", s.path(devicesDir), err)
	}
	return nil
}

func (s *Sysfs) instanceType(dev0 Device) (string, error) {
	path := s.path(productNameFile)
	data, _, err := readAttribute(path)
	if err != nil {
		return "", err
	}
	if t := strings.TrimSpace(string(data)); t != "" {
		return t, nil
	}
	if dev0.InstanceType != "" {
		return dev0.InstanceType, nil
	}
	return "", fmt.Errorf("cannot tell the instance type: %s and %s are both absent or empty; run on an EC2 instance or point --sysfs-root at a root that has them",
		path, s.path(devicesDir, "neuron0", architectureDir, "instance_type"))
}

func (s *Sysfs) lnc() (int, error) {
	path := s.path(lncConfigFile)
	data, ok, err := readAttribute(path)
	if err != nil || !ok {
		return 0, err
	}
	lnc, err := parseLNCConfig(data)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return lnc, nil
}

// ultraServer reads the class attributes. Drivers that know no UltraServer either leave them
// out or report server id 0000000000000000 and node id -1: both give nil.
func (s *Sysfs) ultraServer() (*UltraServer, error) {
	read := func(name string) (string, bool, error) {
		data, ok, err := readAttribute(s.path(classDir, name))
		return strings.TrimSpace(string(data)), ok, err
	}
	nodeID := func(name string) (int, error) {
		v, ok, err := read(name)
		if err != nil || !ok {
			return -1, err
		}
		id, err := parseNodeID(v)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", s.path(classDir, name), err)
		}
		return id, nil
	}
	node4, err := nodeID("node_id_4")
	if err != nil {
		return nil, err
	}
	server4, _, err := read("server_id_4")
	if err != nil {
		return nil, err
	}
	if strings.Trim(server4, "0") == "" {
		return nil, nil
	}
	if node4 < 0 {
		return nil, fmt.Errorf("%s is %s but %s is absent or -1: the driver reports an UltraServer without this node's position in it; check dmesg for Neuron driver errors",
			s.path(classDir, "server_id_4"), server4, s.path(classDir, "node_id_4"))
	}
	us := &UltraServer{ServerID4: server4, NodeID4: node4}
	if us.NodeID2, err = nodeID("node_id_2"); err != nil {
		return nil, err
	}
	if us.ServerID2, _, err = read("server_id_2"); err != nil {
		return nil, err
	}
	if strings.Trim(us.ServerID2, "0") == "" {
		us.ServerID2 = ""
	}
	if us.Mode, _, err = read("ultraserver_mode"); err != nil {
		return nil, err
	}
	return us, nil
}

// efaAddresses returns the PCI addresses of the EFA devices, in ascending address order.
func (s *Sysfs) efaAddresses() ([]string, error) {
	dir := s.path(pciDevicesDir)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing PCI devices for EFA pairing: %w", err)
	}
	type efa struct {
		addr string
		key  uint64
	}
	var found []efa
	for _, e := range entries {
		vendor, ok, err := readAttribute(filepath.Join(dir, e.Name(), "vendor"))
		if err != nil {
			return nil, err
		}
		if !ok || strings.ToLower(strings.TrimSpace(string(vendor))) != amazonPCIVendor {
			continue
		}
		device, _, err := readAttribute(filepath.Join(dir, e.Name(), "device"))
		if err != nil {
			return nil, err
		}
		if !isEFADeviceID(strings.ToLower(strings.TrimSpace(string(device)))) {
			continue
		}
		key, ok := parseBDF(e.Name())
		if !ok {
			return nil, fmt.Errorf("%s is an EFA device but its name is not a PCI address (DDDD:BB:DD.F)", filepath.Join(dir, e.Name()))
		}
		found = append(found, efa{e.Name(), key})
	}
	slices.SortFunc(found, func(a, b efa) int {
		if a.key != b.key {
			if a.key < b.key {
				return -1
			}
			return 1
		}
		return strings.Compare(a.addr, b.addr)
	})
	addrs := make([]string, len(found))
	for i, f := range found {
		addrs[i] = f.addr
	}
	return addrs, nil
}

// readAttribute reads a sysfs attribute; ok is false (with no error) when it does not exist.
func readAttribute(path string) (data []byte, ok bool, err error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if errors.Is(err, fs.ErrPermission) {
		return nil, false, fmt.Errorf("reading Neuron sysfs: %w: the Neuron driver makes core_count and connected_devices readable by root only; run as root", err)
	}
	if err != nil {
		return nil, false, fmt.Errorf("reading Neuron sysfs: %w", err)
	}
	defer f.Close()
	data, err = io.ReadAll(io.LimitReader(f, maxAttributeSize+1))
	if err != nil {
		return nil, false, fmt.Errorf("reading Neuron sysfs: %w", err)
	}
	if len(data) > maxAttributeSize {
		return nil, false, fmt.Errorf("%s is larger than %d bytes, which no sysfs attribute is: check that --sysfs-root points at the right place", path, maxAttributeSize)
	}
	return data, true, nil
}

// readRequired is readAttribute for a file the driver always creates.
func readRequired(path string) ([]byte, error) {
	data, ok, err := readAttribute(path)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%s does not exist, but the Neuron driver creates it for every device: the device is being removed or --sysfs-root points at the wrong place", path)
	}
	return data, nil
}

// parseCoreCount parses core_count: a decimal number of physical cores (the driver prints it
// without a newline; surrounding whitespace is ignored).
func parseCoreCount(data []byte) (int, error) {
	s := strings.TrimSpace(string(data))
	if isDigits(s) && len(s) <= 3 {
		if n, _ := strconv.Atoi(s); n >= 1 && n <= maxCoreCount {
			return n, nil
		}
	}
	return 0, fmt.Errorf("expected a decimal core count between 1 and %d, got %s", maxCoreCount, quote(s))
}

// parseConnectedDevices parses connected_devices as the driver writes it ("12, 3, 4, 1\n", or
// "\n" for a device without links) and returns the device numbers ascending.
func parseConnectedDevices(data []byte) ([]int, error) {
	s := strings.TrimSpace(string(data))
	out := []int{}
	if s == "" {
		return out, nil
	}
	seen := map[int]bool{}
	for i, part := range strings.Split(s, ",") {
		t := strings.TrimSpace(part)
		if !isDigits(t) || len(t) > 4 {
			return nil, fmt.Errorf("expected comma-separated device numbers such as \"12, 3, 4, 1\", got %s (entry %d is %s)", quote(s), i+1, quote(t))
		}
		n, _ := strconv.Atoi(t)
		if n > maxDeviceIndex {
			return nil, fmt.Errorf("entry %d is device %d, above the highest possible device number %d", i+1, n, maxDeviceIndex)
		}
		if seen[n] {
			return nil, fmt.Errorf("lists device %d twice in %s", n, quote(s))
		}
		seen[n] = true
		out = append(out, n)
	}
	slices.Sort(out)
	return out, nil
}

// parseCounter parses a stats counter: a decimal uint64 with surrounding whitespace.
func parseCounter(data []byte) (uint64, error) {
	s := strings.TrimSpace(string(data))
	if isDigits(s) {
		if n, err := strconv.ParseUint(s, 10, 64); err == nil {
			return n, nil
		}
	}
	return 0, fmt.Errorf("expected a decimal error count (0 to %d), got %s", uint64(1<<64-1), quote(s))
}

// parseNodeID parses a class node_id attribute: a decimal number, -1 when the node has none,
// or "busy" while the driver is still electing.
func parseNodeID(s string) (int, error) {
	if s == "busy" {
		return 0, ErrUltraServerBusy
	}
	if s == "-1" {
		return -1, nil
	}
	if isDigits(s) && len(s) <= 4 {
		n, _ := strconv.Atoi(s)
		return n, nil
	}
	return 0, fmt.Errorf("expected a decimal node id, -1 or busy, got %s", quote(s))
}

// parseLNCConfig parses logical_nc_config: one line NEURON_LOGICAL_NC_CONFIG=1 or =2, with
// optional surrounding whitespace, quotes around the value, blank lines and # comments.
func parseLNCConfig(data []byte) (int, error) {
	lnc := 0
	for i, line := range strings.Split(string(data), "\n") {
		l := strings.TrimSpace(line)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		key, val, ok := strings.Cut(l, "=")
		if !ok || strings.TrimSpace(key) != lncKey {
			return 0, fmt.Errorf("line %d: expected %s=1 or %s=2, got %s", i+1, lncKey, lncKey, quote(l))
		}
		if c := strings.IndexByte(val, '#'); c >= 0 {
			val = val[:c]
		}
		val = strings.TrimSpace(val)
		if len(val) >= 2 && (val[0] == '"' || val[0] == '\'') && val[len(val)-1] == val[0] {
			val = strings.TrimSpace(val[1 : len(val)-1])
		}
		if lnc != 0 {
			return 0, fmt.Errorf("line %d sets %s a second time: keep a single line", i+1, lncKey)
		}
		switch val {
		case "1":
			lnc = 1
		case "2":
			lnc = 2
		default:
			return 0, fmt.Errorf("line %d: %s value %s is not valid: it must be 1 or 2", i+1, lncKey, quote(val))
		}
	}
	if lnc == 0 {
		return 0, fmt.Errorf("no %s line: set %s=1 or %s=2, or remove the file to use the instance type's default", lncKey, lncKey, lncKey)
	}
	return lnc, nil
}

// parseBDF parses a PCI address DDDD:BB:DD.F (domain of 4 to 8 hex digits) into a sort key.
func parseBDF(s string) (uint64, bool) {
	domain, rest, ok1 := strings.Cut(s, ":")
	bus, rest, ok2 := strings.Cut(rest, ":")
	dev, fn, ok3 := strings.Cut(rest, ".")
	if !ok1 || !ok2 || !ok3 || len(domain) < 4 || len(domain) > 8 || len(bus) != 2 || len(dev) != 2 || len(fn) != 1 {
		return 0, false
	}
	d, err1 := strconv.ParseUint(domain, 16, 32)
	b, err2 := strconv.ParseUint(bus, 16, 8)
	v, err3 := strconv.ParseUint(dev, 16, 8)
	f, err4 := strconv.ParseUint(fn, 8, 8)
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil || v > 0x1f || !isHex(domain+bus+dev) {
		return 0, false
	}
	return d<<16 | b<<8 | v<<3 | f, true
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// quote quotes s for an error message, shortened when long.
func quote(s string) string {
	const limit = 60
	if len(s) > limit {
		return strconv.Quote(s[:limit]) + "..."
	}
	return strconv.Quote(s)
}

// DiscoverPresent reads every device that is present and readable, without the node-level checks
// of Discover (gaps, links, instance type). Health checks use it to go on watching the other
// devices while one has disappeared. It returns an empty Node when nothing can be read.
func (s *Sysfs) DiscoverPresent(ctx context.Context) *Node {
	node := &Node{}
	entries, err := os.ReadDir(s.path(devicesDir))
	if err != nil {
		return node
	}
	for _, e := range entries {
		if ctx.Err() != nil {
			break
		}
		i, ok := parseDeviceDirName(e.Name())
		if !ok {
			continue
		}
		if d, err := s.readDevice(i); err == nil {
			node.Devices = append(node.Devices, d)
		}
	}
	slices.SortFunc(node.Devices, func(a, b Device) int { return a.Index - b.Index })
	return node
}
