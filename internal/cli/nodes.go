package cli

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	apiv1 "github.com/kube-neuron/kube-neuron/api/neuron.aws.com/v1"
	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// Exit codes of `kubectl-neuron nodes` (besides ExitOK and ExitUsage).
const (
	// ExitCluster: no kubeconfig, or the cluster could not be reached or read.
	ExitCluster = 4
	// ExitNoNodes: the cluster has no Neuron node, or --node names no Neuron node.
	ExitNoNodes = 5
)

// DRADriver is the DRA driver name of kube-neuron.
const DRADriver = apiv1.DriverName

// nodesPageSize bounds the pods (and ResourceClaims) one list call returns.
const nodesPageSize = 500

// NodeReport is one element of `kubectl-neuron nodes -o json`.
type NodeReport struct {
	Name         string       `json:"name"`
	InstanceType string       `json:"instanceType"`
	Mode         string       `json:"mode"`
	LNC          int          `json:"lnc"`
	Devices      IDUsage      `json:"devices"`
	Cores        IDUsage      `json:"cores"`
	Holders      []NodeHolder `json:"holders"`
}

// IDUsage is the used and free ids of a node's devices or cores, ascending.
type IDUsage struct {
	Total int   `json:"total"`
	Used  []int `json:"used"`
	Free  []int `json:"free"`
}

// NodeHolder is what holds part of a node: a pod's container (device plugin), or a
// ResourceClaim (DRA; Pod is the first pod it is reserved for, empty when none).
type NodeHolder struct {
	Pod       string `json:"pod"`
	Namespace string `json:"namespace"`
	Container string `json:"container"`
	Resource  string `json:"resource"`
	Claim     string `json:"claim,omitempty"`
	Devices   []int  `json:"devices"`
	Cores     []int  `json:"cores"`
}

type nodesOptions struct {
	output, node, selector string
	names                  []string
	noMap                  bool
}

func newNodesCommand(o *options) *cobra.Command {
	no := &nodesOptions{}
	var client *clientFlags
	cmd := &cobra.Command{
		Use:   "nodes [NAME...] [-l SELECTOR]",
		Short: "List the cluster's Neuron nodes with the devices and cores in use, and who holds them",
		Long: `nodes reads the cluster (the kubeconfig is loaded as kubectl does: --kubeconfig, else
$KUBECONFIG, else ~/.kube/config; --context, --server, --token, --as, --request-timeout and
kubectl's other client flags apply) and lists every Neuron node, a node whose
node.kubernetes.io/instance-type label is in the catalog, with its allocation mode
(label kube-neuron.io/allocation-mode; a node without it is served by the device plugin), its LNC,
and its devices and cores in use. The table is followed by each node's topology map, every core
marked with the letter of the pod that holds it (--no-map leaves the maps out).

NAME... (or --node) shows only those nodes; -l shows only the nodes its label selector matches.

What is in use comes from:
  device-plugin nodes  the kube-neuron.io/allocation record of every pod that has not terminated;
                       for a pod the published Neuron stack placed, its AWS_NEURON_IDS (the
                       nodes' NEURON_DEV_USAGE_MAP and NEURON_CORE_USAGE_MAP are not read)
  dra nodes            the allocated resource.k8s.io/v1 ResourceClaims: a result of driver
                       neuron.aws.com in the node's pool for device neurondeviceN holds device N
A record or claim that does not fit the node or overlaps another is not counted and is reported
as a warning on stderr.

Output formats (-o):
  table              the table, then the maps (default)
  wide               the table with the used device and core ids and the number of holders
  json, yaml         every node with its used and free ids and its holders (a list)
  name               node/NAME, one a line
  jsonpath=TEMPLATE  the template over the json document, e.g. -o jsonpath='{[*].name}'

Exit codes: 0 listed; 2 bad flags, --kubeconfig or --context; 4 no kubeconfig, or the cluster
cannot be reached or read; 5 no Neuron node (or a NAME, --node or -l names none).`,
		Example: `  kubectl-neuron nodes
  kubectl-neuron nodes trn1-a trn1-b -o wide
  kubectl-neuron nodes -l kube-neuron.io/allocation-mode=dra --context prod --no-map
  kubectl-neuron nodes -o jsonpath='{range [*]}{.name}{"\t"}{.devices.free}{"\n"}{end}'`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := parseOutput(no.output, commandFormats["nodes"]...); err != nil {
				return err
			}
			no.names = args
			if no.node != "" {
				no.names = append(no.names, no.node)
			}
			if no.selector != "" {
				if len(no.names) > 0 {
					return usageErr("name nodes or give a selector (-l), not both")
				}
				if _, err := k8slabels.Parse(no.selector); err != nil {
					return usageErr("-l %q: %v", no.selector, err)
				}
			}
			cat, err := o.catalog()
			if err != nil {
				return err
			}
			c, err := client.client()
			if err != nil {
				return err
			}
			return runNodes(cmd.Context(), c, cat, no, o.out, o.errOut)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&no.output, "output", "o", outTable, "output format: table, wide (with the used ids), json, yaml, name or jsonpath=TEMPLATE")
	f.StringVar(&no.node, "node", "", "show only this node (the same as naming it)")
	f.StringVarP(&no.selector, "selector", "l", "", "label selector of the nodes to show, like kube-neuron.io/allocation-mode=dra (=, ==, !=, in, notin, exists)")
	f.BoolVar(&no.noMap, "no-map", false, "print the table without the topology maps (table and wide output)")
	client = addClientFlags(f)
	return cmd
}

