package local

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/kube-neuron/kube-neuron/internal/autoscaler"
	"github.com/kube-neuron/kube-neuron/internal/autoscaler/plan"
	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

func TestLaunchListDelete(t *testing.T) {
	ctx := t.Context()
	other := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "someone-elses", Labels: map[string]string{autoscaler.LaunchedByLabel: autoscaler.LaunchedByValue}}}
	client := fake.NewClientset(other)
	p := New(Options{Client: client})
	it, _ := topology.DefaultCatalog().Get("trn1.32xlarge")
	req := autoscaler.NodeRequest{
		Name: autoscaler.NodeName(it.Name, []string{"ml/a"}), Type: it.Name, Mode: labels.AllocationModeDevicePlugin,
		Labels:      plan.NewNodeLabels(it, labels.AllocationModeDevicePlugin),
		Annotations: map[string]string{autoscaler.PlannedPodsAnnotation: "ml/a"},
		Taints:      []corev1.Taint{plan.NeuronTaint()},
	}
	inst, err := p.Launch(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if !inst.Launching || inst.ProviderID != ProviderIDPrefix+req.Name || inst.Type != it.Name {
		t.Errorf("instance %+v", inst)
	}
	n, err := client.CoreV1().Nodes().Get(ctx, req.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range req.Labels {
		if n.Labels[k] != v {
			t.Errorf("label %s=%q, want %q", k, n.Labels[k], v)
		}
	}
	if n.Labels[autoscaler.LaunchedByLabel] != autoscaler.LaunchedByValue || n.Annotations[autoscaler.PlannedPodsAnnotation] != "ml/a" {
		t.Errorf("labels %v annotations %v", n.Labels, n.Annotations)
	}
	var neuronTaint, notReady bool
	for _, tn := range n.Spec.Taints {
		neuronTaint = neuronTaint || (tn.Key == labels.NeuronTaintKey && tn.Value == "true" && tn.Effect == corev1.TaintEffectNoSchedule)
		notReady = notReady || tn.Key == corev1.TaintNodeNotReady
	}
	if !neuronTaint || !notReady {
		t.Errorf("taints %v: want the Neuron taint and not-ready until the node registers", n.Spec.Taints)
	}
	if q := n.Status.Capacity[topology.ResourceNeuron]; q.Value() != 16 {
		t.Errorf("capacity %v", n.Status.Capacity)
	}
	if q := n.Status.Capacity[topology.ResourceNeuronCore]; q.Value() != 32 {
		t.Errorf("neuroncore capacity %s, want 32", q.String())
	}

	// Launching the same name again finds the node.
	again, err := p.Launch(ctx, req)
	if err != nil || again.Name != inst.Name {
		t.Fatalf("second launch: %+v, %v", again, err)
	}
	list, _ := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if len(list.Items) != 2 {
		t.Errorf("%d nodes after launching one twice", len(list.Items))
	}
	insts, err := p.Instances(ctx)
	if err != nil || len(insts) != 1 || insts[0].Name != req.Name {
		t.Fatalf("instances %+v, %v (a node with the label but another provider ID is not ours)", insts, err)
	}
	// Ready: no longer launching.
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if insts, _ := p.Instances(ctx); insts[0].Launching {
		t.Error("a Ready node is still launching")
	}
	if err := p.Delete(ctx, req.Name); err != nil {
		t.Fatal(err)
	}
	if err := p.Delete(ctx, req.Name); err != nil {
		t.Errorf("deleting a deleted node: %v", err)
	}
	if insts, _ := p.Instances(ctx); len(insts) != 0 {
		t.Errorf("instances after delete: %+v", insts)
	}

	// A DRA node offers no Neuron extended resources.
	dra := req
	dra.Name, dra.Mode = "dra-node", labels.AllocationModeDRA
	if _, err := p.Launch(ctx, dra); err != nil {
		t.Fatal(err)
	}
	d, _ := client.CoreV1().Nodes().Get(ctx, "dra-node", metav1.GetOptions{})
	if _, ok := d.Status.Capacity[topology.ResourceNeuron]; ok {
		t.Errorf("DRA node capacity %v has Neuron resources", d.Status.Capacity)
	}
}

func TestSetPlannedPods(t *testing.T) {
	ctx := t.Context()
	client := fake.NewClientset()
	p := New(Options{Client: client})
	req := autoscaler.NodeRequest{
		Name: "neuron-trn1-32xlarge-0123456789", Type: "trn1.32xlarge", Mode: labels.AllocationModeDevicePlugin,
		Annotations: map[string]string{autoscaler.PlannedPodsAnnotation: "ml/a", "team": "ml"},
	}
	if _, err := p.Launch(ctx, req); err != nil {
		t.Fatal(err)
	}
	planned := func() (string, bool) {
		t.Helper()
		n, err := client.CoreV1().Nodes().Get(ctx, req.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n.Annotations["team"] != "ml" {
			t.Errorf("annotations %v: the other annotation is gone", n.Annotations)
		}
		v, ok := n.Annotations[autoscaler.PlannedPodsAnnotation]
		return v, ok
	}
	for range 2 { // the same list again is no error
		client.ClearActions()
		if err := p.SetPlannedPods(ctx, req.Name, []string{"ml/c", "ml/a", "ml/b", "ml/c"}); err != nil {
			t.Fatal(err)
		}
		if v, _ := planned(); v != "ml/a,ml/b,ml/c" {
			t.Errorf("planned pods %q, want ml/a,ml/b,ml/c (sorted, once each)", v)
		}
		// One merge patch of the annotation, nothing else.
		var patches []string
		for _, a := range client.Actions() {
			if pa, ok := a.(clienttesting.PatchAction); ok {
				if pa.GetPatchType() != types.MergePatchType || pa.GetSubresource() != "" {
					t.Errorf("patch %s of %q", pa.GetPatchType(), pa.GetSubresource())
				}
				patches = append(patches, string(pa.GetPatch()))
			}
		}
		if want := `{"metadata":{"annotations":{"kube-neuron.io/planned-pods":"ml/a,ml/b,ml/c"}}}`; len(patches) != 1 || patches[0] != want {
			t.Errorf("patches %q, want %s", patches, want)
		}
	}
	insts, err := p.Instances(ctx)
	if err != nil || len(insts) != 1 || insts[0].Annotations[autoscaler.PlannedPodsAnnotation] != "ml/a,ml/b,ml/c" {
		t.Errorf("Instances %+v, %v: want the recorded planned pods", insts, err)
	}
	if err := p.SetPlannedPods(ctx, req.Name, nil); err != nil {
		t.Fatal(err)
	}
	if v, ok := planned(); ok {
		t.Errorf("planned pods %q after recording none, want no annotation", v)
	}

	err = p.SetPlannedPods(ctx, "neuron-gone", []string{"ml/a"})
	if err == nil || !strings.Contains(err.Error(), "recording the planned pods of node neuron-gone: the node does not exist") {
		t.Errorf("unknown node: %v", err)
	}
	if _, getErr := client.CoreV1().Nodes().Get(ctx, "neuron-gone", metav1.GetOptions{}); getErr == nil {
		t.Error("recording planned pods created a node")
	}
}

// TestLaunchUltraServer: an UltraServer's Nodes are created together with its identity, or none
// of them.
func TestLaunchUltraServer(t *testing.T) {
	ctx := t.Context()
	client := fake.NewClientset()
	p := New(Options{Client: client})
	it, _ := topology.DefaultCatalog().Get("trn2u.48xlarge")
	var reqs []autoscaler.NodeRequest
	for k := range 4 {
		np := plan.NodePlan{InstanceType: it, Mode: labels.AllocationModeDRA, UltraServer: "0123456789abcdef", UltraServerNode: k}
		reqs = append(reqs, autoscaler.NodeRequest{Name: autoscaler.UltraServerNodeName(it.Name, "0123456789abcdef", k), Type: it.Name, Mode: np.Mode, Labels: np.Labels()})
	}
	ins, err := p.LaunchUltraServer(ctx, "0123456789abcdef", reqs)
	if err != nil || len(ins) != 4 {
		t.Fatalf("LaunchUltraServer: %d instances, %v", len(ins), err)
	}
	for k, r := range reqs {
		n, err := client.CoreV1().Nodes().Get(ctx, r.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n.Labels[labels.UltraServerServerID4] != "0123456789abcdef" || n.Labels[labels.UltraServerNodeID4] != string(rune('0'+k)) {
			t.Errorf("node %s labels %v, want UltraServer 0123456789abcdef node %d", r.Name, n.Labels, k)
		}
	}
	bad := append([]autoscaler.NodeRequest{}, reqs...)
	for k := range bad {
		bad[k].Name += "-b"
	}
	bad[3].Type = "no-such-type"
	if _, err := p.LaunchUltraServer(ctx, "fedcba9876543210", bad); err == nil || !strings.Contains(err.Error(), "UltraServer fedcba9876543210") {
		t.Fatalf("LaunchUltraServer with a bad node: %v, want an error naming the UltraServer", err)
	}
	nodes, _ := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if len(nodes.Items) != 4 {
		t.Errorf("%d nodes after a failed UltraServer launch, want only the first UltraServer's 4", len(nodes.Items))
	}
}
