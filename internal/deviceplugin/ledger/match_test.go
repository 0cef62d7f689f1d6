package ledger

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

func TestMatch(t *testing.T) {
	c := func(pod string, alloc, created int64, name, res string, n int, served bool) Candidate {
		ctr := allocation.Container{Name: name, Resource: res, Served: served}
		for i := range n {
			if res == topology.ResourceNeuronCore {
				ctr.Cores = append(ctr.Cores, i)
			} else {
				ctr.Devices = append(ctr.Devices, i)
			}
		}
		ns, name, _ := strings.Cut(pod, "/")
		return Candidate{Pod: PodKey{ns, name}, PodUID: types.UID(pod), AllocTime: alloc, Created: created, Container: ctr}
	}
	cands := []Candidate{
		c("ns/late", 300, 1, "app", topology.ResourceNeuron, 4, false),
		c("ns/early", 100, 3, "app", topology.ResourceNeuron, 4, false),
		c("ns/served", 50, 1, "app", topology.ResourceNeuron, 4, true),
		c("ns/cores", 10, 1, "app", topology.ResourceNeuronCore, 4, false),
		c("ns/small", 10, 1, "app", topology.ResourceNeuron, 1, false),
	}
	got, ok := Match(cands, topology.ResourceNeuron, 4, nil)
	if !ok || got.Pod.String() != "ns/early" {
		t.Errorf("got %v %v, want the oldest NEURON_ALLOC_TIME unserved 4-device entry (ns/early)", got.Pod, ok)
	}
	got, ok = Match(cands, topology.ResourceNeuron, 4, map[ContainerRef]bool{{UID: "ns/early", Container: "app"}: true})
	if !ok || got.Pod.String() != "ns/late" {
		t.Errorf("with ns/early in flight: got %v", got.Pod)
	}
	if _, ok := Match(cands, topology.ResourceNeuronDevice, 4, nil); ok {
		t.Error("a neurondevice call matched a neuron entry")
	}
	if _, ok := Match(cands, topology.ResourceNeuron, 2, nil); ok {
		t.Error("a 2-device call matched a 4-device entry")
	}
	if got, _ := Match(cands, topology.ResourceNeuronCore, 4, nil); got.Pod.String() != "ns/cores" {
		t.Errorf("cores: %v", got.Pod)
	}
}
