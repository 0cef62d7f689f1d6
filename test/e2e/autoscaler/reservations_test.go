//go:build e2e

package autoscaler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/kube-neuron/kube-neuron/internal/autoscaler"
	"github.com/kube-neuron/kube-neuron/internal/autoscaler/plan"
	"github.com/kube-neuron/kube-neuron/internal/lab"
	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/topology"
	"github.com/kube-neuron/kube-neuron/test/e2e/framework"
)

const (
	odcrID  = "cr-lab-odcr"  // testdata/reservations.yaml: two trn1.32xlarge
	blockID = "cr-lab-block" // one inf2.xlarge, ending soon after the test starts
	// drainLead and startupEstimate are short so that a Capacity Block ends within the test: its
	// nodes are cordoned at end - drainLead, and no pod is planned onto it from end - drainLead -
	// startupEstimate on.
	drainLead       = 20 * time.Second
	startupEstimate = 5 * time.Second
	// blockLife is how long after the start the Capacity Block ends: long enough for its node to
	// be launched and run its pod before it is cordoned.
	blockLife = 45 * time.Second
)

// TestReservations runs the autoscaler with reserved capacity: an On-Demand Capacity
// Reservation of two trn1.32xlarge and a Capacity Block of one inf2.xlarge that ends during the
// test. Throughout, a watch of the nodes checks that no reservation ever has more nodes than it
// holds.
func TestReservations(t *testing.T) {
	ctx := framework.Context(t)
	c := framework.L.Client()
	ensureDaemonSet(t, ctx, true)
	fleet, err := lab.LoadFleet("testdata/reservations.yaml")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	blockEnd := start.Add(blockLife).UTC().Truncate(time.Second)
	reservations := append(fleet.Reservations, lab.FleetReservation{ID: blockID, InstanceType: "inf2.xlarge", Count: 1, EndTime: blockEnd.Format(time.RFC3339)})
	counts := map[string]int{}
	for _, r := range reservations {
		counts[r.ID] = r.Count
	}
	t.Cleanup(func() {
		// The next tests run with the lab's own autoscaler, without reservations.
		err := errors.Join(framework.L.StopAutoscaler(), framework.L.SetReservations(nil), framework.L.StartAutoscaler())
		if err != nil {
			t.Error(err)
		}
	})
	ns := framework.CreateNamespace(t, ctx)
	rec := recordNodes(t, ctx, ns, counts)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		// Nothing recreates the pods once the Deployment and its ReplicaSet are gone.
		_ = c.AppsV1().Deployments(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
		_ = c.AppsV1().ReplicaSets(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
		_ = c.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{})
		framework.WaitFor(t, ctx, 2*time.Minute, "the autoscaler to remove the nodes it launched", func(ctx context.Context) (bool, string, error) {
			nodes := launched(t, ctx)
			return len(nodes) == 0, fmt.Sprintf("%d launched nodes left: %v", len(nodes), names(nodes)), nil
		})
		// Checked last, over the whole test and the scale-down.
		if over := rec.violations(); len(over) > 0 {
			t.Errorf("reservations exceeded: %s", strings.Join(over, "; "))
		}
	})
	restart := func(onDemand bool) {
		t.Helper()
		if err := framework.L.StopAutoscaler(); err != nil {
			t.Fatal(err)
		}
		if err := framework.L.SetReservations(reservations); err != nil {
			t.Fatal(err)
		}
		addr := freeAddress(t)
		if err := framework.L.StartAutoscaler(scaleDownAfter, "--metrics-address="+addr,
			fmt.Sprintf("--on-demand-fallback=%t", onDemand),
			"--capacity-block-drain-lead="+drainLead.String(), "--node-startup-estimate="+startupEstimate.String()); err != nil {
			t.Fatal(err)
		}
		metricsURL = "http://" + addr + "/metrics"
	}
	restart(true)

	// The block's pod first: it has the least time to spare. A Deployment brings it back when
	// it is evicted.
	dep := blockDeployment(ns)
	if _, err := c.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := c.CoreV1().Pods(ns).Create(ctx, wholeTrn1Pod(ns, fmt.Sprintf("whole-%d", i)), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	if !t.Run("reservation first, on demand once full", func(t *testing.T) {
		// Three pods that each take a whole trn1.32xlarge, on demand allowed: two go to the
		// reservation (it costs nothing more), the third to an on-demand node.
		var reserved, onDemand []string
		for i := range 3 {
			p := framework.WaitForPod(t, ctx, ns, fmt.Sprintf("whole-%d", i), corev1.PodRunning, 2*time.Minute)
			n := node(t, ctx, p.Spec.NodeName)
			switch {
			case n.Labels[labels.CapacityType] == labels.CapacityTypeReserved && n.Labels[labels.CapacityReservationID] == odcrID:
				reserved = append(reserved, n.Name)
			case n.Labels[labels.CapacityType] == labels.CapacityTypeOnDemand && n.Labels[labels.CapacityReservationID] == "":
				onDemand = append(onDemand, n.Name)
			default:
				t.Errorf("pod %s runs on %s with capacity labels %s=%q %s=%q", p.Name, n.Name,
					labels.CapacityType, n.Labels[labels.CapacityType], labels.CapacityReservationID, n.Labels[labels.CapacityReservationID])
			}
		}
		if len(reserved) != 2 || len(onDemand) != 1 {
			t.Errorf("pods on reserved nodes %v and on-demand nodes %v: want 2 in %s (it holds 2) and 1 on demand", reserved, onDemand, odcrID)
		}
	}) {
		return
	}

	if !t.Run("capacity block drained before its end", func(t *testing.T) {
		cordonAt := blockEnd.Add(-drainLead)
		// The Deployment's pod runs on the block's node before the drain starts.
		var first *corev1.Pod
		framework.WaitFor(t, ctx, time.Until(cordonAt), "the block's pod to run on the block's node before the drain", func(ctx context.Context) (bool, string, error) {
			pods := deploymentPods(t, ctx, ns)
			for i := range pods {
				p := &pods[i]
				if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
					continue
				}
				if n := node(t, ctx, p.Spec.NodeName); n.Labels[labels.CapacityReservationID] == blockID {
					first = p
					return true, "", nil
				}
				return false, fmt.Sprintf("pod %s runs on %s, not in %s", p.Name, p.Spec.NodeName, blockID), nil
			}
			return false, fmt.Sprintf("%d pods, none running", len(pods)), nil
		})
		blockNode := node(t, ctx, first.Spec.NodeName)
		if got := blockNode.Annotations[labels.CapacityReservationEndAnnotation]; got != blockEnd.Format(time.RFC3339) {
			t.Errorf("node %s: annotation %s=%q, want %s", blockNode.Name, labels.CapacityReservationEndAnnotation, got, blockEnd.Format(time.RFC3339))
		}
		// The pod is told, evicted, and comes back on a node of another capacity.
		waitEvent(t, ctx, ns, first.Name, autoscaler.ReasonCapacityBlockEnding, "")
		var second *corev1.Pod
		framework.WaitFor(t, ctx, 90*time.Second, "the Deployment's pod to run again, off the ending block", func(ctx context.Context) (bool, string, error) {
			pods := deploymentPods(t, ctx, ns)
			for _, p := range pods {
				if p.Name == first.Name {
					return false, fmt.Sprintf("pod %s still there (phase %s, deleting %t)", p.Name, p.Status.Phase, p.DeletionTimestamp != nil), nil
				}
			}
			for i := range pods {
				if pods[i].Status.Phase == corev1.PodRunning {
					second = &pods[i]
					return true, "", nil
				}
			}
			if len(pods) > 0 {
				return false, framework.DescribePod(ctx, &pods[0]), nil
			}
			return false, "no pod", nil
		})
		n := node(t, ctx, second.Spec.NodeName)
		if n.Labels[labels.CapacityReservationID] == blockID || n.Name == blockNode.Name {
			t.Errorf("the evicted pod came back on %s, of the ending block %s", n.Name, blockID)
		}
		t.Logf("the evicted pod %s came back as %s on %s (%s=%q %s=%q)", first.Name, second.Name, n.Name,
			labels.CapacityType, n.Labels[labels.CapacityType], labels.CapacityReservationID, n.Labels[labels.CapacityReservationID])
		framework.WaitFor(t, ctx, time.Until(blockEnd)+5*time.Second, "the block's node to be removed", func(ctx context.Context) (bool, string, error) {
			_, gone := rec.deletedAt(blockNode.Name)
			return gone, "", nil
		})
		deleted, _ := rec.deletedAt(blockNode.Name)
		cordoned, ok := rec.cordonedAt(blockNode.Name)
		switch {
		case !ok:
			t.Errorf("node %s was removed without being cordoned first", blockNode.Name)
		case cordoned.Before(cordonAt.Add(-time.Second)):
			t.Errorf("node %s cordoned at %s, before end - lead = %s", blockNode.Name, cordoned.Format(time.RFC3339Nano), cordonAt.Format(time.RFC3339))
		}
		if !deleted.Before(blockEnd) {
			t.Errorf("node %s removed at %s, not before the block's end %s", blockNode.Name, deleted.Format(time.RFC3339Nano), blockEnd.Format(time.RFC3339))
		}
		if evicted, ok := rec.podGoneAt(first.Name); !ok || !evicted.Before(deleted) {
			t.Errorf("pod %s left its node at %s (seen: %t), node removed at %s: want the pod evicted before the node goes", first.Name, evicted.Format(time.RFC3339Nano), ok, deleted.Format(time.RFC3339Nano))
		}
		t.Logf("block %s ends %s: node %s cordoned %s before, pod evicted, node removed %s before the end",
			blockID, blockEnd.Format(time.RFC3339), blockNode.Name, blockEnd.Sub(cordoned).Round(time.Millisecond), blockEnd.Sub(deleted).Round(time.Millisecond))
	}) {
		return
	}

	t.Run("no on demand when forbidden", func(t *testing.T) {
		// The reservation is full; with on-demand fallback off, one more pod stays pending and is
		// told why, and nothing is launched for it.
		restart(false)
		before := launched(t, ctx)
		if _, err := c.CoreV1().Pods(ns).Create(ctx, wholeTrn1Pod(ns, "whole-3"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitEvent(t, ctx, ns, "whole-3", plan.ReasonNotTriggerScaleUp, odcrID)
		waitRounds(t, ctx)
		msgs := events(t, ctx, ns, "whole-3", plan.ReasonNotTriggerScaleUp)
		if !slices.ContainsFunc(msgs, func(m string) bool { return strings.Contains(m, odcrID) && strings.Contains(m, "on-demand") }) {
			t.Errorf("events %q: want one naming %s and saying that on-demand fallback is off", msgs, odcrID)
		}
		t.Logf("whole-3 stays pending: %q", msgs)
		p, err := c.CoreV1().Pods(ns).Get(ctx, "whole-3", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Spec.NodeName != "" {
			t.Errorf("pod whole-3 runs on %s with on-demand fallback off", p.Spec.NodeName)
		}
		if after := launched(t, ctx); len(after) != len(before) {
			t.Errorf("nodes launched with on-demand fallback off and %s full: before %v, after %v", odcrID, names(before), names(after))
		}
	})
}

// wholeTrn1Pod asks for all 16 devices of a trn1.32xlarge.
func wholeTrn1Pod(ns, name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       neuronPodSpec("trn1.32xlarge", 16),
	}
}

// blockDeployment is one pod of one inf2.xlarge device, which the ending block can hold.
func blockDeployment(ns string) *appsv1.Deployment {
	sel := map[string]string{"app": "on-block"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "on-block", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: sel},
				Spec:       neuronPodSpec("inf2.xlarge", 1),
			},
		},
	}
}