func clusterErr(what string, err error) error {
	hint := "check that the cluster is reachable (kubectl get nodes) with the kubeconfig you mean (--kubeconfig, --context, $KUBECONFIG)"
	switch {
	case apierrors.IsForbidden(err):
		hint = "your user may not do this: ask for permission to list nodes, pods and resourceclaims in all namespaces"
	case apierrors.IsUnauthorized(err):
		hint = "your credentials were refused: log in again or check the kubeconfig's user"
	}
	return &exitError{code: ExitCluster, err: fmt.Errorf("cannot %s: %w: %s", what, err, hint)}
}

// nodeState is one Neuron node with what is in use on it.
type nodeState struct {
	node    *corev1.Node
	mode    string
	usage   *topology.Usage
	holders []nodeHolder
}

type nodeHolder struct {
	json   NodeHolder
	legend string // what the legend says after "x = "
}

// runNodes renders `kubectl-neuron nodes` for the cluster behind client.
func runNodes(ctx context.Context, client kubernetes.Interface, cat *topology.Catalog, no *nodesOptions, out, errOut io.Writer) error {
	if ctx == nil {
		ctx = context.Background()
	}
	warn := func(format string, args ...any) { fmt.Fprintf(errOut, "warning: "+format+"\n", args...) }

	format, err := parseOutput(cmp.Or(no.output, outTable), commandFormats["nodes"]...)
	if err != nil {
		return err
	}
	if no.node != "" && len(no.names) == 0 {
		no.names = []string{no.node}
	}
	nodes, err := neuronNodes(ctx, client, cat, no.names, no.selector)
	if err != nil {
		return err
	}

	var states []*nodeState
	needPods, needClaims := false, false
	for _, n := range nodes {
		shape, err := allocation.ShapeOfNode(cat, n)
		if err != nil {
			warn("%v: node skipped", err)
			continue
		}
		mode := n.Labels[labels.AllocationMode]
		switch mode {
		case labels.AllocationModeDRA:
			needClaims = true
		case "", labels.AllocationModeDevicePlugin:
			mode = labels.AllocationModeDevicePlugin
			needPods = true
		default:
			warn("node %s: allocation mode %q is unknown: reading it as %s", n.Name, mode, labels.AllocationModeDevicePlugin)
			mode = labels.AllocationModeDevicePlugin
			needPods = true
		}
		states = append(states, &nodeState{node: n, mode: mode, usage: topology.NewUsage(shape)})
	}
	if len(states) == 0 {
		return &exitError{code: ExitNoNodes, err: errors.New("no Neuron node could be read (see the warnings above)")}
	}

	if needPods {
		podsByNode, err := recordPods(ctx, client, warn)
		if err != nil {
			return err
		}
		for _, st := range states {
			if st.mode == labels.AllocationModeDRA {
				continue
			}
			u, holders, problems := allocation.NodeUsage(st.usage.Shape(), st.node.Name, podsByNode[st.node.Name])
			for _, p := range problems {
				warn("node %s: %v: not counted", st.node.Name, p)
			}
			st.usage = u
			for _, h := range holders {
				st.holders = append(st.holders, nodeHolder{
					json: NodeHolder{Pod: h.Name, Namespace: h.Namespace, Container: h.Container.Name, Resource: h.Container.Resource,
						Devices: nonNil(h.Hardware.Devices), Cores: nonNil(h.Hardware.Cores)},
					legend: fmt.Sprintf("%s/%s (container %s, %s)", h.Namespace, h.Name, h.Container.Name, describeHeld(h.Hardware)),
				})
			}
		}
	}
	if needClaims {
		if err := claimUsage(ctx, client, states, warn); err != nil {
			return err
		}
	}

	reports := make([]NodeReport, 0, len(states))
	for _, st := range states {
		slices.SortStableFunc(st.holders, func(a, b nodeHolder) int { return firstID(a.json.Cores) - firstID(b.json.Cores) })
		s := st.usage.Shape()
		r := NodeReport{
			Name: st.node.Name, InstanceType: s.Type.Name, Mode: st.mode, LNC: s.LNC,
			Devices: IDUsage{Total: s.Devices(), Used: st.usage.UsedDevices(), Free: st.usage.FreeDevices()},
			Cores:   IDUsage{Total: s.Cores(), Used: st.usage.UsedCores(), Free: st.usage.FreeCores()},
			Holders: []NodeHolder{},
		}
		for _, h := range st.holders {
			r.Holders = append(r.Holders, h.json)
		}
		reports = append(reports, r)
	}

	// Render fully before writing, so that a failure never leaves half an answer on stdout.
	var buf bytes.Buffer
	switch {
	case format.data():
		if err := writeData(&buf, format, reports, false); err != nil {
			return err
		}
		_, err := out.Write(buf.Bytes())
		return err
	case format.name == outName:
		for _, r := range reports {
			fmt.Fprintf(&buf, "node/%s\n", r.Name)
		}
		_, err := out.Write(buf.Bytes())
		return err
	}
	wide := format.name == outWide
	w := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', 0)
	if wide {
		fmt.Fprintln(w, "NAME\tINSTANCE TYPE\tMODE\tLNC\tDEVICES\tCORES\tUSED DEVICES\tUSED CORES\tHOLDERS")
	} else {
		fmt.Fprintln(w, "NAME\tINSTANCE TYPE\tMODE\tLNC\tDEVICES\tCORES")
	}
	for _, r := range reports {
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d/%d\t%d/%d", r.Name, r.InstanceType, r.Mode, r.LNC,
			len(r.Devices.Used), r.Devices.Total, len(r.Cores.Used), r.Cores.Total)
		if wide {
			fmt.Fprintf(w, "\t%s\t%s\t%d", orDash(r.Devices.Used), orDash(r.Cores.Used), len(r.Holders))
		}
		fmt.Fprintln(w)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if !no.noMap {
		for _, st := range states {
			marks := map[int]rune{}
			var legend []string
			for i, h := range st.holders {
				letter := holderLetter(i)
				for _, c := range h.json.Cores {
					marks[c] = letter
				}
				legend = append(legend, fmt.Sprintf("  %c = %s", letter, h.legend))
			}
			fmt.Fprintf(&buf, "\nnode %s (%s)\n", st.node.Name, st.mode)
			buf.WriteString(DrawTopologyWithHolders(st.usage, marks))
			if len(legend) == 0 {
				buf.WriteString("  nothing holds a device or core of this node\n")
			} else {
				buf.WriteString(strings.Join(legend, "\n") + "\n")
			}
		}
	}
	_, err = out.Write(buf.Bytes())
	return err
}

