package ledger

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImportsNoClientNorGRPC: the ledger decides over plain data. The Kubernetes client, gRPC
// and the kubelet's APIs are the plugin's, around it; the compiler keeps them out through this
// test.
func TestImportsNoClientNorGRPC(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list the package's imports: %v", err)
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps listed %v: too few to be this package's imports", deps)
	}
	for _, dep := range deps {
		for _, banned := range []string{"k8s.io/client-go", "google.golang.org/grpc", "k8s.io/kubelet"} {
			if dep == banned || strings.HasPrefix(dep, banned+"/") {
				t.Errorf("the ledger imports %s", dep)
			}
		}
	}
}
