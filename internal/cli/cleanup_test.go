package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/labels"
)

const (
	devMap  = "true,false"
	coreMap = "true,true,false,false"
)

// cleanupCluster:
//
//	ours     labels and annotations of kube-neuron's components, usage maps its extender mirrored,
//	         and a foreign label and annotation
//	theirs   the published extension's usage maps, UltraServer labels
//	plain    nothing of anyone's
//
// and Leases: two bind Leases and the autoscaler's in kube-system (removed), a Lease named like
// a bind Lease without the extender's label, a foreign Lease and a bind Lease in another
// namespace (kept).
func cleanupCluster() []runtime.Object {
	ours := neuronNode("ours", "trn1.32xlarge", labels.AllocationModeDevicePlugin, 16, 32)
	ours.Labels["kube-neuron.io/launched-by"] = "neuron-autoscaler"
	ours.Labels["lab.kube-neuron.io/x"] = "y"
	ours.Labels["team"] = "ml"
	ours.Annotations = map[string]string{
		"kube-neuron.io/planned-pods": "ns/p",
		allocation.DevUsageMap:        devMap,
		allocation.CoreUsageMap:       coreMap,
		allocation.UsageMapsMirror:    allocation.UsageMapsDigest(devMap, coreMap),
		"example.com/owner":           "someone",
		"notkube-neuron.io/x":         "kept",
	}
	theirs := neuronNode("theirs", "trn2u.48xlarge", "", 16, 64)
	theirs.Labels[labels.UltraServerMode] = "1_2_4"
	theirs.Labels[labels.UltraServerServerID4] = "us-1"
	theirs.Annotations = map[string]string{allocation.DevUsageMap: "false,true", allocation.CoreUsageMap: "false,false"}
	lease := func(ns, name string, managed bool) *coordinationv1.Lease {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "/" + name)}}
		if managed {
			l.Labels = map[string]string{"app.kubernetes.io/managed-by": "neuron-scheduler-extender"}
		}
		return l
	}
	return []runtime.Object{
		ours, theirs, neuronNode("plain", "m5.large", "", 0, 0),
		lease("kube-system", "kube-neuron-bind-ours", true),
		lease("kube-system", "kube-neuron-bind-theirs", true),
		lease("kube-system", "neuron-autoscaler", false),
		lease("kube-system", "kube-neuron-bind-unlabelled", false),
		lease("kube-system", "my-scheduler", false),
		lease("other", "kube-neuron-bind-ours", true),
	}
}

func runCleanupOn(t *testing.T, client *fake.Clientset, co cleanupOptions) (string, string, error) {
	t.Helper()
	if co.namespace == "" {
		co.namespace = "kube-system"
	}
	var out, errOut bytes.Buffer
	err := runCleanup(context.Background(), client, &co, &out, &errOut)
	return out.String(), errOut.String(), err
}

func writes(client *fake.Clientset) []k8stesting.Action {
	var out []k8stesting.Action
	for _, a := range client.Actions() {
		if v := a.GetVerb(); v != "get" && v != "list" && v != "watch" {
			out = append(out, a)
		}
	}
	return out
}

