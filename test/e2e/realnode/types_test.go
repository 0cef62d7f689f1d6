//go:build e2e

package realnode

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kube-neuron/kube-neuron/internal/dra"
	"github.com/kube-neuron/kube-neuron/internal/lab"
	"github.com/kube-neuron/kube-neuron/internal/topology"
	"github.com/kube-neuron/kube-neuron/test/e2e/framework"
)

// TestEveryInstanceTypeBothModes starts a real node of every instance type of the catalog in
// each mode, two at a time, and checks that the chart's component for the mode runs on it as a
// pod and serves every device: the device plugin's allocatable devices and cores through the
// real kubelet, or the DRA driver's ResourceSlices.
func TestEveryInstanceTypeBothModes(t *testing.T) {
	cat := topology.DefaultCatalog()
	var jobs []lab.NodeSpec
	for _, name := range cat.Names() {
		it, err := cat.Get(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, mode := range []string{lab.ModeDevicePlugin, lab.ModeDRA} {
			short := "dp"
			if mode == lab.ModeDRA {
				short = "dra"
			}
			jobs = append(jobs, lab.NodeSpec{Name: "rt-" + strings.ReplaceAll(name, ".", "-") + "-" + short, InstanceType: it, Mode: mode,
				LNC: it.DefaultLNC, DriverVersion: lab.DefaultDriverVersion})
		}
	}
	sem := make(chan struct{}, 2)
	var wg sync.WaitGroup
	for _, spec := range jobs {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			begin := time.Now()
			if err := runOne(t, spec); err != nil {
				t.Errorf("%s in %s mode: %v", spec.InstanceType.Name, spec.Mode, err)
				return
			}
			t.Logf("%s in %s mode: served in %v", spec.InstanceType.Name, spec.Mode, time.Since(begin).Round(100*time.Millisecond))
		})
	}
	wg.Wait()
}

// runOne starts one real node, waits until its component serves every device, and removes it.
func runOne(t *testing.T, spec lab.NodeSpec) error {
	ctx := framework.Context(t)
	if _, err := framework.L.AddRealNode(ctx, spec); err != nil {
		return err
	}
	defer func() {
		if err := framework.L.RemoveRealNode(ctx, spec.Name); err != nil {
			t.Errorf("removing node %s: %v", spec.Name, err)
		}
	}()
	it := spec.InstanceType
	if spec.Mode == lab.ModeDRA {
		return framework.L.WaitForResourceSliceDevices(ctx, spec.Name, dra.DriverName, it.Devices, 90*time.Second)
	}
	shape, err := topology.NewShape(it, spec.LNC)
	if err != nil {
		return err
	}
	if err := framework.L.WaitForNodeResource(ctx, spec.Name, "aws.amazon.com/neuron", int64(it.Devices), 90*time.Second); err != nil {
		return err
	}
	if err := framework.L.WaitForNodeResource(ctx, spec.Name, "aws.amazon.com/neuroncore", int64(shape.Cores()), 30*time.Second); err != nil {
		return fmt.Errorf("cores: %w", err)
	}
	return nil
}
