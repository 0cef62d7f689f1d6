package cli

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
)

// What kube-neuron's components create at run time, outside the chart's objects.
const (
	// ownDomain: label and annotation keys in this domain, or a subdomain of it, are kube-neuron's.
	ownDomain = "kube-neuron.io"
	// bindLeasePrefix and bindLeaseLabel: the scheduler extender's per-node bind Leases.
	bindLeasePrefix = "kube-neuron-bind-"
	bindLeaseLabel  = "app.kubernetes.io/managed-by"
	bindLeaseValue  = "neuron-scheduler-extender"
	// autoscalerLease is neuron-autoscaler's leader election Lease.
	autoscalerLease = "neuron-autoscaler"
	// chartSelector selects the chart's workloads, which put back what cleanup removes.
	chartSelector = "app.kubernetes.io/part-of=kube-neuron"
)

// Values of cleanup's --dry-run, as kubectl writes them.
const (
	dryRunNone   = "none"
	dryRunClient = "client"
	dryRunServer = "server"
)

// Modes of a cleanup run (CleanupReport.Mode).
const (
	// CleanupListed: nothing was sent (no --yes, or --dry-run=client).
	CleanupListed = "listed"
	// CleanupServerDryRun: every removal was sent as a server-side dry run; nothing changed.
	CleanupServerDryRun = "server-dry-run"
	// CleanupRemoved: the removals were made (--yes).
	CleanupRemoved = "removed"
)

// CleanupReport is `kubectl-neuron cleanup -o json`: what cleanup removes (or removed) and keeps.
type CleanupReport struct {
	Mode   string         `json:"mode"`
	Nodes  []CleanupNode  `json:"nodes"`
	Leases []CleanupLease `json:"leases"`
}

// CleanupNode is what cleanup removes from one node, and the keys it keeps that may look like
// kube-neuron's (Keep says why).
type CleanupNode struct {
	Name              string            `json:"name"`
	RemoveLabels      map[string]string `json:"removeLabels"`
	RemoveAnnotations []string          `json:"removeAnnotations"`
	Keep              []string          `json:"keep"`
}

// CleanupLease is a Lease cleanup deletes.
type CleanupLease struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

type cleanupOptions struct {
	namespace, dryRun, output string
	yes, force                bool
}

// mode is what the run does: list only, send server-side dry runs, or remove.
func (co *cleanupOptions) mode() string {
	switch {
	case co.dryRun == dryRunServer:
		return CleanupServerDryRun
	case co.yes && (co.dryRun == "" || co.dryRun == dryRunNone):
		return CleanupRemoved
	}
	return CleanupListed
}

