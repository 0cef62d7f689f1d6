//go:build e2e

// Package chart applies every object the Helm chart renders, for the seed install commands and
// the hardened settings, to the lab's real kube-apiserver with server-side dry-run, and tests
// the chart's MutatingAdmissionPolicy on it. No node and no component runs: only the API server
// judges the objects.
package chart

import (
	"os"
	"testing"

	"github.com/kube-neuron/kube-neuron/internal/lab"
	"github.com/kube-neuron/kube-neuron/test/e2e/framework"
)

func TestMain(m *testing.M) {
	os.Exit(framework.MainOptions(m, lab.Options{Fleet: &lab.FleetFile{Nodes: []lab.FleetEntry{}}}))
}
