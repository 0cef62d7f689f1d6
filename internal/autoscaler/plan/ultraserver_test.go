package plan

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-neuron/kube-neuron/internal/labels"
)

// us4Pods are n replicas of the seed's us-4-node-config StatefulSet: each claims the neuron_node
// device of a trn2u.48xlarge in UltraServer mode 4, requires pod affinity with the others on the
// UltraServer's id and anti-affinity on the hostname.
func us4Pods(t *testing.T, n int) []PodDemand {
	spec := seedTemplate(t, "us-4-node-config.yaml")
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "vllm-us4"}}
	var out []PodDemand
	for i := range n {
		d := claimPod(fmt.Sprintf("vllm-%d", i), spec)
		d.Pod.Labels["app"] = "vllm-us4"
		d.Pod.Spec.Affinity = &corev1.Affinity{
			PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				TopologyKey: labels.UltraServerServerID4, LabelSelector: sel}}},
			PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				TopologyKey: corev1.LabelHostname, LabelSelector: sel}}},
		}
		out = append(out, d)
	}
	return out
}

// unitsOf summarises the plan's UltraServers: per id, the pods on each of its nodes.
func unitsOf(s ScaleUp) map[string][]int {
	out := map[string][]int{}
	for _, n := range s.Nodes {
		if n.UltraServer == "" {
			continue
		}
		for len(out[n.UltraServer]) <= n.UltraServerNode {
			out[n.UltraServer] = append(out[n.UltraServer], 0)
		}
		out[n.UltraServer][n.UltraServerNode] += len(n.Pods)
	}
	return out
}

// TestPlanUltraServerUnits: trn2u capacity is launched as whole UltraServers of four nodes with
// one identity, never as unrelated nodes; the seed's four replicas get one UltraServer, a node
// each.
func TestPlanUltraServerUnits(t *testing.T) {
	t.Run("the seed's 4 replicas: one UltraServer", func(t *testing.T) {
		pending := us4Pods(t, 4)
		up, decisions := Plan(pending, nil, Options{})
		for _, d := range decisions {
			if d.Warning() {
				t.Fatalf("%s: %s", d.Pod, d.Message)
			}
		}
		units := unitsOf(up)
		if len(units) != 1 || len(up.New()) != 4 {
			t.Fatalf("UltraServers %v, %d new nodes; want one of 4 nodes", units, len(up.New()))
		}
		for id, per := range units {
			if fmt.Sprint(per) != "[1 1 1 1]" || len(id) != 16 {
				t.Errorf("UltraServer %q takes %v pods per node, want one per node", id, per)
			}
		}
		if !strings.Contains(decisions[0].Message, "a new UltraServer") {
			t.Errorf("message %q", decisions[0].Message)
		}
	})
	t.Run("five replicas: the group never fits", func(t *testing.T) {
		pending := us4Pods(t, 5)
		up, decisions := Plan(pending, nil, Options{})
		refused := 0
		for _, d := range decisions {
			if d.Warning() {
				refused++
				if !strings.Contains(d.Message, "must share one UltraServer") {
					t.Errorf("message %q", d.Message)
				}
			}
		}
		if refused != 1 || len(unitsOf(up)) != 1 {
			t.Errorf("%d refused, UltraServers %v; want one refused and one UltraServer", refused, unitsOf(up))
		}
	})
	t.Run("a node device claim alone: a whole UltraServer, shared by such pods", func(t *testing.T) {
		spec := seedTemplate(t, "us-4-node-config.yaml")
		spec.Devices.Config = nil
		pending := claimPods("solo", 5, spec)
		up, decisions := Plan(pending, nil, Options{})
		for _, d := range decisions {
			if d.Warning() {
				t.Fatalf("%s: %s", d.Pod, d.Message)
			}
		}
		units := unitsOf(up)
		if len(units) != 2 || len(up.New()) != 8 {
			t.Errorf("UltraServers %v, %d new nodes; want 2 UltraServers of 4 nodes", units, len(up.New()))
		}
	})
	t.Run("trn2u only for pods that need it", func(t *testing.T) {
		up, _ := Plan(claimPods("p", 2, seedTemplate(t, "xl-trn2.yaml")), nil, Options{})
		if len(unitsOf(up)) != 0 {
			t.Errorf("UltraServers %v for pods a trn2.48xlarge serves", unitsOf(up))
		}
	})
	t.Run("a LeaderWorkerSet leader: the group's UltraServer; its workers then fill it", func(t *testing.T) {
		lws := func(name string) PodDemand {
			d := us4Pods(t, 1)[0]
			d.Pod.Name, d.Pod.UID = name, "uid-"+d.Pod.UID
			d.Pod.Labels[lwsNameLabel], d.Pod.Labels[lwsGroupIndexLabel] = "vllm", "0"
			d.Pod.Annotations[lwsExclusiveTopology], d.Pod.Annotations[lwsSizeAnnotation] = labels.UltraServerServerID4, "4"
			d.Pod.Spec.Affinity = nil
			return d
		}
		leader := lws("vllm-0")
		up, decisions := Plan([]PodDemand{leader}, nil, Options{})
		if decisions[0].Warning() || len(up.New()) != 4 {
			t.Fatalf("leader: %s; %d new nodes, want an UltraServer of 4", decisions[0].Message, len(up.New()))
		}
		var launching []NodeOption
		for k, n := range up.Nodes {
			lo := NodeOption{Name: fmt.Sprintf("us-node-%d", k), InstanceType: n.InstanceType.Name, Mode: n.Mode, UltraServer: n.UltraServer}
			if len(n.Pods) > 0 {
				lo.Bound = []PodDemand{leader}
			}
			launching = append(launching, lo)
		}
		workers := []PodDemand{lws("vllm-0-1"), lws("vllm-0-2"), lws("vllm-0-3")}
		up, decisions = Plan(workers, launching, Options{})
		if len(up.New()) != 0 {
			t.Errorf("%d new nodes for the workers, want none: the leader's UltraServer takes them", len(up.New()))
		}
		for _, d := range decisions {
			if d.Warning() || !d.Launching {
				t.Errorf("%s: %s", d.Pod, d.Message)
			}
		}
	})
}

// TestCheckPinnedToAnUltraServer: a LeaderWorkerSet worker, pinned by its node selector to its
// leader's UltraServer, is told that no new node can be that UltraServer's.
func TestCheckPinnedToAnUltraServer(t *testing.T) {
	d := us4Pods(t, 1)[0]
	d.Pod.Spec.Affinity = nil
	d.Pod.Spec.NodeSelector = map[string]string{labels.UltraServerServerID4: "0123456789abcdef"}
	problems := messages(Check(d, allDaemonSets))
	if len(problems) != 1 || !strings.Contains(problems[0], "pins it to the nodes of one UltraServer") {
		t.Errorf("Check: %q", problems)
	}
}