func newCleanupCommand(o *options) *cobra.Command {
	co := &cleanupOptions{}
	var client *clientFlags
	cmd := &cobra.Command{
		Use:   "cleanup",
		Short: "After helm uninstall: remove what kube-neuron's components added to the cluster",
		Long: `cleanup removes what kube-neuron's components added to the cluster at run time, outside the Helm
chart's own objects (helm uninstall removes those). Without --yes it only lists what it would
remove; with --yes it removes it, with merge patches that remove exactly those keys.
--dry-run=server sends every removal as a server-side dry run (the API server checks it,
admission included, and changes nothing); --dry-run=client (or --dry-run) only lists, even with
--yes. The cluster is read as kubectl does (--kubeconfig, --context, --server, --token, --as,
--request-timeout and kubectl's other client flags).

It removes:
  node labels and annotations whose key is in the kube-neuron.io domain (or a subdomain):
      kube-neuron.io/allocation-mode (device plugin, DRA driver, autoscaler), kube-neuron.io/
      launched-by and planned-pods (autoscaler), kube-neuron.io/usage-maps-mirror (extender)
  the node annotations NEURON_DEV_USAGE_MAP and NEURON_CORE_USAGE_MAP, only where the scheduler
      extender's --mirror-usage-annotations wrote them (kube-neuron.io/usage-maps-mirror matches
      their values); the published scheduler extension's maps are kept and listed
  the scheduler extender's bind Leases kube-neuron-bind-<node> (label
      app.kubernetes.io/managed-by=neuron-scheduler-extender) and neuron-autoscaler's leader
      election Lease neuron-autoscaler, in --namespace (default kube-system, not the context's)

It keeps:
  the UltraServer labels neuron.amazonaws.com/ultraserver-*: the published Neuron stack's keys,
      which its device plugin sets too and pod affinities select on
  every pod annotation: kube-neuron.io/allocation, AWS_NEURON_IDS and the other keys say what
      running pods hold, and go away with the pods
  the CDI specs of ResourceClaims still prepared on DRA nodes (files on the nodes: see
      docs/migration.md)

Run it after helm uninstall: while the chart's device plugin, DRA driver, extender or autoscaler
run, they put back what it removes, so --yes refuses unless --force.

Output formats (-o):
  table              one line per key or Lease, then a summary (default)
  json, yaml         {"mode", "nodes": [{"name", "removeLabels", "removeAnnotations", "keep"}],
                     "leases": [{"namespace", "name"}]}; mode is listed, server-dry-run or removed
  name               node/NAME and lease.coordination.k8s.io/NAME of what is (or would be) changed
  jsonpath=TEMPLATE  the template over the json document

Exit codes: 0 listed or removed; 1 the chart's workloads still run (--yes without --force);
2 bad flags; 4 no kubeconfig, or the cluster cannot be reached, read or changed.`,
		Example: `  kubectl-neuron cleanup                 # what would be removed
  kubectl-neuron cleanup --dry-run=server  # the API server checks every removal, changes nothing
  kubectl-neuron cleanup --yes
  kubectl-neuron cleanup -n neuron-system --context prod -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := co.validate(); err != nil {
				return err
			}
			c, err := client.client()
			if err != nil {
				return err
			}
			return runCleanup(cmd.Context(), c, co, o.out, o.errOut)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&co.namespace, "namespace", "n", "kube-system", "namespace the chart was installed in (the extender's --lease-namespace, the autoscaler's --namespace)")
	f.BoolVar(&co.yes, "yes", false, "remove what is listed (default: only list it)")
	f.BoolVar(&co.force, "force", false, "with --yes: go ahead although the chart's workloads still run")
	f.StringVar(&co.dryRun, "dry-run", dryRunNone, `"none", "client" or "server": client only lists (even with --yes); server sends every removal as a server-side dry run`)
	f.Lookup("dry-run").NoOptDefVal = dryRunClient
	f.StringVarP(&co.output, "output", "o", outTable, "output format: table, json, yaml, name or jsonpath=TEMPLATE")
	client = addClientFlags(f)
	return cmd
}

func (co *cleanupOptions) validate() error {
	switch co.dryRun {
	case "", dryRunNone, dryRunClient, dryRunServer:
	default:
		return usageErr("--dry-run %q: use none, client or server", co.dryRun)
	}
	if co.namespace == "" {
		return usageErr("--namespace is empty: name the namespace the chart was installed in (default kube-system)")
	}
	_, err := parseOutput(cmp.Or(co.output, outTable), commandFormats["cleanup"]...)
	return err
}

// nodeCleanup is what cleanup removes from one node, and what it keeps that may look like ours.
type nodeCleanup struct {
	Labels      []string
	Annotations []string
	Kept        []string // why a key that looks like ours stays
}

func (c nodeCleanup) empty() bool { return len(c.Labels) == 0 && len(c.Annotations) == 0 }

// ownedKey reports whether a label or annotation key is in kube-neuron's domain.
func ownedKey(k string) bool {
	prefix, _, ok := strings.Cut(k, "/")
	return ok && (prefix == ownDomain || strings.HasSuffix(prefix, "."+ownDomain))
}

// planNodeCleanup decides what to remove from a node.
func planNodeCleanup(n *corev1.Node) nodeCleanup {
	var c nodeCleanup
	for k := range n.Labels {
		if ownedKey(k) {
			c.Labels = append(c.Labels, k)
		}
	}
	for k := range n.Annotations {
		if ownedKey(k) {
			c.Annotations = append(c.Annotations, k)
		}
	}
	dev, hasDev := n.Annotations[allocation.DevUsageMap]
	core, hasCore := n.Annotations[allocation.CoreUsageMap]
	if hasDev || hasCore {
		if mark, ok := n.Annotations[allocation.UsageMapsMirror]; ok && mark == allocation.UsageMapsDigest(dev, core) {
			for k, has := range map[string]bool{allocation.DevUsageMap: hasDev, allocation.CoreUsageMap: hasCore} {
				if has {
					c.Annotations = append(c.Annotations, k)
				}
			}
		} else {
			c.Kept = append(c.Kept, fmt.Sprintf("annotations %s, %s: not written by kube-neuron (the published scheduler extension's usage maps); once it no longer runs, kubectl annotate node %s %s- %s- removes them",
				allocation.DevUsageMap, allocation.CoreUsageMap, n.Name, allocation.DevUsageMap, allocation.CoreUsageMap))
		}
	}
	var us []string
	for k := range n.Labels {
		if strings.HasPrefix(k, "neuron.amazonaws.com/ultraserver-") {
			us = append(us, k)
		}
	}
	if len(us) > 0 {
		slices.Sort(us)
		c.Kept = append(c.Kept, fmt.Sprintf("labels %s: the published Neuron stack's UltraServer labels (its device plugin sets them too)", strings.Join(us, ", ")))
	}
	slices.Sort(c.Labels)
	slices.Sort(c.Annotations)
	return c
}

// removalPatch is a merge patch that removes exactly the keys, on the node as it was read.
func removalPatch(c nodeCleanup, resourceVersion string) []byte {
	meta := map[string]any{"resourceVersion": resourceVersion}
	if len(c.Labels) > 0 {
		l := map[string]any{}
		for _, k := range c.Labels {
			l[k] = nil
		}
		meta["labels"] = l
	}
	if len(c.Annotations) > 0 {
		a := map[string]any{}
		for _, k := range c.Annotations {
			a[k] = nil
		}
		meta["annotations"] = a
	}
	data, _ := json.Marshal(map[string]any{"metadata": meta})
	return data
}

// ownLease reports whether a Lease in the chart's namespace is one kube-neuron's components create.
func ownLease(name string, lbls map[string]string) bool {
	return (strings.HasPrefix(name, bindLeasePrefix) && lbls[bindLeaseLabel] == bindLeaseValue) || name == autoscalerLease
}

// runCleanup lists (with --yes removes, with --dry-run=server sends as dry runs) what
// kube-neuron's components added to the cluster.
func runCleanup(ctx context.Context, client kubernetes.Interface, co *cleanupOptions, out, errOut io.Writer) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if err := co.validate(); err != nil {
		return err
	}
	format, _ := parseOutput(cmp.Or(co.output, outTable), commandFormats["cleanup"]...)
	warn := func(format string, args ...any) { fmt.Fprintf(errOut, "warning: "+format+"\n", args...) }
	mode := co.mode()
	var dryRun []string
	if mode == CleanupServerDryRun {
		dryRun = []string{metav1.DryRunAll}
	}

	running, err := chartWorkloads(ctx, client)
	if err != nil {
		warn("cannot tell whether kube-neuron's chart is still installed (%v): run cleanup after helm uninstall", err)
	}
	if len(running) > 0 {
		msg := fmt.Sprintf("kube-neuron's chart still runs (%s): its components put back what cleanup removes; helm uninstall it first", strings.Join(running, ", "))
		if mode == CleanupRemoved && !co.force {
			return refused(fmt.Errorf("%s, or pass --force", msg))
		}
		warn("%s", msg)
	}

	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return clusterErr("list nodes", err)
	}
	leases, err := client.CoordinationV1().Leases(co.namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return clusterErr("list leases in namespace "+co.namespace, err)
	}
	slices.SortFunc(nodes.Items, func(a, b corev1.Node) int { return strings.Compare(a.Name, b.Name) })

	report := CleanupReport{Mode: mode, Nodes: []CleanupNode{}, Leases: []CleanupLease{}}
	// finish writes what was done; after a failure, the table has no summary line.
	finish := func(err error) error {
		if werr := writeCleanup(out, format, report, err != nil); werr != nil && err == nil {
			err = werr
		}
		return err
	}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		c := planNodeCleanup(n)
		if c.empty() && len(c.Kept) == 0 {
			continue
		}
		if !c.empty() && mode != CleanupListed {
			done, err := removeFromNode(ctx, client, n, dryRun)
			if err != nil {
				return finish(err)
			}
			c.Labels, c.Annotations = done.Labels, done.Annotations
		}
		rn := CleanupNode{Name: n.Name, RemoveLabels: map[string]string{}, RemoveAnnotations: nonNilStrings(c.Annotations), Keep: nonNilStrings(c.Kept)}
		for _, k := range c.Labels {
			rn.RemoveLabels[k] = n.Labels[k]
		}
		report.Nodes = append(report.Nodes, rn)
	}
	for _, l := range leases.Items {
		if !ownLease(l.Name, l.Labels) {
			continue
		}
		if mode != CleanupListed {
			uid := l.UID
			err := client.CoordinationV1().Leases(co.namespace).Delete(ctx, l.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}, DryRun: dryRun})
			if err != nil && !apierrors.IsNotFound(err) {
				return finish(clusterErr(fmt.Sprintf("delete lease %s/%s", co.namespace, l.Name), err))
			}
		}
		report.Leases = append(report.Leases, CleanupLease{Namespace: co.namespace, Name: l.Name})
	}
	return finish(nil)
}

func nonNilStrings(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// writeCleanup renders the report in the -o format; failed leaves the table's summary out.
func writeCleanup(out io.Writer, format outputFormat, r CleanupReport, failed bool) error {
	var buf bytes.Buffer
	switch {
	case format.data():
		if err := writeData(&buf, format, r, false); err != nil {
			return err
		}
	case format.name == outName:
		for _, n := range r.Nodes {
			if len(n.RemoveLabels)+len(n.RemoveAnnotations) > 0 {
				fmt.Fprintf(&buf, "node/%s\n", n.Name)
			}
		}
		for _, l := range r.Leases {
			fmt.Fprintf(&buf, "lease.coordination.k8s.io/%s\n", l.Name)
		}
	default:
		buf.WriteString(cleanupTable(r, failed))
	}
	_, err := out.Write(buf.Bytes())
	return err
}

// cleanupTable is the table output: one line per key or Lease, then a summary (none after a
// failure: the error says what happened).
func cleanupTable(r CleanupReport, failed bool) string {
	var lines []string
	keys := 0
	for _, n := range r.Nodes {
		for _, k := range n.Keep {
			lines = append(lines, fmt.Sprintf("node %s: keep %s", n.Name, k))
		}
		for _, k := range slices.Sorted(maps.Keys(n.RemoveLabels)) {
			lines = append(lines, fmt.Sprintf("node %s: remove label %s=%s", n.Name, k, n.RemoveLabels[k]))
		}
		for _, k := range n.RemoveAnnotations {
			lines = append(lines, fmt.Sprintf("node %s: remove annotation %s", n.Name, k))
		}
		keys += len(n.RemoveLabels) + len(n.RemoveAnnotations)
	}
	for _, l := range r.Leases {
		lines = append(lines, fmt.Sprintf("lease %s/%s: delete", l.Namespace, l.Name))
	}
	switch {
	case failed:
	case keys == 0 && len(r.Leases) == 0:
		lines = append(lines, "Nothing of kube-neuron's is left on the cluster (besides pod annotations, which go with the pods).")
	case r.Mode == CleanupRemoved:
		lines = append(lines, fmt.Sprintf("Removed %d node labels and annotations and %d leases.", keys, len(r.Leases)))
	case r.Mode == CleanupServerDryRun:
		lines = append(lines, fmt.Sprintf("Server dry run: the API server accepted the removal of %d node labels and annotations and %d leases, and changed nothing. Run again with --yes to remove them.", keys, len(r.Leases)))
	default:
		lines = append(lines, fmt.Sprintf("Dry run: %d node labels and annotations and %d leases would be removed; nothing was changed. Run again with --yes to remove them.", keys, len(r.Leases)))
	}
	return joinLines(lines)
}

func joinLines(lines []string) string {
	if len(lines) == 0 {
		return ""
	}
	return strings.Join(lines, "\n") + "\n"
}

// removeFromNode removes what planNodeCleanup lists (as a server-side dry run with dryRun), with a
// merge patch carrying the node's resourceVersion; when the node changed in between, it reads the node again and decides again
// (the usage maps are removed only if they still are what kube-neuron wrote). It returns what it
// removed.
func removeFromNode(ctx context.Context, client kubernetes.Interface, n *corev1.Node, dryRun []string) (nodeCleanup, error) {
	name := n.Name
	for attempt := 0; attempt < 5; attempt++ {
		c := planNodeCleanup(n)
		if c.empty() {
			return c, nil
		}
		_, err := client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, removalPatch(c, n.ResourceVersion), metav1.PatchOptions{FieldManager: "kubectl-neuron", DryRun: dryRun})
		switch {
		case err == nil:
			return c, nil
		case apierrors.IsNotFound(err):
			return nodeCleanup{}, nil
		case !apierrors.IsConflict(err):
			return nodeCleanup{}, clusterErr("patch node "+name, err)
		}
		if n, err = client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); err != nil {
			if apierrors.IsNotFound(err) {
				return nodeCleanup{}, nil
			}
			return nodeCleanup{}, clusterErr("get node "+name, err)
		}
	}
	return nodeCleanup{}, clusterErr("patch node "+name, fmt.Errorf("the node changed five times while it was being cleaned up"))
}

// chartWorkloads lists the DaemonSets and Deployments of kube-neuron's chart that still exist.
func chartWorkloads(ctx context.Context, client kubernetes.Interface) ([]string, error) {
	var out []string
	ds, err := client.AppsV1().DaemonSets("").List(ctx, metav1.ListOptions{LabelSelector: chartSelector})
	if err != nil {
		return nil, err
	}
	for _, d := range ds.Items {
		out = append(out, "daemonset "+d.Namespace+"/"+d.Name)
	}
	deps, err := client.AppsV1().Deployments("").List(ctx, metav1.ListOptions{LabelSelector: chartSelector})
	if err != nil {
		return nil, err
	}
	for _, d := range deps.Items {
		out = append(out, "deployment "+d.Namespace+"/"+d.Name)
	}
	return out, nil
}
