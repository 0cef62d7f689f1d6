package extender

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/testkit"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// publishedPod is a running pod as the published Neuron stack leaves it on node: its ids in
// AWS_NEURON_IDS, no kube-neuron.io/allocation record.
func publishedPod(name, node, res string, count int, ids string) *corev1.Pod {
	return testkit.MakePod().Name(name).Container("main", res, int64(count)).Node(node).Running().
		Annotation(allocation.AWSNeuronIDs, ids).Annotation(allocation.Allocated, "true").AllocTime(1).Obj()
}

// TestPublishedPodsCount: a node taken over from the published stack, with two running pods
// that have only its annotations and the published extension's stale usage maps on the node:
// new pods never get their devices or cores, and the node fills exactly up to what is free.
func TestPublishedPodsCount(t *testing.T) {
	n := testkit.MakeNode().Name("taken-over").InstanceType(trn1).Obj()
	n.Annotations = map[string]string{
		allocation.DevUsageMap:  "true,true,nonsense",
		allocation.CoreUsageMap: "",
	}
	e, client, ctx := startExtender(t, []runtime.Object{
		n,
		publishedPod("legacy-devices", "taken-over", topology.ResourceNeuron, 4, "0,1,2,3"),
		publishedPod("legacy-cores", "taken-over", topology.ResourceNeuronCore, 2, "9,8"),
	}...)
	// Devices 0-3 and device 4 (cores 8, 9) are held: 11 single devices are free.
	taken := map[int]string{0: "legacy-devices", 1: "legacy-devices", 2: "legacy-devices", 3: "legacy-devices", 4: "legacy-cores"}
	for i := range 12 {
		pod := createPod(t, ctx, client, testkit.MakePod().Name(fmt.Sprintf("new-%d", i)).Neuron(1).Obj())
		waitFor(t, 5*time.Second, "the informer to have the pod", func() bool {
			_, ok, _ := e.pods.GetStore().GetByKey(pod.Namespace + "/" + pod.Name)
			return ok
		})
		passed, failed, _ := e.Filter(ctx, pod, []string{"taken-over"})
		if i == 11 {
			if len(passed) != 0 || failed["taken-over"] == "" {
				t.Fatalf("pod %d: passed %v, failed %v; want the full node refused", i, passed, failed)
			}
			break
		}
		if len(passed) != 1 {
			t.Fatalf("pod %d: filter %v %v, want the node to pass", i, passed, failed)
		}
		if err := e.Bind(ctx, pod.Namespace, pod.Name, pod.UID, "taken-over"); err != nil {
			t.Fatal(err)
		}
		rec, err := allocation.RecordOf(getPod(t, ctx, client, pod.Namespace, pod.Name))
		if err != nil || rec == nil {
			t.Fatalf("record %v %v", rec, err)
		}
		d := rec.Containers[0].Devices[0]
		if holder, ok := taken[d]; ok {
			t.Fatalf("pod %d got device %d, held by %s", i, d, holder)
		}
		taken[d] = pod.Name
	}
	if got := len(taken); got != 16 {
		t.Errorf("%d devices held, want all 16", got)
	}
	if held := slices.Sorted(maps.Keys(taken)); !slices.Equal(held, seqInts(0, 16)) {
		t.Errorf("held devices %v", held)
	}
}

// TestMirrorMarksItsMaps: the mirror overwrites the published extension's stale maps with maps
// computed from pods (published pods included) and marks them as kube-neuron's.
func TestMirrorMarksItsMaps(t *testing.T) {
	n := testkit.MakeNode().Name("taken-over").InstanceType(inf2).Obj()
	n.Annotations = map[string]string{allocation.DevUsageMap: "stale", allocation.CoreUsageMap: "true"}
	e, client, ctx := startExtender(t, n, publishedPod("legacy", "taken-over", topology.ResourceNeuron, 2, "0,1"))
	node, err := e.nodes.Get("taken-over")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.mirrorNode(ctx, node); err != nil {
		t.Fatal(err)
	}
	got, err := client.CoreV1().Nodes().Get(ctx, "taken-over", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dev := "true,true,false,false,false,false,false,false,false,false,false,false"
	core := "true,true,true,true" + ",false,false,false,false,false,false,false,false,false,false,false,false,false,false,false,false,false,false,false,false"
	if got.Annotations[allocation.DevUsageMap] != dev || got.Annotations[allocation.CoreUsageMap] != core {
		t.Errorf("maps %q %q", got.Annotations[allocation.DevUsageMap], got.Annotations[allocation.CoreUsageMap])
	}
	if got.Annotations[allocation.UsageMapsMirror] != allocation.UsageMapsDigest(dev, core) {
		t.Errorf("marker %q, want the digest of the maps written", got.Annotations[allocation.UsageMapsMirror])
	}
}
