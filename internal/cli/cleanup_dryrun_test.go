package cli

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// serverDryRuns makes the fake API server answer dry-run patches and deletes as a real one does:
// accepted, nothing changed. It records the dry-run options of every write.
func serverDryRuns(client *fake.Clientset) *[][]string {
	var seen [][]string
	client.PrependReactor("patch", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		opts := a.(k8stesting.PatchActionImpl).GetPatchOptions()
		seen = append(seen, opts.DryRun)
		return len(opts.DryRun) > 0, nil, nil
	})
	client.PrependReactor("delete", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		opts := a.(k8stesting.DeleteActionImpl).GetDeleteOptions()
		seen = append(seen, opts.DryRun)
		return len(opts.DryRun) > 0, nil, nil
	})
	return &seen
}

func TestCleanupServerDryRun(t *testing.T) {
	client := fake.NewClientset(cleanupCluster()...)
	seen := serverDryRuns(client)
	before, _ := client.CoreV1().Nodes().Get(context.Background(), "ours", metav1.GetOptions{})
	out, _, err := runCleanupOn(t, client, cleanupOptions{dryRun: "server"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(out, "Server dry run: the API server accepted the removal of 7 node labels and annotations and 3 leases, and changed nothing. Run again with --yes to remove them.\n") ||
		!strings.Contains(out, "node ours: remove label kube-neuron.io/allocation-mode=device-plugin\n") {
		t.Errorf("output:\n%s", out)
	}
	// One patch (node ours) and three deletes, each a server-side dry run.
	if len(*seen) != 4 {
		t.Errorf("writes %v, want 4", *seen)
	}
	for _, dr := range *seen {
		if !reflect.DeepEqual(dr, []string{metav1.DryRunAll}) {
			t.Errorf("a write without dryRun=All: %v", dr)
		}
	}
	after, _ := client.CoreV1().Nodes().Get(context.Background(), "ours", metav1.GetOptions{})
	if !reflect.DeepEqual(before.ObjectMeta, after.ObjectMeta) {
		t.Error("the node changed")
	}

	// --dry-run=server with --yes is still a dry run; --dry-run=client with --yes sends nothing.
	if out, _, err := runCleanupOn(t, client, cleanupOptions{dryRun: "server", yes: true}); err != nil || !strings.Contains(out, "Server dry run") {
		t.Errorf("--yes --dry-run=server: %v\n%s", err, out)
	}
	n := len(*seen)
	if out, _, err := runCleanupOn(t, client, cleanupOptions{dryRun: "client", yes: true}); err != nil || !strings.Contains(out, "Dry run: 7 node labels") || len(*seen) != n {
		t.Errorf("--yes --dry-run=client: %v, %d writes\n%s", err, len(*seen)-n, out)
	}
}

func TestCleanupOutput(t *testing.T) {
	client := fake.NewClientset(cleanupCluster()...)
	out, _, err := runCleanupOn(t, client, cleanupOptions{output: "json"})
	if err != nil {
		t.Fatal(err)
	}
	var r CleanupReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if r.Mode != CleanupListed || len(r.Nodes) != 2 || len(r.Leases) != 3 {
		t.Fatalf("report %+v", r)
	}
	ours := r.Nodes[0]
	if ours.Name != "ours" || ours.RemoveLabels["kube-neuron.io/launched-by"] != "neuron-autoscaler" || len(ours.RemoveLabels) != 3 || len(ours.RemoveAnnotations) != 4 || len(ours.Keep) != 0 {
		t.Errorf("node ours: %+v", ours)
	}
	if theirs := r.Nodes[1]; theirs.Name != "theirs" || len(theirs.RemoveLabels)+len(theirs.RemoveAnnotations) != 0 || len(theirs.Keep) != 2 {
		t.Errorf("node theirs: %+v", theirs)
	}
	if r.Leases[0] != (CleanupLease{Namespace: "kube-system", Name: "kube-neuron-bind-ours"}) {
		t.Errorf("leases %+v", r.Leases)
	}

	out, _, err = runCleanupOn(t, client, cleanupOptions{output: "name", yes: true})
	want := "node/ours\nlease.coordination.k8s.io/kube-neuron-bind-ours\nlease.coordination.k8s.io/kube-neuron-bind-theirs\nlease.coordination.k8s.io/neuron-autoscaler\n"
	if err != nil || out != want {
		t.Errorf("-o name --yes: %v\n%s\nwant:\n%s", err, out, want)
	}
	out, _, err = runCleanupOn(t, client, cleanupOptions{output: "jsonpath={.mode} {.leases}"})
	if err != nil || out != "listed []" {
		t.Errorf("-o jsonpath after the removal: %v, %q", err, out)
	}
}

func TestCleanupFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"cleanup", "--dry-run=maybe"}, `--dry-run "maybe": use none, client or server`},
		{[]string{"cleanup", "-o", "wide"}, `output format "wide" is not supported`},
		{[]string{"cleanup", "-n", ""}, "--namespace is empty"},
	} {
		stdout, stderr, code := run(t, tc.args...)
		if code != ExitUsage || stdout != "" || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q, want %q", tc.args, code, stdout, stderr, tc.want)
		}
	}
	// --dry-run without a value is client, as kubectl reads it.
	cmd := NewCommand(nil, nil)
	cleanup, _, _ := cmd.Find([]string{"cleanup"})
	if f := cleanup.Flags().Lookup("dry-run"); f.NoOptDefVal != "client" || f.DefValue != "none" {
		t.Errorf("--dry-run: %+v", f)
	}
}

// TestCleanupFailureHasNoSummary: after a failed removal the table lists what was done and no
// summary that could claim nothing is left.
func TestCleanupFailureHasNoSummary(t *testing.T) {
	client := fake.NewClientset(cleanupCluster()...)
	client.PrependReactor("delete", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, "x", errors.New("no"))
	})
	out, _, err := runCleanupOn(t, client, cleanupOptions{yes: true})
	if exitCode(err) != ExitCluster || !strings.Contains(err.Error(), "cannot delete lease kube-system/kube-neuron-bind-ours") {
		t.Fatalf("err %v", err)
	}
	if !strings.Contains(out, "node ours: remove annotation kube-neuron.io/usage-maps-mirror\n") || strings.Contains(out, "Removed") || strings.Contains(out, "Nothing") {
		t.Errorf("output:\n%s", out)
	}
}
