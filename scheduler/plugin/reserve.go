package plugin

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/utils/ptr"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// Reserve chooses the pod's devices on the node and counts them from now on: the scheduler
// assumed the pod on the node before this, so the next cycle's snapshot holds the pod, and its
// usage the devices chosen here. The pods nominated to the node keep the room Filter set aside
// for them.
func (p *Plugin) Reserve(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, nodeName string) *fwk.Status {
	p.unsupportedMsgs.Delete(pod.UID)
	s, ok := readState(state)
	if !ok {
		return nil
	}
	ni, err := p.h.SnapshotSharedLister().NodeInfos().Get(nodeName)
	if err != nil {
		return fwk.AsStatus(fmt.Errorf("node %s is not in the scheduler's snapshot: %w", nodeName, err))
	}
	v, _, err := p.view(ctx, ni)
	if err != nil {
		return fwk.NewStatus(fwk.Unschedulable, err.Error())
	}
	var containers []allocation.Container
	var held []string
	if nominated := p.nominatedTo(nodeName, pod); len(nominated) > 0 {
		containers, _, held, err = allocation.Arrange(v.usage, p.policy, pod, s.reqs, nominated)
	} else {
		containers, _, err = allocation.Plan(v.usage, s.reqs, p.policy)
	}
	if err != nil {
		if len(held) > 0 {
			return fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("pod %s/%s no longer fits node %s beside the pods nominated to it (%s): %v", pod.Namespace, pod.Name, nodeName, strings.Join(held, ", "), err))
		}
		return fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("pod %s/%s no longer fits node %s: %v", pod.Namespace, pod.Name, nodeName, err))
	}
	p.reserved.put(pod.UID, &allocation.Record{Node: nodeName, Containers: containers})
	return nil
}

// Unreserve forgets the devices Reserve chose: the pod was not bound.
func (p *Plugin) Unreserve(_ context.Context, _ fwk.CycleState, pod *corev1.Pod, _ string) {
	p.reserved.forget(pod.UID)
}

// Bind binds a pod with Neuron requests with one Binding that carries its allocation record:
// the API server merges the annotations into the pod in the same write that sets its node, so
// the record and the binding land together or not at all. Other pods are left to DefaultBinder.
func (p *Plugin) Bind(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, nodeName string) *fwk.Status {
	if _, neuron := readState(state); !neuron {
		return fwk.NewStatus(fwk.Skip)
	}
	rec := p.reserved.get(pod.UID)
	if rec == nil || rec.Node != nodeName {
		// Never let DefaultBinder bind a Neuron pod without a record: the device plugin would
		// have nothing to serve it.
		return fwk.AsStatus(fmt.Errorf("no Neuron devices are reserved for pod %s/%s on node %s (the pod was deleted, or its reservation was undone); the scheduler will try it again", pod.Namespace, pod.Name, nodeName))
	}
	binding := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, Annotations: rec.Annotations()},
		Target:     corev1.ObjectReference{Kind: "Node", Name: nodeName},
	}
	binding.Annotations[allocation.AllocTime] = strconv.FormatInt(time.Now().UnixNano(), 10)
	err := p.h.ClientSet().CoreV1().Pods(pod.Namespace).Bind(ctx, binding, metav1.CreateOptions{FieldManager: "neuron-kube-scheduler"})
	if err != nil {
		return fwk.AsStatus(fmt.Errorf("binding pod %s/%s to node %s: %w", pod.Namespace, pod.Name, nodeName, err))
	}
	logger := klog.FromContext(ctx)
	for _, c := range rec.Containers {
		logger.V(2).Info("Bound", "pod", klog.KObj(pod), "node", nodeName, "container", c.Name, "resource", c.Resource, "devices", topology.JoinIDs(c.Devices), "cores", topology.JoinIDs(c.Cores))
	}
	return nil
}

// nominatedTo returns the pods nominated to the node that hold room against pod: priority at
// least the pod's, not the pod itself, not bound, and holding room (holdsRoom).
func (p *Plugin) nominatedTo(node string, pod *corev1.Pod) []*corev1.Pod {
	if p.h == nil {
		return nil
	}
	prio := ptr.Deref(pod.Spec.Priority, 0)
	var out []*corev1.Pod
	for _, pi := range p.h.NominatedPodsForNode(node) {
		q := pi.GetPod()
		if q.UID == pod.UID || q.Spec.NodeName != "" || ptr.Deref(q.Spec.Priority, 0) < prio || !p.holdsRoom(q) {
			continue
		}
		out = append(out, q)
	}
	return out
}
