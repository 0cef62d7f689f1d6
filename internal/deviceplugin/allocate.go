package deviceplugin

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// candidates returns the unserved and served container entries of the allocation records of
// the node's pods that are not finished, from the informer's cache.
func (p *Plugin) candidates() []Candidate {
	pods, _ := p.pods.List(labels.Everything())
	return p.candidatesOf(pods, true)
}

// match finds the record entry a call is for. The kubelet and the plugin learn of a newly bound
// pod through different watches, so when the cache has no match, the node's pods are read again
// from the API server before the call falls back to the kubelet's ids. So they are when the
// cache's only match is a pod of the published stack that the kubelet had not admitted: the call
// is more likely for a pod the extender has just bound (see Match).
func (p *Plugin) match(ctx context.Context, resource string, count int) (Candidate, []Candidate, bool) {
	p.records.RLock()
	defer p.records.RUnlock()
	cands := p.candidates()
	cached, ok := Match(cands, resource, count, p.inflightSkip())
	if ok && !cached.Published {
		return cached, cands, true
	}
	pods, err := p.listNodePods(ctx)
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Listing the node's pods failed", "err", err)
		return cached, cands, ok
	}
	cands = p.candidatesOf(pods, false)
	c, ok := Match(cands, resource, count, p.inflightSkip())
	return c, cands, ok
}

// candidatesOf returns the container entries of the pods' records (ours, or derived from the
// published Neuron stack's annotations: see allocation.RecordOf). A derived entry whose container
// the kubelet already holds devices for (its PodResources show it: the published device plugin
// served it, though NEURON_ALLOCATED may still say false) is marked served: an Allocate call can
// no longer be for it, except a call again for the same ids, which allocate answers before
// matching. (Entries of our records are marked served by the plugin itself, and the swap of
// records admitted in reverse order relies on their unserved entries.) cached says the pods are
// the informer's, which may not show this plugin's latest writes yet (recordOfLocked adds them);
// pods read from the API server show them, and must not make the plugin forget them while the
// informer still lags.
func (p *Plugin) candidatesOf(pods []*corev1.Pod, cached bool) []Candidate {
	p.mu.Lock()
	defer p.mu.Unlock()
	admitted := map[string]bool{}
	for _, h := range p.holdings {
		if h.Admitted {
			admitted[h.PodUID+"/"+h.Container+"/"+h.Resource] = true
		}
	}
	now := time.Now()
	var out []Candidate
	for _, pod := range pods {
		if pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		r, err := allocation.RecordOf(pod) // read from the API server: it has this plugin's writes
		if cached {
			r, err = p.recordOfLocked(pod, now)
		}
		if err != nil || r == nil || r.Node != p.o.NodeName {
			continue
		}
		t := allocation.AllocTimeOf(pod)
		published := allocation.FromPublishedStack(pod)
		for i, c := range r.Containers {
			if published && admitted[string(pod.UID)+"/"+c.Name+"/"+c.Resource] {
				c.Served = true
			}
			out = append(out, Candidate{Pod: pod.Namespace + "/" + pod.Name, PodUID: string(pod.UID), AllocTime: t,
				Created: pod.CreationTimestamp.UnixNano(), Container: c, Index: i, Published: published})
		}
	}
	return out
}

// reallocation returns the holding of a container the kubelet's PodResources show holding
// exactly ids in this pool, of a pod that runs and is not being deleted: the kubelet hands a
// container's ids to no other container, so a call with them is the kubelet asking again for that
// container (after a kubelet restart, when the container starts again), and it must get the same
// hardware, also when the ids are not that hardware (a record of the scheduler extender, or of
// the published Neuron stack, served on other ids than the kubelet's). A pod that does not run
// yet is left out: the kubelet may have released its ids for a failed admission that the
// plugin has not seen.
func (p *Plugin) reallocation(resource string, ids []string) (Holding, bool) {
	p.mu.Lock()
	var found *Holding
	for i := range p.holdings {
		h := &p.holdings[i]
		if h.Admitted && h.Resource == resource && h.PodUID != "" && slices.Equal(h.KubeletIDs, ids) {
			found = h
			break
		}
	}
	var h Holding
	if found != nil {
		h = *found
	}
	p.mu.Unlock()
	if found == nil {
		return Holding{}, false
	}
	ns, name, _ := strings.Cut(h.Pod, "/")
	pod, err := p.pods.Pods(ns).Get(name)
	if err != nil || string(pod.UID) != h.PodUID || pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning {
		return Holding{}, false
	}
	return h, true
}

