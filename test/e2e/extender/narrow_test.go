//go:build e2e

package extender

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/lab"
	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/topology"
	"github.com/kube-neuron/kube-neuron/test/e2e/framework"
)

// The nodes of TestNarrowedPodRefusedElsewhereRunsOnEveryNode, of instance types no other test
// of the package asks for. For one core, NeuronTopology ranks the single-device inf2.8xlarge
// (a free segment of one device) above the inf2.24xlarge (a ring of six).
const (
	narrowSmall = "narrow-small" // inf2.8xlarge
	narrowLarge = "narrow-large" // inf2.24xlarge
)

// narrowFallbackConfig is my-scheduler's profile (lab.PluginSchedulerConfig) under the scheduler
// name name, narrowing to one candidate, with the NodeAffinity plugin's addedAffinity holding
// every pod of the profile to node: a filter of the profile that the candidates' checks do not
// repeat.
func narrowFallbackConfig(t *testing.T, name, node string) []byte {
	t.Helper()
	var cfg map[string]any
	if err := yaml.Unmarshal(lab.PluginSchedulerConfig("best-fit"), &cfg); err != nil {
		t.Fatal(err)
	}
	profile := cfg["profiles"].([]any)[0].(map[string]any)
	profile["schedulerName"] = name
	pcs := profile["pluginConfig"].([]any)
	for _, pc := range pcs {
		if pc := pc.(map[string]any); pc["name"] == "NeuronTopology" {
			pc["args"].(map[string]any)["candidateNodes"] = 1
		}
	}
	profile["pluginConfig"] = append(pcs, map[string]any{"name": "NodeAffinity", "args": map[string]any{
		"addedAffinity": map[string]any{"requiredDuringSchedulingIgnoredDuringExecution": map[string]any{
			"nodeSelectorTerms": []any{map[string]any{"matchExpressions": []any{map[string]any{
				"key": labels.Hostname, "operator": "In", "values": []any{node},
			}}}},
		}},
	}})
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestNarrowedPodRefusedElsewhereRunsOnEveryNode runs neuron-kube-scheduler with a profile whose
// NodeAffinity addedAffinity allows only narrow-large, and narrowing to one candidate: the pod,
// which may run on either node, is narrowed to narrow-small (ranked best), which the profile's
// filter refuses; PostFilter says so, and the pod is tried again on every node and lands on
// narrow-large.
func TestNarrowedPodRefusedElsewhereRunsOnEveryNode(t *testing.T) {
	ctx := framework.Context(t)
	ns := framework.CreateNamespace(t, ctx)
	if err := framework.EnsureComponents(lab.ComponentKubeScheduler); err != nil {
		t.Fatal(err)
	}
	const sched = "narrow-fallback"
	cp := framework.L.ControlPlane()
	if err := cp.StartSchedulerBinary(ctx, sched, framework.L.ComponentPath(lab.ComponentKubeScheduler), narrowFallbackConfig(t, sched, narrowLarge)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cp.StopScheduler(sched); err != nil {
			t.Error(err)
		}
	})

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "refused-first", Namespace: ns},
		Spec: corev1.PodSpec{
			SchedulerName: sched,
			Tolerations:   []corev1.Toleration{{Key: labels.NeuronTaintKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: labels.Hostname, Operator: corev1.NodeSelectorOpIn, Values: []string{narrowSmall, narrowLarge}}}}},
			}}},
			Containers: []corev1.Container{{Name: "app", Image: "my-neuron-image", Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{corev1.ResourceName(topology.ResourceNeuronCore): resource.MustParse("1")},
			}}},
		},
	}
	start := time.Now()
	if _, err := framework.L.Client().CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var placed time.Duration
	framework.WaitFor(t, ctx, 30*time.Second, "the pod bound with its record", func(ctx context.Context) (bool, string, error) {
		p, err := framework.L.Client().CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		if p.Spec.NodeName == "" {
			return false, framework.DescribePod(ctx, p), nil
		}
		placed = time.Since(start)
		rec, err := allocation.RecordOf(p)
		if err != nil || rec == nil || rec.Node != narrowLarge {
			return false, "", fmt.Errorf("bound, but the record is %+v (err %v), want one on %s: %s", rec, err, narrowLarge, framework.DescribePod(ctx, p))
		}
		return true, "", nil
	})

	p, err := framework.L.Client().CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const want = "the nodes NeuronTopology ranked best for the pod (candidateNodes 1) did not pass the other filters; the pod is tried again on every node"
	if desc := framework.DescribePod(ctx, p); !strings.Contains(desc, want) {
		t.Errorf("no FailedScheduling event saying %q: %s", want, desc)
	}
	m, err := framework.ScrapeSchedulerMetrics(ctx, sched)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, s := range m["scheduler_neuron_topology_narrowing_total"] {
		got[s.Labels["result"]] += s.Value
	}
	if got["narrowed"] != 1 || got["retried"] != 1 || got["sampled"] != 1 {
		t.Errorf("scheduler_neuron_topology_narrowing_total %v: want narrowed 1, retried 1, sampled 1 (the retry on every node)", got)
	}
	t.Logf("placed on %s %v after its creation", narrowLarge, placed.Round(time.Millisecond))
}
