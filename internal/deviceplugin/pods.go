package deviceplugin

import (
	"context"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	podresv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/deviceplugin/ledger"
)

// podView is what the ledger needs to know of a pod.
func podView(pod *corev1.Pod) ledger.Pod {
	r, err := allocation.RecordOf(pod)
	if err != nil {
		r = nil
	}
	phase := pod.Status.Phase
	v := ledger.Pod{
		Key: ledger.PodKey{Namespace: pod.Namespace, Name: pod.Name}, UID: pod.UID,
		Pending: phase == corev1.PodPending || phase == "", Running: phase == corev1.PodRunning,
		Finished: phase == corev1.PodSucceeded || phase == corev1.PodFailed, Deleting: pod.DeletionTimestamp != nil,
		Created: pod.CreationTimestamp.UnixNano(), AllocTime: allocation.AllocTimeOf(pod),
		Record: r, Published: allocation.FromPublishedStack(pod),
	}
	for _, c := range append(slices.Clone(pod.Spec.InitContainers), pod.Spec.Containers...) {
		for _, res := range Resources {
			if q, ok := c.Resources.Limits[corev1.ResourceName(res)]; ok {
				v.Asks = append(v.Asks, allocation.Request{Container: c.Name, Resource: res, Count: int(q.Value())})
			}
		}
	}
	return v
}

func podViews(pods []*corev1.Pod) []ledger.Pod {
	out := make([]ledger.Pod, len(pods))
	for i, pod := range pods {
		out[i] = podView(pod)
	}
	return out
}

// cachedPods are the node's pods as the informer has them.
func (p *Plugin) cachedPods() []*corev1.Pod {
	pods, _ := p.pods.List(labels.Everything())
	return pods
}

// listNodePods reads the node's pods from the API server, for when the informer may lag.
func (p *Plugin) listNodePods(ctx context.Context) ([]*corev1.Pod, error) {
	list, err := p.o.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + p.o.NodeName})
	if err != nil {
		return nil, err
	}
	pods := make([]*corev1.Pod, len(list.Items))
	for i := range list.Items {
		pods[i] = &list.Items[i]
	}
	return pods, nil
}

// lookup answers the ledger's questions from the API server and the kubelet, for one call.
type lookup struct {
	ctx context.Context
	p   *Plugin
	// podRes are the kubelet's PodResources, read at the first question that needs them.
	podRes []*podresv1.PodResources
	listed bool
}

var _ ledger.Lookup = (*lookup)(nil)

func (p *Plugin) lookup(ctx context.Context) *lookup { return &lookup{ctx: ctx, p: p} }

// ListPods reads the node's pods from the API server.
func (l *lookup) ListPods() ([]ledger.Pod, error) {
	pods, err := l.p.listNodePods(l.ctx)
	if err != nil {
		return nil, err
	}
	return podViews(pods), nil
}

// Gone reads the pod from the API server.
func (l *lookup) Gone(key ledger.PodKey, uid types.UID) bool {
	pod, err := l.p.o.Client.CoreV1().Pods(key.Namespace).Get(l.ctx, key.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return true
	case err != nil:
		return false
	}
	return pod.UID != uid || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// KubeletHolder reads the kubelet's PodResources (once per call).
func (l *lookup) KubeletHolder(resource string, ids []string) ledger.PodKey {
	if !l.listed {
		var err error
		l.podRes, err = l.p.kubeletPodResources(l.ctx)
		l.listed = true
		if err != nil {
			klog.FromContext(l.ctx).V(2).Info("The kubelet's PodResources API is not available to confirm a conflict", "err", err)
		}
	}
	want := ledger.KeyOf(resource, ids)
	for _, a := range admittedOf(l.podRes) {
		if ledger.KeyOf(a.Resource, a.IDs) == want {
			return a.Pod
		}
	}
	return ledger.PodKey{}
}
