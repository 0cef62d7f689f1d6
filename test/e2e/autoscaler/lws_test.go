//go:build e2e

package autoscaler

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/kube-neuron/kube-neuron/internal/autoscaler"
	"github.com/kube-neuron/kube-neuron/internal/lab"
	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/test/e2e/framework"
)

// TestSeedLeaderWorkerSetGetsTwoUltraServers: the seed's own example, run by the real
// LeaderWorkerSet controller and webhooks: 2 groups of 4 with exclusive topology on
// ultraserver-server-id-4, every pod claiming its node's neuron_node device in UltraServer mode 4,
// on an empty fleet. The controller creates only the leaders at first (it creates a group's
// workers once its leader is scheduled, pinned to the leader's UltraServer); the autoscaler plans
// each group from its leader (leaderworkerset.sigs.k8s.io/size) and launches two UltraServers of
// four nodes, and all 8 pods run, each group on its own UltraServer, one pod per node.
func TestSeedLeaderWorkerSetGetsTwoUltraServers(t *testing.T) {
	ctx, ns := setup(t)
	framework.EnsureDeviceClass(t, ctx)
	createDaemonSet(t, ctx, "neuron-dra-driver-kubelet-plugin")
	c := framework.L.Client()
	dyn, err := dynamic.NewForConfig(framework.L.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // before setup's clean-up: the controller would recreate the pods
		_ = dyn.Resource(lab.LWSResource).Namespace(ns).Delete(context.Background(), "vllm", metav1.DeleteOptions{})
	})
	framework.Apply(t, ctx, "examples/dra/us-4-node-config.yaml", ns)
	_ = c.AppsV1().StatefulSets(ns).Delete(ctx, "vllm", metav1.DeleteOptions{}) // the file's stand-in: only its template is wanted
	framework.WaitFor(t, ctx, time.Minute, "the stand-in StatefulSet's pods to go", func(ctx context.Context) (bool, string, error) {
		pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(pods.Items) == 0, fmt.Sprintf("%d pods", len(pods.Items)), err
	})
	framework.Apply(t, ctx, "test/e2e/autoscaler/testdata/lws-us-4-node.yaml", ns)

	groups := map[string]map[string]bool{} // group index -> UltraServers its pods run on
	nodes := map[string]string{}           // node -> pod
	for g := range 2 {
		for w := range 4 {
			name := fmt.Sprintf("vllm-%d", g)
			if w > 0 {
				name = fmt.Sprintf("vllm-%d-%d", g, w)
			}
			p := framework.WaitForPod(t, ctx, ns, name, corev1.PodRunning, 4*time.Minute)
			node, err := c.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if node.Labels[labels.InstanceType] != "trn2u.48xlarge" || node.Labels[autoscaler.LaunchedByLabel] != autoscaler.LaunchedByValue {
				t.Errorf("%s runs on %s (%s), want a trn2u.48xlarge the autoscaler launched", name, node.Name, node.Labels[labels.InstanceType])
			}
			if other, taken := nodes[node.Name]; taken {
				t.Errorf("%s and %s share node %s", name, other, node.Name)
			}
			nodes[node.Name] = name
			if groups[p.Labels[lab.LWSGroupIndexLabel]] == nil {
				groups[p.Labels[lab.LWSGroupIndexLabel]] = map[string]bool{}
			}
			groups[p.Labels[lab.LWSGroupIndexLabel]][node.Labels[labels.UltraServerServerID4]] = true
			t.Logf("%s (group %s): runs on %s, UltraServer %s node %s", name, p.Labels[lab.LWSGroupIndexLabel], node.Name,
				node.Labels[labels.UltraServerServerID4], node.Labels[labels.UltraServerNodeID4])
		}
	}
	if len(groups) != 2 || len(groups["0"]) != 1 || len(groups["1"]) != 1 || fmt.Sprint(groups["0"]) == fmt.Sprint(groups["1"]) {
		t.Errorf("groups on UltraServers %v, want each group on one UltraServer of its own", groups)
	}
	if fleet := launched(t, ctx); len(fleet) != 8 {
		t.Errorf("launched %d nodes (%s), want the 8 of two UltraServers", len(fleet), strings.Join(names(fleet), ", "))
	}
	checkUltraServerSlices(t, ctx)
}
