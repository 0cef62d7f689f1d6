package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
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

type cleanupOptions struct {
	kubeconfig, context, namespace string
	yes, force                     bool
}

func newCleanupCommand(o *options) *cobra.Command {
	co := &cleanupOptions{}
	cmd := &cobra.Command{
		Use:   "cleanup",
		Short: "After helm uninstall: remove what kube-neuron's components added to the cluster",
		Long: `cleanup removes what kube-neuron's components added to the cluster at run time, outside the Helm
chart's own objects (helm uninstall removes those). Without --yes it only lists what it would
remove; with --yes it removes it, with merge patches that remove exactly those keys.

It removes:
  node labels and annotations whose key is in the kube-neuron.io domain (or a subdomain):
      kube-neuron.io/allocation-mode (device plugin, DRA driver, autoscaler), kube-neuron.io/
      launched-by and planned-pods (autoscaler), kube-neuron.io/usage-maps-mirror (extender)
  the node annotations NEURON_DEV_USAGE_MAP and NEURON_CORE_USAGE_MAP, only where the scheduler
      extender's --mirror-usage-annotations wrote them (kube-neuron.io/usage-maps-mirror matches
      their values); the published scheduler extension's maps are kept and listed
  the scheduler extender's bind Leases kube-neuron-bind-<node> (label
      app.kubernetes.io/managed-by=neuron-scheduler-extender) and neuron-autoscaler's leader
      election Lease neuron-autoscaler, in --namespace

It keeps:
  the UltraServer labels neuron.amazonaws.com/ultraserver-*: the published Neuron stack's keys,
      which its device plugin sets too and pod affinities select on
  every pod annotation: kube-neuron.io/allocation, AWS_NEURON_IDS and the other keys say what
      running pods hold, and go away with the pods
  the CDI specs of ResourceClaims still prepared on DRA nodes (files on the nodes: see
      docs/migration.md)

Run it after helm uninstall: while the chart's device plugin, DRA driver, extender or autoscaler
run, they put back what it removes, so --yes refuses unless --force.

Exit codes: 0 listed or removed; 1 the chart's workloads still run (--yes without --force);
2 bad flags; 4 no kubeconfig, or the cluster cannot be reached, read or changed.`,
		Example: `  kubectl-neuron cleanup                 # what would be removed
  kubectl-neuron cleanup --yes
  kubectl-neuron cleanup --namespace neuron-system --context prod`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client, err := kubeconfigClient(co.kubeconfig, co.context)
			if err != nil {
				return err
			}
			return runCleanup(cmd.Context(), client, co, o.out, o.errOut)
		},
	}
	f := cmd.Flags()
	f.StringVar(&co.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, else ~/.kube/config)")
	f.StringVar(&co.context, "context", "", "kubeconfig context to use (default: the current context)")
	f.StringVarP(&co.namespace, "namespace", "n", "kube-system", "namespace the chart was installed in (the extender's --lease-namespace, the autoscaler's --namespace)")
	f.BoolVar(&co.yes, "yes", false, "remove what is listed (default: only list it)")
	f.BoolVar(&co.force, "force", false, "with --yes: go ahead although the chart's workloads still run")
	return cmd
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

// runCleanup lists (and with --yes removes) what kube-neuron's components added to the cluster.
func runCleanup(ctx context.Context, client kubernetes.Interface, co *cleanupOptions, out, errOut io.Writer) error {
	if ctx == nil {
		ctx = context.Background()
	}
	warn := func(format string, args ...any) { fmt.Fprintf(errOut, "warning: "+format+"\n", args...) }

	running, err := chartWorkloads(ctx, client)
	if err != nil {
		warn("cannot tell whether kube-neuron's chart is still installed (%v): run cleanup after helm uninstall", err)
	}
	if len(running) > 0 {
		msg := fmt.Sprintf("kube-neuron's chart still runs (%s): its components put back what cleanup removes; helm uninstall it first", strings.Join(running, ", "))
		if co.yes && !co.force {
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

	var lines []string
	removedKeys, removedLeases := 0, 0
	for i := range nodes.Items {
		n := &nodes.Items[i]
		c := planNodeCleanup(n)
		for _, k := range c.Kept {
			lines = append(lines, fmt.Sprintf("node %s: keep %s", n.Name, k))
		}
		if c.empty() {
			continue
		}
		if co.yes {
			done, err := removeFromNode(ctx, client, n)
			if err != nil {
				fmt.Fprint(out, joinLines(lines))
				return err
			}
			c = done
		}
		for _, k := range c.Labels {
			lines = append(lines, fmt.Sprintf("node %s: remove label %s=%s", n.Name, k, n.Labels[k]))
		}
		for _, k := range c.Annotations {
			lines = append(lines, fmt.Sprintf("node %s: remove annotation %s", n.Name, k))
		}
		removedKeys += len(c.Labels) + len(c.Annotations)
	}
	for _, l := range leases.Items {
		if !ownLease(l.Name, l.Labels) {
			continue
		}
		if co.yes {
			uid := l.UID
			err := client.CoordinationV1().Leases(co.namespace).Delete(ctx, l.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
			if err != nil && !apierrors.IsNotFound(err) {
				fmt.Fprint(out, joinLines(lines))
				return clusterErr(fmt.Sprintf("delete lease %s/%s", co.namespace, l.Name), err)
			}
		}
		lines = append(lines, fmt.Sprintf("lease %s/%s: delete", co.namespace, l.Name))
		removedLeases++
	}
	switch {
	case removedKeys == 0 && removedLeases == 0:
		lines = append(lines, "Nothing of kube-neuron's is left on the cluster (besides pod annotations, which go with the pods).")
	case co.yes:
		lines = append(lines, fmt.Sprintf("Removed %d node labels and annotations and %d leases.", removedKeys, removedLeases))
	default:
		lines = append(lines, fmt.Sprintf("Dry run: %d node labels and annotations and %d leases would be removed; nothing was changed. Run again with --yes to remove them.", removedKeys, removedLeases))
	}
	_, err = fmt.Fprint(out, joinLines(lines))
	return err
}

func joinLines(lines []string) string {
	if len(lines) == 0 {
		return ""
	}
	return strings.Join(lines, "\n") + "\n"
}

// removeFromNode removes what planNodeCleanup lists, with a merge patch carrying the node's
// resourceVersion; when the node changed in between, it reads the node again and decides again
// (the usage maps are removed only if they still are what kube-neuron wrote). It returns what it
// removed.
func removeFromNode(ctx context.Context, client kubernetes.Interface, n *corev1.Node) (nodeCleanup, error) {
	name := n.Name
	for attempt := 0; attempt < 5; attempt++ {
		c := planNodeCleanup(n)
		if c.empty() {
			return c, nil
		}
		_, err := client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, removalPatch(c, n.ResourceVersion), metav1.PatchOptions{FieldManager: "kubectl-neuron"})
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
