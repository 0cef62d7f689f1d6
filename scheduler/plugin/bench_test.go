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

// benchFleet is the fleet of make bench-scheduler (500 nodes, half trn1.32xlarge, half
// inf2.48xlarge, a few cores in use on each) in a snapshot, with NeuronTopology and the
// scheduler's own NodeResourcesFit (LeastAllocated, as in the default profile) on it.
func benchFleet(b *testing.B) (neuron *Plugin, fit cyclePlugin, nis []fwk.NodeInfo) {
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
	neuron = newPlugin(h, topology.BestFit, topology.DefaultCatalog())
	fitArgs := &config.NodeResourcesFitArgs{ScoringStrategy: &config.ScoringStrategy{
		Type:      config.LeastAllocated,
		Resources: []config.ResourceSpec{{Name: "cpu", Weight: 1}, {Name: "memory", Weight: 1}},
	}}
	f, err := noderesources.NewFit(context.Background(), fitArgs, h, feature.Features{})
	if err != nil {
		b.Fatal(err)
	}
	if nis, err = h.snapshot.NodeInfos().List(); err != nil {
		b.Fatal(err)
	}
	return neuron, f.(cyclePlugin), nis
}

// runCycle runs one pod's PreFilter, Filter on the nodes PreFilter leaves (all of nodes when it
// does not narrow), PreScore and Score on those (one after another: the CPU time; the scheduler
// runs the nodes on 16 goroutines), and returns how long that took.
func runCycle(b *testing.B, p cyclePlugin, pod *corev1.Pod, nodes []fwk.NodeInfo) time.Duration {
	ctx := context.Background()
	start := time.Now()
	state := framework.NewCycleState()
	res, st := p.PreFilter(ctx, state, pod, nodes)
	if !st.IsSuccess() {
		b.Fatal(st)
	}
	if !res.AllNodes() {
		narrowed := make([]fwk.NodeInfo, 0, len(res.NodeNames))
		for _, ni := range nodes {
			if res.NodeNames.Has(ni.Node().Name) {
				narrowed = append(narrowed, ni)
			}
		}
		nodes = narrowed
	}
	for _, ni := range nodes {
		if st := p.Filter(ctx, state, pod, ni); !st.IsSuccess() {
			b.Fatal(st)
		}
	}
	if st := p.PreScore(ctx, state, pod, nodes); !st.IsSuccess() {
		b.Fatal(st)
	}
	for _, ni := range nodes {
		if _, st := p.Score(ctx, state, pod, ni); !st.IsSuccess() {
			b.Fatal(st)
		}
	}
	return time.Since(start)
}

// compareCycles times a cycle of NeuronTopology on neuronNodes against one of NodeResourcesFit,
// which every pod passes through, on fitNodes, alternating which runs first, and reports both
// and ratio-neuron/fit.
func compareCycles(b *testing.B, neuron *Plugin, fit cyclePlugin, neuronNodes, fitNodes []fwk.NodeInfo) {
	pod := testkit.MakePod().Name("one").NeuronCores(1).Obj()
	runCycle(b, neuron, pod, neuronNodes) // NeuronTopology derives every node's usage once
	runCycle(b, fit, pod, fitNodes)
	var took [2]time.Duration
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if i%2 == 0 {
			took[0] += runCycle(b, neuron, pod, neuronNodes)
			took[1] += runCycle(b, fit, pod, fitNodes)
		} else {
			took[1] += runCycle(b, fit, pod, fitNodes)
			took[0] += runCycle(b, neuron, pod, neuronNodes)
		}
	}
	b.ReportMetric(float64(took[0].Nanoseconds())/float64(b.N), "ns/pod-neuron")
	b.ReportMetric(float64(took[1].Nanoseconds())/float64(b.N), "ns/pod-fit")
	b.ReportMetric(took[0].Seconds()/took[1].Seconds(), "ratio-neuron/fit")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkCycle is what the plugin adds to the cycle of a pod it does not narrow (candidateNodes
// 0), for a pod asking for one core, on every node of the bench fleet: PreFilter, Filter and Score
// on each. The nodes did not change since the previous pod of the same shape (steady state: the
// scheduler changes one node per pod). The baseline, timed in the same loop, is the same cycle of
// the scheduler's own NodeResourcesFit: ratio-neuron/fit is NeuronTopology's time over it.
func BenchmarkCycle(b *testing.B) {
	neuron, fit, nis := benchFleet(b)
	neuron.candidateNodes = 0
	compareCycles(b, neuron, fit, nis, nis)
}

// BenchmarkNarrowedCycle is the plugin's part of a narrowed pod's cycle on the bench fleet:
// PreFilter ranks all 500 nodes and hands on 10 (DefaultCandidateNodes), then Filter and Score on
// those. The baseline is NodeResourcesFit on the 100 nodes kube-scheduler checks per pod when it
// samples (my-scheduler's percentageOfNodesToScore 10, at least 100). ratio-neuron/fit is what
// ranking every node costs against one default plugin's work on the sample; narrowing spares
// all of the profile's plugins (a dozen filters, eight scores, and the framework's per-node
// bookkeeping) 90 of those 100 nodes.
func BenchmarkNarrowedCycle(b *testing.B) {
	neuron, fit, nis := benchFleet(b)
	compareCycles(b, neuron, fit, nis, nis[:100])
}
