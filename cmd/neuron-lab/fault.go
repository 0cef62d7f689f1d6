package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/kube-neuron/kube-neuron/internal/lab"
)

// faultFlags are the flags of `neuron-lab fault`.
type faultFlags struct {
	node                 string
	device               int
	ecc, remove, restore bool
}

// options turns the flags into lab.FaultOptions: a node, a device and exactly one action.
func (f *faultFlags) options(dir string, deviceSet bool) (lab.FaultOptions, error) {
	o := lab.FaultOptions{Dir: dir, Node: f.node, Device: f.device}
	if f.node == "" {
		return o, fmt.Errorf("--node is required: the name of a lab node (neuron-lab status --dir %s lists them)", dir)
	}
	if !deviceSet {
		return o, fmt.Errorf("--device is required: the index N of the device neuronN")
	}
	var actions []lab.FaultAction
	for _, a := range []struct {
		set    bool
		action lab.FaultAction
	}{{f.ecc, lab.FaultECCUncorrected}, {f.remove, lab.FaultRemove}, {f.restore, lab.FaultClear}} {
		if a.set {
			actions = append(actions, a.action)
		}
	}
	if len(actions) != 1 {
		return o, fmt.Errorf("give exactly one of --ecc-uncorrected, --remove and --clear (got %d)", len(actions))
	}
	o.Action = actions[0]
	return o, nil
}

func faultCommand(f *flags, out io.Writer) *cobra.Command {
	ff := &faultFlags{}
	cmd := &cobra.Command{Use: "fault --node NODE --device N (--ecc-uncorrected | --remove | --clear)",
		Short: "Change a device of a node of the running lab: an uncorrected ECC error, remove it, or reset it",
		Long: `Change the simulated Neuron hardware of a node (simulated or real) of the lab running in --dir.
--ecc-uncorrected raises the device's uncorrected memory ECC counter by 1, --remove makes the device
vanish, --clear resets it (present again, uncorrectable error counters 0). The node's device plugin
or DRA driver sees the change at its next health check (see docs/lab.md).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o, err := ff.options(f.dir, cmd.Flags().Changed("device"))
			if err != nil {
				return err
			}
			done, err := lab.Fault(o)
			if err != nil {
				return err
			}
			fmt.Fprintln(out, done)
			return nil
		}}
	fl := cmd.Flags()
	fl.StringVar(&ff.node, "node", "", "the node's name")
	fl.IntVar(&ff.device, "device", 0, "the device's index N (neuronN)")
	fl.BoolVar(&ff.ecc, "ecc-uncorrected", false, "raise the device's uncorrected memory ECC counter by 1")
	fl.BoolVar(&ff.remove, "remove", false, "make the device vanish")
	fl.BoolVar(&ff.restore, "clear", false, "reset the device: present again, uncorrectable error counters 0")
	return cmd
}
