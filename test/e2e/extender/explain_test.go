//go:build e2e

package extender

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kube-neuron/kube-neuron/internal/cli"
	"github.com/kube-neuron/kube-neuron/internal/topology"
	"github.com/kube-neuron/kube-neuron/test/e2e/framework"
)

// explain runs kubectl-neuron explain pod in this process against the lab, as a user runs it.
func explain(t *testing.T, ns, pod string, output string) (string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := cli.Main([]string{"explain", "pod", pod, "-n", ns, "--kubeconfig", framework.L.Kubeconfig(), "-o", output}, &out, &errOut)
	if code != cli.ExitOK {
		return errOut.String(), code
	}
	return out.String(), code
}

// explainJSON waits until explain -o json satisfies done and returns that answer.
func explainJSON(t *testing.T, ctx context.Context, ns, pod, what string, done func(e cli.Explanation) (bool, string)) cli.Explanation {
	t.Helper()
	var got cli.Explanation
	framework.WaitFor(t, ctx, 60*time.Second, what, func(ctx context.Context) (bool, string, error) {
		out, code := explain(t, ns, pod, "json")
		if code != cli.ExitOK {
			return false, fmt.Sprintf("exit %d: %s", code, out), nil
		}
		var e cli.Explanation
		if err := json.Unmarshal([]byte(out), &e); err != nil {
			return false, "", fmt.Errorf("explain -o json: %v: %s", err, out)
		}
		ok, status := done(e)
		got = e
		return ok, status + "\n" + out, nil
	})
	return got
}

func hasEvent(e cli.Explanation, reason, text string) bool {
	return slices.ContainsFunc(e.Events, func(ev cli.ExplainEvent) bool { return ev.Reason == reason && strings.Contains(ev.Message, text) })
}

