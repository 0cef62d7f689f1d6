package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// Core marks in topology maps.
const (
	markFree    = '.'
	markUsed    = '#'
	markPlanned = '*'
)

// DrawTopology draws the node's devices with their cores: the 4x4 grid for torus types, a ring or
// chain line otherwise. Cores of planned are marked '*', other cores in use '#', free cores '.'.
func DrawTopology(u *topology.Usage, planned topology.Allocation) string {
	s := u.Shape()
	isPlanned := map[int]bool{}
	for _, c := range planned.Cores {
		isPlanned[c] = true
	}
	cell := func(d int) string {
		var b strings.Builder
		fmt.Fprintf(&b, "%2d[", d)
		for _, c := range s.CoresOf(d) {
			switch {
			case isPlanned[c]:
				b.WriteRune(markPlanned)
			case !u.CoreFree(c):
				b.WriteRune(markUsed)
			default:
				b.WriteRune(markFree)
			}
		}
		b.WriteString("]")
		return b.String()
	}
	var b strings.Builder
	width := len(cell(0))
	fmt.Fprintf(&b, "%s: %d devices, %s, %d cores per device (LNC %d)\n", s.Type.Name, s.Devices(), describeKind(s), s.CoresPerDevice, s.LNC)
	switch s.Kind() {
	case topology.KindTorus:
		for r := range 4 {
			b.WriteString("  ")
			for c := range 4 {
				if c > 0 {
					b.WriteString("--")
				}
				b.WriteString(cell(r*4 + c))
			}
			b.WriteString("--(row wraps)\n")
			if r < 3 {
				b.WriteString("  ")
				for c := range 4 {
					if c > 0 {
						b.WriteString("  ")
					}
					b.WriteString(strings.Repeat(" ", width/2) + "|" + strings.Repeat(" ", width-width/2-1))
				}
				trimLine(&b)
				b.WriteString("\n")
			}
		}
		b.WriteString("  (columns wrap from the bottom row to the top row)\n")
	case topology.KindSwitched:
		for d := range s.Devices() {
			b.WriteString("  ")
			b.WriteString(cell(d))
			if d%4 == 3 || d == s.Devices()-1 {
				b.WriteString("\n")
			}
		}
	default:
		order := s.Graph().Order()
		const perLine = 8
		for i, d := range order {
			if i%perLine == 0 {
				b.WriteString("  ")
			}
			b.WriteString(cell(d))
			if i < len(order)-1 {
				b.WriteString("--")
			} else if s.Kind() == topology.KindRing {
				b.WriteString(fmt.Sprintf("--(back to %d)", order[0]))
			}
			if i%perLine == perLine-1 || i == len(order)-1 {
				b.WriteString("\n")
			}
		}
	}
	legend := fmt.Sprintf("  %c free core   %c core in use", markFree, markUsed)
	if len(planned.Cores) > 0 {
		legend += fmt.Sprintf("   %c planned", markPlanned)
	}
	b.WriteString(legend + "\n")
	fmt.Fprintf(&b, "  free devices: %s; free cores: %d of %d\n", orNoneList(u.FreeDevices()), u.FreeCoreCount(), s.Cores())
	return b.String()
}

// trimLine removes the spaces at the end of the line being written.
func trimLine(b *strings.Builder) {
	s := strings.TrimRight(b.String(), " ")
	b.Reset()
	b.WriteString(s)
}

func orNoneList(ids []int) string {
	if len(ids) == 0 {
		return "none"
	}
	return topology.FormatList(ids)
}

func describeKind(s *topology.Shape) string {
	switch s.Kind() {
	case topology.KindTorus:
		return "4x4 2D torus"
	case topology.KindRing:
		return "ring"
	case topology.KindChain:
		return "chain (no wrap-around)"
	case topology.KindSwitched:
		return "switched (all-to-all: any subset is connected)"
	}
	return "single device"
}

// TopologyReport is `kubectl-neuron topology -o json`: a node's devices and cores, used and free,
// and which devices are linked.
type TopologyReport struct {
	InstanceType   string  `json:"instanceType"`
	Topology       string  `json:"topology"` // single, chain, ring, torus or switched
	LNC            int     `json:"lnc"`
	CoresPerDevice int     `json:"coresPerDevice"`
	Devices        IDUsage `json:"devices"`
	Cores          IDUsage `json:"cores"`
	// Links[d] are the devices linked to device d, as neuron-ls --topology lists them.
	Links [][]int `json:"links"`
}

// topologyReport describes the node u.
func topologyReport(u *topology.Usage) TopologyReport {
	s := u.Shape()
	r := TopologyReport{
		InstanceType: s.Type.Name, Topology: string(s.Kind()), LNC: s.LNC, CoresPerDevice: s.CoresPerDevice,
		Devices: IDUsage{Total: s.Devices(), Used: nonNil(u.UsedDevices()), Free: nonNil(u.FreeDevices())},
		Cores:   IDUsage{Total: s.Cores(), Used: nonNil(u.UsedCores()), Free: nonNil(u.FreeCores())},
		Links:   make([][]int, s.Devices()),
	}
	for d := range s.Devices() {
		r.Links[d] = nonNil(s.Graph().Neighbors(d))
	}
	return r
}

func newTopologyCommand(o *options) *cobra.Command {
	var instanceType, inUseDevices, inUseCores, output string
	var lnc int
	cmd := &cobra.Command{
		Use:   "topology",
		Short: "Draw a node's Neuron devices and cores, used and free",
		Long: `topology draws a node of an instance type: the 4x4 grid of torus types, a ring or chain line
otherwise, '#' a core in use, '.' a free core.

Output formats (-o):
  table              the drawing (default)
  json, yaml         {"instanceType", "topology", "lnc", "coresPerDevice", "devices", "cores",
                     "links"}: devices and cores as {"total", "used", "free"}, links[d] the
                     devices linked to device d
  jsonpath=TEMPLATE  the template over the json document, e.g. -o jsonpath='{.devices.free}'`,
		Example: `  kubectl-neuron topology --instance-type trn1.32xlarge --in-use-devices 0-3 --in-use-cores 9
  kubectl-neuron topology --instance-type inf2.48xlarge -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			format, err := parseOutput(output, commandFormats["topology"]...)
			if err != nil {
				return err
			}
			cat, err := o.catalog()
			if err != nil {
				return err
			}
			u, err := shapeFor(cat, instanceType, lnc, inUseDevices, inUseCores)
			if err != nil {
				return err
			}
			if format.data() {
				return writeData(o.out, format, topologyReport(u), false)
			}
			_, err = fmt.Fprint(o.out, DrawTopology(u, topology.Allocation{}))
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&instanceType, "instance-type", "", "EC2 instance type of the node")
	f.StringVar(&inUseDevices, "in-use-devices", "", "devices in use, like 0-3,8")
	f.StringVar(&inUseCores, "in-use-cores", "", "global core ids in use, like 0-1")
	f.IntVar(&lnc, "lnc", 0, "Logical NeuronCore config, 1 or 2 (default: the catalog's default)")
	f.StringVarP(&output, "output", "o", outTable, "output format: table, json, yaml or jsonpath=TEMPLATE")
	return cmd
}
