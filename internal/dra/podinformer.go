package dra

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
)

// startPodInformer starts an informer of the pods bound to the driver's node (the node metrics
// name the pods that use the prepared claims) and waits for it to sync.
func (d *Driver) startPodInformer(ctx context.Context) (corelisters.PodLister, func(), error) {
	factory := informers.NewSharedInformerFactoryWithOptions(d.o.Client, 0, informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
		lo.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", d.o.NodeName).String()
	}))
	pods := factory.Core().V1().Pods()
	lister := pods.Lister()
	_ = pods.Informer() // register it before Start
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			factory.Shutdown()
			return nil, nil, fmt.Errorf("the %v cache did not sync: check the driver's RBAC (pods list/watch)", typ)
		}
	}
	return lister, factory.Shutdown, nil
}

// holders joins the prepared claims (the checkpoint on disk, which a second driver pod may
// have written during a rolling update; the one in memory when it cannot be read) with the
// node's pods.
func (d *Driver) holders(pods corelisters.PodLister) []holder {
	cp, err := LoadCheckpoint(d.dataDir)
	if err != nil {
		d.mu.Lock() // prepare changes the checkpoint in memory
		defer d.mu.Unlock()
		cp = d.checkpoint
	}
	list, _ := pods.List(k8slabels.Everything())
	return claimHolders(d.info.Shape, cp, list)
}
