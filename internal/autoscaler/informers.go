package autoscaler

import (
	"context"
	"fmt"
	"sort"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	klabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/autoscaler/plan"
)

// podsByNode indexes pods by spec.nodeName.
const podsByNode = "nodeName"

// start runs the informers and returns once their caches have synced.
func (c *Controller) start(ctx context.Context) (informers.SharedInformerFactory, error) {
	factory := informers.NewSharedInformerFactory(c.o.Client, 0)
	podInformer := factory.Core().V1().Pods().Informer()
	if err := podInformer.AddIndexers(cache.Indexers{podsByNode: func(obj any) ([]string, error) {
		if pod, ok := obj.(*corev1.Pod); ok && pod.Spec.NodeName != "" {
			return []string{pod.Spec.NodeName}, nil
		}
		return nil, nil
	}}); err != nil {
		return nil, err
	}
	if _, err := podInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: c.podChanged,
		UpdateFunc: func(old, obj any) {
			c.podChanged(obj)
			c.nominationCleared(ctx, old, obj)
		},
	}); err != nil {
		return nil, err
	}
	// A device plugin or DRA driver DaemonSet appearing can unblock pods refused for its absence.
	kickOnDaemonSet := func(obj any) {
		if ds, ok := obj.(*appsv1.DaemonSet); ok && (plan.IsDevicePluginDaemonSet(ds) || plan.IsDRADriverDaemonSet(ds)) {
			c.kickRound()
		}
	}
	if _, err := factory.Apps().V1().DaemonSets().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: kickOnDaemonSet}); err != nil {
		return nil, err
	}
	// A launched node that still holds pods off (LaunchingTaint) may have come up: a round
	// releases it, rather than the next resync. The node changes (Ready, capacity) or, on a DRA
	// node, its driver publishes its ResourceSlices.
	kick := c.kickRound
	if _, err := factory.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) {
			if node, ok := obj.(*corev1.Node); ok && holdsPods(node) {
				kick()
			}
		},
	}); err != nil {
		return nil, err
	}
	if _, err := factory.Resource().V1().ResourceSlices().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if s, ok := obj.(*resourcev1.ResourceSlice); ok && s.Spec.Driver == plan.DeviceClass && s.Spec.NodeName != nil {
				if node, err := c.nodes.Get(*s.Spec.NodeName); err == nil && holdsPods(node) {
					kick()
				}
			}
		},
	}); err != nil {
		return nil, err
	}
	c.pods, c.podIndex = factory.Core().V1().Pods().Lister(), podInformer.GetIndexer()
	c.nodes = factory.Core().V1().Nodes().Lister()
	c.daemons = factory.Apps().V1().DaemonSets().Lister()
	c.claims = factory.Resource().V1().ResourceClaims().Lister()
	c.templates = factory.Resource().V1().ResourceClaimTemplates().Lister()
	c.rslices = factory.Resource().V1().ResourceSlices().Lister()
	c.classes = factory.Resource().V1().DeviceClasses().Lister()
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return factory, fmt.Errorf("the %v cache did not sync: check the autoscaler's RBAC (pods, nodes, daemonsets, resourceclaims, resourceclaimtemplates, resourceslices and deviceclasses: list and watch)", typ)
		}
	}
	if c.recorder == nil {
		bcast := record.NewBroadcaster(record.WithContext(ctx))
		bcast.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.o.Client.CoreV1().Events("")})
		go func() {
			<-ctx.Done()
			bcast.Shutdown()
		}()
		c.recorder = bcast.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "neuron-autoscaler"})
	}
	c.synced.Store(true)
	return factory, nil
}

// podChanged starts a batch for a pending Neuron pod not seen before.
func (c *Controller) podChanged(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || !plan.WaitingForScaleUp(pod) || (len(allocation.PodRequests(pod)) == 0 && len(pod.Spec.ResourceClaims) == 0) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen[pod.UID] {
		return
	}
	c.seen[pod.UID] = true
	c.kickRound()
}

// kickRound asks the work loop for a round (after the batch window); a round already asked
// for takes this one in.
func (c *Controller) kickRound() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// pending returns the pods waiting for a scale-up that ask for Neuron hardware, by key, and the
// ResourceSlices and DeviceClasses their claims are placed with.
func (c *Controller) pending(ctx context.Context) ([]plan.PodDemand, *plan.DeviceTemplates) {
	logger := klog.FromContext(ctx)
	pods, _ := c.pods.List(klabels.Everything())
	rslices, _ := c.rslices.List(klabels.Everything())
	classes, _ := c.classes.List(klabels.Everything())
	if classes == nil {
		classes = []*resourcev1.DeviceClass{} // none in the cluster: the allocator says so
	}
	templates := plan.NewDeviceTemplates(c.o.Catalog, rslices, classes)
	var out []plan.PodDemand
	waiting := map[types.UID]bool{}
	for _, pod := range pods {
		if !plan.WaitingForScaleUp(pod) {
			continue
		}
		dra, claims, unresolved := c.draRequests(pod)
		if unresolved != "" {
			logger.V(5).Info("Pod's claim not found; its other requests only", "pod", klog.KObj(pod), "claim", unresolved)
		}
		if len(dra) > 0 {
			dra = templates.Resolve(ctx, dra)
		}
		waiting[pod.UID] = true
		if d := plan.NewPodDemand(pod, dra); d.Neuron() {
			d.Claims = claims
			out = append(out, d)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key() < out[j].Key() })
	c.mu.Lock()
	for uid := range c.seen {
		if !waiting[uid] {
			delete(c.seen, uid)
		}
	}
	c.mu.Unlock()
	return out, templates
}

// draRequests resolves the pod's ResourceClaims (the claim generated for a template when the
// pod's status names it, else the template) into Neuron requests, and returns the claims that
// have any (a template's as ClaimFromTemplate makes it); unresolved names a claim or template
// that is not in the cache.
func (c *Controller) draRequests(pod *corev1.Pod) (out []plan.DRARequest, claims []*resourcev1.ResourceClaim, unresolved string) {
	for _, rc := range pod.Spec.ResourceClaims {
		claimName := rc.ResourceClaimName
		for _, st := range pod.Status.ResourceClaimStatuses {
			if claimName == nil && st.Name == rc.Name {
				claimName = st.ResourceClaimName
			}
		}
		var claim *resourcev1.ResourceClaim
		if claimName != nil {
			claim, _ = c.claims.ResourceClaims(pod.Namespace).Get(*claimName)
		}
		if claim == nil && rc.ResourceClaimTemplateName != nil {
			if t, err := c.templates.ResourceClaimTemplates(pod.Namespace).Get(*rc.ResourceClaimTemplateName); err == nil {
				claim = plan.ClaimFromTemplate(pod.Namespace, pod.Name, rc.Name, t.Spec.Spec)
			}
		}
		switch {
		case claim != nil:
			if reqs := plan.DRARequestsOf(claim.Spec); len(reqs) > 0 {
				out = append(out, reqs...)
				claims = append(claims, claim)
			}
		case rc.ResourceClaimTemplateName != nil:
			unresolved = *rc.ResourceClaimTemplateName
		case claimName != nil:
			unresolved = *claimName
		}
	}
	return out, claims, unresolved
}

// podsOn returns the pods bound to a node, from the cache.
func (c *Controller) podsOn(node string) []*corev1.Pod {
	objs, _ := c.podIndex.ByIndex(podsByNode, node)
	out := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok {
			out = append(out, p)
		}
	}
	return out
}
