package deviceplugin

import (
	"maps"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"

	"github.com/kube-neuron/kube-neuron/internal/deviceplugin/ledger"
	"github.com/kube-neuron/kube-neuron/internal/neuron"
	"github.com/kube-neuron/kube-neuron/internal/nodemetrics"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// TestNodeMetrics: the plugin's registry serves the node metrics, read from a simulated sysfs
// tree through the production reader, with the ledger's holdings as holders, next to the
// plugin's own metrics.
func TestNodeMetrics(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	it, err := topology.DefaultCatalog().Get("trn1.32xlarge")
	if err != nil {
		t.Fatal(err)
	}
	sim, err := neuron.Simulate(neuron.SimOptions{Root: t.TempDir(), InstanceType: it})
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(ctx, Options{NodeName: node, SysfsRoot: sim.Root(), Client: fake.NewClientset(), MetricsSampleInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := indexer.Add(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "answered", UID: "uid-answered"}}); err != nil {
		t.Fatal(err)
	}
	p.pods = corelisters.NewPodLister(indexer)
	dev3, _ := p.shape.DeviceAllocation([]int{3})
	core9, _ := p.shape.CoreAllocation([]int{9})
	p.ledger.SetHoldings([]ledger.Holding{
		{Pod: ledger.PodKey{Namespace: "ns", Name: "p"}, Container: "app", Resource: topology.ResourceNeuron, Hardware: dev3, Admitted: true},
		{PodUID: "uid-answered", Who: "ns/answered container side", Container: "side", Resource: topology.ResourceNeuronCore, Hardware: core9},
	})
	stop := p.startNodeMetrics(ctx)
	defer stop()
	deadline := time.Now().Add(10 * time.Second)
	for testutil.CollectAndCount(p.metrics.registry, nodemetrics.CoreMemoryUsed) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no core series 10 s after the first sample")
		}
		time.Sleep(10 * time.Millisecond)
	}

	states := map[string]float64{}
	for _, s := range gather(t, p.metrics.registry, nodemetrics.NodeDevices) {
		if s.labels["node"] != node || s.labels["instance_type"] != "trn1.32xlarge" {
			t.Errorf("series %v: want node %s, instance_type trn1.32xlarge", s.labels, node)
		}
		states[s.labels["state"]] = s.value
	}
	if want := map[string]float64{"free": 14, "used": 2, "unhealthy": 0}; !maps.Equal(states, want) {
		t.Errorf("devices by state %v, want %v", states, want)
	}
	holders := map[string]string{} // neuron_core -> namespace/pod/container of its series
	for _, s := range gather(t, p.metrics.registry, nodemetrics.CoreMemoryUsed) {
		holders[s.labels["neuron_core"]] += s.labels["namespace"] + "/" + s.labels["pod"] + "/" + s.labels["container"]
	}
	for core, want := range map[string]string{"6": "ns/p/app", "7": "ns/p/app", "9": "ns/answered/side", "8": "//", "0": "//"} {
		if holders[core] != want {
			t.Errorf("core %s: holders %q, want %q", core, holders[core], want)
		}
	}
	if n := testutil.CollectAndCount(p.metrics.registry, "neuron_device_plugin_unhealthy_devices"); n != 1 {
		t.Errorf("the plugin's own metrics: %d series of neuron_device_plugin_unhealthy_devices, want 1", n)
	}
}

type gathered struct {
	labels map[string]string
	value  float64
}

// gather returns the series of one metric (gauges and counters) in the registry.
func gather(t *testing.T, reg prometheus.Gatherer, name string) []gathered {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []gathered
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			g := gathered{labels: map[string]string{}, value: m.GetGauge().GetValue() + m.GetCounter().GetValue()}
			for _, lp := range m.GetLabel() {
				g.labels[lp.GetName()] = lp.GetValue()
			}
			out = append(out, g)
		}
	}
	return out
}