func neuronPodSpec(instanceType string, devices int64) corev1.PodSpec {
	q := *resource.NewQuantity(devices, resource.DecimalSI)
	return corev1.PodSpec{
		NodeSelector:                  map[string]string{labels.InstanceType: instanceType},
		Tolerations:                   []corev1.Toleration{{Key: labels.NeuronTaintKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
		TerminationGracePeriodSeconds: ptr.To[int64](1),
		Containers: []corev1.Container{{Name: "main", Image: "my-neuron-image", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{topology.ResourceNeuron: q},
			Limits:   corev1.ResourceList{topology.ResourceNeuron: q},
		}}},
	}
}

func deploymentPods(t *testing.T, ctx context.Context, ns string) []corev1.Pod {
	t.Helper()
	list, err := framework.L.Client().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=on-block"})
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].CreationTimestamp.Before(&list.Items[j].CreationTimestamp) })
	return list.Items
}

func node(t *testing.T, ctx context.Context, name string) *corev1.Node {
	t.Helper()
	n, err := framework.L.Client().CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("node %q: %v", name, err)
	}
	return n
}

// nodeRecorder watches the launched nodes and the pods for the whole test: how many nodes each
// reservation has at every change (and every time that exceeded what it holds), when each node
// was first seen cordoned and seen gone, and when each pod was first seen leaving.
type nodeRecorder struct {
	holds map[string]int

	mu       sync.Mutex
	live     map[string]string // node -> reservation id ("" on demand)
	over     []string
	cordoned map[string]time.Time
	deleted  map[string]time.Time
	podGone  map[string]time.Time
}