// neuronNodes gets the named nodes, or lists the nodes the selector matches (all without one),
// and returns the Neuron ones; it is an ExitNoNodes error when a named node is missing or not a
// Neuron node, or the list has no Neuron node.
func neuronNodes(ctx context.Context, client kubernetes.Interface, cat *topology.Catalog, names []string, selector string) ([]*corev1.Node, error) {
	var nodes []*corev1.Node
	if len(names) > 0 {
		seen := map[string]bool{}
		for _, name := range names {
			if seen[name] {
				continue
			}
			seen[name] = true
			n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil, &exitError{code: ExitNoNodes, err: fmt.Errorf("node %q not found: kubectl get nodes lists the nodes, kubectl-neuron nodes the Neuron ones", name)}
			}
			if err != nil {
				return nil, clusterErr("get node "+name, err)
			}
			if !allocation.IsNeuronNode(cat, n) {
				return nil, &exitError{code: ExitNoNodes, err: fmt.Errorf("node %s is not a Neuron node: its %s label %q is not in the catalog (kubectl-neuron catalog lists the types; --catalog adds your own)",
					n.Name, labels.InstanceType, n.Labels[labels.InstanceType])}
			}
			nodes = append(nodes, n)
		}
		return nodes, nil
	}
	list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, clusterErr("list nodes", err)
	}
	for i := range list.Items {
		if allocation.IsNeuronNode(cat, &list.Items[i]) {
			nodes = append(nodes, &list.Items[i])
		}
	}
	slices.SortFunc(nodes, func(a, b *corev1.Node) int { return strings.Compare(a.Name, b.Name) })
	if len(nodes) > 0 {
		return nodes, nil
	}
	if selector != "" {
		return nil, &exitError{code: ExitNoNodes, err: fmt.Errorf("no Neuron node matches -l %s (%d nodes match it, none with a %s label in the catalog): kubectl get nodes -l '%s' --show-labels shows them",
			selector, len(list.Items), labels.InstanceType, selector)}
	}
	return nil, &exitError{code: ExitNoNodes, err: fmt.Errorf("the cluster has no Neuron node (%d nodes, none with a %s label in the catalog): check the context (--context), and for a type of your own add it with --catalog",
		len(list.Items), labels.InstanceType)}
}

