package lab

import (
	"context"
	"strings"
	"testing"

	"github.com/kube-neuron/kube-neuron/internal/neuron"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// faultLab writes the simulated trees of two nodes where a lab in dir keeps them.
func faultLab(t testing.TB, dir string) {
	t.Helper()
	for node, typ := range map[string]string{"trn2-a": "trn2.48xlarge", "inf2-a": "inf2.xlarge"} {
		it, err := topology.DefaultCatalog().Get(typ)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := neuron.Simulate(neuron.SimOptions{Root: nodeSysfsRoot(dir, node), InstanceType: it}); err != nil {
			t.Fatal(err)
		}
	}
}

func discoverNode(t *testing.T, dir, node string) (*neuron.Node, error) {
	t.Helper()
	return (&neuron.Sysfs{Root: nodeSysfsRoot(dir, node)}).Discover(context.Background())
}

// TestFault drives a device of a simulated tree through every action, as neuron-lab fault does,
// and reads the result with the production reader.
func TestFault(t *testing.T) {
	dir := t.TempDir()
	faultLab(t, dir)
	if nodes, err := FaultNodes(dir); err != nil || strings.Join(nodes, ",") != "inf2-a,trn2-a" {
		t.Fatalf("FaultNodes = %v, %v; want inf2-a, trn2-a", nodes, err)
	}
	do := func(action FaultAction) string {
		t.Helper()
		msg, err := faultTree(FaultOptions{Dir: dir, Node: "trn2-a", Device: 5, Action: action})
		if err != nil {
			t.Fatalf("%s: %v", action, err)
		}
		return msg
	}
	if msg := do(FaultECCUncorrected); msg != "node trn2-a device 5: uncorrected memory ECC error counted (mem_ecc_uncorrected +1)" {
		t.Errorf("message %q", msg)
	}
	do(FaultECCUncorrected)
	n, err := discoverNode(t, dir, "trn2-a")
	if err != nil {
		t.Fatal(err)
	}
	if got := n.Devices[5].MemECCUncorrected; got != 2 {
		t.Errorf("mem_ecc_uncorrected = %d after two faults, want 2", got)
	}
	do(FaultRemove)
	if _, err := discoverNode(t, dir, "trn2-a"); err == nil || !strings.Contains(err.Error(), "neuron5") {
		t.Errorf("Discover after --remove: %v, want an error naming neuron5", err)
	}
	if _, err := faultTree(FaultOptions{Dir: dir, Node: "trn2-a", Device: 5, Action: FaultECCUncorrected}); err == nil || !strings.Contains(err.Error(), "is removed: bring it back with --clear") {
		t.Errorf("ECC on a removed device: %v", err)
	}
	if _, err := faultTree(FaultOptions{Dir: dir, Node: "trn2-a", Device: 5, Action: FaultRemove}); err == nil || !strings.Contains(err.Error(), "already removed") {
		t.Errorf("removing twice: %v", err)
	}
	if msg := do(FaultClear); msg != "node trn2-a device 5: reset (present, uncorrectable error counters 0)" {
		t.Errorf("message %q", msg)
	}
	n, err = discoverNode(t, dir, "trn2-a")
	if err != nil {
		t.Fatal(err)
	}
	if len(n.Devices) != 16 || n.Devices[5].ErrorCount() != 0 {
		t.Errorf("after --clear: %d devices, ErrorCount %d; want 16 and 0", len(n.Devices), n.Devices[5].ErrorCount())
	}
	// --clear on a present device with errors resets the counters.
	do(FaultECCUncorrected)
	do(FaultClear)
	if n, err = discoverNode(t, dir, "trn2-a"); err != nil || n.Devices[5].ErrorCount() != 0 {
		t.Errorf("after ECC and --clear: %v, %v", n, err)
	}
}

func TestFaultErrors(t *testing.T) {
	dir := t.TempDir()
	faultLab(t, dir)
	for _, tc := range []struct {
		name string
		o    FaultOptions
		want string
	}{
		{"unknown node", FaultOptions{Node: "trn9", Device: 0, Action: FaultRemove}, `node "trn9" has no simulated Neuron devices in the lab in ` + dir + ": use one of inf2-a, trn2-a"},
		{"device too high", FaultOptions{Node: "inf2-a", Device: 1, Action: FaultRemove}, "node inf2-a has no device 1: its devices are 0 to 0 (inf2.xlarge)"},
		{"negative device", FaultOptions{Node: "trn2-a", Device: -1, Action: FaultClear}, "node trn2-a has no device -1: its devices are 0 to 15 (trn2.48xlarge)"},
		{"action", FaultOptions{Node: "trn2-a", Device: 0, Action: "melt"}, `unknown fault action "melt"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.Dir = dir
			if _, err := faultTree(tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	empty := t.TempDir()
	if _, err := faultTree(FaultOptions{Dir: empty, Node: "x", Action: FaultRemove}); err == nil || !strings.Contains(err.Error(), "has no node with any") {
		t.Errorf("a lab without trees: %v", err)
	}
}

// TestFaultNeedsARunningLab: Fault refuses a directory where no lab runs or one still starts,
// and acts once a ready lab runs there.
func TestFaultNeedsARunningLab(t *testing.T) {
	dir := t.TempDir()
	faultLab(t, dir)
	o := FaultOptions{Dir: dir, Node: "trn2-a", Device: 0, Action: FaultRemove}
	if _, err := Fault(o); err == nil || !strings.Contains(err.Error(), "no lab runs in "+dir) {
		t.Errorf("without a lab: %v", err)
	}
	startFakeLab(t, dir, nil)
	if _, err := Fault(o); err == nil || !strings.Contains(err.Error(), "still starting") {
		t.Errorf("with a starting lab: %v", err)
	}
	startFakeLab(t, dir, &ReadyInfo{Nodes: []string{"trn2-a", "inf2-a"}})
	if _, err := Fault(o); err != nil {
		t.Errorf("with a running lab: %v", err)
	}
	if _, err := discoverNode(t, dir, "trn2-a"); err == nil {
		t.Error("the device is still there")
	}
}
