package main

import (
	"fmt"
	"io"
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

// flags are neuron-lab's persistent flags.
type flags struct {
	dir, binDir, fleetFile string
	components, manifests  []string
	real                   realFlags
}

// abs makes the directories absolute (`up` runs the lab in the background) and checks the
// components; a lab needs --bin-dir.
func (f *flags) abs() error {
	if err := lab.CheckComponents(f.components); err != nil {
		return err
	}
	var err error
	if f.dir, err = filepath.Abs(f.dir); err == nil && f.binDir != "" {
		f.binDir, err = filepath.Abs(f.binDir)
	}
	if err == nil && f.binDir == "" {
		err = fmt.Errorf("--bin-dir is required: run `make lab-up`, or pass the directory hack/build-tools.sh prints")
	}
	return err
}

func (f *flags) options() lab.Options {
	return lab.Options{BinDir: f.binDir, Dir: f.dir, ComponentBinDir: selfDir(), Components: f.components, Manifests: f.manifests}
}

func upCommand(f *flags, out io.Writer) *cobra.Command {
	return &cobra.Command{Use: "up", Short: "Start a lab in the background (replacing one running in --dir)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.abs(); err != nil {
				return err
			}
			if f.fleetFile != "" { // fail here, with the file's problem, rather than in the background
				fleet, err := lab.LoadFleet(f.fleetFile)
				if err != nil {
					return err
				}
				if _, err := fleet.Expand(topology.DefaultCatalog()); err != nil {
					return fmt.Errorf("fleet file %s: %w", f.fleetFile, err)
				}
				if f.fleetFile, err = filepath.Abs(f.fleetFile); err != nil {
					return err
				}
			}
			for _, c := range f.components { // the background lab would fail on it
				if _, err := os.Stat(filepath.Join(selfDir(), c)); err != nil {
					build := "run make build"
					if c == lab.ComponentKubeScheduler { // a module of its own, not built by make build
						build = "copy it there from the directory hack/build-scheduler.sh prints"
					}
					return fmt.Errorf("component %s is not in %s: %s, or leave it out of --components (COMPONENTS)", c, selfDir(), build)
				}
			}
			self, err := os.Executable()
			if err != nil {
				return err
			}
			for i, m := range f.manifests {
				if f.manifests[i], err = filepath.Abs(m); err != nil {
					return err
				}
			}
			if err := f.real.abs(); err != nil {
				return err
			}
			stopped, err := lab.StopLab(f.dir)
			if err != nil {
				return fmt.Errorf("stopping the lab that runs in %s: %w", f.dir, err)
			}
			if !stopped.Nothing() {
				fmt.Fprintln(out, stopped)
			}
			if _, err := lab.Up(cmd.Context(), lab.UpOptions{Dir: f.dir, BinDir: f.binDir, FleetFile: f.fleetFile, Self: self,
				Manifests: f.manifests, Components: f.components, Extra: f.real.args()}); err != nil {
				return err
			}
			st, err := lab.ReadStatus(cmd.Context(), lab.StatusOptions{Dir: f.dir})
			if err != nil {
				return err
			}
			st.Write(out)
			fmt.Fprintf(out, "see it again with: make lab-status (neuron-lab status --dir %s); stop it with: make lab-down\n", f.dir)
			return nil
		}}
}

func downCommand(f *flags, out io.Writer) *cobra.Command {
	return &cobra.Command{Use: "down", Short: "Stop the lab running in --dir, and say what it stopped", Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			stopped, err := lab.StopLab(f.dir)
			fmt.Fprintln(out, stopped)
			return err
		}}
}

func statusCommand(f *flags, out io.Writer) *cobra.Command {
	return &cobra.Command{Use: "status", Short: "Say whether a lab runs in --dir: its nodes, components, kubeconfig and pending pods (exit 0 when one runs, 1 when none does)",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := lab.ReadStatus(cmd.Context(), lab.StatusOptions{Dir: f.dir})
			if err != nil {
				return err
			}
			st.Write(out)
			if !st.Running() {
				return exitCode(1)
			}
			return nil
		}}
}

func serveCommand(f *flags) *cobra.Command {
	return &cobra.Command{Use: "serve", Short: "Run a lab in the foreground until interrupted", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.abs(); err != nil {
				return err
			}
			o := f.options()
			f.real.apply(&o)
			if f.fleetFile != "" {
				fleet, err := lab.LoadFleet(f.fleetFile)
				if err != nil {
					return err
				}
				o.Fleet = &fleet
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return lab.Serve(ctx, o)
		}}
}

// demoComponents are the demo's components when --components is not given: all but the
// autoscaler, which the demo's last act starts.
func demoComponents() []string {
	return []string{lab.ComponentDevicePlugin, lab.ComponentExtender, lab.ComponentDRADriver}
}

func demoCommand(f *flags, out io.Writer) *cobra.Command {
	return &cobra.Command{Use: "demo", Short: "Start a lab in --dir, apply examples/, show what every pod got, and stop", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flag("components").Changed {
				f.components = demoComponents()
			}
			if err := f.abs(); err != nil {
				return err
			}
			if err := lab.Down(f.dir); err != nil { // a demo interrupted earlier
				return err
			}
			if err := os.MkdirAll(f.dir, 0o755); err != nil {
				return err
			}
			logFile, err := os.Create(filepath.Join(f.dir, lab.ServeLog)) // keep the demo's output readable
			if err != nil {
				return err
			}
			defer logFile.Close()
			klog.LogToStderr(false)
			klog.SetOutput(logFile)
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			o := f.options()
			if err := f.real.abs(); err != nil {
				return err
			}
			f.real.apply(&o)
			return demo.Run(ctx, demo.Options{Lab: o, Examples: demo.RepoExamples(), Out: out})
		}}
}
