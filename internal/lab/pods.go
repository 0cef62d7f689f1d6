package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"tags.cncf.io/container-device-interface/pkg/cdi"
)

// AllocationsAnnotation is where the simulated kubelet records, on each pod it admitted, what the
// device plugins and DRA drivers returned: per container the device ids, env, device specs,
// mounts and CDI devices; per claim the CDI devices with their resolved env and device nodes.
// Tests and the demo read it; a real kubelet keeps this in its checkpoint instead.
const AllocationsAnnotation = "lab.kube-neuron.io/allocations"

// HoldAdmissionAnnotation, set to "true" on a pod, makes the simulated kubelet wait with the
// pod's admission until the annotation is removed: tests use it to choose the order in which
// the kubelet admits pods.
const HoldAdmissionAnnotation = "lab.kube-neuron.io/hold-admission"

// PodAllocations is the value of AllocationsAnnotation.
type PodAllocations struct {
	Containers []ContainerResult `json:"containers,omitempty"`
	Claims     []ClaimResult     `json:"claims,omitempty"`
}

// ContainerResult is what one container got from the device plugins.
type ContainerResult struct {
	Name      string            `json:"name"`
	Resources []ResourceResult  `json:"resources"`
	Env       map[string]string `json:"env,omitempty"` // merged over every resource
}

