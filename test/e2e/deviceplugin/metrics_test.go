//go:build e2e

package deviceplugin

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-neuron/kube-neuron/test/e2e/framework"
)

// TestMetricsHolders: the device plugin's per-device and per-core series name the pod and
// container that hold each device and core (a device-plugin pod, a two-container pod with a
// device and cores of another device), and free devices and cores have empty holders.
func TestMetricsHolders(t *testing.T) {
	const node = "trn2-a"
	ctx := framework.Context(t)
	shape := shapeOf(t, node)
	read := func(ctx context.Context) (map[int][]string, map[int][]string, error) {
		m, err := framework.ScrapeNodeMetrics(ctx, node)
		if err != nil {
			return nil, nil, err
		}
		cores, err := framework.HolderSets(m["neuron_core_memory_used_bytes"], node, "neuron_core")
		if err != nil {
			return nil, nil, err
		}
		devices, err := framework.HolderSets(m["neuron_device_ecc_errors_total"], node, "neuron_device")
		return cores, devices, err
	}
	// The pods of tests before this one may still be leaving the node.
	framework.WaitFor(t, ctx, time.Minute, "every device of "+node+" to be free in its metrics", func(ctx context.Context) (bool, string, error) {
		cores, devices, err := read(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		d := framework.DiffHolders("core", cores, framework.WantHolders(shape.Cores(), nil)) + framework.DiffHolders("; device", devices, framework.WantHolders(shape.Devices(), nil))
		return d == "", d, nil
	})

	ns := framework.CreateNamespace(t, ctx)
	createPod(t, ctx, ns, podSpec{name: "devices", node: node, containers: []ctr{{"app", neuronRes, 4}}})
	createPod(t, ctx, ns, podSpec{name: "two", node: node, containers: []ctr{{"whole", deviceRes, 1}, {"part", coreRes, 2}}})
	heldCores, heldDevices := map[string][]int{}, map[string][]int{}
	for _, name := range []string{"devices", "two"} {
		pod := framework.WaitForPod(t, ctx, ns, name, corev1.PodRunning, 60*time.Second)
		for c, r := range running(t, pod) {
			h := ns + "/" + name + "/" + c
			heldDevices[h], heldCores[h] = r[0], r[1]
		}
	}
	if part := heldCores[ns+"/two/part"]; len(part) != 2 || len(part) == len(shape.CoresOf(shape.DeviceOf(part[0]))) {
		t.Fatalf("container part runs with cores %v: want 2 of one device's %d", part, shape.CoresPerDevice)
	}
	wantCores, wantDevices := framework.WantHolders(shape.Cores(), heldCores), framework.WantHolders(shape.Devices(), heldDevices)
	framework.WaitFor(t, ctx, 30*time.Second, "the metrics of "+node+" to name the pods on their devices and cores", func(ctx context.Context) (bool, string, error) {
		cores, devices, err := read(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		d := framework.DiffHolders("core", cores, wantCores) + framework.DiffHolders("; device", devices, wantDevices)
		return d == "", d, nil
	})
	// The lab's busy loop moves nc_time_in_use of held cores only: utilisation is above 0 on
	// exactly the held cores.
	held := map[int]bool{}
	for _, cs := range heldCores {
		for _, c := range cs {
			held[c] = true
		}
	}
	framework.WaitFor(t, ctx, 30*time.Second, "the held cores of "+node+" (and only they) to show utilization", func(ctx context.Context) (bool, string, error) {
		m, err := framework.ScrapeNodeMetrics(ctx, node)
		if err != nil {
			return false, err.Error(), nil
		}
		return framework.BusyOnlyWhereHeld(m["neuron_core_utilization_ratio"], held)
	})
}
