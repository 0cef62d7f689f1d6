package cli

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// publishedPod is a running pod as the published Neuron stack leaves it.
func publishedPod(name, node, res string, count int64, ids string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "legacy", Name: name, Annotations: map[string]string{
			allocation.AWSNeuronIDs: ids, allocation.AllocTime: "1", allocation.Allocated: "true",
		}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{corev1.ResourceName(res): *resource.NewQuantity(count, resource.DecimalSI)},
		}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

// TestNodesCountPublishedPods: pods the published stack placed show as holders; a count that
// does not match its request is counted whole, with a warning; the published extension's usage
// maps on the node change nothing.
func TestNodesCountPublishedPods(t *testing.T) {
	n := neuronNode("inf2-a", "inf2.48xlarge", labels.AllocationModeDevicePlugin, 12, 24)
	n.Annotations = map[string]string{allocation.DevUsageMap: "true,true,true,true,true,true,true,true,true,true,true,true", allocation.CoreUsageMap: "garbage"}
	stdout, stderr, err := runNodesOn(t, []runtime.Object{
		n,
		publishedPod("two-devices", "inf2-a", topology.ResourceNeuron, 2, "0,1"),
		publishedPod("cores", "inf2-a", topology.ResourceNeuronCore, 1, "6,7"),
	}, nodesOptions{output: "json"})
	if err != nil {
		t.Fatal(err)
	}
	var got []NodeReport
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatal(err)
	}
	if want := []int{0, 1, 3}; len(got) != 1 || !reflect.DeepEqual(got[0].Devices.Used, want) || len(got[0].Holders) != 2 {
		t.Fatalf("report %+v, want devices 0, 1, 3 used by two holders", got)
	}
	if !strings.Contains(stderr, `warning: pod legacy/cores: AWS_NEURON_IDS "6,7" lists 2 ids but the pod requests 1`) {
		t.Errorf("stderr %q", stderr)
	}
}
