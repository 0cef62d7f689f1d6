package plan

import (
	"os/exec"
	"strings"
	"testing"
)

// TestPure: the planner decides and does no I/O. It imports no Kubernetes client, no gRPC and
// no AWS SDK, directly or through any package it uses, so that what it decides depends on its
// arguments alone.
func TestPure(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 || deps[len(deps)-1] != "github.com/kube-neuron/kube-neuron/internal/autoscaler/plan" {
		t.Fatalf("go list -deps . did not list this package last: %v", deps)
	}
	for _, d := range deps {
		for _, banned := range []string{"k8s.io/client-go", "google.golang.org/grpc", "github.com/aws/"} {
			if d == banned || strings.HasPrefix(d, strings.TrimSuffix(banned, "/")+"/") {
				t.Errorf("the planner depends on %s; it must take its inputs as arguments instead", d)
			}
		}
	}
}
