//go:build e2e

// Package deviceplugin tests neuron-device-plugin on simulated inf2.48xlarge, trn1.32xlarge and
// trn2.48xlarge nodes, through the kubelet's real device plugin and PodResources protocols.
package deviceplugin

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
		{Name: "trn1-b", InstanceType: "trn1.32xlarge"},
		{Name: "trn1-c", InstanceType: "trn1.32xlarge"},
		{Name: "trn2-a", InstanceType: "trn2.48xlarge", LNC: 2},
	}}, lab.ComponentDevicePlugin))
}
