package autoscaler

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	klabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/kube-neuron/kube-neuron/internal/autoscaler/plan"
	"github.com/kube-neuron/kube-neuron/internal/labels"
)

// release removes LaunchingTaint from the launched nodes that the release rule (releaseRule)
// lets take pods now, and adds the capacity labels and the end annotation they lack.
func (c *Controller) release(ctx context.Context, nodes []*corev1.Node, placed map[string]placement, insts []Instance, now time.Time) {
	logger := klog.FromContext(ctx)
	holds, present := c.holds(nodes, placed, now)
	byName := map[string]*hold{}
	for _, h := range holds {
		byName[h.node.Name] = h
	}
	for _, in := range insts {
		if h := byName[in.Name]; h != nil {
			h.capacity = missingCapacity(h.node, in, c.reserved.byID)
		}
	}
	c.fleet.forgetGone(present, func(r *nodeRecord) { r.servingSince, r.releasedAt = time.Time{}, time.Time{} })
	c.renominations.expire(now)
	all := groupReady(placed, byName, present)
	var out []*hold
	for _, h := range holds {
		v := releaseRule(*h, all)
		switch v {
		case keepNotServing:
			logger.V(4).Info("Launched node not serving yet; it keeps its launching taint", "node", h.node.Name, "pods", h.pods)
		case keepForGroup:
			logger.V(2).Info("Launched node serving; it keeps its launching taint until its pods are nominated and the other launching nodes serve", "node", h.node.Name,
				"pods", h.pods, "notNominated", h.unnominated)
		case releaseAfterWait:
			if len(h.unnominated) > 0 || !all {
				logger.Info("Releasing a launched node after waiting for its pods' nominations and the other launching nodes", "node", h.node.Name, "waited", releaseWait,
					"pods", h.pods, "notNominated", h.unnominated)
			}
		}
		if v.release() {
			out = append(out, h)
		}
	}
	if len(out) == 0 {
		return
	}
	if c.o.DryRun {
		for _, h := range out {
			logger.Info("Dry run: would remove the launching taint", "node", h.node.Name, "pods", h.pods)
		}
		return
	}
	c.untaintAll(ctx, out, now)
}

// holds returns the launched nodes that hold pods off, with the pods this round's plan puts on
// them and whether they serve, and times how long each has served; present names every Node.
func (c *Controller) holds(nodes []*corev1.Node, placed map[string]placement, now time.Time) (holds []*hold, present map[string]bool) {
	present = map[string]bool{}
	for _, node := range nodes {
		present[node.Name] = true
		if !holdsPods(node) {
			c.fleet.update(node.Name, func(r *nodeRecord) { r.servingSince = time.Time{} })
			continue
		}
		h := &hold{node: node}
		var want []string
		for k, p := range placed {
			if p.node == node.Name {
				h.pods = append(h.pods, k)
				want = append(want, p.resources...)
				if !p.nominated {
					h.unnominated = append(h.unnominated, k)
				}
			}
		}
		sort.Strings(h.pods)
		sort.Strings(h.unnominated)
		slices.Sort(want)
		h.serving = c.serving(node, slices.Compact(want), now)
		c.fleet.update(node.Name, func(r *nodeRecord) {
			switch {
			case !h.serving:
				r.servingSince = time.Time{}
			case r.servingSince.IsZero():
				r.servingSince = now
			default:
				h.waited = now.Sub(r.servingSince) >= releaseWait
			}
		})
		holds = append(holds, h)
	}
	return holds, present
}

// serving reports whether a launched node could take its pods but for LaunchingTaint: Ready,
// and advertising every device plugin resource its pods ask for (want; any Neuron resource when
// none) or publishing Neuron devices in a ResourceSlice (DRA); or Ready for the register timeout,
// whatever it serves, so that a node whose plugin never starts is not held forever. The device
// plugin registers its resources one after the other and the kubelet posts each when its status
// next goes out: a node released on the first would turn away pods that ask for another.
func (c *Controller) serving(node *corev1.Node, want []string, now time.Time) bool {
	switch {
	case !nodeReady(node):
		return false
	case now.Sub(readySince(node)) >= c.o.RegisterTimeout:
		return true
	case node.Labels[labels.AllocationMode] == labels.AllocationModeDRA:
		return c.publishesDevices(node.Name)
	case len(want) == 0:
		return hasNeuronCapacity(node)
	}
	for _, r := range want {
		if q, ok := node.Status.Allocatable[corev1.ResourceName(r)]; !ok || q.IsZero() {
			return false
		}
	}
	return true
}

