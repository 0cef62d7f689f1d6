// Package cli is kubectl-neuron: the catalog, the what-if planner, topology maps and the fleet
// simulator, on top of the topology engine. It works as a kubectl plugin (`kubectl neuron ...`)
// and on its own.
package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// Exit codes.
const (
	ExitOK       = 0
	ExitRefused  = 1 // the engine refused the request: unsupported count, or it does not fit
	ExitUsage    = 2 // bad flags or input
	exitInternal = 3 // a bug: please report it
)

// exitError carries an exit code with its message.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func usageErr(format string, args ...any) error {
	return &exitError{code: ExitUsage, err: fmt.Errorf(format, args...)}
}

func refused(err error) error { return &exitError{code: ExitRefused, err: err} }

type options struct {
	catalogFiles []string
	out, errOut  io.Writer
}

func (o *options) catalog() (*topology.Catalog, error) {
	c, err := topology.LoadCatalog(o.catalogFiles...)
	if err != nil {
		return nil, usageErr("%w", err)
	}
	return c, nil
}

// NewCommand returns the kubectl-neuron root command writing to out and errOut.
func NewCommand(out, errOut io.Writer) *cobra.Command {
	o := &options{out: out, errOut: errOut}
	root := &cobra.Command{
		Use:   "kubectl-neuron",
		Short: "Topology maps, what-if planning and fleet simulation for AWS Neuron nodes",
		Long: `kubectl-neuron shows how kube-neuron places AWS Neuron (Inferentia, Trainium) workloads.

It uses the same topology engine as the scheduler extender, the device plugin, the DRA driver
and the autoscaler, so what it plans is what the cluster does. Installed on the PATH it also
runs as "kubectl neuron". Every command and its -o formats: docs/kubectl-neuron.md.

Exit codes:
  0  done (check: no error found)
  1  refused: the engine refuses the request or it does not fit (plan), check found an error,
     cleanup --yes while the chart still runs
  2  bad flags, arguments or input (an unreadable manifest, an unknown instance type)
  3  internal error
  4  no kubeconfig, or the cluster cannot be reached, read or changed (nodes, cleanup, top)
  5  no Neuron node, or a node named is missing or not a Neuron node (nodes); the pod does
     not exist (explain); no node agent (top)`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(out)
	root.SetErr(errOut)
	root.PersistentFlags().StringArrayVar(&o.catalogFiles, "catalog", nil,
		"instance catalog file applied over the built-in catalog (repeatable; see docs/catalog.md)")
	root.AddCommand(newCatalogCommand(o), newPlanCommand(o), newTopologyCommand(o), newSimulateCommand(o), newNodesCommand(o), newCheckCommand(o))
	root.AddCommand(newCleanupCommand(o), newExplainCommand(o), newTopCommand(o))
	return root
}

// Main runs kubectl-neuron with args and returns the process exit code.
func Main(args []string, out, errOut io.Writer) int {
	cmd := NewCommand(out, errOut)
	cmd.SetArgs(args)
	err := cmd.Execute()
	if err == nil {
		return ExitOK
	}
	fmt.Fprintf(errOut, "error: %v\n", err)
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	// cobra's own errors: unknown flags, commands and arguments.
	return ExitUsage
}

// writeJSON writes v indented (lists, such as the catalog).
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// writeJSONLine writes v as one line (single results that scripts read, such as a plan).
func writeJSONLine(w io.Writer, v any) error {
	return json.NewEncoder(w).Encode(v)
}