// ResourceResult is one Allocate answer.
type ResourceResult struct {
	Resource    string            `json:"resource"`
	DeviceIDs   []string          `json:"deviceIDs"`
	Preferred   []string          `json:"preferred,omitempty"`
	Env         map[string]string `json:"env,omitempty"`
	Devices     []string          `json:"devices,omitempty"` // host paths of the device specs
	Mounts      []string          `json:"mounts,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	CDIDevices  []string          `json:"cdiDevices,omitempty"`
}

// ClaimResult is what one prepared ResourceClaim gave.
type ClaimResult struct {
	Name        string            `json:"name"` // the pod's name for the claim
	Claim       string            `json:"claim"`
	Driver      string            `json:"driver"`
	Devices     []string          `json:"devices"` // allocated device names
	CDIDevices  []string          `json:"cdiDevices"`
	Env         map[string]string `json:"env,omitempty"`
	DeviceNodes []string          `json:"deviceNodes,omitempty"`
	uid         string
}

// podWorker runs pod admission, start and teardown for the simulated nodes, one queue per node
// so that each node admits its pods one at a time, as a kubelet does.
type podWorker struct {
	client   kubernetes.Interface
	lister   corelisters.PodLister
	recorder record.EventRecorder

	mu       sync.Mutex
	nodes    map[string]*SimNode
	queues   map[string]workqueue.TypedRateLimitingInterface[string]
	admitted map[types.UID]*admittedPod
}

type admittedPod struct {
	node   string
	key    string
	claims map[string][]ClaimRef // driver -> claims prepared
}

func podKey(p *corev1.Pod) string { return p.Namespace + "/" + p.Name }

func (w *podWorker) enqueue(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	p, ok := obj.(*corev1.Pod)
	if !ok || p.Spec.NodeName == "" {
		return
	}
	w.mu.Lock()
	q := w.queues[p.Spec.NodeName]
	w.mu.Unlock()
	if q != nil {
		q.Add(podKey(p))
	}
}

func (w *podWorker) addNode(ctx context.Context, n *SimNode) {
	q := workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](200*time.Millisecond, 10*time.Second),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "node-" + n.Spec.Name})
	w.mu.Lock()
	w.nodes[n.Spec.Name] = n
	w.queues[n.Spec.Name] = q
	w.mu.Unlock()
	go func() {
		<-ctx.Done()
		q.ShutDown()
	}()
	go func() {
		for {
			key, quit := q.Get()
			if quit {
				return
			}
			err := w.sync(ctx, n, key)
			if err != nil && ctx.Err() == nil {
				klog.FromContext(ctx).V(2).Info("Pod not ready on simulated node, retrying", "node", n.Spec.Name, "pod", key, "err", err)
				q.AddRateLimited(key)
			} else {
				q.Forget(key)
			}
			q.Done(key)
		}
	}()
}

// sync brings one pod on node n to where a kubelet would have it.
func (w *podWorker) sync(ctx context.Context, n *SimNode, key string) error {
	logger := klog.FromContext(ctx).WithValues("node", n.Spec.Name, "pod", key)
	ctx = klog.NewContext(ctx, logger)
	ns, name, _ := strings.Cut(key, "/")
	pod, err := w.lister.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) || (err == nil && pod.Spec.NodeName != n.Spec.Name) {
		return w.forgetKey(ctx, n, key)
	}
	if err != nil {
		return err
	}
	switch {
	case pod.DeletionTimestamp != nil:
		if err := w.teardown(ctx, n, pod.UID); err != nil {
			return err
		}
		err := w.client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{
			GracePeriodSeconds: new(int64), Preconditions: &metav1.Preconditions{UID: &pod.UID},
		})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return err
		}
		return nil
	case pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed:
		return w.teardown(ctx, n, pod.UID)
	}
	w.mu.Lock()
	_, done := w.admitted[pod.UID]
	w.mu.Unlock()
	if done || pod.Annotations[HoldAdmissionAnnotation] == "true" {
		return nil
	}
	return w.admit(ctx, n, pod)
}

// forgetKey tears down whatever was admitted under key (the pod is gone or moved).
func (w *podWorker) forgetKey(ctx context.Context, n *SimNode, key string) error {
	w.mu.Lock()
	var uids []types.UID
	for uid, a := range w.admitted {
		if a.key == key && a.node == n.Spec.Name {
			uids = append(uids, uid)
		}
	}
	w.mu.Unlock()
	for _, uid := range uids {
		if err := w.teardown(ctx, n, uid); err != nil {
			return err
		}
	}
	return nil
}

// teardown frees the pod's devices and unprepares claims that no other pod on the node uses.
func (w *podWorker) teardown(ctx context.Context, n *SimNode, uid types.UID) error {
	n.dm.release(string(uid))
	w.mu.Lock()
	a := w.admitted[uid]
	w.mu.Unlock()
	if a == nil {
		return nil
	}
	for driver, claims := range a.claims {
		var unused []ClaimRef
		for _, c := range claims {
			if !w.claimUsedByOthers(n.Spec.Name, uid, c.UID) {
				unused = append(unused, c)
			}
		}
		if len(unused) == 0 {
			continue
		}
		if err := n.dra.unprepare(ctx, driver, unused); err != nil {
			return fmt.Errorf("unpreparing claims of pod %s: %w", a.key, err)
		}
	}
	w.mu.Lock()
	delete(w.admitted, uid)
	w.mu.Unlock()
	klog.FromContext(ctx).V(2).Info("Pod torn down on simulated node")
	return nil
}

func (w *podWorker) claimUsedByOthers(node string, self types.UID, claimUID string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for uid, a := range w.admitted {
		if uid == self || a.node != node {
			continue
		}
		for _, cs := range a.claims {
			for _, c := range cs {
				if c.UID == claimUID {
					return true
				}
			}
		}
	}
	return false
}

// admit allocates device plugin resources and prepares claims, then starts the pod.
func (w *podWorker) admit(ctx context.Context, n *SimNode, pod *corev1.Pod) error {
	logger := klog.FromContext(ctx)
	var result PodAllocations
	containers := append(slices.Clone(pod.Spec.InitContainers), pod.Spec.Containers...)
	for _, c := range containers {
		cr := ContainerResult{Name: c.Name}
		names := make([]string, 0, len(c.Resources.Limits))
		for res := range c.Resources.Limits {
			names = append(names, string(res))
		}
		sort.Strings(names)
		for _, res := range names {
			if !strings.Contains(res, "/") || strings.HasPrefix(res, "kubernetes.io/") || strings.HasPrefix(res, "requests.") {
				continue
			}
			q := c.Resources.Limits[corev1.ResourceName(res)]
			count := int(q.Value())
			if count == 0 {
				continue
			}
			a, err := n.dm.allocate(ctx, containerRef{podUID: string(pod.UID), podNamespace: pod.Namespace, podName: pod.Name, container: c.Name}, res, count)
			if err != nil {
				n.dm.release(string(pod.UID))
				return w.reject(ctx, pod, err)
			}
			cr.Resources = append(cr.Resources, resourceResult(a))
		}
		if len(cr.Resources) > 0 {
			cr.Env = map[string]string{}
			for _, r := range cr.Resources {
				for k, v := range r.Env {
					cr.Env[k] = v
				}
			}
			result.Containers = append(result.Containers, cr)
		}
	}
	claims, results, err := w.prepareClaims(ctx, n, pod)
	if err != nil {
		n.dm.release(string(pod.UID))
		w.recorder.Eventf(pod, corev1.EventTypeWarning, "FailedPrepareDynamicResources", "Failed to prepare dynamic resources: %v", err)
		return err
	}
	result.Claims = results
	w.mu.Lock()
	w.admitted[pod.UID] = &admittedPod{node: n.Spec.Name, key: podKey(pod), claims: claims}
	w.mu.Unlock()
	if len(result.Containers) > 0 || len(result.Claims) > 0 {
		value, err := json.Marshal(result)
		if err != nil {
			return err
		}
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{AllocationsAnnotation: string(value)}}})
		if _, err := w.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("recording allocations: %w", err)
		}
	}
	if err := w.setRunning(ctx, pod); err != nil {
		return err
	}
	logger.V(2).Info("Pod running on simulated node", "containers", len(result.Containers), "claims", len(result.Claims))
	return nil
}

func resourceResult(a *ContainerAllocation) ResourceResult {
	r := ResourceResult{Resource: a.Resource, DeviceIDs: a.DeviceIDs, Preferred: a.Preferred}
	if resp := a.Response; resp != nil {
		r.Env = resp.Envs
		r.Annotations = resp.Annotations
		for _, d := range resp.Devices {
			r.Devices = append(r.Devices, d.HostPath)
		}
		for _, m := range resp.Mounts {
			r.Mounts = append(r.Mounts, m.HostPath+":"+m.ContainerPath)
		}
		for _, d := range resp.CdiDevices {
			r.CDIDevices = append(r.CDIDevices, d.Name)
		}
	}
	return r
}

// reject fails the pod as the kubelet does when admission fails (UnexpectedAdmissionError).
func (w *podWorker) reject(ctx context.Context, pod *corev1.Pod, cause error) error {
	klog.FromContext(ctx).Info("Pod rejected by the simulated kubelet", "err", cause)
	msg := "Pod was rejected: " + cause.Error()
	w.recorder.Event(pod, corev1.EventTypeWarning, "UnexpectedAdmissionError", msg)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := w.client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cur.UID != pod.UID {
			return nil
		}
		cur.Status.Phase = corev1.PodFailed
		cur.Status.Reason = "UnexpectedAdmissionError"
		cur.Status.Message = msg
		_, err = w.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// prepareClaims calls NodePrepareResources for the pod's allocated claims, per driver.
func (w *podWorker) prepareClaims(ctx context.Context, n *SimNode, pod *corev1.Pod) (map[string][]ClaimRef, []ClaimResult, error) {
	if len(pod.Spec.ResourceClaims) == 0 {
		return nil, nil, nil
	}
	byDriver := map[string][]ClaimRef{}
	var results []ClaimResult
	for _, pc := range pod.Spec.ResourceClaims {
		claimName := ""
		if pc.ResourceClaimName != nil {
			claimName = *pc.ResourceClaimName
		} else {
			for _, s := range pod.Status.ResourceClaimStatuses {
				if s.Name == pc.Name && s.ResourceClaimName != nil {
					claimName = *s.ResourceClaimName
				}
			}
		}
		if claimName == "" {
			return nil, nil, fmt.Errorf("claim %s of the pod has no ResourceClaim yet", pc.Name)
		}
		claim, err := w.client.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, claimName, metav1.GetOptions{})
		if err != nil {
			return nil, nil, fmt.Errorf("getting ResourceClaim %s: %w", claimName, err)
		}
		if claim.Status.Allocation == nil {
			return nil, nil, fmt.Errorf("ResourceClaim %s is not allocated", claimName)
		}
		if !slices.ContainsFunc(claim.Status.ReservedFor, func(r resourcev1.ResourceClaimConsumerReference) bool { return r.UID == pod.UID }) {
			return nil, nil, fmt.Errorf("ResourceClaim %s is not reserved for the pod", claimName)
		}
		drivers := map[string][]string{}
		for _, r := range claim.Status.Allocation.Devices.Results {
			drivers[r.Driver] = append(drivers[r.Driver], r.Device)
		}
		for driver, devices := range drivers {
			ref := ClaimRef{Namespace: claim.Namespace, Name: claim.Name, UID: string(claim.UID)}
			byDriver[driver] = append(byDriver[driver], ref)
			results = append(results, ClaimResult{Name: pc.Name, Claim: claim.Name, Driver: driver, Devices: devices, uid: ref.UID})
		}
	}
	cdiIDs := map[string][]string{} // driver + "/" + claim UID -> CDI device ids
	for driver, claims := range byDriver {
		out, err := n.dra.prepare(ctx, driver, claims)
		if err != nil {
			return nil, nil, err
		}
		for uid, ids := range out {
			cdiIDs[driver+"/"+uid] = ids
		}
	}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(n.CDIDir()), cdi.WithAutoRefresh(false))
	if err != nil {
		return nil, nil, fmt.Errorf("reading CDI specs: %w", err)
	}
	for i := range results {
		results[i].CDIDevices = cdiIDs[results[i].Driver+"/"+results[i].uid]
		env, nodes, err := resolveCDI(cache, results[i].CDIDevices)
		if err != nil {
			return nil, nil, err
		}
		results[i].Env, results[i].DeviceNodes = env, nodes
	}
	return byDriver, results, nil
}

// resolveCDI reads the env and device nodes that the CDI specs give the devices, as the container
// runtime would apply them.
func resolveCDI(cache *cdi.Cache, ids []string) (map[string]string, []string, error) {
	if len(ids) == 0 {
		return nil, nil, nil
	}
	env := map[string]string{}
	var nodes []string
	seenSpecs := map[*cdi.Spec]bool{}
	for _, id := range ids {
		d := cache.GetDevice(id)
		if d == nil {
			return nil, nil, fmt.Errorf("CDI device %s is not in any spec (errors: %v)", id, cache.GetErrors())
		}
		edits := []*cdi.ContainerEdits{{ContainerEdits: &d.ContainerEdits}}
		if spec := d.GetSpec(); !seenSpecs[spec] {
			seenSpecs[spec] = true
			edits = append(edits, &cdi.ContainerEdits{ContainerEdits: &spec.ContainerEdits})
		}
		for _, e := range edits {
			for _, kv := range e.Env {
				k, v, _ := strings.Cut(kv, "=")
				env[k] = v
			}
			for _, dn := range e.DeviceNodes {
				nodes = append(nodes, dn.Path)
			}
		}
	}
	sort.Strings(nodes)
	return env, slices.Compact(nodes), nil
}

// setRunning marks the pod Running with every container started and ready.
func (w *podWorker) setRunning(ctx context.Context, pod *corev1.Pod) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := w.client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cur.UID != pod.UID || cur.Status.Phase == corev1.PodRunning {
			return nil
		}
		now := metav1.Now()
		cur.Status.Phase = corev1.PodRunning
		cur.Status.HostIP = "127.0.0.1"
		cur.Status.HostIPs = []corev1.HostIP{{IP: "127.0.0.1"}}
		cur.Status.StartTime = &now
		cur.Status.Conditions = nil
		for _, t := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.PodReadyToStartContainers, corev1.ContainersReady, corev1.PodReady} {
			cur.Status.Conditions = append(cur.Status.Conditions, corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: now})
		}
		cur.Status.ContainerStatuses = nil
		for _, c := range cur.Spec.Containers {
			cur.Status.ContainerStatuses = append(cur.Status.ContainerStatuses, corev1.ContainerStatus{
				Name: c.Name, Image: c.Image, ImageID: "lab://" + c.Image, ContainerID: "lab://" + string(cur.UID) + "/" + c.Name,
				Ready: true, Started: new(bool(true)), State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
			})
		}
		_, err = w.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
