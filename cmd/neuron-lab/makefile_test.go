package main

import (
	"os/exec"
	"strings"
	"testing"
)

// makeOutput runs make in the repository with args and returns its output. With "-n" first it
// only prints what it would run; LAB_FLAGS stands in for the pinned tools' flags (it would build
// them).
func makeOutput(t *testing.T, args ...string) string {
	t.Helper()
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	cmd := exec.Command("make", append([]string{"--no-print-directory", "LAB_FLAGS=--tools"}, args...)...)
	cmd.Dir = "../.."
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// TestMakeLabTargets: COMPONENTS goes to neuron-lab as --components (without it, neuron-lab's
// default, every component, applies); lab-status and lab-down call neuron-lab; make help says so.
func TestMakeLabTargets(t *testing.T) {
	for _, tc := range []struct {
		args      []string
		want, not string
	}{
		{args: []string{"-n", "lab-up", "COMPONENTS=neuron-device-plugin,neuron-autoscaler"}, want: "neuron-lab up --dir .lab --tools   --components neuron-device-plugin,neuron-autoscaler"},
		{args: []string{"-n", "lab-up"}, want: "neuron-lab up --dir .lab --tools", not: "--components"},
		{args: []string{"-n", "lab-status"}, want: "bin/neuron-lab status --dir .lab"},
		{args: []string{"-n", "lab-down", "LAB_DIR=/tmp/x"}, want: "bin/neuron-lab down --dir /tmp/x"},
		{args: []string{"help"}, want: "lab-status       Say whether the lab runs"},
		{args: []string{"help"}, want: "COMPONENTS (lab-up: a comma list of the binaries to run, as neuron-lab --components"},
	} {
		out := makeOutput(t, tc.args...)
		if !strings.Contains(out, tc.want) || tc.not != "" && strings.Contains(out, tc.not) {
			t.Errorf("make %v:\n%s\nwant %q, and not %q", tc.args, out, tc.want, tc.not)
		}
	}
}
