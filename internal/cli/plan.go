package cli

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// PlanResult is the JSON contract of `kubectl-neuron plan -o json`.
type PlanResult struct {
	InstanceType string `json:"instanceType"`
	Resource     string `json:"resource"`
	Count        int    `json:"count"`
	Devices      []int  `json:"devices"`
	Cores        []int  `json:"cores"`
}

type planOptions struct {
	instanceType, request, inUseDevices, inUseCores, policy, output string
	lnc                                                             int
}

func newPlanCommand(o *options) *cobra.Command {
	p := &planOptions{}
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Show what the engine allocates for a request on an empty or partly used node",
		Long: `plan asks the topology engine where a request goes on one node.

An invalid or unsatisfiable request prints nothing on stdout, exits 1 and says why on stderr:
the Neuron scheduler extension's message for a count the instance type never accepts, and the
free devices for a valid request that does not fit now. Bad flags exit 2.`,
		Example: `  kubectl-neuron plan --instance-type trn1.32xlarge --request aws.amazon.com/neuron=4
  kubectl-neuron plan --instance-type inf2.48xlarge --request aws.amazon.com/neuroncore=3 --in-use-cores 0-1 -o json
  kubectl-neuron plan --instance-type trn2.48xlarge --request aws.amazon.com/neuron=8 --in-use-devices 0 --policy first-fit`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runPlan(o, p) },
	}
	f := cmd.Flags()
	f.StringVar(&p.instanceType, "instance-type", "", "EC2 instance type of the node (see `kubectl-neuron catalog`)")
	f.StringVar(&p.request, "request", "", "RESOURCE=N, RESOURCE one of "+strings.Join(topology.Resources, ", "))
	f.StringVar(&p.inUseDevices, "in-use-devices", "", "devices already in use, like 0-3,8")
	f.StringVar(&p.inUseCores, "in-use-cores", "", "global core ids already in use, like 0-1")
	f.IntVar(&p.lnc, "lnc", 0, "Logical NeuronCore config, 1 or 2 (default: the catalog's default for the type)")
	f.StringVar(&p.policy, "policy", string(topology.BestFit), "placement policy: best-fit or first-fit")
	f.StringVarP(&p.output, "output", "o", "table", "output format: table, json (one line), yaml or jsonpath=TEMPLATE")
	return cmd
}

func parseRequest(s string) (string, topology.Request, error) {
	name, count, ok := strings.Cut(s, "=")
	if !ok || s == "" {
		return "", topology.Request{}, usageErr("--request %q: write RESOURCE=N, for example aws.amazon.com/neuron=4", s)
	}
	unit, err := topology.UnitOf(strings.TrimSpace(name))
	if err != nil {
		return "", topology.Request{}, usageErr("--request: %w", err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(count))
	if err != nil {
		return "", topology.Request{}, usageErr("--request %q: %q is not a whole number", s, count)
	}
	return strings.TrimSpace(name), topology.Request{Unit: unit, Count: n}, nil
}

func runPlan(o *options, p *planOptions) error {
	format, err := parseOutput(p.output, commandFormats["plan"]...)
	if err != nil {
		return err
	}
	policy, err := topology.ParsePolicy(p.policy)
	if err != nil {
		return usageErr("--policy: %w", err)
	}
	resource, req, err := parseRequest(p.request)
	if err != nil {
		return err
	}
	if p.lnc != 0 && p.lnc != 1 && p.lnc != 2 {
		return usageErr("--lnc %d: use 1 or 2", p.lnc)
	}
	cat, err := o.catalog()
	if err != nil {
		return err
	}
	u, err := shapeFor(cat, p.instanceType, p.lnc, p.inUseDevices, p.inUseCores)
	if err != nil {
		return err
	}
	if req.Count < 1 {
		return usageErr("--request %s: the count must be at least 1", p.request)
	}
	fit, err := policy.Place(u, req)
	if err != nil {
		return refused(err)
	}
	res := PlanResult{InstanceType: p.instanceType, Resource: resource, Count: req.Count, Devices: fit.Devices, Cores: fit.Cores}
	// Render fully before writing, so that a failure never leaves half an answer on stdout.
	var buf bytes.Buffer
	if format.data() {
		if err := writeData(&buf, format, res, true); err != nil {
			return err
		}
	} else {
		s := u.Shape()
		w := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', 0)
		fmt.Fprintf(w, "INSTANCE TYPE\t%s (%s, LNC %d, %d cores per device)\n", s.Type.Name, s.Kind(), s.LNC, s.CoresPerDevice)
		fmt.Fprintf(w, "REQUEST\t%s=%d\n", resource, req.Count)
		fmt.Fprintf(w, "POLICY\t%s\n", policy)
		fmt.Fprintf(w, "DEVICES\t%s\n", topology.JoinIDs(fit.Devices))
		fmt.Fprintf(w, "CORES\t%s\n", topology.JoinIDs(fit.Cores))
		if policy == topology.BestFit {
			fmt.Fprintf(w, "NODE SCORE\t%.1f (breaks a free set of %g devices; %.0f%% of cores free after)\n", fit.Score, fit.Damage, 100*fit.FreeAfter)
		}
		if err := w.Flush(); err != nil {
			return err
		}
		after := u.Clone()
		if err := after.Allocate(fit.Allocation); err != nil {
			return fmt.Errorf("internal error: %w", err)
		}
		buf.WriteString("\n")
		buf.WriteString(DrawTopology(after, fit.Allocation))
	}
	_, err = o.out.Write(buf.Bytes())
	return err
}