// recordPods lists the pods of every namespace once and returns, per node, the pods whose
// allocation record names it and that have not terminated. A malformed record is a warning.
func recordPods(ctx context.Context, client kubernetes.Interface, warn func(string, ...any)) (map[string][]*corev1.Pod, error) {
	byNode := map[string][]*corev1.Pod{}
	opts := metav1.ListOptions{
		FieldSelector: "status.phase!=" + string(corev1.PodSucceeded) + ",status.phase!=" + string(corev1.PodFailed),
		Limit:         nodesPageSize,
	}
	for {
		list, err := client.CoreV1().Pods("").List(ctx, opts)
		if err != nil {
			return nil, clusterErr("list pods in all namespaces", err)
		}
		for i := range list.Items {
			pod := &list.Items[i]
			if !allocation.Counts(pod) {
				continue
			}
			r, err := allocation.RecordOf(pod)
			if err != nil {
				warn("%v: not counted", err)
				continue
			}
			if allocation.FromPublishedStack(pod) {
				_, notes, _ := allocation.PublishedRecord(pod)
				for _, n := range notes {
					warn("%s", n)
				}
			}
			if r != nil {
				byNode[r.Node] = append(byNode[r.Node], pod)
			}
		}
		if list.Continue == "" {
			return byNode, nil
		}
		opts.Continue = list.Continue
	}
}

