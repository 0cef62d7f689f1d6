// Command kubectl-neuron shows how kube-neuron places AWS Neuron workloads: the instance
// catalog, what-if plans, topology maps, a fleet simulator, an offline manifest check, the
// cluster's Neuron nodes, and cleanup after uninstall. See `kubectl-neuron --help` and
// docs/kubectl-neuron.md.
package main

import (
	"os"

	"github.com/kube-neuron/kube-neuron/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
