package cli

import (
	"fmt"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/kube-neuron/kube-neuron/internal/topology"
)

func newCatalogCommand(o *options) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "catalog",
		Short: "List the Neuron instance types the engine knows",
		Example: `  kubectl-neuron catalog
  kubectl-neuron catalog -o json
  kubectl-neuron catalog --catalog my-prices.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			format, err := parseOutput(output, commandFormats["catalog"]...)
			if err != nil {
				return err
			}
			cat, err := o.catalog()
			if err != nil {
				return err
			}
			types := cat.Types()
			if format.data() {
				return writeData(o.out, format, types, false)
			}
			w := tabwriter.NewWriter(o.out, 0, 0, 2, ' ', 0)
			fmt.Fprintln(w, "INSTANCE TYPE\tDEVICES\tCORES/DEVICE\tLNC\tNODE CORES\tDEVICE MEM\tTOPOLOGY\tVCPU\tMEMORY\t$/HOUR")
			for _, t := range types {
				lnc := strconv.Itoa(t.DefaultLNC)
				if t.LNCConfigurable {
					lnc += " (1|2)"
				}
				price := "unknown"
				if t.PriceKnown() {
					price = strconv.FormatFloat(*t.PriceUSDPerHour, 'f', -1, 64)
				}
				topo := string(t.Topology)
				if t.UltraServerNodes > 0 {
					topo += fmt.Sprintf(", UltraServer of %d", t.UltraServerNodes)
				}
				fmt.Fprintf(w, "%s\t%d\t%d physical\t%s\t%d\t%d GiB\t%s\t%d\t%d GiB\t%s\n",
					t.Name, t.Devices, t.PhysicalCoresPerDevice, lnc, t.LogicalCores(0),
					t.DeviceMemoryGiB, topo, t.VCPU, t.MemoryGiB, price)
			}
			if err := w.Flush(); err != nil {
				return err
			}
			fmt.Fprintln(o.out, "\nNODE CORES are logical NeuronCores at the default LNC. Prices: on-demand, us-east-1, USD per hour.")
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table, json, yaml or jsonpath=TEMPLATE")
	return cmd
}

// shapeFor resolves an instance type and LNC into a shape with usage.
func shapeFor(cat *topology.Catalog, instanceType string, lnc int, inUseDevices, inUseCores string) (*topology.Usage, error) {
	if instanceType == "" {
		return nil, usageErr("--instance-type is required (one of: %v)", cat.Names())
	}
	it, err := cat.Get(instanceType)
	if err != nil {
		return nil, usageErr("%w", err)
	}
	shape, err := topology.NewShape(it, lnc)
	if err != nil {
		return nil, usageErr("%w", err)
	}
	u := topology.NewUsage(shape)
	devs, err := topology.ParseList(inUseDevices)
	if err != nil {
		return nil, usageErr("--in-use-devices: %w", err)
	}
	if err := u.MarkDevices(devs); err != nil {
		return nil, usageErr("--in-use-devices: %w", err)
	}
	cores, err := topology.ParseList(inUseCores)
	if err != nil {
		return nil, usageErr("--in-use-cores: %w", err)
	}
	if err := u.MarkCores(cores); err != nil {
		return nil, usageErr("--in-use-cores: %w (a core of a device in --in-use-devices is already in use)", err)
	}
	return u, nil
}