// requestedResources returns the device plugin resources the pod asks for, sorted, once each.
func requestedResources(d plan.PodDemand) []string {
	var out []string
	for _, r := range d.Requests {
		out = append(out, r.Resource)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// publishesDevices reports whether the Neuron DRA driver published devices for the node.
func (c *Controller) publishesDevices(node string) bool {
	list, _ := c.rslices.List(klabels.Everything())
	for _, s := range list {
		if s.Spec.Driver == plan.DeviceClass && s.Spec.NodeName != nil && *s.Spec.NodeName == node && len(s.Spec.Devices) > 0 {
			return true
		}
	}
	return false
}

// untaintAll releases the nodes: LaunchingTaint removed, each node Released, and the pods
// planned onto it nominated again should the scheduler clear their nomination soon
// (nominationCleared).
//
// The scheduler tries the pending pods as soon as the first release reaches it, and a pod
// whose own node it does not see released yet may take room planned for another on a node
// it does: so the releases of a group should reach it as close together as can be (in
// parallel, through a client of their own), and the node of the pod it tries first goes
// first, alone. That pod is the one of highest priority, then the oldest (the scheduler
// queues pods of equal priority in the order they last failed, for pods that wait together
// the order they were created in; creation times have a one-second resolution, and pods
// created in the same second are taken in name order, a guess). Its scheduling cycle, which
// asks the extender, takes longer than the other releases take to arrive.
func (c *Controller) untaintAll(ctx context.Context, out []*hold, now time.Time) {
	logger := klog.FromContext(ctx)
	slices.SortStableFunc(out, func(a, b *hold) int { return c.compareFirstPods(a.pods, b.pods) })
	errs := make([]error, len(out))
	errs[0] = c.untaint(ctx, out[0].node, out[0].capacity)
	var wg sync.WaitGroup
	for i, h := range out[1:] {
		wg.Go(func() { errs[i+1] = c.untaint(ctx, h.node, h.capacity) })
	}
	wg.Wait()
	for i, h := range out {
		if errs[i] != nil {
			logger.Error(errs[i], "Removing the launching taint failed; retrying at the next round", "node", h.node.Name)
			continue
		}
		c.fleet.update(h.node.Name, func(r *nodeRecord) { r.releasedAt, r.servingSince = now, time.Time{} })
		c.renominations.add(h.pods, h.node.Name, now.Add(settleAfterReady))
		logger.Info("Released a launched node: it takes pods now", "node", h.node.Name, "pods", h.pods)
	}
}

// addOps are the JSON patch operations that add to the map at path (a Node's labels or
// annotations, have) the keys of add it lacks: each key, or the whole map when there is none.
func addOps(have map[string]string, path string, add map[string]string) []map[string]any {
	var missing []string
	for _, k := range slices.Sorted(maps.Keys(add)) {
		if _, ok := have[k]; !ok {
			missing = append(missing, k)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if have == nil {
		m := map[string]string{}
		for _, k := range missing {
			m[k] = add[k]
		}
		return []map[string]any{{"op": "add", "path": path, "value": m}}
	}
	var ops []map[string]any
	esc := strings.NewReplacer("~", "~0", "/", "~1")
	for _, k := range missing {
		ops = append(ops, map[string]any{"op": "add", "path": path + "/" + esc.Replace(k), "value": add[k]})
	}
	return ops
}

// compareFirstPods compares two nodes' pending pods (keys) by the first of them the scheduler
// will try: highest priority, then the oldest, then by name; a node without pods comes last.
func (c *Controller) compareFirstPods(a, b []string) int {
	type first struct {
		ok       bool
		priority int32
		created  time.Time
		key      string
	}
	firstOf := func(keys []string) first {
		var f first
		for _, k := range keys {
			ns, name, _ := strings.Cut(k, "/")
			pod, err := c.pods.Pods(ns).Get(name)
			if err != nil {
				continue
			}
			g := first{ok: true, priority: ptr.Deref(pod.Spec.Priority, 0), created: pod.CreationTimestamp.Time, key: k}
			if !f.ok || g.priority > f.priority || (g.priority == f.priority && (g.created.Before(f.created) || (g.created.Equal(f.created) && g.key < f.key))) {
				f = g
			}
		}
		return f
	}
	fa, fb := firstOf(a), firstOf(b)
	switch {
	case fa.ok != fb.ok:
		if fa.ok {
			return -1
		}
		return 1
	case fa.priority != fb.priority:
		return cmp.Compare(fb.priority, fa.priority)
	case !fa.created.Equal(fb.created):
		return fa.created.Compare(fb.created)
	}
	return strings.Compare(fa.key, fb.key)
}

// missingCapacity returns the capacity labels (reservation id, capacity type) of the Instance
// that the Node lacks, and the end annotation of a Capacity Block's node that lacks it: the
// Instance's, else the End of its reservation as the provider lists it (byID).
func missingCapacity(node *corev1.Node, in Instance, byID map[string]Reservation) capacityMeta {
	var out capacityMeta
	for _, k := range []string{labels.CapacityReservationID, labels.CapacityType} {
		if v := in.Labels[k]; v != "" {
			if _, has := node.Labels[k]; !has {
				if out.labels == nil {
					out.labels = map[string]string{}
				}
				out.labels[k] = v
			}
		}
	}
	if _, has := node.Annotations[labels.CapacityReservationEndAnnotation]; has {
		return out
	}
	end := in.Annotations[labels.CapacityReservationEndAnnotation]
	if r, ok := byID[cmp.Or(node.Labels[labels.CapacityReservationID], in.Labels[labels.CapacityReservationID])]; end == "" && ok && r.ID != "" && !r.End.IsZero() {
		end = r.End.UTC().Format(time.RFC3339)
	}
	if end != "" {
		out.annotations = map[string]string{labels.CapacityReservationEndAnnotation: end}
	}
	return out
}

// untaint removes LaunchingTaint from a node with a JSON patch that first tests that the taint
// is still where the cache saw it, so that a taint another client added or removed meanwhile is
// never lost (the patch then fails, and the next round tries again with the new list). The same
// patch adds the labels and annotations of add that the Node lacks.
func (c *Controller) untaint(ctx context.Context, node *corev1.Node, add capacityMeta) error {
	client := c.o.Client
	if c.o.ReleaseClient != nil {
		client = c.o.ReleaseClient
	}
	// The patch removes the taint at its index only if it is still there (test): the node's
	// taints change under it (the node lifecycle controller removes node.kubernetes.io/not-ready
	// as the node turns Ready), and the round's copy may be behind. A failed test tries again
	// with the cache's newer copy, if it has one; else the next round does.
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		if attempt > 0 {
			newer, gerr := c.nodes.Get(node.Name)
			if gerr != nil || newer.ResourceVersion == node.ResourceVersion {
				break
			}
			node = newer
		}
		i := slices.IndexFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == LaunchingTaintKey })
		if i < 0 {
			return nil
		}
		path := fmt.Sprintf("/spec/taints/%d", i)
		ops := []map[string]any{{"op": "test", "path": path, "value": node.Spec.Taints[i]}, {"op": "remove", "path": path}}
		ops = append(ops, addOps(node.Labels, "/metadata/labels", add.labels)...)
		ops = append(ops, addOps(node.Annotations, "/metadata/annotations", add.annotations)...)
		patch, merr := json.Marshal(ops)
		if merr != nil {
			return merr
		}
		_, err = client.CoreV1().Nodes().Patch(ctx, node.Name, types.JSONPatchType, patch, metav1.PatchOptions{})
		if !apierrors.IsInvalid(err) {
			break
		}
	}
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("removing the taint %s from node %s (the autoscaler needs patch on nodes): %w", LaunchingTaintKey, node.Name, err)
	}
	return nil
}
