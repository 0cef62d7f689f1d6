package neuron

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// smallUltraServer names trn2u.48xlarge cut down to one device, for the tests of the
// UltraServer attributes, which do not depend on the devices.
const smallUltraServer = "trn2u.48xlarge/1"

func catalogType(t testing.TB, name string) topology.InstanceType {
	t.Helper()
	small := name == smallUltraServer
	if small {
		name = "trn2u.48xlarge"
	}
	it, err := topology.DefaultCatalog().Get(name)
	if err != nil {
		t.Fatal(err)
	}
	if small {
		it.Devices, it.Topology = 1, topology.KindSingle
	}
	return it
}

func simulate(t testing.TB, opts SimOptions) *Simulator {
	t.Helper()
	if opts.Root == "" {
		opts.Root = t.TempDir()
	}
	s, err := Simulate(opts)
	if err != nil {
		t.Fatalf("Simulate: %v", err)
	}
	return s
}

func discover(t *testing.T, root string) *Node {
	t.Helper()
	n, err := (&Sysfs{Root: root}).Discover(context.Background())
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	return n
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func removeAll(t testing.TB, path string) {
	t.Helper()
	if err := os.RemoveAll(path); err != nil {
		t.Fatal(err)
	}
}

// TestRoundTrip simulates every catalog type and reads it back with the production reader.
func TestRoundTrip(t *testing.T) {
	wantArch := map[string][2]string{
		"inf1":  {"Inferentia", "NCv1"},
		"inf2":  {"Inferentia2", "NCv2"},
		"trn1":  {"Trainium", "NCv2"},
		"trn1n": {"Trainium", "NCv2"},
		"trn2":  {"Trainium2", "NCv3"},
		"trn2u": {"Trainium2", "NCv3"},
		"trn3":  {"Trainium3", "NCv4"},
	}
	wantEFAs := map[string]int{"trn1.32xlarge": 8, "trn1n.32xlarge": 16, "trn2.3xlarge": 1, "trn2.48xlarge": 16, "trn2u.48xlarge": 16, "trn3.48xlarge": 16}
	for _, it := range topology.DefaultCatalog().Types() {
		for _, variant := range []struct {
			name    string
			lnc     int
			efa     bool
			busBase int
			version string
		}{
			{name: "lnc-efa", lnc: 1, efa: true, busBase: 0x40, version: "2.27.4.0"},
			{name: "defaults"},
		} {
			if variant.name == "defaults" && it.Name != "inf1.xlarge" && it.Name != "trn2.48xlarge" && it.Name != "trn2u.48xlarge" {
				continue // the defaults need not be simulated for every type
			}
			t.Run(it.Name+"/"+variant.name, func(t *testing.T) {
				t.Parallel()
				lnc := variant.lnc
				if lnc != 0 && it.LNCConfigurable {
					lnc = 3 - it.DefaultLNC // the non-default value
				}
				var us *UltraServer
				if it.UltraServerNodes > 0 && variant.efa {
					us = &UltraServer{ServerID2: "00000000000000b2", ServerID4: "00000000000000a4", NodeID2: 1, NodeID4: 3, Mode: "X4,X2H"}
				}
				s := simulate(t, SimOptions{InstanceType: it, LNC: lnc, DriverVersion: variant.version, UltraServer: us, EFA: variant.efa, EFABusBase: variant.busBase})
				n := discover(t, s.Root())

				if n.InstanceType != it.Name {
					t.Errorf("InstanceType = %q, want %q", n.InstanceType, it.Name)
				}
				if n.LNC != lnc {
					t.Errorf("LNC = %d, want %d", n.LNC, lnc)
				}
				wantVersion := variant.version
				if wantVersion == "" {
					wantVersion = DefaultDriverVersion
				}
				if n.DriverVersion != wantVersion {
					t.Errorf("DriverVersion = %q, want %q", n.DriverVersion, wantVersion)
				}
				if (n.UltraServer == nil) != (us == nil) || us != nil && *n.UltraServer != *us {
					t.Errorf("UltraServer = %+v, want %+v", n.UltraServer, us)
				}
				if len(n.Devices) != it.Devices {
					t.Fatalf("%d devices, want %d", len(n.Devices), it.Devices)
				}
				adj, err := topology.Adjacency(it.Topology, it.Devices)
				if err != nil {
					t.Fatal(err)
				}
				wantEFA := make([]string, it.Devices)
				if variant.efa {
					wantEFA = EFAAddresses(it, variant.busBase)
				}
				links := make([][]int, it.Devices)
				efas := map[string]bool{}
				for i, d := range n.Devices {
					want := Device{
						Index:         i,
						PhysicalCores: it.PhysicalCoresPerDevice,
						Connected:     slices.Sorted(slices.Values(adj[i])),
						DeviceName:    wantArch[it.Family][0],
						ArchType:      wantArch[it.Family][1],
						InstanceType:  it.Name,
						EFAAddress:    wantEFA[i],
					}
					if !devicesEqual(d, want) {
						t.Errorf("device %d = %+v, want %+v", i, d, want)
					}
					if d.ErrorCount() != 0 {
						t.Errorf("device %d ErrorCount = %d, want 0", i, d.ErrorCount())
					}
					links[i] = d.Connected
					if d.EFAAddress != "" {
						efas[d.EFAAddress] = true
					}
				}
				if variant.efa && len(efas) != wantEFAs[it.Name] {
					t.Errorf("%d distinct EFA addresses, want %d", len(efas), wantEFAs[it.Name])
				}
				g, err := topology.NewGraph(links)
				if err != nil {
					t.Fatal(err)
				}
				if g.Kind() != it.Topology {
					t.Errorf("links form %s, want %s", g.Kind(), it.Topology)
				}
			})
		}
	}
}

func devicesEqual(a, b Device) bool {
	return a.Index == b.Index && a.PhysicalCores == b.PhysicalCores && slices.Equal(a.Connected, b.Connected) &&
		a.DeviceName == b.DeviceName && a.ArchType == b.ArchType && a.InstanceType == b.InstanceType &&
		a.MemECCUncorrected == b.MemECCUncorrected && a.SRAMECCUncorrected == b.SRAMECCUncorrected && a.EFAAddress == b.EFAAddress
}

func TestEFAAddresses(t *testing.T) {
	trn1 := EFAAddresses(catalogType(t, "trn1.32xlarge"), 0)
	if trn1[0] != "0000:10:00.0" || trn1[1] != trn1[0] || trn1[2] != "0000:11:00.0" || trn1[15] != "0000:17:00.0" {
		t.Errorf("trn1.32xlarge EFA addresses = %v", trn1)
	}
	trn2 := EFAAddresses(catalogType(t, "trn2.48xlarge"), 0xf8)
	if trn2[7] != "0000:ff:00.0" || trn2[8] != "0001:00:00.0" {
		t.Errorf("trn2.48xlarge addresses past bus ff = %v", trn2)
	}
	for _, a := range trn2 {
		if _, ok := parseBDF(a); !ok {
			t.Errorf("%q is not a valid PCI address", a)
		}
	}
	if got := EFAAddresses(catalogType(t, "inf2.48xlarge"), 0); len(got) != 12 || slices.ContainsFunc(got, func(s string) bool { return s != "" }) {
		t.Errorf("inf2.48xlarge EFA addresses = %v, want 12 empty", got)
	}
}

func TestErrorInjection(t *testing.T) {
	ctx := context.Background()
	s := simulate(t, SimOptions{InstanceType: catalogType(t, "trn1.32xlarge")})
	r := &Sysfs{Root: s.Root()}

	if err := s.InjectError(3, MemECC, 2); err != nil {
		t.Fatal(err)
	}
	if err := s.InjectError(3, SRAMECC, 1); err != nil {
		t.Fatal(err)
	}
	n := discover(t, s.Root())
	if d := n.Devices[3]; d.MemECCUncorrected != 2 || d.SRAMECCUncorrected != 1 || d.ErrorCount() != 3 {
		t.Errorf("device 3 counters = %d, %d (total %d), want 2, 1 (3)", d.MemECCUncorrected, d.SRAMECCUncorrected, d.ErrorCount())
	}
	for i, d := range n.Devices {
		if i != 3 && d.ErrorCount() != 0 {
			t.Errorf("device %d ErrorCount = %d, want 0", i, d.ErrorCount())
		}
	}
	if err := s.InjectError(3, MemECC, 5); err != nil {
		t.Fatal(err)
	}
	if got := discover(t, s.Root()).Devices[3].ErrorCount(); got != 8 {
		t.Errorf("after a second injection ErrorCount = %d, want 8", got)
	}

	// A device in the middle disappears, then comes back with its counters.
	if err := s.RemoveDevice(5); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Discover(ctx); err == nil || !strings.Contains(err.Error(), "neuron5 is missing") {
		t.Errorf("Discover with neuron5 removed: error %v, want one naming neuron5", err)
	}
	if err := s.InjectError(5, MemECC, 1); err == nil {
		t.Error("InjectError on a removed device succeeded")
	}
	if err := s.RemoveDevice(5); err == nil {
		t.Error("removing a removed device succeeded")
	}
	if err := s.RestoreDevice(5); err != nil {
		t.Fatal(err)
	}
	if got := len(discover(t, s.Root()).Devices); got != 16 {
		t.Errorf("after RestoreDevice: %d devices, want 16", got)
	}
	if err := s.RestoreDevice(5); err == nil {
		t.Error("restoring a present device succeeded")
	}

	// The highest-numbered device disappears: the others' links name it.
	if err := s.RemoveDevice(15); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Discover(ctx); err == nil || !strings.Contains(err.Error(), "neuron15 is missing") {
		t.Errorf("Discover with neuron15 removed: error %v, want one naming neuron15", err)
	}
	if err := s.RemoveDevice(3); err != nil {
		t.Fatal(err)
	}
	if err := s.ClearErrors(3); err != nil { // reset while removed: it comes back clean
		t.Fatal(err)
	}
	for _, d := range []int{3, 15} {
		if err := s.RestoreDevice(d); err != nil {
			t.Fatal(err)
		}
	}
	if got := discover(t, s.Root()).Devices[3].ErrorCount(); got != 0 {
		t.Errorf("after ClearErrors and RestoreDevice ErrorCount = %d, want 0", got)
	}

	if err := s.InjectError(1, SRAMECC, 4); err != nil {
		t.Fatal(err)
	}
	if err := s.ClearErrors(1); err != nil {
		t.Fatal(err)
	}
	if got := discover(t, s.Root()).Devices[1].ErrorCount(); got != 0 {
		t.Errorf("after ClearErrors ErrorCount = %d, want 0", got)
	}
}

func TestSimulatorErrors(t *testing.T) {
	s := simulate(t, SimOptions{InstanceType: catalogType(t, "inf1.6xlarge")})
	for name, err := range map[string]error{
		"device out of range": s.InjectError(4, MemECC, 1),
		"negative device":     s.ClearErrors(-1),
		"unknown counter":     s.InjectError(0, Counter(9), 1),
		"restore present":     s.RestoreDevice(0),
	} {
		if err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if err := s.InjectError(0, MemECC, ^uint64(0)); err != nil {
		t.Fatal(err)
	}
	if err := s.InjectError(0, MemECC, 1); err == nil || !strings.Contains(err.Error(), "overflow") {
		t.Errorf("overflowing counter: error %v, want overflow", err)
	}
	if got := discover(t, s.Root()).Devices[0].ErrorCount(); got != ^uint64(0) {
		t.Errorf("ErrorCount = %d, want max uint64", got)
	}

	single := simulate(t, SimOptions{InstanceType: catalogType(t, "inf2.xlarge")})
	if err := single.RemoveDevice(0); err != nil {
		t.Fatal(err)
	}
	if _, err := (&Sysfs{Root: single.Root()}).Discover(context.Background()); err == nil || !strings.Contains(err.Error(), "no Neuron devices were found") {
		t.Errorf("single device removed: error %v, want no devices", err)
	}
}

func TestSimulateOptions(t *testing.T) {
	trn2 := catalogType(t, "trn2.48xlarge")
	trn2u := catalogType(t, "trn2u.48xlarge")
	inf2 := catalogType(t, "inf2.xlarge")
	tests := []struct {
		name string
		opts SimOptions
		want string
	}{
		{"no root", SimOptions{Root: "", InstanceType: trn2}, "Root is empty"},
		{"lnc not configurable", SimOptions{InstanceType: inf2, LNC: 2}, "not configurable"},
		{"lnc 3", SimOptions{InstanceType: trn2, LNC: 3}, "use 1 or 2"},
		{"ultraserver on trn2", SimOptions{InstanceType: trn2, UltraServer: &UltraServer{ServerID4: "a4"}}, "not an UltraServer type"},
		{"ultraserver zero id", SimOptions{InstanceType: trn2u, UltraServer: &UltraServer{ServerID4: "0000"}}, "all zeros"},
		{"ultraserver node id", SimOptions{InstanceType: trn2u, UltraServer: &UltraServer{ServerID4: "a4", NodeID4: 4}}, "NodeID4 4"},
		{"bad topology", SimOptions{InstanceType: topology.InstanceType{Name: "x", Devices: 3, PhysicalCoresPerDevice: 2, Topology: topology.KindTorus}}, "torus"},
		{"bus base", SimOptions{InstanceType: trn2, EFA: true, EFABusBase: 0x10000}, "EFABusBase"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.name != "no root" {
				tt.opts.Root = t.TempDir()
			}
			_, err := Simulate(tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Simulate: error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// TestDiscoverMalformed corrupts a simulated tree and checks the error names the file or gives
// the specific hint.
func TestDiscoverMalformed(t *testing.T) {
	dev := func(i int, rel string) string {
		return filepath.Join(devicesDir, "neuron"+string(rune('0'+i)), rel)
	}
	tests := []struct {
		name     string
		typ      string
		efa      bool
		mutate   func(t *testing.T, root string)
		wantPath string   // relative path the error must name ("" for none)
		want     []string // further substrings
		wantIs   error
	}{
		{name: "core_count not a number", typ: "inf1.6xlarge",
			mutate:   func(t *testing.T, r string) { writeFile(t, filepath.Join(r, dev(1, coreCountFile)), "abc\n") },
			wantPath: dev(1, coreCountFile), want: []string{"expected a decimal core count", `"abc"`}},
		{name: "core_count zero", typ: "inf1.6xlarge",
			mutate:   func(t *testing.T, r string) { writeFile(t, filepath.Join(r, dev(0, coreCountFile)), "0") },
			wantPath: dev(0, coreCountFile), want: []string{"between 1 and 64"}},
		{name: "core_count absent", typ: "inf1.6xlarge",
			mutate:   func(t *testing.T, r string) { removeAll(t, filepath.Join(r, dev(2, coreCountFile))) },
			wantPath: dev(2, coreCountFile), want: []string{"does not exist"}},
		{name: "connected_devices not a number", typ: "inf1.6xlarge",
			mutate:   func(t *testing.T, r string) { writeFile(t, filepath.Join(r, dev(0, connectedDevicesFile)), "1, x\n") },
			wantPath: dev(0, connectedDevicesFile), want: []string{"expected comma-separated device numbers", `"x"`}},
		{name: "connected_devices out of range", typ: "inf1.6xlarge",
			mutate:   func(t *testing.T, r string) { writeFile(t, filepath.Join(r, dev(0, connectedDevicesFile)), "1, 7\n") },
			wantPath: dev(0, connectedDevicesFile), want: []string{"lists device 7", "neuron7 is missing"}},
		{name: "connected_devices self link", typ: "inf1.6xlarge",
			mutate: func(t *testing.T, r string) {
				writeFile(t, filepath.Join(r, dev(1, connectedDevicesFile)), "2, 1, 0\n")
			},
			wantPath: dev(1, connectedDevicesFile), want: []string{"lists the device itself"}},
		{name: "connected_devices duplicate", typ: "inf1.6xlarge",
			mutate: func(t *testing.T, r string) {
				writeFile(t, filepath.Join(r, dev(1, connectedDevicesFile)), "2, 0, 2\n")
			},
			wantPath: dev(1, connectedDevicesFile), want: []string{"lists device 2 twice"}},
		{name: "connected_devices asymmetric", typ: "inf1.6xlarge",
			mutate:   func(t *testing.T, r string) { writeFile(t, filepath.Join(r, dev(0, connectedDevicesFile)), "1, 2\n") },
			wantPath: devicesDir, want: []string{"inconsistent", "device 0 lists device 2 as connected but device 2 does not list device 0"}},
		{name: "links form no topology", typ: "inf1.6xlarge",
			mutate: func(t *testing.T, r string) {
				// two separate pairs: 0-1 and 2-3
				writeFile(t, filepath.Join(r, dev(0, connectedDevicesFile)), "1\n")
				writeFile(t, filepath.Join(r, dev(1, connectedDevicesFile)), "0\n")
				writeFile(t, filepath.Join(r, dev(2, connectedDevicesFile)), "3\n")
				writeFile(t, filepath.Join(r, dev(3, connectedDevicesFile)), "2\n")
			},
			wantPath: devicesDir, want: []string{"no known topology"}},
		{name: "counter malformed", typ: "inf1.6xlarge",
			mutate: func(t *testing.T, r string) {
				writeFile(t, filepath.Join(r, dev(2, "stats/hardware/mem_ecc_uncorrected/total")), "12abc\n")
			},
			wantPath: dev(2, "stats/hardware/mem_ecc_uncorrected/total"), want: []string{"expected a decimal error count"}},
		{name: "counter overflow", typ: "inf1.6xlarge",
			mutate: func(t *testing.T, r string) {
				writeFile(t, filepath.Join(r, dev(2, "stats/hardware/sram_ecc_uncorrected/total")), "18446744073709551616\n")
			},
			wantPath: dev(2, "stats/hardware/sram_ecc_uncorrected/total"), want: []string{"expected a decimal error count"}},
		{name: "lnc 3", typ: "trn2.3xlarge",
			mutate: func(t *testing.T, r string) {
				writeFile(t, filepath.Join(r, lncConfigFile), "NEURON_LOGICAL_NC_CONFIG=3\n")
			},
			wantPath: lncConfigFile, want: []string{`"3"`, "must be 1 or 2"}},
		{name: "lnc other line", typ: "trn2.3xlarge",
			mutate:   func(t *testing.T, r string) { writeFile(t, filepath.Join(r, lncConfigFile), "LNC=2\n") },
			wantPath: lncConfigFile, want: []string{"line 1", "expected NEURON_LOGICAL_NC_CONFIG=1"}},
		{name: "lnc empty", typ: "trn2.3xlarge",
			mutate:   func(t *testing.T, r string) { writeFile(t, filepath.Join(r, lncConfigFile), "# nothing\n") },
			wantPath: lncConfigFile, want: []string{"remove the file"}},
		{name: "no instance type anywhere", typ: "inf1.6xlarge",
			mutate: func(t *testing.T, r string) {
				removeAll(t, filepath.Join(r, productNameFile))
				removeAll(t, filepath.Join(r, dev(0, "info/architecture/instance_type")))
			},
			wantPath: productNameFile, want: []string{"cannot tell the instance type", "instance_type"}},
		{name: "efa count does not divide devices", typ: "trn2.48xlarge", efa: true,
			mutate: func(t *testing.T, r string) {
				removeAll(t, filepath.Join(r, pciDevicesDir, EFAAddresses(catalogType(t, "trn2.48xlarge"), 0)[4]))
			},
			wantPath: pciDevicesDir, want: []string{"found 15 EFA devices", "must divide the device count"}},
		{name: "efa more than devices", typ: "trn2.3xlarge", efa: true,
			mutate: func(t *testing.T, r string) {
				writeFile(t, filepath.Join(r, pciDevicesDir, "0000:90:00.0/vendor"), "0x1d0f\n")
				writeFile(t, filepath.Join(r, pciDevicesDir, "0000:90:00.0/device"), "0xEFA2\n")
			},
			wantPath: pciDevicesDir, want: []string{"found 2 EFA devices", "for 1 Neuron devices"}},
		{name: "efa not a pci address", typ: "trn2.3xlarge", efa: true,
			mutate: func(t *testing.T, r string) {
				writeFile(t, filepath.Join(r, pciDevicesDir, "efa0/vendor"), "0x1d0f\n")
				writeFile(t, filepath.Join(r, pciDevicesDir, "efa0/device"), "0xefa0\n")
			},
			wantPath: filepath.Join(pciDevicesDir, "efa0"), want: []string{"not a PCI address"}},
		{name: "gap in device numbers", typ: "inf1.6xlarge",
			mutate:   func(t *testing.T, r string) { removeAll(t, filepath.Join(r, dev(2, ""))) },
			wantPath: devicesDir, want: []string{"neuron2 is missing", "without gaps"}},
		{name: "no devices", typ: "inf1.xlarge",
			mutate:   func(t *testing.T, r string) { removeAll(t, filepath.Join(r, devicesDir)) },
			wantPath: devicesDir, want: []string{"no Neuron devices were found under", "lsmod | grep neuron", "--sysfs-root"}},
		{name: "ultraserver busy", typ: smallUltraServer,
			mutate:   func(t *testing.T, r string) { writeFile(t, filepath.Join(r, classDir, "node_id_4"), "busy\n") },
			wantPath: filepath.Join(classDir, "node_id_4"), wantIs: ErrUltraServerBusy},
		{name: "ultraserver without node id", typ: smallUltraServer,
			mutate: func(t *testing.T, r string) {
				writeFile(t, filepath.Join(r, classDir, "server_id_4"), "00000000000000a4\n")
			},
			wantPath: filepath.Join(classDir, "server_id_4"), want: []string{"absent or -1"}},
		{name: "ultraserver node id malformed", typ: smallUltraServer,
			mutate:   func(t *testing.T, r string) { writeFile(t, filepath.Join(r, classDir, "node_id_4"), "two\n") },
			wantPath: filepath.Join(classDir, "node_id_4"), want: []string{"expected a decimal node id"}},
		{name: "huge attribute", typ: "inf1.6xlarge",
			mutate: func(t *testing.T, r string) {
				writeFile(t, filepath.Join(r, productNameFile), strings.Repeat("x", maxAttributeSize+1))
			},
			wantPath: productNameFile, want: []string{"larger than"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := simulate(t, SimOptions{InstanceType: catalogType(t, tt.typ), EFA: tt.efa})
			tt.mutate(t, s.Root())
			n, err := (&Sysfs{Root: s.Root()}).Discover(context.Background())
			if err == nil {
				t.Fatalf("Discover succeeded (%d devices), want an error", len(n.Devices))
			}
			msg := err.Error()
			if tt.wantPath != "" && !strings.Contains(msg, filepath.Join(s.Root(), tt.wantPath)) {
				t.Errorf("error %q does not name %s", msg, filepath.Join(s.Root(), tt.wantPath))
			}
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not contain %q", msg, w)
				}
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("error %v is not %v", err, tt.wantIs)
			}
		})
	}
}

// TestDiscoverTolerated covers variations of a valid tree that must still be read.
func TestDiscoverTolerated(t *testing.T) {
	tests := []struct {
		name   string
		typ    string
		mutate func(t *testing.T, root string)
		check  func(t *testing.T, n *Node)
	}{
		{name: "product_name absent: device instance type", typ: "inf2.24xlarge",
			mutate: func(t *testing.T, r string) { removeAll(t, filepath.Join(r, productNameFile)) },
			check: func(t *testing.T, n *Node) {
				if n.InstanceType != "inf2.24xlarge" {
					t.Errorf("InstanceType = %q", n.InstanceType)
				}
			}},
		{name: "class attributes absent", typ: smallUltraServer,
			mutate: func(t *testing.T, r string) { removeAll(t, filepath.Join(r, classDir)) },
			check: func(t *testing.T, n *Node) {
				if n.UltraServer != nil {
					t.Errorf("UltraServer = %+v, want nil", n.UltraServer)
				}
			}},
		{name: "ultraserver with only the 4-node attributes", typ: smallUltraServer,
			mutate: func(t *testing.T, r string) {
				removeAll(t, filepath.Join(r, classDir))
				writeFile(t, filepath.Join(r, classDir, "server_id_4"), "00000000000000a4\n")
				writeFile(t, filepath.Join(r, classDir, "node_id_4"), "2\n")
			},
			check: func(t *testing.T, n *Node) {
				want := UltraServer{ServerID4: "00000000000000a4", NodeID4: 2, NodeID2: -1}
				if n.UltraServer == nil || *n.UltraServer != want {
					t.Errorf("UltraServer = %+v, want %+v", n.UltraServer, want)
				}
			}},
		{name: "counters and architecture absent", typ: "inf1.6xlarge",
			mutate: func(t *testing.T, r string) {
				removeAll(t, filepath.Join(r, devicesDir, "neuron1", "stats"))
				removeAll(t, filepath.Join(r, devicesDir, "neuron1", "info"))
			},
			check: func(t *testing.T, n *Node) {
				if d := n.Devices[1]; d.ErrorCount() != 0 || d.DeviceName != "" || d.InstanceType != "" {
					t.Errorf("device 1 = %+v", d)
				}
			}},
		{name: "driver version and lnc absent", typ: "inf1.6xlarge",
			mutate: func(t *testing.T, r string) { removeAll(t, filepath.Join(r, driverVersionFile)) },
			check: func(t *testing.T, n *Node) {
				if n.DriverVersion != "" || n.LNC != 0 {
					t.Errorf("DriverVersion %q LNC %d, want empty and 0", n.DriverVersion, n.LNC)
				}
			}},
		{name: "lnc with comments and spaces", typ: "trn2.3xlarge",
			mutate: func(t *testing.T, r string) {
				writeFile(t, filepath.Join(r, lncConfigFile), "# set by the AMI\n\n   NEURON_LOGICAL_NC_CONFIG = 1   \r\n")
			},
			check: func(t *testing.T, n *Node) {
				if n.LNC != 1 {
					t.Errorf("LNC = %d, want 1", n.LNC)
				}
			}},
		{name: "other entries in the device directory", typ: "inf1.6xlarge",
			mutate: func(t *testing.T, r string) {
				writeFile(t, filepath.Join(r, devicesDir, "neuron9"), "a file, not a device\n")
				writeFile(t, filepath.Join(r, devicesDir, "neuron01", "core_count"), "4")
				writeFile(t, filepath.Join(r, devicesDir, "power", "async"), "disabled\n")
				writeFile(t, filepath.Join(r, devicesDir, "neuronx", "core_count"), "4")
			},
			check: func(t *testing.T, n *Node) {
				if len(n.Devices) != 4 {
					t.Errorf("%d devices, want 4", len(n.Devices))
				}
			}},
		{name: "device directories as symlinks", typ: "inf1.6xlarge",
			mutate: func(t *testing.T, r string) {
				for i := range 4 {
					name := "neuron" + string(rune('0'+i))
					dir := filepath.Join(r, devicesDir, name)
					real := filepath.Join(r, "real", name)
					if err := os.MkdirAll(filepath.Dir(real), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.Rename(dir, real); err != nil {
						t.Fatal(err)
					}
					if err := os.Symlink(real, dir); err != nil {
						t.Fatal(err)
					}
				}
			},
			check: func(t *testing.T, n *Node) {
				if len(n.Devices) != 4 || n.Devices[3].PhysicalCores != 4 {
					t.Errorf("devices = %+v", n.Devices)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := simulate(t, SimOptions{InstanceType: catalogType(t, tt.typ)})
			tt.mutate(t, s.Root())
			tt.check(t, discover(t, s.Root()))
		})
	}
}

func TestSysfsPath(t *testing.T) {
	for _, root := range []string{"", "/"} {
		if got := (&Sysfs{Root: root}).path(devicesDir); got != "/sys/devices/virtual/neuron_device" {
			t.Errorf("Root %q: path = %q", root, got)
		}
	}
	if got := (&Sysfs{Root: "/host"}).path(lncConfigFile); got != "/host/opt/aws/neuron/logical_nc_config" {
		t.Errorf("path = %q", got)
	}
}

func TestDiscoverCanceled(t *testing.T) {
	s := simulate(t, SimOptions{InstanceType: catalogType(t, "inf1.xlarge")})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := (&Sysfs{Root: s.Root()}).Discover(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Discover with a canceled context: %v", err)
	}
}

// TestConcurrentChanges reads while the simulator changes the tree: the reader must see either
// the old or the new state, never a half-written file.
func TestConcurrentChanges(t *testing.T) {
	s := simulate(t, SimOptions{InstanceType: catalogType(t, "trn2.48xlarge"), EFA: true})
	r := &Sysfs{Root: s.Root()}
	const rounds = 25
	var wg sync.WaitGroup
	errs := make(chan error, 4*rounds)
	wg.Add(2)
	go func() {
		defer wg.Done()
		for range rounds {
			if err := s.InjectError(7, MemECC, 1); err != nil {
				errs <- err
			}
			if err := s.ClearErrors(7); err != nil {
				errs <- err
			}
		}
	}()
	go func() {
		defer wg.Done()
		for range rounds {
			if err := s.RemoveDevice(9); err != nil {
				errs <- err
			}
			if err := s.RestoreDevice(9); err != nil {
				errs <- err
			}
		}
	}()
	for range rounds {
		n, err := r.Discover(context.Background())
		if err != nil {
			if !strings.Contains(err.Error(), "neuron9") {
				t.Errorf("Discover during changes: %v (only a missing neuron9 is expected)", err)
			}
			continue
		}
		if len(n.Devices) != 16 || n.Devices[7].ErrorCount() > 1 {
			t.Errorf("Discover during changes: %d devices, device 7 ErrorCount %d", len(n.Devices), n.Devices[7].ErrorCount())
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
