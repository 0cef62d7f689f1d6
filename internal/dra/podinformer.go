package dra

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// podSyncWarning is how long the pod informer may take to sync before the driver says so.
const podSyncWarning = 30 * time.Second

// startPodInformer starts an informer of the pods bound to the driver's node: the node metrics
// name the pods that use the prepared claims. It does not wait for the informer to sync (the
// driver serves the kubelet without it; until then prepared claims show unnamed holders), but
// logs an error when it has not synced after podSyncWarning.
func (d *Driver) startPodInformer(ctx context.Context) (corelisters.PodLister, func()) {
	factory := informers.NewSharedInformerFactoryWithOptions(d.o.Client, 0, informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
		lo.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", d.o.NodeName).String()
	}))
	pods := factory.Core().V1().Pods()
	lister, informer := pods.Lister(), pods.Informer()
	factory.Start(ctx.Done())
	go func() {
		waitCtx, cancel := context.WithTimeout(ctx, podSyncWarning)
		defer cancel()
		if !cache.WaitForCacheSync(waitCtx.Done(), informer.HasSynced) && ctx.Err() == nil {
			klog.FromContext(ctx).Error(nil, "The node's pods are not listed yet: the metrics cannot name the pods that hold devices. Check the driver's RBAC (pods list/watch)", "after", podSyncWarning)
		}
	}()
	return lister, factory.Shutdown
}