func recordNodes(t *testing.T, ctx context.Context, ns string, holds map[string]int) *nodeRecorder {
	t.Helper()
	r := &nodeRecorder{holds: holds, live: map[string]string{}, cordoned: map[string]time.Time{}, deleted: map[string]time.Time{}, podGone: map[string]time.Time{}}
	ctx, cancel := context.WithCancel(ctx)
	f := informers.NewSharedInformerFactoryWithOptions(framework.L.Client(), 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = autoscaler.LaunchedByLabel + "=" + autoscaler.LaunchedByValue
	}))
	nodes := f.Core().V1().Nodes().Informer()
	if _, err := nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.node(obj, false) },
		UpdateFunc: func(_, obj any) { r.node(obj, false) },
		DeleteFunc: func(obj any) { r.node(obj, true) },
	}); err != nil {
		t.Fatal(err)
	}
	pf := informers.NewSharedInformerFactoryWithOptions(framework.L.Client(), 0, informers.WithNamespace(ns))
	pods := pf.Core().V1().Pods().Informer()
	if _, err := pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) { r.pod(obj, false) },
		DeleteFunc: func(obj any) { r.pod(obj, true) },
	}); err != nil {
		t.Fatal(err)
	}
	f.Start(ctx.Done())
	pf.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), nodes.HasSynced, pods.HasSynced) {
		t.Fatal("the node and pod watches never synced")
	}
	t.Cleanup(func() {
		cancel()
		f.Shutdown()
		pf.Shutdown()
	})
	return r
}

