package cli

import (
	"bytes"
	"fmt"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/kube-neuron/kube-neuron/internal/fleet"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

func newSimulateCommand(o *options) *cobra.Command {
	var policy, output, seeds string
	var seed uint64
	var compare bool
	cmd := &cobra.Command{
		Use:   "simulate",
		Short: "Replay a seeded request stream over a fixed fleet and report fragmentation",
		Long: `simulate replays 2,000 requests over 4 inf2.48xlarge, 4 trn1.32xlarge and 4 trn2.48xlarge
nodes: half device requests (1, 2, 4, 8, 16 devices, weights 8, 4, 4, 2, 1), half core requests
(1, 2, 4, 8 cores, equally likely), arriving one by one and each holding its set for an
exponentially distributed time that keeps the offered load at about 90 % of the fleet's devices.
A request goes to the node the policy's node score picks among those that can serve it.

A fragmentation failure is a refused request for which some node whose type accepts that size had
at least that many free devices (or cores). The same seed gives the same stream for both policies.

--compare runs both policies over --seeds and prints a table with totals.`,
		Example: `  kubectl-neuron simulate --policy best-fit --seed 1 -o json
  kubectl-neuron simulate --compare --seeds 1-5`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			format, err := parseOutput(output, commandFormats["simulate"]...)
			if err != nil {
				return err
			}
			cat, err := o.catalog()
			if err != nil {
				return err
			}
			if compare {
				ids, err := topology.ParseList(seeds)
				if err != nil || len(ids) == 0 {
					return usageErr("--seeds %q: give seeds like 1-5", seeds)
				}
				return runCompare(o, cat, ids, format)
			}
			p, err := topology.ParsePolicy(policy)
			if err != nil {
				return usageErr("--policy: %w", err)
			}
			opts := fleet.Defaults(p, seed)
			opts.Catalog = cat
			res, err := fleet.Run(opts)
			if err != nil {
				return err
			}
			if format.data() {
				return writeData(o.out, format, res, true)
			}
			return writeSimTable(o, []fleet.Result{res}, false)
		},
	}
	f := cmd.Flags()
	f.StringVar(&policy, "policy", string(topology.BestFit), "placement policy: best-fit or first-fit")
	f.Uint64Var(&seed, "seed", 1, "seed of the request stream")
	f.BoolVar(&compare, "compare", false, "run both policies over --seeds and compare them")
	f.StringVar(&seeds, "seeds", "1-5", "seeds for --compare, like 1-5")
	f.StringVarP(&output, "output", "o", "table", "output format: table, json, yaml or jsonpath=TEMPLATE")
	return cmd
}

func runCompare(o *options, cat *topology.Catalog, seeds []int, format outputFormat) error {
	var results []fleet.Result
	for _, s := range seeds {
		for _, p := range topology.Policies {
			opts := fleet.Defaults(p, uint64(s))
			opts.Catalog = cat
			res, err := fleet.Run(opts)
			if err != nil {
				return err
			}
			results = append(results, res)
		}
	}
	if format.data() {
		return writeData(o.out, format, results, false)
	}
	return writeSimTable(o, results, true)
}

func ratio(v *float64) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatFloat(*v, 'f', 4, 64)
}

func writeSimTable(o *options, results []fleet.Result, totals bool) error {
	var buf bytes.Buffer
	w := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "POLICY\tSEED\tREQUESTS\tPLACED\tFRAGMENTATION FAILURES\tALLOCATION RATIO AT FIRST FAILURE\tMEAN FRAGMENTATION RATIO\t")
	sum := map[topology.Policy][3]float64{}
	for _, r := range results {
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%s\t%.4f\t\n", r.Policy, r.Seed, r.Requests, r.Placed, r.FragmentationFailures, ratio(r.AllocationRatioAtFirstFailure), r.MeanFragmentationRatio)
		s := sum[r.Policy]
		s[0] += float64(r.Placed)
		s[1] += float64(r.FragmentationFailures)
		s[2] += r.MeanFragmentationRatio
		sum[r.Policy] = s
	}
	if totals {
		n := float64(len(results)) / float64(len(topology.Policies))
		for _, p := range topology.Policies {
			s := sum[p]
			fmt.Fprintf(w, "%s\ttotal\t\t%.0f\t%.0f\t\t%.4f (mean)\t\n", p, s[0], s[1], s[2]/n)
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if totals && sum[topology.FirstFit][1] > 0 {
		fmt.Fprintf(&buf, "\nbest-fit had %.0f%% of first-fit's fragmentation failures.\n", 100*sum[topology.BestFit][1]/sum[topology.FirstFit][1])
	}
	_, err := o.out.Write(buf.Bytes())
	return err
}
