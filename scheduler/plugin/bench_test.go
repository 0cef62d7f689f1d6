package plugin

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/noderesources"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/testkit"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// cyclePlugin is the part of a filter and score plugin one pod's cycle runs.
type cyclePlugin interface {
	fwk.PreFilterPlugin
	fwk.FilterPlugin
	fwk.PreScorePlugin
	fwk.ScorePlugin
}

// BenchmarkCycle is what the plugin adds to one pod's scheduling cycle on the fleet of
// make bench-scheduler (500 nodes, half trn1.32xlarge, half inf2.48xlarge, a few cores in use on
// each): PreFilter, Filter on every node, PreScore and Score on every node (one after another:
// the CPU time; the scheduler runs the nodes on 16 goroutines), for a pod asking for one core. The nodes did not change
// since the previous pod of the same shape (steady state: the scheduler changes one node per
// pod). The baseline, timed in the same loop, is the same cycle of the scheduler's own
// NodeResourcesFit, which every pod passes through: ratio-neuron/fit is NeuronTopology's time
// over it.
func BenchmarkCycle(b *testing.B) {
	const n = 500
	var nodes []*corev1.Node
	var pods []*corev1.Pod
	for i := range n {
		name := fmt.Sprintf("node-%03d", i)
		typ := "trn1.32xlarge"
		if i%2 == 1 {
			typ = "inf2.48xlarge"
		}
		node := testkit.MakeNode().Name(name).InstanceType(typ).DevicePlugin().Obj()
		node.Status.Allocatable = node.Status.Capacity.DeepCopy()
		node.Status.Allocatable[corev1.ResourceCPU] = resource.MustParse("128")
		node.Status.Allocatable[corev1.ResourceMemory] = resource.MustParse("512Gi")
		node.Status.Allocatable[corev1.ResourcePods] = resource.MustParse("110")
		nodes = append(nodes, node)
		for c := range i % 5 {
			rec := &allocation.Record{Node: name, Containers: []allocation.Container{{Name: "main", Resource: topology.ResourceNeuronCore, Devices: []int{c / 2}, Cores: []int{c}}}}
			pods = append(pods, testkit.MakePod().Name(fmt.Sprintf("%s-%d", name, c)).NeuronCores(1).Node(name).Running().Record(rec).Obj())
		}
	}
	h := &fakeHandle{snapshot: cache.NewSnapshot(pods, nodes)}
	neuron := newPlugin(h, topology.BestFit, topology.DefaultCatalog())
	fitArgs := &config.NodeResourcesFitArgs{ScoringStrategy: &config.ScoringStrategy{
		Type:      config.LeastAllocated,
		Resources: []config.ResourceSpec{{Name: "cpu", Weight: 1}, {Name: "memory", Weight: 1}},
	}}
	fit, err := noderesources.NewFit(context.Background(), fitArgs, h, feature.Features{})
	if err != nil {
		b.Fatal(err)
	}
	nis, err := h.snapshot.NodeInfos().List()
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	pod := testkit.MakePod().Name("one").NeuronCores(1).Obj()
	run := func(p cyclePlugin) time.Duration {
		start := time.Now()
		state := framework.NewCycleState()
		if _, st := p.PreFilter(ctx, state, pod, nis); !st.IsSuccess() {
			b.Fatal(st)
		}
		for _, ni := range nis {
			if st := p.Filter(ctx, state, pod, ni); !st.IsSuccess() {
				b.Fatal(st)
			}
		}
		if st := p.PreScore(ctx, state, pod, nis); !st.IsSuccess() {
			b.Fatal(st)
		}
		for _, ni := range nis {
			if _, st := p.Score(ctx, state, pod, ni); !st.IsSuccess() {
				b.Fatal(st)
			}
		}
		return time.Since(start)
	}
	plugins := []cyclePlugin{neuron, fit.(cyclePlugin)}
	for _, p := range plugins {
		run(p) // NeuronTopology derives every node's usage once
	}
	var took [2]time.Duration
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		for j := range plugins { // alternating which runs first
			k := (i + j) % 2
			took[k] += run(plugins[k])
		}
	}
	b.ReportMetric(float64(took[0].Nanoseconds())/float64(b.N), "ns/pod-neuron")
	b.ReportMetric(float64(took[1].Nanoseconds())/float64(b.N), "ns/pod-fit")
	b.ReportMetric(took[0].Seconds()/took[1].Seconds(), "ratio-neuron/fit")
	b.ReportMetric(0, "ns/op")
}
