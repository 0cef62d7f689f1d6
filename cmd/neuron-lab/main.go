// Command neuron-lab runs kube-neuron's local lab: a real Kubernetes control plane on 127.0.0.1
// with simulated Neuron nodes. `make lab-up` and `make lab-down` call it.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/kube-neuron/kube-neuron/internal/demo"
	"github.com/kube-neuron/kube-neuron/internal/lab"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

func main() {
	var dir, binDir, fleetFile string
	var components, manifests []string
	var real realFlags
	root := &cobra.Command{Use: "neuron-lab", Short: "A local Kubernetes control plane with simulated AWS Neuron nodes", SilenceUsage: true}
	root.PersistentFlags().StringVar(&dir, "dir", ".lab", "lab state directory (kubeconfig, logs, bin/kubectl)")
	root.PersistentFlags().StringVar(&binDir, "bin-dir", os.Getenv("KUBE_NEURON_TOOLS_BIN"), "directory of the pinned etcd and Kubernetes binaries (hack/build-tools.sh prints it)")
	root.PersistentFlags().StringSliceVar(&components, "components", []string{lab.ComponentDevicePlugin, lab.ComponentExtender, lab.ComponentDRADriver}, "kube-neuron components to run, from the directory of this binary")
	root.PersistentFlags().StringArrayVar(&manifests, "apply", nil, "YAML file to apply once the lab runs (repeatable), such as the rendered Helm chart")
	root.PersistentFlags().StringVar(&fleetFile, "fleet", "", "fleet file (default: one inf2.48xlarge, one trn1.32xlarge, one trn2.48xlarge in DRA mode)")
	real.add(root)
	abs := func() error {
		var err error
		if dir, err = filepath.Abs(dir); err == nil && binDir != "" {
			binDir, err = filepath.Abs(binDir)
		}
		if err == nil && binDir == "" {
			err = fmt.Errorf("--bin-dir is required: run `make lab-up`, or pass the directory hack/build-tools.sh prints")
		}
		return err
	}
	root.AddCommand(&cobra.Command{Use: "up", Short: "Start a lab in the background (replacing one running in --dir)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := abs(); err != nil {
				return err
			}
			if fleetFile != "" { // fail here, with the file's problem, rather than in the background
				f, err := lab.LoadFleet(fleetFile)
				if err == nil {
					_, err = f.Expand(topology.DefaultCatalog())
				}
				if err != nil {
					return err
				}
				if fleetFile, err = filepath.Abs(fleetFile); err != nil {
					return err
				}
			}
			self, err := os.Executable()
			if err != nil {
				return err
			}
			for i, m := range manifests {
				if manifests[i], err = filepath.Abs(m); err != nil {
					return err
				}
			}
			if err := real.abs(); err != nil {
				return err
			}
			info, err := lab.Up(cmd.Context(), lab.UpOptions{Dir: dir, BinDir: binDir, FleetFile: fleetFile, Self: self, Manifests: manifests, Components: components, Extra: real.args()})
			if err != nil {
				return err
			}
			fmt.Printf("lab ready in %s: nodes %v\n  %s --kubeconfig %s get nodes\n", info.StartedIn, info.Nodes, info.Kubectl, info.Kubeconfig)
			if info.Chart != "" {
				fmt.Printf("  %s (helm --kubeconfig %s list -n %s)\n", info.Chart, info.Kubeconfig, lab.ChartNamespace)
			}
			fmt.Println("  stop it with: make lab-down")
			return nil
		}})
	root.AddCommand(&cobra.Command{Use: "down", Short: "Stop the lab running in --dir", Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error { return lab.Down(dir) }})
	root.AddCommand(&cobra.Command{Use: "serve", Short: "Run a lab in the foreground until interrupted", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := abs(); err != nil {
				return err
			}
			o := lab.Options{BinDir: binDir, Dir: dir, ComponentBinDir: selfDir(), Components: components, Manifests: manifests}
			real.apply(&o)
			if fleetFile != "" {
				f, err := lab.LoadFleet(fleetFile)
				if err != nil {
					return err
				}
				o.Fleet = &f
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return lab.Serve(ctx, o)
		}})
	root.AddCommand(&cobra.Command{Use: "demo", Short: "Start a lab in --dir, apply examples/, show what every pod got, and stop", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := abs(); err != nil {
				return err
			}
			if err := lab.Down(dir); err != nil { // a demo interrupted earlier
				return err
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			logFile, err := os.Create(filepath.Join(dir, lab.ServeLog)) // keep the demo's output readable
			if err != nil {
				return err
			}
			defer logFile.Close()
			klog.LogToStderr(false)
			klog.SetOutput(logFile)
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			o := lab.Options{BinDir: binDir, Dir: dir, ComponentBinDir: selfDir(), Components: components, Manifests: manifests}
			if err := real.abs(); err != nil {
				return err
			}
			real.apply(&o)
			return demo.Run(ctx, demo.Options{Lab: o, Examples: demo.RepoExamples(), Out: os.Stdout})
		}})
	root.AddCommand(registryCommand(), nodeInitCommand())
	if err := root.ExecuteContext(klog.NewContext(context.Background(), klog.Background())); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

// selfDir is the directory of this binary, where make build puts the components too.
func selfDir() string {
	self, err := os.Executable()
	if err != nil {
		return "bin"
	}
	return filepath.Dir(self)
}
