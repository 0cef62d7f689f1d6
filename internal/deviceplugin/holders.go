package deviceplugin

import (
	"cmp"
	"slices"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kube-neuron/kube-neuron/internal/deviceplugin/ledger"
	"github.com/kube-neuron/kube-neuron/internal/nodemetrics"
)

// holdingHolders turns the ledger's holdings into the node metrics' holders (Cores: node-wide
// NeuronCore ids, ascending), one per container of a pod: a container
// that holds hardware through several resources (or several holdings) holds their union.
//
// Every holding marks its hardware used, including a reservation (the scheduler extender's
// record for a container the kubelet has not admitted yet: the hardware is promised to that
// pod, and no other pod can get it). A holding names its pod when the ledger knows the pod, or
// when its pod UID is one of the node's pods (pods: the informer's pods by UID, for answers
// given since the last refresh); otherwise its hardware is held unnamed (namespace, pod and
// container ""), and all such holdings make one holder.
func holdingHolders(holdings []ledger.Holding, pods map[types.UID]ledger.PodKey) []nodemetrics.Holder {
	type key struct{ ns, pod, container string }
	held := map[key][]int{}
	for _, h := range holdings {
		pod := h.Pod
		if pod.IsZero() && h.PodUID != "" {
			pod = pods[h.PodUID]
		}
		k := key{}
		if !pod.IsZero() {
			k = key{pod.Namespace, pod.Name, h.Container}
		}
		held[k] = append(held[k], h.Hardware.Cores...)
	}
	out := make([]nodemetrics.Holder, 0, len(held))
	for k, cores := range held {
		if len(cores) == 0 {
			continue
		}
		slices.Sort(cores)
		out = append(out, nodemetrics.Holder{Namespace: k.ns, Pod: k.pod, Container: k.container, Cores: slices.Compact(cores)})
	}
	slices.SortFunc(out, func(a, b nodemetrics.Holder) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Pod, b.Pod), cmp.Compare(a.Container, b.Container))
	})
	return out
}