// TestExplain: kubectl-neuron explain names fragmentation on a trn1.32xlarge and the pods
// whose release would free a connected set, and explains a 7-device request with the counts
// the type accepts.
func TestExplain(t *testing.T) {
	ctx := framework.Context(t)
	ns := framework.CreateNamespace(t, ctx)
	client := framework.L.Client()
	const node = "trn1-a"

	t.Run("fragmentation names the holders", func(t *testing.T) {
		// Fill the node with four 4-device blocks, then free two that are not one half: 8
		// devices free, no 8 connected (the halves are 0-7 and 8-15).
		blocks := map[int]string{} // first device of a block -> pod
		for i := range 4 {
			create(t, ctx, ns, fmt.Sprintf("block-%d", i), "trn1.32xlarge", topology.ResourceNeuron, 4, node)
		}
		for i := range 4 {
			name := fmt.Sprintf("block-%d", i)
			r := checkServed(t, ctx, ns, name)
			if r.Node != node {
				t.Fatalf("%s went to %s, not %s", name, r.Node, node)
			}
			blocks[r.Containers[0].Devices[0]] = name
		}
		if len(blocks) != 4 {
			t.Fatalf("blocks %v: want four distinct aligned blocks", blocks)
		}
		for _, first := range []int{0, 8} {
			if err := client.CoreV1().Pods(ns).Delete(ctx, blocks[first], metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
				t.Fatal(err)
			}
		}
		framework.WaitFor(t, ctx, 30*time.Second, "the pods of blocks 0-3 and 8-11 to be gone", func(ctx context.Context) (bool, string, error) {
			for _, first := range []int{0, 8} {
				if _, err := client.CoreV1().Pods(ns).Get(ctx, blocks[first], metav1.GetOptions{}); !apierrors.IsNotFound(err) {
					return false, blocks[first] + " still there", nil
				}
			}
			return true, "", nil
		})
		create(t, ctx, ns, "eight", "trn1.32xlarge", topology.ResourceNeuron, 8, node)

		// Equal holders: the one with the lower name is the answer.
		holder, frees := blocks[4], []int{0, 1, 2, 3, 4, 5, 6, 7}
		if blocks[12] < holder {
			holder, frees = blocks[12], []int{8, 9, 10, 11, 12, 13, 14, 15}
		}
		e := explainJSON(t, ctx, ns, "eight", "explain to name the fragmentation on "+node+" and the scheduler's event", func(e cli.Explanation) (bool, string) {
			if len(e.Nodes) != 1 || e.Nodes[0].Name != node {
				return false, fmt.Sprintf("nodes %+v", e.Nodes)
			}
			return e.Nodes[0].Verdict == cli.VerdictFragmented && hasEvent(e, "FailedScheduling", ""), e.Nodes[0].Verdict
		})
		n := e.Nodes[0]
		if !slices.Equal(n.FreeDevices, []int{0, 1, 2, 3, 8, 9, 10, 11}) {
			t.Errorf("free devices %v, want 0-3, 8-11", n.FreeDevices)
		}
		if n.Move == nil || len(n.Move.Pods) != 1 || n.Move.Pods[0].Name != holder || n.Move.Pods[0].Namespace != ns || !slices.Equal(n.Move.Frees, frees) {
			t.Errorf("move %+v: want pod %s/%s, freeing %v", n.Move, ns, holder, frees)
		}
		want := fmt.Sprintf("8 devices free but no 8 connected; freeing pod %s/%s (devices %s) would make 8 connected devices %s free",
			ns, holder, topology.FormatList(n.Move.Pods[0].Devices), topology.FormatList(frees))
		if n.Message != want {
			t.Errorf("message %q, want %q", n.Message, want)
		}
		if !slices.ContainsFunc(e.WhatToDo, func(s string) bool { return strings.Contains(s, "Fragmentation on "+node+": moving "+ns+"/"+holder) }) {
			t.Errorf("what to do %q does not name %s", e.WhatToDo, holder)
		}
		table, code := explain(t, ns, "eight", "table")
		if code != cli.ExitOK || !strings.Contains(table, "What to do:") || !strings.Contains(table, want) {
			t.Errorf("explain (table): exit %d:\n%s", code, table)
		}
		t.Logf("kubectl-neuron explain pod eight -n %s:\n%s", ns, table)
	})

	t.Run("7 devices lists the valid counts", func(t *testing.T) {
		framework.Apply(t, ctx, example("trn1-seven-devices"), ns)
		seven := "Instance type trn1.32xlarge does not support requests for device: 7. Please request a different number of devices."
		e := explainJSON(t, ctx, ns, "trn1-seven-devices", "explain to show my-scheduler's warning and the valid counts", func(e cli.Explanation) (bool, string) {
			return hasEvent(e, "FailedScheduling", seven) || hasEvent(e, "UnsupportedNeuronRequest", seven), fmt.Sprintf("%d events", len(e.Events))
		})
		if len(e.ValidCounts) != 1 || e.ValidCounts[0].InstanceType != "trn1.32xlarge" || !slices.Equal(e.ValidCounts[0].Devices, []int{1, 4, 8, 16}) || e.ValidCounts[0].Accepts {
			t.Errorf("valid counts %+v, want trn1.32xlarge 1, 4, 8, 16 not accepting 7", e.ValidCounts)
		}
		if len(e.Nodes) == 0 {
			t.Error("no candidate node")
		}
		for _, n := range e.Nodes {
			if n.InstanceType != "trn1.32xlarge" || n.Verdict != cli.VerdictUnsupportedCount || !strings.Contains(n.Message, seven) {
				t.Errorf("node %s (%s): %s %q, want UnsupportedCount with the Neuron message", n.Name, n.InstanceType, n.Verdict, n.Message)
			}
		}
		if !slices.ContainsFunc(e.WhatToDo, func(s string) bool { return strings.Contains(s, "trn1.32xlarge: 1, 4, 8 or 16 devices") }) {
			t.Errorf("what to do %q lacks the valid counts", e.WhatToDo)
		}
		if e.Autoscaler.Launch != "" || !slices.ContainsFunc(e.Autoscaler.Problems, func(s string) bool { return strings.Contains(s, "not 7") }) {
			t.Errorf("autoscaler %+v: want no launch, and why", e.Autoscaler)
		}
		table, _ := explain(t, ns, "trn1-seven-devices", "table")
		t.Logf("kubectl-neuron explain pod trn1-seven-devices -n %s:\n%s", ns, table)
	})

	t.Run("unknown pod", func(t *testing.T) {
		out, code := explain(t, ns, "nope", "table")
		if code != cli.ExitNotFound || !strings.Contains(out, `pod "nope" not found`) {
			t.Errorf("exit %d: %s", code, out)
		}
	})
}
