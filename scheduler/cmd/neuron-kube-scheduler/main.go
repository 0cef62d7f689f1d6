// Command neuron-kube-scheduler is kube-scheduler with kube-neuron's topology plugin compiled
// in: the same flags and configuration file as kube-scheduler, and one more plugin,
// NeuronTopology, for the profiles that enable it.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	"github.com/kube-neuron/kube-neuron/scheduler/plugin"
)

func main() {
	cmd := app.NewSchedulerCommand(app.WithPlugin(plugin.Name, plugin.New))
	os.Exit(cli.Run(cmd))
}