func (p *Plugin) inflightSkip() map[string]bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]bool, len(p.inflight))
	for k := range p.inflight {
		out[k] = true
	}
	return out
}

// preferred chooses the ids the kubelet should take: the matching allocation record's, else the
// valid connected set the topology engine picks among the available ids.
func (p *Plugin) preferred(ctx context.Context, resource string, available, mustInclude []string, size int) []string {
	logger := klog.FromContext(ctx).WithValues("resource", resource, "size", size)
	avail := map[string]bool{}
	for _, id := range available {
		avail[id] = true
	}
	if p.o.Source != SourceKubelet {
		if c, _, ok := p.match(ctx, resource, size); ok {
			if hw, err := c.Container.Hardware(p.shape); err == nil {
				ids := idsOf(resource, hw)
				if allIn(ids, avail) && allIn(mustInclude, setOf(ids)) {
					logger.V(5).Info("Preferring the allocation record's ids", "pod", c.Pod, "container", c.Container.Name, "ids", ids)
					return ids
				}
			}
		}
	}
	unit, _ := topology.UnitOf(resource)
	u := topology.NewUsage(p.shape)
	busy := map[int]bool{}
	for _, id := range poolIDs(p.shape, resource) {
		if !avail[id] {
			if hw, err := hardwareOf(p.shape, resource, []string{id}); err == nil {
				for _, c := range hw.Cores {
					busy[c] = true
				}
			}
		}
	}
	// Steer away from all hardware known to be held, not only what the kubelet's pool withholds:
	// the kubelet may not have processed the latest withdrawal yet (it admits the next pod right
	// after the previous Allocate), and hardware the extender promised to pods waiting for
	// admission is free in this pool but not for another pod.
	p.mu.Lock()
	for _, h := range p.holdings {
		if h.Resource == resource && !h.Reserved && len(h.KubeletIDs) > 0 {
			continue // held through this pool: not in the available list anyway
		}
		for _, c := range h.Hardware.Cores {
			busy[c] = true
		}
	}
	for _, e := range p.served {
		for _, c := range e.hw.Cores {
			busy[c] = true
		}
	}
	p.mu.Unlock()
	var cores []int
	for c := range busy {
		cores = append(cores, c)
	}
	if err := u.MarkCores(cores); err == nil {
		if fit, err := topology.BestFit.Place(u, topology.Request{Unit: unit, Count: size}); err == nil {
			ids := idsOf(resource, fit.Allocation)
			if allIn(mustInclude, setOf(ids)) {
				logger.V(5).Info("Preferring the engine's set", "ids", ids)
				return ids
			}
		} else {
			logger.V(5).Info("No valid set among the available ids", "err", err)
		}
	}
	out := slices.Clone(mustInclude)
	rest := slices.Clone(available)
	sortIDs(rest)
	for _, id := range rest {
		if len(out) < size && !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

func setOf(ids []string) map[string]bool {
	m := map[string]bool{}
	for _, id := range ids {
		m[id] = true
	}
	return m
}

func allIn(ids []string, set map[string]bool) bool {
	for _, id := range ids {
		if !set[id] {
			return false
		}
	}
	return true
}

// allocate serves one container: the matching allocation record's devices, or the kubelet's ids.
func (p *Plugin) allocate(ctx context.Context, resource string, kubeletIDs []string) (*pluginapi.ContainerAllocateResponse, error) {
	logger := klog.FromContext(ctx).WithValues("resource", resource)
	ids := slices.Clone(kubeletIDs)
	sortIDs(ids)
	unit, err := topology.UnitOf(resource)
	if err != nil {
		return nil, err
	}
	var hw topology.Allocation
	var matched *Candidate
	source := "kubelet"
	var cands []Candidate
	again, isAgain := p.reallocation(resource, ids)
	if isAgain {
		hw, source = again.Hardware, "again"
		matched = &Candidate{Pod: again.Pod, PodUID: again.PodUID, Container: allocation.Container{Name: again.Container, Resource: resource}}
		logger.V(2).Info("The kubelet asks again for a container it already holds these ids for: serving the same hardware", "pod", again.Pod, "container", again.Container)
	} else if p.o.Source != SourceKubelet {
		var c Candidate
		var ok bool
		if c, cands, ok = p.match(ctx, resource, len(ids)); ok {
			if hw, err = c.Container.Hardware(p.shape); err != nil {
				what := allocation.Annotation + " record"
				if c.Published {
					what = allocation.AWSNeuronIDs + " annotation (left by the published Neuron scheduler extension)"
				}
				return nil, fmt.Errorf("pod %s container %s: its %s does not fit this %s node: %w; delete the pod so that the scheduler extender places it again",
					c.Pod, c.Container.Name, what, p.shape.Type.Name, err)
			}
			matched, source = &c, "extender"
			if c.Published {
				source = "published"
			}
		} else if p.o.Source == SourceExtender {
			return nil, fmt.Errorf("no pod bound to node %s has a container waiting for %d %s in its %s annotation (pods waiting for %s here: %s; records: %s). Schedule the pod with the scheduler extender (schedulerName: my-scheduler), or run the plugin with --allocation-source=auto to serve pods scheduled without it",
				p.o.NodeName, len(ids), resource, allocation.Annotation, resource, p.waitingPods(resource, len(ids)), describe(cands, resource))
		}
	}
	if matched == nil {
		if err := p.shape.Validate(topology.Request{Unit: unit, Count: len(ids)}); err != nil {
			return nil, fmt.Errorf("%w The kubelet asked for %d %s for pod %s without an allocation from the scheduler extender: schedule the pod with it (schedulerName: my-scheduler), or request one of %s",
				err, len(ids), resource, p.waitingPods(resource, len(ids)), sizesText(p.shape, unit))
		}
		if hw, err = hardwareOf(p.shape, resource, ids); err != nil {
			return nil, fmt.Errorf("pod %s: the kubelet offered %s ids %v: %w", p.waitingPods(resource, len(ids)), resource, ids, err)
		}
		if !p.shape.IsValidDeviceSet(hw.Devices) {
			logger.Info("Serving the kubelet's ids, which are not a connected set: the kubelet did not take the preferred allocation", "ids", ids, "devices", hw.Devices)
		}
	}
	podUID, who := "", p.waitingPods(resource, len(ids))
	if matched != nil {
		podUID, who = matched.PodUID, matched.Pod+" container "+matched.Container.Name
	}
	p.mu.Lock()
	// The last refresh's holdings may predate answers given since (refresh computes them without
	// the lock); every answer not yet seen to go is in p.served, so check against both.
	current := slices.Clone(p.holdings)
	for _, e := range p.served {
		current = append(current, Holding{Pod: e.holder("(served by this plugin)"), PodUID: e.podUID, Container: e.container, Resource: e.resource, KubeletIDs: e.kubelet, Hardware: e.hw})
	}
	conflicts := Conflicts(hw, podUID, current)
	if matched == nil || isAgain {
		// The kubelet's own pool ids for this pool never conflict with themselves: the
		// container it asks again for holds them.
		conflicts = slices.DeleteFunc(conflicts, func(h Holding) bool { return h.Resource == resource && slices.Equal(h.KubeletIDs, ids) })
	}
	if len(conflicts) > 0 {
		p.mu.Unlock()
		// The plugin's view of pods can lag the scheduler's: a holder the API server no longer
		// has (or that has finished) holds nothing. Ask before failing the pod.
		conflicts = p.confirm(ctx, conflicts)
		p.mu.Lock()
	}
	if len(conflicts) > 0 {
		p.mu.Unlock()
		c := conflicts[0]
		holder := "pod " + c.Pod
		if c.Container != "" {
			holder += " (container " + c.Container + ", " + c.Resource + ")"
		} else {
			holder += " (" + c.Resource + ")"
		}
		if matched != nil && c.Admitted && c.PodUID == matched.PodUID {
			// The record's own container runs there: the call is not for it.
			return nil, fmt.Errorf("the kubelet asked for %d %s (ids %s) and the only waiting record of that size is pod %s container %s's, but the kubelet already runs that container on devices %s (cores %s); the call is for another pod, whose record the plugin does not see yet, refusing to hand the devices out twice: delete the pod that failed and let its controller create it again",
				len(ids), resource, strings.Join(ids, ","), matched.Pod, matched.Container.Name, topology.FormatList(hw.Devices), topology.FormatList(hw.Cores))
		}
		return nil, fmt.Errorf("pod %s: devices %s (cores %s) are already in use by %s; refusing to hand them out twice. The kubelet admitted the pod before it saw the plugin withdraw these ids: delete the pod and let its controller create it again",
			who, topology.FormatList(hw.Devices), topology.FormatList(hw.Cores), holder)
	}
	key := servedKey(resource, ids)
	entry := servedEntry{hw: hw, resource: resource, kubelet: ids, at: time.Now()}
	if matched != nil {
		entry.podUID, entry.pod, entry.container = matched.PodUID, matched.Pod, matched.Container.Name
		if !isAgain {
			p.inflight[matched.PodUID+"/"+matched.Container.Name] = time.Now()
		}
	}
	prev, hadPrev := p.served[key]
	p.served[key] = entry
	if err := p.saveCheckpointLocked(); err != nil {
		// Like the kubelet, which fails an admission whose checkpoint it cannot write: an
		// answer a restart could lose is not given.
		if hadPrev {
			p.served[key] = prev
		} else {
			delete(p.served, key)
		}
		if matched != nil && !isAgain {
			delete(p.inflight, matched.PodUID+"/"+matched.Container.Name)
		}
		p.mu.Unlock()
		return nil, fmt.Errorf("pod %s: %w; the plugin keeps every answer there before giving it, so that a restart does not lose which devices a container got: make the directory writable (--state-dir, the chart's devicePlugin.stateDir)", who, err)
	}
	p.holdings = append(p.holdings, Holding{Pod: who, PodUID: podUID, Resource: resource, KubeletIDs: ids, Hardware: hw})
	p.mu.Unlock()
	p.metrics.allocations.WithLabelValues(resource, source).Inc()
	logger.Info("Allocated", "pod", who, "source", source, "kubeletIDs", ids, "devices", hw.Devices, "cores", hw.Cores)
	if matched != nil && !isAgain {
		if err := p.fixRecord(ctx, recordFix{pod: matched.Pod, podUID: matched.PodUID, container: matched.Container.Name, resource: resource, hw: hw, served: true}); err != nil {
			logger.Error(err, "Marking the container served; the next refresh retries", "pod", matched.Pod)
		}
	}
	p.requestRefresh()
	return response(unit, hw), nil
}

// confirm keeps the conflicting holdings whose pod the API server still has, not finished.
// Holdings of answers this plugin gave to a pod it could not name are kept: they are recent.
// An answer the kubelet's PodResources have not shown yet names the pod whose record it was
// matched to, which may not be the pod the kubelet admitted (it admits pods in its own order):
// when that pod is gone, the kubelet is asked who holds the answer's ids (exactly those: the
// kubelet may have handed some of them to a pod admitted since, with an answer of its own), and a
// pod that does keeps the conflict.
func (p *Plugin) confirm(ctx context.Context, conflicts []Holding) []Holding {
	logger := klog.FromContext(ctx)
	var podRes []*podresv1.PodResources
	var podResErr error
	listed := false
	holderOfIDs := func(h Holding) string {
		if !listed {
			podRes, podResErr = p.kubeletPodResources(ctx)
			listed = true
			if podResErr != nil {
				logger.V(2).Info("The kubelet's PodResources API is not available to confirm a conflict", "err", podResErr)
			}
		}
		for _, pr := range podRes {
			for _, c := range pr.Containers {
				for _, d := range c.Devices {
					if servedKey(d.ResourceName, d.DeviceIds) == servedKey(h.Resource, h.KubeletIDs) {
						return pr.Namespace + "/" + pr.Name
					}
				}
			}
		}
		return ""
	}
	var out []Holding
	for _, h := range conflicts {
		ns, name, ok := strings.Cut(h.Pod, "/")
		if !ok || h.PodUID == "" {
			out = append(out, h)
			continue
		}
		pod, err := p.o.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err), err == nil && string(pod.UID) != h.PodUID,
			err == nil && (pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed):
			if len(h.KubeletIDs) > 0 && !h.Admitted {
				if holder := holderOfIDs(h); holder != "" {
					logger.V(2).Info("A conflicting answer's pod is gone, but the kubelet holds its ids for another pod", "answeredFor", h.Pod, "holder", holder, "ids", h.KubeletIDs)
					h.Pod, h.PodUID = holder, ""
					out = append(out, h)
					continue
				}
			}
			logger.V(2).Info("A conflicting holder is gone; its devices are free", "holder", h.Pod)
		default:
			out = append(out, h)
		}
	}
	return out
}

