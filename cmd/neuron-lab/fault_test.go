package main

import (
	"strings"
	"testing"
)

// TestFaultFlags: fault needs a node, a device and exactly one action, says what is wrong on
// one line of stderr and exits 1; with the flags right it reports that no lab runs.
func TestFaultFlags(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no node", []string{"--device", "1", "--remove"}, "error: --node is required: the name of a lab node (neuron-lab status --dir " + dir + " lists them)"},
		{"no device", []string{"--node", "n", "--remove"}, "error: --device is required"},
		{"no action", []string{"--node", "n", "--device", "1"}, "error: give exactly one of --ecc-uncorrected, --remove and --clear (got 0)"},
		{"two actions", []string{"--node", "n", "--device", "1", "--remove", "--clear"}, "(got 2)"},
		{"bad device", []string{"--node", "n", "--device", "x", "--clear"}, `invalid argument "x" for "--device"`},
		{"argument", []string{"--node", "n", "--device", "1", "--clear", "extra"}, `error: unknown command "extra" for "neuron-lab fault"`},
		{"no lab", []string{"--node", "n", "--device", "1", "--ecc-uncorrected"}, "error: no lab runs in " + dir + ": start one with make lab-up"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := neuronLab(t, append([]string{"fault", "--dir", dir}, tc.args...)...)
			if code != 1 || out != "" {
				t.Errorf("exit %d, stdout %q; want 1 and nothing", code, out)
			}
			if !strings.Contains(errOut, tc.want) || strings.Count(errOut, "\n") != 1 {
				t.Errorf("stderr:\n%s\nwant one line with %q", errOut, tc.want)
			}
		})
	}
}

func TestFaultOptions(t *testing.T) {
	for _, tc := range []struct {
		f    faultFlags
		want string
	}{
		{faultFlags{node: "a", device: 3, ecc: true}, "ecc-uncorrected"},
		{faultFlags{node: "a", device: 0, remove: true}, "remove"},
		{faultFlags{node: "a", device: 15, restore: true}, "clear"},
	} {
		o, err := tc.f.options("/lab", true)
		if err != nil || string(o.Action) != tc.want || o.Node != "a" || o.Device != tc.f.device || o.Dir != "/lab" {
			t.Errorf("%+v: %+v, %v; want action %s", tc.f, o, err, tc.want)
		}
	}
}
