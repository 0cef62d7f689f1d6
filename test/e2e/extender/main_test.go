//go:build e2e

// Package extender tests my-scheduler's topology decisions with neuron-device-plugin serving
// them on simulated nodes: my-scheduler is neuron-scheduler-extender behind a real
// kube-scheduler, or with KUBE_NEURON_SCHEDULING=plugin neuron-kube-scheduler (the Makefile runs
// the shared tests both ways; those about the extender itself only with the extender).
package extender

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
		{Name: "inf1-a", InstanceType: "inf1.6xlarge"},
		{Name: "churn", InstanceType: "trn1.32xlarge", Count: 2},
		{Name: "churn-inf2", InstanceType: "inf2.48xlarge"},
		{Name: "race", InstanceType: "trn1.32xlarge"},
		{Name: "switch", InstanceType: "trn1.32xlarge"},
		{Name: narrowSmall, InstanceType: "inf2.8xlarge"},
		{Name: narrowLarge, InstanceType: "inf2.24xlarge"},
	}}, lab.ComponentDevicePlugin, lab.ComponentExtender))
}
