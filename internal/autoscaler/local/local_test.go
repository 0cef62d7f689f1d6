package local

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kube-neuron/kube-neuron/internal/autoscaler"
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
		Labels:      autoscaler.NewNodeLabels(it, labels.AllocationModeDevicePlugin),
		Annotations: map[string]string{autoscaler.PlannedPodsAnnotation: "ml/a"},
		Taints:      []corev1.Taint{autoscaler.NeuronTaint()},
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
