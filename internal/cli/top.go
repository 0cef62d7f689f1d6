package cli

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
)

// What `kubectl-neuron top` shows.
const (
	topPods  = "pods"
	topNodes = "nodes"
)

// topAliases are the names kubectl top takes for its resources.
var topAliases = map[string]string{"pods": topPods, "pod": topPods, "po": topPods, "nodes": topNodes, "node": topNodes, "no": topNodes}

type topOptions struct {
	what             string // topPods or topNodes
	namespace        string // top pods: the namespace shown; "" with allNamespaces
	allNamespaces    bool
	output           string
	agentNamespaces  []string
	agentTimeout     time.Duration
	namespaceChanged bool // -n given
}

func newTopCommand(o *options) *cobra.Command {
	to := &topOptions{}
	var client *clientFlags
	cmd := &cobra.Command{
		Use:   "top pods|nodes [-n NS] [-A]",
		Short: "Show the Neuron devices and cores each pod or node uses, their memory and utilisation",
		Long: `top shows what the Neuron hardware is doing, as kubectl top does for CPU and memory:

  top pods   one line per container holding Neuron devices or cores: its node, devices, cores,
             the device memory its cores use and their mean utilisation
  top nodes  one line per Neuron node: devices used, free and unhealthy (with the reasons),
             cores used, device memory in use and the mean utilisation of the used cores

It reads the metrics of kube-neuron's node agents, the pods labelled app.kubernetes.io/name
neuron-device-plugin or neuron-dra-driver (any namespace, or --agent-namespace), on their
container port named metrics, through the API server's pod proxy. That needs list on pods and
get on pods/proxy in the agents' namespaces; an agent that cannot be read is a warning on stderr
and its node is left out. Utilisation is the share of time the cores were busy between the
agent's last two samples of the driver's nc_time_in_use; "-" when an agent exports none.

top pods shows the namespace of the kubeconfig's context (like kubectl), -n NS another, -A all.

Output formats (-o):
  table              the table (default)
  json, yaml         a list: pods {"namespace", "pod", "container", "node", "devices", "cores",
                     "memoryUsedBytes", "utilization"}; nodes {"node", "instanceType", "devicesUsed",
                     "devicesFree", "devicesUnhealthy", "coresUsed", "cores", "memoryUsedBytes",
                     "utilization", "unhealthy": [{"device", "reason"}]}
  jsonpath=TEMPLATE  the template over the json document

Exit codes: 0 shown; 2 bad flags, --kubeconfig or --context; 4 no kubeconfig, the cluster cannot
be reached, or no agent could be read; 5 no node agent found.`,
		Example: `  kubectl-neuron top pods
  kubectl-neuron top pods -A -o json
  kubectl-neuron top nodes
  kubectl-neuron top nodes --agent-namespace kube-system -o jsonpath='{range [*]}{.node}{"\t"}{.unhealthy}{"\n"}{end}'`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := to.complete(args, cmd.Flags().Changed("namespace")); err != nil {
				return err
			}
			c, err := client.client()
			if err != nil {
				return err
			}
			if to.what == topPods && !to.allNamespaces && !to.namespaceChanged {
				ns, _, err := client.config.ToRawKubeConfigLoader().Namespace()
				if err != nil {
					return usageErr("the kubeconfig's namespace: %w (give -n)", err)
				}
				to.namespace = ns
			}
			return runTop(cmd.Context(), c, proxyFetcher{client: c}, to, o.out, o.errOut)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&to.namespace, "namespace", "n", "", "top pods: the namespace to show (default: the kubeconfig context's)")
	f.BoolVarP(&to.allNamespaces, "all-namespaces", "A", false, "top pods: show the pods of every namespace")
	f.StringVarP(&to.output, "output", "o", outTable, "output format: table, json, yaml or jsonpath=TEMPLATE")
	f.StringSliceVar(&to.agentNamespaces, "agent-namespace", nil, "look for the node agents only in these namespaces (default: all; e.g. kube-system,neuron-dra-driver)")
	f.DurationVar(&to.agentTimeout, "agent-timeout", defaultAgentWait, "how long to wait for each node agent's metrics")
	client = addClientFlags(f)
	return cmd
}

// complete checks the arguments and flags that need no cluster.
func (to *topOptions) complete(args []string, namespaceChanged bool) error {
	switch {
	case len(args) == 0:
		return usageErr("say what to show: kubectl-neuron top pods, or kubectl-neuron top nodes")
	case len(args) > 1:
		return usageErr("top takes one argument, pods or nodes, not %q", strings.Join(args, " "))
	}
	what, ok := topAliases[args[0]]
	if !ok {
		return usageErr("top shows pods or nodes, not %q", args[0])
	}
	to.what, to.namespaceChanged = what, namespaceChanged
	if _, err := parseOutput(to.output, commandFormats["top"]...); err != nil {
		return err
	}
	if what == topNodes && (namespaceChanged || to.allNamespaces) {
		return usageErr("-n and -A choose the pods of top pods: top nodes shows every node")
	}
	if to.agentTimeout <= 0 {
		return usageErr("--agent-timeout %v: give a positive duration such as 10s", to.agentTimeout)
	}
	if to.allNamespaces {
		to.namespace = ""
	}
	return nil
}

