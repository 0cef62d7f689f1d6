//go:build e2e

// Package lws tests the lab's LeaderWorkerSet controller (sigs.k8s.io/lws, built by
// hack/lws/build.sh): its webhooks are reached through the lab's API server and the controller
// creates a group's leader and workers on simulated UltraServer nodes.
package lws

import (
	"os"
	"testing"

	"github.com/kube-neuron/kube-neuron/internal/lab"
	"github.com/kube-neuron/kube-neuron/test/e2e/framework"
)

func TestMain(m *testing.M) {
	os.Exit(framework.MainOptions(m, lab.Options{
		Fleet: &lab.FleetFile{Nodes: []lab.FleetEntry{
			{Name: "us-1", InstanceType: "trn2u.48xlarge", Count: 2, UltraServer: "us-1"},
		}},
		LWS: true,
	}))
}
