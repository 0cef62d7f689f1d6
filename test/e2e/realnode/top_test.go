//go:build e2e

package realnode

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kube-neuron/kube-neuron/internal/cli"
	"github.com/kube-neuron/kube-neuron/internal/topology"
	"github.com/kube-neuron/kube-neuron/test/e2e/framework"
)

// topJSON runs `kubectl-neuron top ARGS -o json` against the lab and decodes its answer into v;
// it returns the exit code and stderr.
func topJSON(t *testing.T, v any, args ...string) (int, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	args = append(append([]string{"top"}, args...), "-o", "json", "--kubeconfig", framework.L.Kubeconfig())
	code := cli.Main(args, &out, &errOut)
	if code == cli.ExitOK {
		if err := json.Unmarshal(out.Bytes(), v); err != nil {
			t.Fatalf("kubectl-neuron %s: %v\n%s", strings.Join(args, " "), err, out.String())
		}
	}
	return code, errOut.String()
}

// TestTopOnRealNodes runs a device-plugin pod with two Neuron containers on a real trn1 or inf2
// node and a DRA claim pod on the real trn2-a (LNC 2), then reads them back with
// `kubectl-neuron top pods -A -o json`: the chart's agents (pods on the real nodes) export the
// holders in their metrics and top reads them through the API server's pod proxy. Each
// container's node, devices and cores are what the allocation record or the claim gave it.
func TestTopOnRealNodes(t *testing.T) {
	ctx := framework.Context(t)
	ns := newNamespace(t, ctx)
	framework.EnsureDeviceClass(t, ctx)
	framework.Apply(t, ctx, "examples/device-plugin/two-containers.yaml", ns)
	framework.Apply(t, ctx, "examples/dra/1x4-connected-neurons.yaml", ns)
	rec := checkRecordRuns(t, ctx, ns, "two-containers")
	ids := checkClaimRuns(t, ctx, ns, "pod-1x4-connected", "ctr0", 2)

	want := map[string]cli.TopPod{}
	for _, c := range rec.Containers {
		want["two-containers/"+c.Name] = cli.TopPod{Namespace: ns, Pod: "two-containers", Container: c.Name, Node: rec.Node, Devices: c.Devices, Cores: c.Cores}
	}
	it, err := topology.DefaultCatalog().Get("trn2.48xlarge")
	if err != nil {
		t.Fatal(err)
	}
	shape, err := topology.NewShape(it, 2)
	if err != nil {
		t.Fatal(err)
	}
	var cores []int
	for _, d := range ids {
		cores = append(cores, shape.CoresOf(d)...)
	}
	slices.Sort(cores)
	want["pod-1x4-connected/ctr0"] = cli.TopPod{Namespace: ns, Pod: "pod-1x4-connected", Container: "ctr0", Node: trn2Node, Devices: ids, Cores: cores}

	// The agents sample sysfs and watch their pods on their own: poll until they name both pods.
	var rows []cli.TopPod
	framework.WaitFor(t, ctx, 90*time.Second, "kubectl-neuron top pods -A to list the test's containers", func(ctx context.Context) (bool, string, error) {
		rows = nil
		code, stderr := topJSON(t, &rows, "pods", "-A")
		if code != cli.ExitOK {
			return false, fmt.Sprintf("exit %d: %s", code, stderr), nil
		}
		got := map[string]cli.TopPod{}
		for _, r := range rows {
			if r.Namespace == ns {
				got[r.Pod+"/"+r.Container] = r
			}
		}
		if len(got) != len(want) {
			return false, fmt.Sprintf("%d of the test's containers listed: %+v (stderr %q)", len(got), got, stderr), nil
		}
		for k, w := range want {
			g, ok := got[k]
			if !ok || g.Node != w.Node || !slices.Equal(g.Devices, w.Devices) || !slices.Equal(g.Cores, w.Cores) {
				return false, fmt.Sprintf("%s: got %+v, want node %s devices %v cores %v", k, g, w.Node, w.Devices, w.Cores), nil
			}
		}
		return true, "", nil
	})
	for _, r := range rows {
		if r.Devices == nil || r.Cores == nil || r.Utilization < 0 || r.Utilization > 1 {
			t.Errorf("row %+v: ids must not be null, utilization 0 to 1", r)
		}
	}

	// -n: only the test's namespace, the same rows.
	var inNS []cli.TopPod
	if code, stderr := topJSON(t, &inNS, "pods", "-n", ns); code != cli.ExitOK || len(inNS) != len(want) {
		t.Errorf("top pods -n %s: exit %d, %d rows %+v, stderr %q", ns, code, len(inNS), inNS, stderr)
	}

	// top nodes: every real Neuron node, with the test's devices counted as used.
	var nodes []cli.TopNode
	if code, stderr := topJSON(t, &nodes, "nodes"); code != cli.ExitOK {
		t.Fatalf("top nodes: exit %d: %s", code, stderr)
	}
	byName := map[string]cli.TopNode{}
	for _, n := range nodes {
		byName[n.Node] = n
	}
	for node, minUsed := range map[string]int{rec.Node: 2, trn2Node: len(ids)} {
		n, ok := byName[node]
		if !ok {
			t.Errorf("top nodes does not list %s: %+v", node, nodes)
			continue
		}
		if n.DevicesUsed < minUsed || n.DevicesUsed+n.DevicesFree+n.DevicesUnhealthy != shapeDevices(t, n.InstanceType) || n.CoresUsed == 0 || n.Unhealthy == nil {
			t.Errorf("top nodes %s: %+v, want at least %d devices used of %s's", node, n, minUsed, n.InstanceType)
		}
	}
	for _, node := range []string{inf2Node, trn1Node, trn2Node} {
		if _, ok := byName[node]; !ok {
			t.Errorf("top nodes does not list the real node %s", node)
		}
	}

	// The tables, as a user sees them (in the test's log).
	for _, args := range [][]string{{"top", "pods", "-n", ns}, {"top", "nodes"}} {
		var out, errOut bytes.Buffer
		args = append(args, "--kubeconfig", framework.L.Kubeconfig())
		if code := cli.Main(args, &out, &errOut); code != cli.ExitOK || !strings.Contains(out.String(), "UTILIZATION") {
			t.Errorf("kubectl-neuron %s: exit %d\n%s%s", strings.Join(args, " "), code, out.String(), errOut.String())
		}
		t.Logf("kubectl-neuron %s\n%s%s", strings.Join(args[:len(args)-2], " "), out.String(), errOut.String())
	}
}

func shapeDevices(t *testing.T, instanceType string) int {
	t.Helper()
	it, err := topology.DefaultCatalog().Get(instanceType)
	if err != nil {
		t.Fatalf("instance type %q: %v", instanceType, err)
	}
	return it.Devices
}
