package deviceplugin

import (
	"context"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	podresv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/deviceplugin/ledger"
)

// refresh recomputes the holdings, fixes allocation records that disagree with what the kubelet
// runs, and pushes new health views to the kubelet.
func (p *Plugin) refresh(ctx context.Context) {
	logger := klog.FromContext(ctx)
	podRes, podResErr := p.kubeletPodResources(ctx)
	if podResErr != nil {
		logger.V(4).Info("The kubelet's PodResources API is not available", "err", podResErr)
	}
	pods := p.cachedPods()
	p.reportPublished(ctx, pods)
	p.reconcile(ctx, pods, podRes, podResErr == nil)
	p.mu.Lock()
	changed := map[string]map[string]string{}
	for _, res := range Resources {
		view := p.ledger.Withdrawn(res, p.health.Unhealthy())
		if !maps.Equal(view, p.lastHealth[res]) {
			changed[res] = view
			p.lastHealth[res] = view
		}
	}
	pools := p.pools
	p.mu.Unlock()
	for res, view := range changed {
		logger.V(5).Info("Pool health changed", "resource", res, "withdrawn", len(view))
		if pl := pools[res]; pl != nil {
			pl.setWithdrawn(view)
		}
	}
}

// reconcile asks the ledger for the holdings and record fixes of the pods (the informer's) and
// the kubelet's PodResources, writes the fixes and the checkpoint.
func (p *Plugin) reconcile(ctx context.Context, pods []*corev1.Pod, podRes []*podresv1.PodResources, podResOK bool) {
	logger := klog.FromContext(ctx)
	p.mu.Lock()
	defer p.mu.Unlock()
	snap := ledger.Snapshot{Pods: podViews(pods), Cached: true, Kubelet: admittedOf(podRes), KubeletOK: podResOK, Now: time.Now()}
	fixes, err := p.ledger.Refresh(snap, p.lookup(ctx))
	if err != nil {
		logger.V(2).Info("Listing the node's pods for a pod the informer does not show yet failed", "err", err)
	}
	for _, f := range fixes {
		if err := p.writeFix(ctx, f); err != nil {
			logger.Error(err, "Updating an allocation record", "pod", f.Pod)
		}
	}
	if err := p.saveCheckpointLocked(); err != nil {
		logger.Error(err, "Keeping the answers that still count; the next refresh retries")
	}
}

// reportPublished tells, once per pod and problem, what is wrong with the allocation the
// published Neuron stack left on a pod of this node (allocation.PublishedRecord): in the log and
// as a Warning event on the pod.
func (p *Plugin) reportPublished(ctx context.Context, pods []*corev1.Pod) {
	for _, pod := range pods {
		if !allocation.FromPublishedStack(pod) {
			continue
		}
		_, warnings, err := allocation.PublishedRecord(pod)
		if err != nil {
			warnings = append(warnings, err.Error())
		}
		for _, msg := range warnings {
			if p.reportedBefore(string(pod.UID) + "|" + msg) {
				continue
			}
			klog.FromContext(ctx).Info("Allocation of the published Neuron stack on a pod", "pod", klog.KObj(pod), "problem", msg)
			if p.recorder != nil {
				p.recorder.Event(pod, corev1.EventTypeWarning, "PublishedNeuronAllocation", msg)
			}
		}
	}
}

// reportedBefore notes a problem as reported and says whether it was already.
func (p *Plugin) reportedBefore(key string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	seen := p.reported[key]
	if len(p.reported) > 1000 {
		p.reported = map[string]bool{}
	}
	p.reported[key] = true
	return seen
}
