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

// TestAnswerForAPodThatIsGoneHoldsNothing: an Allocate answer the kubelet's PodResources never
// showed (the pod was admitted and torn down between two refreshes) stopped holding its devices
// only after 30 seconds, refusing every pod placed on them meanwhile. Once its pod is gone from
// the informer (after a short grace) it holds nothing; until then it holds, and it names the pod
// so that a conflict with it can be confirmed with the API server.
func TestAnswerForAPodThatIsGoneHoldsNothing(t *testing.T) {
	p, _, _ := testPlugin(t)
	hw, err := p.shape.DeviceAllocation([]int{0, 1, 2, 3, 4, 5, 6, 7})
	if err != nil {
		t.Fatal(err)
	}
	p.served[topology.ResourceNeuron+"|0,1,2,3,4,5,6,7"] = servedEntry{hw: hw, resource: topology.ResourceNeuron, kubelet: []string{"0", "1", "2", "3", "4", "5", "6", "7"},
		podUID: "uid-eight", pod: "ns/eight", container: "app", at: time.Now()}
	holdings, _ := p.computeHoldings(nil, nil, true, true)
	if len(holdings) != 1 || holdings[0].Pod != "ns/eight" {
		t.Fatalf("within the grace the answer holds, naming its pod: %+v", holdings)
	}
	e := p.served[topology.ResourceNeuron+"|0,1,2,3,4,5,6,7"]
	e.at = time.Now().Add(-servedGrace - time.Second)
	p.served[topology.ResourceNeuron+"|0,1,2,3,4,5,6,7"] = e
	if holdings, _ := p.computeHoldings(nil, nil, true, true); len(holdings) != 0 {
		t.Fatalf("the answer's pod is gone: it must hold nothing, got %+v", holdings)
	}
	if len(p.served) != 0 {
		t.Errorf("the answer is still remembered: %+v", p.served)
	}
}

// TestDeletedPodReleasedByTheKubeletIsNotWithdrawn: a pod being deleted whose containers the
// kubelet's PodResources no longer show has had its ids released; its record must not withdraw
// them until the informer drops the pod, or the pod placed there next is refused at admission
// ("requested number of devices unavailable", seen in test/e2e/migration). A running pod's
// record the PodResources do not show (yet) still holds.
func TestDeletedPodReleasedByTheKubeletIsNotWithdrawn(t *testing.T) {
	served := func(name string, device int) *corev1.Pod {
		pod := testPod(name).neuron(1).obj()
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
