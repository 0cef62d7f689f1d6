// Command neuron-lab runs kube-neuron's local lab: a real Kubernetes control plane on 127.0.0.1
// with simulated Neuron nodes. `make lab-up`, `make lab-status` and `make lab-down` call it.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/kube-neuron/kube-neuron/internal/lab"
)

func main() {
	os.Exit(run(klog.NewContext(context.Background(), klog.Background()), os.Args[1:], os.Stdout, os.Stderr))
}

// exitCode ends a command with that code and no message: the command said what it had to.
type exitCode int

func (c exitCode) Error() string { return fmt.Sprintf("exit status %d", int(c)) }

// run runs neuron-lab with args and returns its exit code. An error is printed once, here.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f := &flags{}
	root := &cobra.Command{Use: "neuron-lab", Short: "A local Kubernetes control plane with simulated AWS Neuron nodes",
		SilenceUsage: true, SilenceErrors: true}
	p := root.PersistentFlags()
	p.StringVar(&f.dir, "dir", ".lab", "lab state directory (kubeconfig, logs, bin/kubectl)")
	p.StringVar(&f.binDir, "bin-dir", os.Getenv("KUBE_NEURON_TOOLS_BIN"), "directory of the pinned etcd and Kubernetes binaries (hack/build-tools.sh prints it)")
	p.StringSliceVar(&f.components, "components", lab.DefaultComponents(), "kube-neuron components to run, from the directory of this binary (a comma list; demo: all but the autoscaler, which its last act starts); "+
		lab.ComponentKubeScheduler+" in place of "+lab.ComponentExtender+" runs my-scheduler with the NeuronTopology plugin")
	p.StringArrayVar(&f.manifests, "apply", nil, "YAML file to apply once the lab runs (repeatable), such as the rendered Helm chart")
	p.StringVar(&f.fleetFile, "fleet", "", "fleet file (default: one inf2.48xlarge, one trn1.32xlarge, one trn2.48xlarge in DRA mode)")
	f.real.add(root)
	root.AddCommand(upCommand(f, stdout), downCommand(f, stdout), statusCommand(f, stdout), serveCommand(f), demoCommand(f, stdout),
		registryCommand(), nodeInitCommand(), faultCommand(f, stdout))
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	var code exitCode
	switch {
	case err == nil:
		return 0
	case errors.As(err, &code):
		return int(code)
	}
	fmt.Fprintln(stderr, "error:", err)
	return 1
}

// selfDir is the directory of this binary, where make build puts the components too.
func selfDir() string {
	self, err := os.Executable()
	if err != nil {
		return "bin"
	}
	return filepath.Dir(self)
}