// response is what the container gets: the device nodes of every device touched, the global
// core ids, and the device ids for device requests.
func response(unit topology.Unit, hw topology.Allocation) *pluginapi.ContainerAllocateResponse {
	r := &pluginapi.ContainerAllocateResponse{Envs: map[string]string{allocation.EnvVisibleCores: topology.JoinIDs(hw.Cores)}}
	if unit == topology.UnitDevice {
		r.Envs[allocation.EnvVisibleDevices] = topology.JoinIDs(hw.Devices)
	}
	for _, d := range hw.Devices {
		path := fmt.Sprintf("/dev/neuron%d", d)
		r.Devices = append(r.Devices, &pluginapi.DeviceSpec{ContainerPath: path, HostPath: path, Permissions: "rw"})
	}
	return r
}

func sizesText(shape *topology.Shape, unit topology.Unit) string {
	sizes := shape.DeviceSizes()
	if unit == topology.UnitCore {
		sizes = shape.CoreSizes()
	}
	return topology.FormatList(sizes)
}

// waitingPods names the node's pods not running yet that ask for count of resource in one
// container: the kubelet names no pod, so this is who the call is for.
func (p *Plugin) waitingPods(resource string, count int) string {
	pods, _ := p.pods.List(labels.Everything())
	var names []string
	for _, pod := range pods {
		if pod.Status.Phase != corev1.PodPending && pod.Status.Phase != "" {
			continue
		}
		for _, c := range append(slices.Clone(pod.Spec.InitContainers), pod.Spec.Containers...) {
			if q, ok := c.Resources.Limits[corev1.ResourceName(resource)]; ok && int(q.Value()) == count {
				names = append(names, pod.Namespace+"/"+pod.Name)
				break
			}
		}
	}
	slices.Sort(names)
	if len(names) == 0 {
		return "(unknown: no pending pod on this node asks for that)"
	}
	return strings.Join(names, " or ")
}

