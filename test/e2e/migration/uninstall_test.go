//go:build e2e

package migration

import (
	"bytes"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/cli"
	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/topology"
	"github.com/kube-neuron/kube-neuron/test/e2e/framework"
)

func cleanup(t *testing.T, args ...string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	args = append([]string{"cleanup", "--kubeconfig", framework.L.Kubeconfig()}, args...)
	if code := cli.Main(args, &out, &errOut); code != 0 {
		t.Fatalf("kubectl-neuron %s: exit %d: %s", strings.Join(args, " "), code, errOut.String())
	}
	return out.String()
}

// TestUninstallCleanup runs last (after the extender bound pods and wrote its Leases): cleanup
// lists, then removes, kube-neuron's node labels and annotations, the usage maps its mirror
// wrote and its Leases, and leaves a foreign label and annotation, the published extension's
// usage maps and every pod annotation alone.
func TestUninstallCleanup(t *testing.T) {
	ctx := framework.Context(t)
	ns := framework.CreateNamespace(t, ctx)
	client := framework.L.Client()
	// A pod placed by the extender, so that a bind Lease exists.
	createNew(t, ctx, ns, "placed", inf2, topology.ResourceNeuron, 1)
	served(t, ctx, ns, "placed")
	placed, err := client.CoreV1().Pods(ns).Get(ctx, "placed", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// Someone else's label and annotation on the trn1; on the inf2, usage maps as the extender's
	// --mirror-usage-annotations writes them (with its marker); on the trn1 the published
	// extension's maps (no marker, or one that does not match).
	dev, core := "false,true", "false,false,true,true"
	for node, anns := range map[string]map[string]*string{
		trn1: {"example.com/note": ptr("keep me"), allocation.DevUsageMap: ptr("true"), allocation.CoreUsageMap: ptr("true,true"), allocation.UsageMapsMirror: ptr("0000000000000000")},
		inf2: {allocation.DevUsageMap: &dev, allocation.CoreUsageMap: &core, allocation.UsageMapsMirror: ptr(allocation.UsageMapsDigest(dev, core))},
	} {
		patch := `{"metadata":{"labels":{"example.com/team":"ml"}}}`
		if _, err := client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, allocation.MergePatch(anns), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	dry := cleanup(t)
	for _, want := range []string{
		"node inf2-a: remove label kube-neuron.io/allocation-mode=device-plugin",
		"node trn1-a: remove label kube-neuron.io/lab-node=true",
		"node inf2-a: remove annotation NEURON_DEV_USAGE_MAP",
		"node trn1-a: remove annotation kube-neuron.io/usage-maps-mirror",
		"node trn1-a: keep annotations NEURON_DEV_USAGE_MAP, NEURON_CORE_USAGE_MAP: not written by kube-neuron",
		"lease kube-system/kube-neuron-bind-inf2-a: delete",
		"Dry run:",
	} {
		if !strings.Contains(dry, want) {
			t.Errorf("the dry run does not say %q:\n%s", want, dry)
		}
	}
	if strings.Contains(dry, "example.com") || strings.Contains(dry, "trn1-a: remove annotation NEURON_") {
		t.Errorf("the dry run would remove what is not kube-neuron's:\n%s", dry)
	}
	if n, _ := client.CoreV1().Nodes().Get(ctx, inf2, metav1.GetOptions{}); n.Labels[labels.AllocationMode] == "" {
		t.Errorf("the dry run removed the allocation-mode label")
	}

	done := cleanup(t, "--yes")
	t.Logf("kubectl-neuron cleanup --yes:\n%s", done)
	for _, name := range []string{inf2, trn1} {
		n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for k := range n.Labels {
			if strings.Contains(k, "kube-neuron.io/") {
				t.Errorf("node %s still has label %s", name, k)
			}
		}
		for k := range n.Annotations {
			if strings.Contains(k, "kube-neuron.io/") {
				t.Errorf("node %s still has annotation %s", name, k)
			}
		}
		if n.Labels["example.com/team"] != "ml" || n.Labels[labels.InstanceType] == "" {
			t.Errorf("node %s lost labels that are not kube-neuron's: %v", name, n.Labels)
		}
		_, hasDev := n.Annotations[allocation.DevUsageMap]
		if name == trn1 && (!hasDev || n.Annotations["example.com/note"] != "keep me") {
			t.Errorf("node %s lost annotations that are not kube-neuron's: %v", name, n.Annotations)
		}
		if name == inf2 && hasDev {
			t.Errorf("node %s keeps the usage maps kube-neuron's mirror wrote: %v", name, n.Annotations)
		}
	}
	leases, err := client.CoordinationV1().Leases("kube-system").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range leases.Items {
		if strings.HasPrefix(l.Name, "kube-neuron-bind-") {
			t.Errorf("lease %s is left", l.Name)
		}
	}
	// Running pods keep every annotation.
	after, err := client.CoreV1().Pods(ns).Get(ctx, "placed", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{allocation.Annotation, allocation.AWSNeuronIDs, allocation.AllocTime, allocation.Allocated} {
		if after.Annotations[k] != placed.Annotations[k] || after.Annotations[k] == "" {
			t.Errorf("pod annotation %s: %q, was %q", k, after.Annotations[k], placed.Annotations[k])
		}
	}
	if after.Status.Phase != corev1.PodRunning {
		t.Errorf("pod %s", after.Status.Phase)
	}
	if again := cleanup(t); !strings.Contains(again, "Nothing of kube-neuron's is left") {
		t.Errorf("after cleanup --yes:\n%s", again)
	}
}

func ptr(s string) *string { return &s }
