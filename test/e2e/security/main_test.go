//go:build e2e

// Package security tests the security settings in the lab.
//
// TestRBACIsLeastPrivilege proves the chart's RBAC least-privilege on the lab's real API server:
// it runs neuron-device-plugin, neuron-scheduler-extender, neuron-dra-driver and
// neuron-autoscaler through their flows with the API server's audit log on, and compares every
// (verb, resource, subresource) each component called, told apart by its user agent, with the
// rules the chart grants it: a call the chart does not grant fails the test, and so does a
// granted rule nothing used, unless allowUnused says why the lab cannot exercise it.
//
// TestExtenderTLSWithKubeScheduler runs a real kube-scheduler with the chart's TLS
// configuration against neuron-scheduler-extender serving HTTPS with client authentication.
package security

import (
	"os"
	"testing"

	"github.com/kube-neuron/kube-neuron/internal/lab"
	"github.com/kube-neuron/kube-neuron/test/e2e/framework"
)

func TestMain(m *testing.M) {
	os.Exit(framework.MainOptions(m, lab.Options{
		Fleet: &lab.FleetFile{Nodes: []lab.FleetEntry{
			{Name: "trn1-a", InstanceType: "trn1.32xlarge"},
			{Name: "trn1-s", InstanceType: "trn1.2xlarge", Mode: lab.ModeDRA},
		}},
		Components: []string{lab.ComponentDevicePlugin, lab.ComponentExtender, lab.ComponentDRADriver, lab.ComponentAutoscaler},
		AuditLog:   true,
		// Leader election as the chart runs it (the lab turns it off), and a quick scale-down.
		AutoscalerArgs: []string{"--leader-elect=true", "--namespace=kube-system", "--scale-down-after=3s"},
	}))
}
