// Command kubectl-neuron shows how kube-neuron places AWS Neuron workloads: the instance
// catalog, what-if plans, topology maps and a fleet simulator. See `kubectl-neuron --help`.
package main

import (
	"os"

	"github.com/kube-neuron/kube-neuron/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
