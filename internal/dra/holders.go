package dra

import (
	"cmp"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-neuron/kube-neuron/internal/nodemetrics"
)

// claimKey names a ResourceClaim.
type claimKey struct{ Namespace, Name string }

// claimHolders joins the prepared claims with the pods of the node into the node metrics'
// holders: every container whose resources.claims name a pod claim that resolves to a prepared
// claim holds that claim's devices, whole (a claim gives whole devices; an LNC config changes
// how the runtime numbers their cores, not which devices the pod has). A claim shared by
// several pods, or several containers, yields one holder for each. A pod that lists the claim
// but gives it to no container holds it with container "". A prepared claim that no pod uses
// (its pod is gone but the kubelet has not unprepared it yet, or the informer has not seen the
// pod) still holds its devices, unnamed; all such claims make one holder. Pods that have
// finished hold nothing: the kubelet unprepares their claims.
func claimHolders(cp *Checkpoint, pods []*corev1.Pod) []nodemetrics.Holder {
	devices := map[claimKey][]int{}
	for _, pc := range cp.Claims {
		k := claimKey{pc.Namespace, pc.Name}
		devices[k] = append(devices[k], pc.Indexes()...)
	}
	used := map[claimKey]bool{}
	var out []nodemetrics.Holder
	for _, pod := range pods {
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		byPodClaim := podClaims(pod) // pod claim name -> ResourceClaim name
		// held: the devices each container holds (a container may use several claims).
		held := map[string][]int{}
		var order []string
		add := func(container string, cs []int) {
			if _, ok := held[container]; !ok {
				order = append(order, container)
			}
			held[container] = append(held[container], cs...)
		}
		given := map[string]bool{} // pod claims some container uses
		for _, c := range allContainers(pod) {
			for _, rc := range c.Resources.Claims {
				name, ok := byPodClaim[rc.Name]
				if !ok {
					continue
				}
				k := claimKey{pod.Namespace, name}
				cs, prepared := devices[k]
				if !prepared {
					continue
				}
				used[k], given[rc.Name] = true, true
				add(c.Name, cs)
			}
		}
		for podClaim, name := range byPodClaim {
			k := claimKey{pod.Namespace, name}
			if cs, prepared := devices[k]; prepared && !given[podClaim] {
				used[k] = true
				add("", cs)
			}
		}
		for _, c := range order {
			cs := slices.Sorted(slices.Values(held[c]))
			out = append(out, nodemetrics.Holder{Namespace: pod.Namespace, Pod: pod.Name, Container: c, Devices: slices.Compact(cs)})
		}
	}
	var unnamed []int // one holder for all: series are keyed by the holder's names
	for k, cs := range devices {
		if !used[k] {
			unnamed = append(unnamed, cs...)
		}
	}
	if len(unnamed) > 0 {
		slices.Sort(unnamed)
		out = append(out, nodemetrics.Holder{Devices: slices.Compact(unnamed)})
	}
	slices.SortFunc(out, func(a, b nodemetrics.Holder) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Pod, b.Pod), cmp.Compare(a.Container, b.Container))
	})
	return out
}

// podClaims maps each of the pod's claims to the ResourceClaim it resolved to: the name the
// pod gives, or for a template the claim the controller made (in the pod's status). A template
// claim not made yet maps to nothing.
func podClaims(pod *corev1.Pod) map[string]string {
	out := map[string]string{}
	for _, rc := range pod.Spec.ResourceClaims {
		if rc.ResourceClaimName != nil {
			out[rc.Name] = *rc.ResourceClaimName
		}
	}
	for _, s := range pod.Status.ResourceClaimStatuses {
		if s.ResourceClaimName != nil {
			if _, direct := out[s.Name]; !direct {
				out[s.Name] = *s.ResourceClaimName
			}
		}
	}
	return out
}

// allContainers returns the pod's init containers (sidecars use claims too) and containers.
func allContainers(pod *corev1.Pod) []corev1.Container {
	return append(slices.Clone(pod.Spec.InitContainers), pod.Spec.Containers...)
}
