package standin

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestText(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     []string
		devices []string
		want    string
	}{
		{"sorted by name, no devices", []string{"PATH=/bin", "HOME=/root", "A_B=x=y"}, nil,
			"A_B=x=y\nHOME=/root\nPATH=/bin\ndevices: none\n"},
		{"devices in the given order", []string{"NEURON_RT_VISIBLE_CORES=0,1"}, []string{"/dev/neuron0", "/dev/neuron2"},
			"NEURON_RT_VISIBLE_CORES=0,1\ndevices: /dev/neuron0 /dev/neuron2\n"},
		{"a name without a value", []string{"B=1", "A"}, nil, "A=\nB=1\ndevices: none\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Text(tc.env, tc.devices)
			if got != tc.want {
				t.Fatalf("Text = %q, want %q", got, tc.want)
			}
			env, devs, ok := Parse(got)
			if !ok || !slices.Equal(devs, tc.devices) || len(env) != len(tc.env) {
				t.Fatalf("Parse(Text) = %v %v %v", env, devs, ok)
			}
		})
	}
}

func TestDeviceNodesSortsByNumber(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"neuron10", "neuron2", "neuron0", "neuron", "null", "neuronx1"} {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{dir + "/neuron0", dir + "/neuron2", dir + "/neuron10"}
	if got := DeviceNodes(dir); !slices.Equal(got, want) {
		t.Fatalf("DeviceNodes = %v, want %v", got, want)
	}
	if got := DeviceNodes(filepath.Join(dir, "missing")); got != nil {
		t.Fatalf("DeviceNodes of a missing directory = %v, want none", got)
	}
}

func TestParseWithoutDevicesLine(t *testing.T) {
	if _, _, ok := Parse("A=1\n"); ok {
		t.Fatal("Parse found a devices line in output without one")
	}
}