func (r *nodeRecorder) node(obj any, gone bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	n, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if gone {
		delete(r.live, n.Name)
		if _, seen := r.deleted[n.Name]; !seen {
			r.deleted[n.Name] = now
		}
		return
	}
	if n.Spec.Unschedulable {
		if _, seen := r.cordoned[n.Name]; !seen {
			r.cordoned[n.Name] = now
		}
	}
	// Every node that carries a reservation's id counts against it, also while being deleted.
	id := n.Labels[labels.CapacityReservationID]
	r.live[n.Name] = id
	if id == "" {
		return
	}
	var in []string
	for name, rid := range r.live {
		if rid == id {
			in = append(in, name)
		}
	}
	if len(in) > r.holds[id] {
		sort.Strings(in)
		r.over = append(r.over, fmt.Sprintf("%s holds %d, had nodes %v at %s", id, r.holds[id], in, now.Format(time.RFC3339Nano)))
	}
}

func (r *nodeRecorder) pod(obj any, gone bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	p, ok := obj.(*corev1.Pod)
	if !ok || (!gone && p.DeletionTimestamp == nil) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, seen := r.podGone[p.Name]; !seen {
		r.podGone[p.Name] = time.Now()
	}
}

func (r *nodeRecorder) violations() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.over)
}

func (r *nodeRecorder) cordonedAt(node string) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	at, ok := r.cordoned[node]
	return at, ok
}

func (r *nodeRecorder) deletedAt(node string) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	at, ok := r.deleted[node]
	return at, ok
}

func (r *nodeRecorder) podGoneAt(pod string) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	at, ok := r.podGone[pod]
	return at, ok
}
