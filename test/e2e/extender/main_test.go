//go:build e2e

// Package extender tests neuron-scheduler-extender behind a real kube-scheduler (my-scheduler),
// with neuron-device-plugin serving its decisions on simulated nodes.
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
	}}, lab.ComponentDevicePlugin, lab.ComponentExtender))
}