// runTop finds the node agents with client, reads their metrics with fetch and prints top's
// table or document.
func runTop(ctx context.Context, client kubernetes.Interface, fetch metricsFetcher, to *topOptions, out, errOut io.Writer) error {
	if ctx == nil {
		ctx = context.Background()
	}
	warn := func(format string, args ...any) { fmt.Fprintf(errOut, "warning: "+format+"\n", args...) }
	format, err := parseOutput(cmp.Or(to.output, outTable), commandFormats["top"]...)
	if err != nil {
		return err
	}
	agents, err := findAgents(ctx, client, to.agentNamespaces, warn)
	if err != nil {
		return err
	}
	if len(agents) == 0 {
		where := "any namespace"
		if len(to.agentNamespaces) > 0 {
			where = "namespace " + strings.Join(to.agentNamespaces, ", ")
		}
		return &exitError{code: ExitNoNodes, err: fmt.Errorf("no running kube-neuron node agent found in %s (pods labelled %s in (%s)): is the chart installed, with the device plugin or the DRA driver? (kubectl get pods -A -l %s)",
			where, agentNameLabel, strings.Join(agentNames, ", "), agentNameLabel)}
	}
	timeout := cmp.Or(to.agentTimeout, defaultAgentWait)
	metrics := newTopMetrics()
	read := 0
	for i, r := range fetchAll(ctx, fetch, agents, timeout) {
		a := agents[i]
		if r.err != nil {
			warn("cannot read the metrics of node agent %s: %v: %s", a, r.err, agentHint(a, r.err))
			continue
		}
		nodes, skipped, err := metrics.add(r.data)
		if err != nil {
			warn("node agent %s: %v: is it a kube-neuron agent of this version?", a, err)
			continue
		}
		read++
		if skipped > 0 {
			warn("node agent %s: %d series of the node metrics without a node or with an unreadable id were left out", a, skipped)
		}
		switch {
		case len(nodes) == 0:
			warn("node agent %s exports no Neuron hardware metrics: is it older than this kubectl-neuron, or is its node without Neuron devices?", a)
		case !slices.Contains(nodes, a.Node):
			warn("node agent %s reports node %s, not its own: check its NODE_NAME", a, strings.Join(nodes, ", "))
		}
	}
	if read == 0 {
		return &exitError{code: ExitCluster, err: errors.New("no node agent's metrics could be read (see the warnings above)")}
	}

	var doc any
	var buf bytes.Buffer
	w := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', 0)
	switch to.what {
	case topPods:
		rows := metrics.pods(to.namespace)
		doc = rows
		if !format.data() {
			if len(rows) == 0 {
				where := "namespace " + to.namespace
				if to.namespace == "" {
					where = "any namespace"
				}
				fmt.Fprintf(errOut, "No pod holds Neuron devices or cores in %s.\n", where)
				return nil
			}
			writeTopPods(w, rows, to.namespace == "")
		}
	default:
		rows := metrics.nodeRows()
		doc = rows
		if !format.data() {
			writeTopNodes(w, rows)
		}
	}
	if format.data() {
		if err := writeData(&buf, format, doc, false); err != nil {
			return err
		}
	} else if err := w.Flush(); err != nil {
		return err
	}
	_, err = out.Write(buf.Bytes())
	return err
}

func writeTopPods(w io.Writer, rows []TopPod, withNamespace bool) {
	if withNamespace {
		fmt.Fprint(w, "NAMESPACE\t")
	}
	fmt.Fprintln(w, "POD\tCONTAINER\tNODE\tDEVICES\tCORES\tMEMORY\tUTILIZATION")
	for _, r := range rows {
		if withNamespace {
			fmt.Fprintf(w, "%s\t", r.Namespace)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Pod, cmp.Or(r.Container, "-"), r.Node,
			orDash(r.Devices), orDash(r.Cores), humanBytes(r.MemoryUsedBytes), percent(r.Utilization, r.sampled))
	}
}

func writeTopNodes(w io.Writer, rows []TopNode) {
	fmt.Fprintln(w, "NODE\tINSTANCE TYPE\tDEVICES USED\tFREE\tUNHEALTHY\tCORES USED\tMEMORY\tUTILIZATION\tUNHEALTHY DEVICES")
	for _, r := range rows {
		var bad []string
		for _, u := range r.Unhealthy {
			bad = append(bad, fmt.Sprintf("%d (%s)", u.Device, cmp.Or(u.Reason, "no reason given")))
		}
		unhealthy := "-"
		if len(bad) > 0 {
			unhealthy = strings.Join(bad, ", ")
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%d/%d\t%s\t%s\t%s\n", r.Node, cmp.Or(r.InstanceType, "-"),
			r.DevicesUsed, r.DevicesFree, r.DevicesUnhealthy, r.CoresUsed, r.Cores,
			humanBytes(r.MemoryUsedBytes), percent(r.Utilization, r.sampled), unhealthy)
	}
}
