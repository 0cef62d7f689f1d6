//go:build e2e

// Package migration tests taking nodes over from the published Neuron stack: pods it placed
// (AWS_NEURON_IDS, NEURON_ALLOC_TIME, NEURON_ALLOCATED, no kube-neuron.io/allocation record) and
// its stale usage maps on the nodes, with my-scheduler (neuron-scheduler-extender, or
// neuron-kube-scheduler with KUBE_NEURON_SCHEDULING=plugin) and neuron-device-plugin
// running; and uninstalling with kubectl-neuron cleanup.
package migration

import (
	"os"
	"testing"

	"github.com/kube-neuron/kube-neuron/internal/lab"
	"github.com/kube-neuron/kube-neuron/test/e2e/framework"
)

func TestMain(m *testing.M) {
	os.Exit(framework.Main(m, &lab.FleetFile{Nodes: []lab.FleetEntry{
		{Name: "inf2-a", InstanceType: "inf2.48xlarge"},
		{Name: "trn1-a", InstanceType: "trn1.32xlarge"},
	}}, lab.ComponentDevicePlugin, lab.ComponentExtender))
}