// fixRecord sets one container entry of a pod's record, with a merge patch of the annotation
// keys that carries the pod's resourceVersion, so that a concurrent writer is never overwritten.
func (p *Plugin) fixRecord(ctx context.Context, f recordFix) error {
	ns, name, _ := strings.Cut(f.pod, "/")
	for attempt := 0; attempt < 5; attempt++ {
		pod, err := p.o.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if string(pod.UID) != f.podUID {
			return nil
		}
		r, err := allocation.RecordOf(pod)
		if err != nil {
			return err
		}
		var anns map[string]*string
		if r == nil || r.Node != p.o.NodeName {
			if r != nil {
				return fmt.Errorf("pod %s runs on node %s but its %s record names node %s", f.pod, p.o.NodeName, allocation.Annotation, r.Node)
			}
			// A pod served from the kubelet's ids: its record starts here.
			r = &allocation.Record{Node: p.o.NodeName}
		}
		if !slices.ContainsFunc(r.Containers, func(c allocation.Container) bool { return c.Name == f.container && c.Resource == f.resource }) {
			r.Containers = append(r.Containers, allocation.Container{Name: f.container, Resource: f.resource})
		}
		if _, ok := pod.Annotations[allocation.AllocTime]; !ok {
			now := strconv.FormatInt(time.Now().UnixNano(), 10)
			anns = map[string]*string{allocation.AllocTime: &now}
		}
		changed := false
		for i := range r.Containers {
			c := &r.Containers[i]
			if c.Name != f.container || c.Resource != f.resource {
				continue
			}
			if !slices.Equal(c.Devices, f.hw.Devices) || !slices.Equal(c.Cores, f.hw.Cores) || c.Served != f.served {
				c.Devices, c.Cores, c.Served = slices.Clone(f.hw.Devices), slices.Clone(f.hw.Cores), f.served
				changed = true
			}
		}
		if !changed {
			p.mu.Lock()
			p.rememberWrittenLocked(f, time.Now())
			p.mu.Unlock()
			return nil
		}
		for k, v := range allocation.StringPtrs(r.Annotations()) {
			if anns == nil {
				anns = map[string]*string{}
			}
			anns[k] = v
		}
		patch := allocation.MergePatchWithVersion(anns, pod.ResourceVersion)
		_, err = p.o.Client.CoreV1().Pods(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "neuron-device-plugin"})
		if apierrors.IsConflict(err) {
			continue
		}
		if err == nil {
			klog.FromContext(ctx).V(2).Info("Allocation record updated", "pod", f.pod, "container", f.container, "devices", f.hw.Devices, "cores", f.hw.Cores, "served", f.served)
			p.mu.Lock()
			delete(p.inflight, f.podUID+"/"+f.container)
			p.rememberWrittenLocked(f, time.Now())
			p.mu.Unlock()
		}
		return err
	}
	return fmt.Errorf("pod %s changed five times while its allocation record was being updated", f.pod)
}
