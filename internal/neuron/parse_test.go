package neuron

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kube-neuron/kube-neuron/internal/topology"
)

func TestParseConnectedDevices(t *testing.T) {
	tests := []struct {
		in      string
		want    []int
		wantErr string
	}{
		{in: "", want: []int{}},
		{in: "\n", want: []int{}},
		{in: "12, 3, 4, 1\n", want: []int{1, 3, 4, 12}},
		{in: "1\n", want: []int{1}},
		{in: "1,2", want: []int{1, 2}},
		{in: "  2 ,\t1  \n", want: []int{1, 2}},
		{in: "1, x", wantErr: `entry 2 is "x"`},
		{in: "1,,2", wantErr: `entry 2 is ""`},
		{in: "1, ", wantErr: "expected comma-separated"},
		{in: "-1", wantErr: "expected comma-separated"},
		{in: "+1", wantErr: "expected comma-separated"},
		{in: "1 2", wantErr: "expected comma-separated"},
		{in: "1, 1", wantErr: "lists device 1 twice"},
		{in: "5000", wantErr: "above the highest possible device number"},
		{in: "99999", wantErr: "expected comma-separated"},
	}
	for _, tt := range tests {
		t.Run(strconv.Quote(tt.in), func(t *testing.T) {
			got, err := parseConnectedDevices([]byte(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tt.want) || got == nil {
				t.Errorf("= %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func TestFormatConnectedDevices(t *testing.T) {
	for _, tt := range []struct {
		in   []int
		want string
	}{{[]int{12, 3, 4, 1}, "12, 3, 4, 1\n"}, {[]int{}, "\n"}, {[]int{1}, "1\n"}} {
		if got := formatConnectedDevices(tt.in); got != tt.want {
			t.Errorf("formatConnectedDevices(%v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestParseLNCConfig(t *testing.T) {
	tests := []struct {
		in      string
		want    int
		wantErr string
	}{
		{in: "NEURON_LOGICAL_NC_CONFIG=1", want: 1},
		{in: "NEURON_LOGICAL_NC_CONFIG=2\n", want: 2},
		{in: "# comment\n\n  NEURON_LOGICAL_NC_CONFIG = 2  \n# another\n", want: 2},
		{in: "NEURON_LOGICAL_NC_CONFIG=\"1\"\r\n", want: 1},
		{in: "NEURON_LOGICAL_NC_CONFIG=2 # default on trn2\n", want: 2},
		{in: "NEURON_LOGICAL_NC_CONFIG=3", wantErr: `value "3" is not valid: it must be 1 or 2`},
		{in: "NEURON_LOGICAL_NC_CONFIG=", wantErr: `value "" is not valid`},
		{in: "NEURON_LOGICAL_NC_CONFIG=1\nNEURON_LOGICAL_NC_CONFIG=1", wantErr: "a second time"},
		{in: "LNC=2", wantErr: "line 1: expected NEURON_LOGICAL_NC_CONFIG=1"},
		{in: "NEURON_LOGICAL_NC_CONFIG 2", wantErr: "expected NEURON_LOGICAL_NC_CONFIG=1"},
		{in: "", wantErr: "no NEURON_LOGICAL_NC_CONFIG line"},
		{in: "# only a comment\n", wantErr: "no NEURON_LOGICAL_NC_CONFIG line"},
	}
	for _, tt := range tests {
		t.Run(strconv.Quote(tt.in), func(t *testing.T) {
			got, err := parseLNCConfig([]byte(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("= %d, %v; want %d", got, err, tt.want)
			}
		})
	}
}

func TestParseScalars(t *testing.T) {
	t.Run("core count", func(t *testing.T) {
		for in, want := range map[string]int{"8": 8, "2\n": 2, " 4 ": 4, "64": 64, "0": 0, "65": 0, "abc": 0, "-2": 0, "": 0, "0008": 0} {
			got, err := parseCoreCount([]byte(in))
			if (err == nil) != (want != 0) || got != want {
				t.Errorf("parseCoreCount(%q) = %d, %v; want %d", in, got, err, want)
			}
		}
	})
	t.Run("counter", func(t *testing.T) {
		for in, want := range map[string]string{"0": "0", "7\n": "7", "18446744073709551615": "18446744073709551615", "18446744073709551616": "error", "-1": "error", "": "error", "1e3": "error", "+5": "error"} {
			got, err := parseCounter([]byte(in))
			if s := strconv.FormatUint(got, 10); err != nil {
				s = "error"
				if !strings.Contains(err.Error(), "expected a decimal error count") {
					t.Errorf("parseCounter(%q) error %v", in, err)
				}
				if s != want {
					t.Errorf("parseCounter(%q) = error, want %s", in, want)
				}
			} else if s != want {
				t.Errorf("parseCounter(%q) = %s, want %s", in, s, want)
			}
		}
	})
	t.Run("node id", func(t *testing.T) {
		for in, want := range map[string]int{"0": 0, "3": 3, "-1": -1} {
			if got, err := parseNodeID(in); err != nil || got != want {
				t.Errorf("parseNodeID(%q) = %d, %v; want %d", in, got, err, want)
			}
		}
		for _, in := range []string{"", "-2", "busy ", "x", "12345"} {
			if _, err := parseNodeID(in); err == nil {
				t.Errorf("parseNodeID(%q) succeeded", in)
			}
		}
	})
	t.Run("bdf", func(t *testing.T) {
		valid := []string{"0000:10:00.0", "0000:ff:1f.7", "0001:00:00.0", "10000:00:00.0", "0000:AB:00.1"}
		invalid := []string{"", "efa0", "0000:10:00", "000:10:00.0", "0000:100:00.0", "0000:10:20.0", "0000:10:00.8", "0000:1g:00.0", "0000:+1:00.0", "0000:10:00.0.1"}
		for _, s := range valid {
			if _, ok := parseBDF(s); !ok {
				t.Errorf("parseBDF(%q) rejected", s)
			}
		}
		for _, s := range invalid {
			if _, ok := parseBDF(s); ok {
				t.Errorf("parseBDF(%q) accepted", s)
			}
		}
		a, _ := parseBDF("0000:0f:1f.7")
		b, _ := parseBDF("0000:10:00.0")
		c, _ := parseBDF("0001:00:00.0")
		if !(a < b && b < c) {
			t.Errorf("BDF keys out of order: %x %x %x", a, b, c)
		}
	})
	t.Run("device directory name", func(t *testing.T) {
		for in, want := range map[string]int{"neuron0": 0, "neuron15": 15, "neuron4095": 4095} {
			if got, ok := parseDeviceDirName(in); !ok || got != want {
				t.Errorf("parseDeviceDirName(%q) = %d, %v", in, got, ok)
			}
		}
		for _, in := range []string{"neuron", "neuron01", "neuron-1", "neuron4096", "neuronx", "power", "Neuron1", "neuron99999"} {
			if _, ok := parseDeviceDirName(in); ok {
				t.Errorf("parseDeviceDirName(%q) accepted", in)
			}
		}
	})
}

func FuzzParseConnectedDevices(f *testing.F) {
	for _, s := range []string{"", "\n", "12, 3, 4, 1\n", "1", "1, x", "1,,2", "-1", "1, 1", "4095", "4096", " 7 ,8 "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got, err := parseConnectedDevices([]byte(in))
		if err != nil {
			return
		}
		for i, d := range got {
			if d < 0 || d > maxDeviceIndex || i > 0 && got[i-1] >= d {
				t.Fatalf("parseConnectedDevices(%q) = %v: not ascending device numbers", in, got)
			}
		}
		again, err := parseConnectedDevices([]byte(formatConnectedDevices(got)))
		if err != nil || !slices.Equal(again, got) {
			t.Fatalf("round trip of %v: %v, %v", got, again, err)
		}
	})
}

func FuzzParseLNCConfig(f *testing.F) {
	for _, s := range []string{"NEURON_LOGICAL_NC_CONFIG=1", "NEURON_LOGICAL_NC_CONFIG=2\n", "# c\n NEURON_LOGICAL_NC_CONFIG = '2' # x\n", "NEURON_LOGICAL_NC_CONFIG=3", "", "=", "#", "NEURON_LOGICAL_NC_CONFIG=\"", "NEURON_LOGICAL_NC_CONFIG=1\nNEURON_LOGICAL_NC_CONFIG=2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got, err := parseLNCConfig([]byte(in))
		if err == nil && got != 1 && got != 2 {
			t.Fatalf("parseLNCConfig(%q) = %d without error", in, got)
		}
		if err != nil && got != 0 {
			t.Fatalf("parseLNCConfig(%q) = %d with error %v", in, got, err)
		}
	})
}

func FuzzParseCounter(f *testing.F) {
	for _, s := range []string{"0", "7\n", " 42 ", "18446744073709551615", "18446744073709551616", "-1", "", "0x10", "1_000"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got, err := parseCounter([]byte(in))
		if err != nil {
			return
		}
		want, perr := strconv.ParseUint(strings.TrimSpace(in), 10, 64)
		if perr != nil || got != want {
			t.Fatalf("parseCounter(%q) = %d, strconv says %d, %v", in, got, want, perr)
		}
	})
}

// FuzzSysfsTree writes fuzzed core_count, connected_devices and logical_nc_config into a
// simulated inf1.6xlarge (a chain of 4) and checks that the reader errors or returns a
// consistent node.
func FuzzSysfsTree(f *testing.F) {
	f.Add("4", "2, 0\n", "NEURON_LOGICAL_NC_CONFIG=1\n")
	f.Add("abc", "2, 0\n", "")
	f.Add("4\n", "0, 2\n", "# c\nNEURON_LOGICAL_NC_CONFIG=2")
	f.Add("4", "2\n", "NEURON_LOGICAL_NC_CONFIG=1")
	f.Add("4", "1, 0, 2\n", "NEURON_LOGICAL_NC_CONFIG=3")
	f.Add("8", "9", "x")
	f.Add("4", "", "NEURON_LOGICAL_NC_CONFIG=1")
	typ, err := topology.DefaultCatalog().Get("inf1.6xlarge")
	if err != nil {
		f.Fatal(err)
	}
	// One tree per fuzzing process: every input rewrites all three files, and inputs run one at a
	// time within a process.
	s := simulate(f, SimOptions{InstanceType: typ, LNC: 1}) // LNC set: the file exists to overwrite
	dir := filepath.Join(s.Root(), devicesDir, "neuron1")
	f.Fuzz(func(t *testing.T, coreCount, connected, lnc string) {
		for path, content := range map[string]string{
			filepath.Join(dir, coreCountFile):        coreCount,
			filepath.Join(dir, connectedDevicesFile): connected,
			filepath.Join(s.Root(), lncConfigFile):   lnc,
		} {
			if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		n, err := (&Sysfs{Root: s.Root()}).Discover(context.Background())
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		wantCores, err1 := parseCoreCount([]byte(coreCount))
		wantLinks, err2 := parseConnectedDevices([]byte(connected))
		wantLNC, err3 := parseLNCConfig([]byte(lnc))
		if err1 != nil || err2 != nil || err3 != nil {
			t.Fatalf("Discover accepted input its parsers reject: %v, %v, %v", err1, err2, err3)
		}
		if len(n.Devices) != 4 || n.Devices[1].PhysicalCores != wantCores || !slices.Equal(n.Devices[1].Connected, wantLinks) || n.LNC != wantLNC {
			t.Fatalf("Discover = %+v, want device 1 with %d cores, links %v, LNC %d", n, wantCores, wantLinks, wantLNC)
		}
		adj := make([][]int, len(n.Devices))
		for i, d := range n.Devices {
			if d.Index != i {
				t.Fatalf("device %d has Index %d", i, d.Index)
			}
			adj[i] = d.Connected
		}
		if _, err := topology.NewGraph(adj); err != nil {
			t.Fatalf("Discover returned inconsistent links %v: %v", adj, err)
		}
	})
}