// claimUsage marks on the DRA nodes of states the devices their allocated ResourceClaims hold.
func claimUsage(ctx context.Context, client kubernetes.Interface, states []*nodeState, warn func(string, ...any)) error {
	dra := map[string]*nodeState{}
	for _, st := range states {
		if st.mode == labels.AllocationModeDRA {
			dra[st.node.Name] = st
		}
	}
	var claims []resourcev1.ResourceClaim
	opts := metav1.ListOptions{Limit: nodesPageSize}
	for {
		list, err := client.ResourceV1().ResourceClaims("").List(ctx, opts)
		if apierrors.IsNotFound(err) {
			warn("the API server does not serve resource.k8s.io/v1 ResourceClaims: the devices of DRA nodes are shown free")
			return nil
		}
		if err != nil {
			return clusterErr("list resourceclaims in all namespaces", err)
		}
		claims = append(claims, list.Items...)
		if list.Continue == "" {
			break
		}
		opts.Continue = list.Continue
	}
	slices.SortFunc(claims, func(a, b resourcev1.ResourceClaim) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	for i := range claims {
		claim := &claims[i]
		if claim.Status.Allocation == nil {
			continue
		}
		devices := map[string][]int{} // node -> devices of this claim
		for _, r := range claim.Status.Allocation.Devices.Results {
			if r.Driver != DRADriver || dra[r.Pool] == nil {
				continue
			}
			if r.Device == apiv1.NodeDeviceName {
				// The UltraServer node device: every device of the node.
				for d := range dra[r.Pool].usage.Shape().Devices() {
					devices[r.Pool] = append(devices[r.Pool], d)
				}
				continue
			}
			d, ok := apiv1.ParseDeviceName(r.Device)
			if !ok {
				warn("ResourceClaim %s/%s: device %q of node %s is neither %sN nor %s: not counted", claim.Namespace, claim.Name, r.Device, r.Pool, apiv1.DevicePrefix, apiv1.NodeDeviceName)
				continue
			}
			devices[r.Pool] = append(devices[r.Pool], d)
		}
		pod := ""
		for _, ref := range claim.Status.ReservedFor {
			if ref.APIGroup == "" && ref.Resource == "pods" {
				pod = ref.Name
				break
			}
		}
		for _, node := range slices.Sorted(maps.Keys(devices)) {
			st := dra[node]
			hw, err := st.usage.Shape().DeviceAllocation(slices.Compact(slices.Sorted(slices.Values(devices[node]))))
			if err == nil {
				err = st.usage.Allocate(hw)
			}
			if err != nil {
				warn("node %s: ResourceClaim %s/%s: %v: not counted", node, claim.Namespace, claim.Name, err)
				continue
			}
			h := nodeHolder{json: NodeHolder{Pod: pod, Namespace: claim.Namespace, Container: "", Resource: DRADriver, Claim: claim.Name,
				Devices: nonNil(hw.Devices), Cores: nonNil(hw.Cores)}}
			if pod != "" {
				h.legend = fmt.Sprintf("%s/%s (claim %s, %s)", claim.Namespace, pod, claim.Name, describeHeld(hw))
			} else {
				h.legend = fmt.Sprintf("%s/%s (ResourceClaim reserved for no pod, %s)", claim.Namespace, claim.Name, describeHeld(hw))
			}
			st.holders = append(st.holders, h)
		}
	}
	return nil
}

// describeHeld says what an allocation holds: "4 devices: 0-3" or "2 cores: 8-9".
func describeHeld(a topology.Allocation) string {
	unit, ids := "device", a.Devices
	if a.Unit == topology.UnitCore {
		unit, ids = "core", a.Cores
	}
	if len(ids) != 1 {
		unit += "s"
	}
	return fmt.Sprintf("%d %s: %s", len(ids), unit, topology.FormatList(ids))
}

// holderLetter is the map letter of the i-th holder: a-z, A-Z, then the in-use mark.
func holderLetter(i int) rune {
	switch {
	case i < 26:
		return rune('a' + i)
	case i < 52:
		return rune('A' + i - 26)
	}
	return markUsed
}

var mapCell = regexp.MustCompile(`(\d+)\[([^\]\n]*)\]`)

// DrawTopologyWithHolders is DrawTopology with every core in holders marked with its rune (the
// letter of the pod holding it) instead of '#'; the caller prints what the letters stand for.
func DrawTopologyWithHolders(u *topology.Usage, holders map[int]rune) string {
	m := DrawTopology(u, topology.Allocation{})
	if len(holders) == 0 {
		return m
	}
	s := u.Shape()
	m = mapCell.ReplaceAllStringFunc(m, func(cell string) string {
		sub := mapCell.FindStringSubmatch(cell)
		d, err := strconv.Atoi(sub[1])
		if err != nil || d >= s.Devices() {
			return cell
		}
		marks := []rune(sub[2])
		cores := s.CoresOf(d)
		if len(marks) != len(cores) {
			return cell
		}
		for k, c := range cores {
			if r, ok := holders[c]; ok {
				marks[k] = r
			}
		}
		return sub[1] + "[" + string(marks) + "]"
	})
	legend := fmt.Sprintf("  %c free core   %c core in use\n", markFree, markUsed)
	return strings.Replace(m, legend, fmt.Sprintf("  %c free core   %c core in use   a-z, A-Z core held by the pod of that letter\n", markFree, markUsed), 1)
}

func firstID(ids []int) int {
	if len(ids) == 0 {
		return -1
	}
	return ids[0]
}

func nonNil(ids []int) []int {
	if ids == nil {
		return []int{}
	}
	return ids
}

func orDash(ids []int) string {
	if len(ids) == 0 {
		return "-"
	}
	return topology.FormatList(ids)
}
