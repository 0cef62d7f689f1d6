//go:build e2e

// Package dra tests neuron-dra-driver in the lab: the real kube-scheduler allocates the seed
// examples' claims from the driver's ResourceSlices, and the simulated kubelet prepares them over
// the real DRA gRPC protocol, with CDI specs the container runtime would read.
package dra

import (
	"os"
	"testing"

	"github.com/kube-neuron/kube-neuron/internal/lab"
	"github.com/kube-neuron/kube-neuron/test/e2e/framework"
)

func TestMain(m *testing.M) {
	os.Exit(framework.Main(m, &lab.FleetFile{Nodes: []lab.FleetEntry{
		{Name: "trn2-a", InstanceType: "trn2.48xlarge", Mode: lab.ModeDRA},
		// The seed's 2.26-driver-trn2 template asks for driver 2.24.7.0.
		{Name: "trn2-b", InstanceType: "trn2.48xlarge", Mode: lab.ModeDRA, DriverVersion: "2.24.7.0"},
		{Name: "trn1-s", InstanceType: "trn1.2xlarge", Mode: lab.ModeDRA},
		{Name: "us-1", InstanceType: "trn2u.48xlarge", Mode: lab.ModeDRA, Count: 4, UltraServer: "us-1"},
		{Name: "us-2", InstanceType: "trn2u.48xlarge", Mode: lab.ModeDRA, Count: 4, UltraServer: "us-2"},
	}}, lab.ComponentDRADriver))
}
