package deviceplugin

import (
	"maps"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// TestDeletedPodReleasedByTheKubeletIsNotWithdrawn: a pod being deleted whose containers the
// kubelet's PodResources no longer show has had its ids released; its record must not withdraw
// them until the informer drops the pod, or the pod placed there next is refused at admission
// ("requested number of devices unavailable", seen in test/e2e/migration). A running pod's
// record the PodResources do not show (yet) still holds.
func TestDeletedPodReleasedByTheKubeletIsNotWithdrawn(t *testing.T) {
	served := func(name string, device int) *corev1.Pod {
		pod := neuronPod(name, 1).Obj()
		r := &allocation.Record{Node: node, Containers: []allocation.Container{{Name: "app", Resource: topology.ResourceNeuron,
			Devices: []int{device}, Cores: []int{2 * device, 2*device + 1}, Served: true}}}
		maps.Copy(pod.Annotations, r.Annotations())
		pod.Annotations[allocation.AllocTime] = "1"
		return pod
	}
	gone := served("gone", 3)
	gone.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	p, _, _ := testPlugin(t, gone, served("running", 5))
	refresh(t, p)
	if w := withdrawn(p, topology.ResourceNeuron); slices.Contains(w, "3") || !slices.Contains(w, "5") {
		t.Errorf("neuron pool withdrawn %v: want device 5 (running) and not device 3 (released)", w)
	}
	if w := withdrawn(p, topology.ResourceNeuronCore); slices.Contains(w, "6") || !slices.Contains(w, "10") {
		t.Errorf("neuroncore pool withdrawn %v: want cores 10-11 and not 6-7", w)
	}
}
