//go:build e2e

// Package realnode is the real-node tier: the chart installed with helm on a lab whose nodes run
// a real kubelet v1.36.3, containerd and runc (docs/lab.md, "Real nodes"), the components as
// pods from their images under their own ServiceAccounts, and the examples' pods running the
// lab's stand-in workload, whose printed environment and device nodes are what the kubelet, the
// device plugin and the DRA driver (through containerd's CDI) gave the container.
//
// It needs root and namespaces; on a machine without them it fails and says so, unless
// KUBE_NEURON_REAL_NODES=0 opts out.
package realnode

import (
	"os"
	"testing"

	"github.com/kube-neuron/kube-neuron/internal/lab"
	"github.com/kube-neuron/kube-neuron/test/e2e/framework"
)

// The fleet: three real Neuron nodes (with the lab's system node, four real kubelets) and a
// simulated node beside them.
const (
	inf2Node = "inf2-a" // inf2.48xlarge, device plugin
	trn1Node = "trn1-a" // trn1.32xlarge, device plugin
	trn2Node = "trn2-a" // trn2.48xlarge, DRA (LNC 2)
	simNode  = "trn1-sim"
)

func TestMain(m *testing.M) {
	os.Exit(framework.MainOptions(m, lab.Options{
		Fleet: &lab.FleetFile{Nodes: []lab.FleetEntry{
			{Name: inf2Node, InstanceType: "inf2.48xlarge", Kubelet: lab.KubeletReal},
			{Name: trn1Node, InstanceType: "trn1.32xlarge", Kubelet: lab.KubeletReal},
			{Name: trn2Node, InstanceType: "trn2.48xlarge", Mode: lab.ModeDRA, Kubelet: lab.KubeletReal},
			{Name: simNode, InstanceType: "trn1.2xlarge", Mode: lab.ModeDRA},
		}},
		Components: []string{lab.ComponentDevicePlugin, lab.ComponentExtender, lab.ComponentDRADriver},
	}))
}
