package deviceplugin

import (
	"testing"
	"time"

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
	holdings, _ := p.computeHoldings(nil, nil, true)
	if len(holdings) != 1 || holdings[0].Pod != "ns/eight" {
		t.Fatalf("within the grace the answer holds, naming its pod: %+v", holdings)
	}
	e := p.served[topology.ResourceNeuron+"|0,1,2,3,4,5,6,7"]
	e.at = time.Now().Add(-servedGrace - time.Second)
	p.served[topology.ResourceNeuron+"|0,1,2,3,4,5,6,7"] = e
	if holdings, _ := p.computeHoldings(nil, nil, true); len(holdings) != 0 {
		t.Fatalf("the answer's pod is gone: it must hold nothing, got %+v", holdings)
	}
	if len(p.served) != 0 {
		t.Errorf("the answer is still remembered: %+v", p.served)
	}
}
