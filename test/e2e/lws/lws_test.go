//go:build e2e

package lws

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/kube-neuron/kube-neuron/internal/lab"
	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/test/e2e/framework"
)

// groupKeyLabel is the label the pod webhook gives a group's leader (a hash of its namespace and
// name); the exclusive-topology affinity terms select on it.
const groupKeyLabel = "leaderworkerset.sigs.k8s.io/group-key"

// TestLeaderWorkerSet applies one group of a leader and a worker with the seed's
// exclusive-topology annotation and checks what the real controller and its webhooks did: the
// mutating webhook's defaults on the LeaderWorkerSet, the leader StatefulSet and pod with the
// group's labels and the pod affinity and anti-affinity on the UltraServer label, and, once the
// leader is scheduled, the worker pod with its labels and a node selector for the leader's
// UltraServer. The validating webhook rejects what only it checks.
func TestLeaderWorkerSet(t *testing.T) {
	ctx := framework.Context(t)
	ns := framework.CreateNamespace(t, ctx)
	client := framework.L.Client()
	dyn, err := dynamic.NewForConfig(framework.L.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}

	framework.Apply(t, ctx, "test/e2e/lws/testdata/leaderworkerset.yaml", ns)
	const name = "group"
	topologyKey := labels.UltraServerServerID4

	// The mutating webhook's defaults: only it sets spec.networkConfig (the CRD has no default).
	lws, err := dyn.Resource(lab.LWSResource).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p, _, _ := unstructured.NestedString(lws.Object, "spec", "networkConfig", "subdomainPolicy"); p != "Shared" {
		t.Errorf("spec.networkConfig.subdomainPolicy = %q, want the webhook's default Shared", p)
	}
	if p, _, _ := unstructured.NestedString(lws.Object, "spec", "leaderWorkerTemplate", "restartPolicy"); p != "RecreateGroupOnPodRestart" {
		t.Errorf("spec.leaderWorkerTemplate.restartPolicy = %q, want RecreateGroupOnPodRestart", p)
	}

	// The leader StatefulSet, owned by the LeaderWorkerSet.
	framework.WaitFor(t, ctx, 30*time.Second, "the leader StatefulSet "+name, func(ctx context.Context) (bool, string, error) {
		sts, err := client.AppsV1().StatefulSets(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, "not found", nil
		}
		if err != nil {
			return false, err.Error(), nil
		}
		for _, o := range sts.OwnerReferences {
			if o.Kind == "LeaderWorkerSet" && o.Name == name && o.UID == lws.GetUID() {
				return true, "", nil
			}
		}
		return false, fmt.Sprintf("owners %v", sts.OwnerReferences), nil
	})

	leader := framework.WaitForPod(t, ctx, ns, name+"-0", corev1.PodRunning, 60*time.Second)
	checkLabels(t, leader, map[string]string{
		lab.LWSNameLabel: name, lab.LWSGroupIndexLabel: "0", lab.LWSWorkerIndexLabel: "0", "role": "leader",
	})
	groupKey := leader.Labels[groupKeyLabel]
	if groupKey == "" {
		t.Fatalf("leader has no %s label (set by the pod webhook): %v", groupKeyLabel, leader.Labels)
	}
	checkExclusiveAffinity(t, leader, topologyKey, groupKey)

	leaderNode, err := client.CoreV1().Nodes().Get(ctx, leader.Spec.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	domain := leaderNode.Labels[topologyKey]
	if domain == "" {
		t.Fatalf("the leader's node %s has no %s label", leaderNode.Name, topologyKey)
	}

	// The worker: the controller creates its StatefulSet once the leader is scheduled, with a node
	// selector for the leader's UltraServer.
	worker := framework.WaitForPod(t, ctx, ns, name+"-0-1", corev1.PodRunning, 60*time.Second)
	checkLabels(t, worker, map[string]string{
		lab.LWSNameLabel: name, lab.LWSGroupIndexLabel: "0", lab.LWSWorkerIndexLabel: "1", "role": "worker",
		groupKeyLabel: groupKey,
	})
	if got := worker.Spec.NodeSelector[topologyKey]; got != domain {
		t.Errorf("worker node selector %s=%q, want the leader's %q", topologyKey, got, domain)
	}
	workerNode, err := client.CoreV1().Nodes().Get(ctx, worker.Spec.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if workerNode.Labels[topologyKey] != domain {
		t.Errorf("worker on node %s of %s %q, the leader on %s of %q", workerNode.Name, topologyKey, workerNode.Labels[topologyKey], leaderNode.Name, domain)
	}

	// The validating webhook: a subgroup-exclusive-topology annotation needs a subGroupPolicy,
	// which the CRD's schema cannot say.
	bad := lws.DeepCopy()
	bad.SetName("invalid")
	bad.SetResourceVersion("")
	bad.SetUID("")
	bad.SetManagedFields(nil)
	bad.SetAnnotations(map[string]string{"leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology": topologyKey})
	unstructured.RemoveNestedField(bad.Object, "status")
	_, err = dyn.Resource(lab.LWSResource).Namespace(ns).Create(ctx, bad, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "vleaderworkerset.kb.io") || !strings.Contains(err.Error(), "subGroupSize") {
		t.Errorf("creating a LeaderWorkerSet with subgroup-exclusive-topology and no subGroupPolicy: %v, want the validating webhook vleaderworkerset.kb.io to deny it", err)
	}
}

func checkLabels(t *testing.T, p *corev1.Pod, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if p.Labels[k] != v {
			t.Errorf("pod %s: label %s=%q, want %q (labels %v)", p.Name, k, p.Labels[k], v, p.Labels)
		}
	}
}

// checkExclusiveAffinity checks the terms LWS's pod webhook gives a leader for exclusive
// placement: a required pod affinity to its own group (group-key In [key]) and a required pod
// anti-affinity to every other group (group-key Exists, NotIn [key]), both on the topology key.
func checkExclusiveAffinity(t *testing.T, p *corev1.Pod, topologyKey, groupKey string) {
	t.Helper()
	a := p.Spec.Affinity
	if a == nil || a.PodAffinity == nil || a.PodAntiAffinity == nil {
		t.Fatalf("pod %s has no pod affinity and anti-affinity: %+v", p.Name, a)
	}
	has := func(terms []corev1.PodAffinityTerm, want []metav1.LabelSelectorRequirement) bool {
		for _, term := range terms {
			if term.TopologyKey != topologyKey || term.LabelSelector == nil {
				continue
			}
			if fmt.Sprint(term.LabelSelector.MatchExpressions) == fmt.Sprint(want) {
				return true
			}
		}
		return false
	}
	affinity := []metav1.LabelSelectorRequirement{{Key: groupKeyLabel, Operator: metav1.LabelSelectorOpIn, Values: []string{groupKey}}}
	if !has(a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution, affinity) {
		t.Errorf("pod %s: no required pod affinity %v on %s: %+v", p.Name, affinity, topologyKey, a.PodAffinity)
	}
	anti := []metav1.LabelSelectorRequirement{
		{Key: groupKeyLabel, Operator: metav1.LabelSelectorOpExists},
		{Key: groupKeyLabel, Operator: metav1.LabelSelectorOpNotIn, Values: []string{groupKey}},
	}
	if !has(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution, anti) {
		t.Errorf("pod %s: no required pod anti-affinity %v on %s: %+v", p.Name, anti, topologyKey, a.PodAntiAffinity)
	}
}
