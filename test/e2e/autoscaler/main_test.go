//go:build e2e

// Package autoscaler tests neuron-autoscaler in the lab with the local provider: the nodes it
// launches are Node objects that the lab adopts and simulates, with the device plugin or the DRA
// driver running on them, so the whole loop (pending pod, plan, node, pod running, node removed)
// runs on the real control plane.
package autoscaler

import (
	"os"
	"testing"

	"github.com/kube-neuron/kube-neuron/internal/lab"
	"github.com/kube-neuron/kube-neuron/test/e2e/framework"
)

func TestMain(m *testing.M) {
	// No Neuron node at the start: the autoscaler launches them. The LeaderWorkerSet controller
	// runs for the seed's own UltraServer example.
	os.Exit(framework.MainOptions(m, lab.Options{
		Fleet:      &lab.FleetFile{},
		Components: []string{lab.ComponentDevicePlugin, lab.ComponentDRADriver, lab.ComponentExtender, lab.ComponentAutoscaler},
		LWS:        true,
	}))
}
