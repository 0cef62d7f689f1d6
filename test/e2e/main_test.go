//go:build e2e

package e2e

import (
	"os"
	"testing"

	"github.com/kube-neuron/kube-neuron/test/e2e/framework"
)

// TestMain runs the package's tests on one lab with the default fleet.
func TestMain(m *testing.M) {
	os.Exit(framework.Main(m, nil))
}