func TestCleanupDryRun(t *testing.T) {
	client := fake.NewClientset(cleanupCluster()...)
	out, errOut, err := runCleanupOn(t, client, cleanupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := `node ours: remove label kube-neuron.io/allocation-mode=device-plugin
node ours: remove label kube-neuron.io/launched-by=neuron-autoscaler
node ours: remove label lab.kube-neuron.io/x=y
node ours: remove annotation NEURON_CORE_USAGE_MAP
node ours: remove annotation NEURON_DEV_USAGE_MAP
node ours: remove annotation kube-neuron.io/planned-pods
node ours: remove annotation kube-neuron.io/usage-maps-mirror
node theirs: keep annotations NEURON_DEV_USAGE_MAP, NEURON_CORE_USAGE_MAP: not written by kube-neuron (the published scheduler extension's usage maps); once it no longer runs, kubectl annotate node theirs NEURON_DEV_USAGE_MAP- NEURON_CORE_USAGE_MAP- removes them
node theirs: keep labels neuron.amazonaws.com/ultraserver-mode, neuron.amazonaws.com/ultraserver-server-id-4: the published Neuron stack's UltraServer labels (its device plugin sets them too)
lease kube-system/kube-neuron-bind-ours: delete
lease kube-system/kube-neuron-bind-theirs: delete
lease kube-system/neuron-autoscaler: delete
Dry run: 7 node labels and annotations and 3 leases would be removed; nothing was changed. Run again with --yes to remove them.
`
	if out != want {
		t.Errorf("dry run:\n%s\nwant:\n%s", out, want)
	}
	if errOut != "" {
		t.Errorf("stderr %q", errOut)
	}
	if w := writes(client); len(w) != 0 {
		t.Errorf("a dry run wrote: %v", w)
	}
}

func TestCleanupRemovesOursOnly(t *testing.T) {
	client := fake.NewClientset(cleanupCluster()...)
	before, _ := client.CoreV1().Nodes().Get(context.Background(), "theirs", metav1.GetOptions{})
	out, _, err := runCleanupOn(t, client, cleanupOptions{yes: true})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(out, "Removed 7 node labels and annotations and 3 leases.\n") {
		t.Errorf("output:\n%s", out)
	}
	ctx := context.Background()
	ours, _ := client.CoreV1().Nodes().Get(ctx, "ours", metav1.GetOptions{})
	if want := map[string]string{labels.InstanceType: "trn1.32xlarge", "team": "ml"}; !reflect.DeepEqual(ours.Labels, want) {
		t.Errorf("labels left %v, want %v", ours.Labels, want)
	}
	if want := map[string]string{"example.com/owner": "someone", "notkube-neuron.io/x": "kept"}; !reflect.DeepEqual(ours.Annotations, want) {
		t.Errorf("annotations left %v, want %v", ours.Annotations, want)
	}
	theirs, _ := client.CoreV1().Nodes().Get(ctx, "theirs", metav1.GetOptions{})
	if !reflect.DeepEqual(theirs.ObjectMeta, before.ObjectMeta) {
		t.Errorf("node theirs changed: %+v", theirs.ObjectMeta)
	}
	leases, _ := client.CoordinationV1().Leases("").List(ctx, metav1.ListOptions{})
	var left []string
	for _, l := range leases.Items {
		left = append(left, l.Namespace+"/"+l.Name)
	}
	if want := []string{"kube-system/kube-neuron-bind-unlabelled", "kube-system/my-scheduler", "other/kube-neuron-bind-ours"}; !reflect.DeepEqual(left, want) {
		t.Errorf("leases left %v, want %v", left, want)
	}
	// One merge patch per node, naming exactly the removed keys, with the node's resourceVersion.
	var patches []string
	for _, a := range writes(client) {
		if p, ok := a.(k8stesting.PatchAction); ok {
			if p.GetPatchType() != "application/merge-patch+json" {
				t.Errorf("patch type %s", p.GetPatchType())
			}
			var body map[string]map[string]any
			if err := json.Unmarshal(p.GetPatch(), &body); err != nil {
				t.Fatal(err)
			}
			if _, ok := body["metadata"]["resourceVersion"]; !ok || len(body) != 1 {
				t.Errorf("patch %s: want metadata only, with the resourceVersion", p.GetPatch())
			}
			patches = append(patches, p.GetName())
		}
	}
	if !reflect.DeepEqual(patches, []string{"ours"}) {
		t.Errorf("patched %v, want only ours", patches)
	}
	// Again: nothing left.
	out, _, err = runCleanupOn(t, client, cleanupOptions{yes: true})
	if err != nil || !strings.Contains(out, "Nothing of kube-neuron's is left") {
		t.Errorf("second run: %v\n%s", err, out)
	}
}

// TestCleanupNodeChangedMeanwhile: the node changes between the list and the patch (the
// published extension writes its maps over ours): cleanup reads it again and keeps the maps.
func TestCleanupNodeChangedMeanwhile(t *testing.T) {
	client := fake.NewClientset(cleanupCluster()...)
	conflicts := 0
	client.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if conflicts > 0 {
			return false, nil, nil
		}
		conflicts++
		n, _ := client.Tracker().Get(corev1.SchemeGroupVersion.WithResource("nodes"), "", a.(k8stesting.PatchAction).GetName())
		node := n.(*corev1.Node).DeepCopy()
		node.Annotations[allocation.DevUsageMap] = "false,false"
		_ = client.Tracker().Update(corev1.SchemeGroupVersion.WithResource("nodes"), node, "")
		return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "nodes"}, node.Name, errors.New("the object has been modified"))
	})
	out, _, err := runCleanupOn(t, client, cleanupOptions{yes: true})
	if err != nil {
		t.Fatal(err)
	}
	ours, _ := client.CoreV1().Nodes().Get(context.Background(), "ours", metav1.GetOptions{})
	if ours.Annotations[allocation.DevUsageMap] != "false,false" || ours.Annotations[allocation.CoreUsageMap] != coreMap {
		t.Errorf("maps written by someone else were removed: %v", ours.Annotations)
	}
	if _, ok := ours.Annotations[allocation.UsageMapsMirror]; ok || strings.Contains(out, "remove annotation NEURON_DEV_USAGE_MAP") {
		t.Errorf("annotations %v, output:\n%s", ours.Annotations, out)
	}
}

func TestCleanupWhileTheChartRuns(t *testing.T) {
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "neuron-device-plugin", Labels: map[string]string{"app.kubernetes.io/part-of": "kube-neuron"}}}
	client := fake.NewClientset(append(cleanupCluster(), ds)...)
	_, errOut, err := runCleanupOn(t, client, cleanupOptions{})
	if err != nil || !strings.Contains(errOut, "warning: kube-neuron's chart still runs (daemonset kube-system/neuron-device-plugin)") {
		t.Errorf("dry run: %v, stderr %q", err, errOut)
	}
	out, _, err := runCleanupOn(t, client, cleanupOptions{yes: true})
	if exitCode(err) != ExitRefused || !strings.Contains(err.Error(), "helm uninstall it first, or pass --force") || out != "" || len(writes(client)) != 0 {
		t.Errorf("--yes: exit %d, %v, output %q, writes %v", exitCode(err), err, out, writes(client))
	}
	if _, _, err := runCleanupOn(t, client, cleanupOptions{yes: true, force: true}); err != nil {
		t.Errorf("--yes --force: %v", err)
	}
}

func TestCleanupCommandFlags(t *testing.T) {
	stdout, stderr, code := run(t, "cleanup", "extra")
	if code != ExitUsage || stdout != "" || !strings.Contains(stderr, "unknown command") {
		t.Errorf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}
