//go:build e2e

package autoscaler

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kube-neuron/kube-neuron/internal/autoscaler"
	"github.com/kube-neuron/kube-neuron/internal/autoscaler/plan"
	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/topology"
	"github.com/kube-neuron/kube-neuron/test/e2e/framework"
)

// scaleDownAfter is short so that each test ends with the fleet empty again.
const scaleDownAfter = "--scale-down-after=3s"

// setup (re)starts the autoscaler with the test's arguments and its metrics on a free port
// (waitRounds reads them), makes sure the device plugin DaemonSet object exists (no DaemonSet
// controller runs in the lab, so it has no pods, as on a cluster without Neuron nodes), and at
// the end deletes the test's pods and waits until the autoscaler removed every node it launched.
func setup(t *testing.T) (context.Context, string) {
	t.Helper()
	ctx := framework.Context(t)
	ensureDaemonSet(t, ctx, true)
	if err := framework.L.StopAutoscaler(); err != nil {
		t.Fatal(err)
	}
	addr := freeAddress(t)
	if err := framework.L.StartAutoscaler(scaleDownAfter, "--metrics-address="+addr); err != nil {
		t.Fatal(err)
	}
	metricsURL = "http://" + addr + "/metrics"
	ns := framework.CreateNamespace(t, ctx)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		c := framework.L.Client()
		_ = c.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{})
		framework.WaitFor(t, ctx, 2*time.Minute, "the autoscaler to remove the nodes it launched", func(ctx context.Context) (bool, string, error) {
			nodes := launched(t, ctx)
			return len(nodes) == 0, fmt.Sprintf("%d launched nodes left: %v", len(nodes), names(nodes)), nil
		})
	})
	return ctx, ns
}

func ensureDaemonSet(t *testing.T, ctx context.Context, present bool) {
	t.Helper()
	dss := framework.L.Client().AppsV1().DaemonSets(metav1.NamespaceSystem)
	if !present {
		if err := dss.Delete(ctx, "neuron-device-plugin", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return
	}
	createDaemonSet(t, ctx, "neuron-device-plugin")
}

// createDaemonSet creates a DaemonSet named name with the pod label app: name in kube-system,
// unless it exists. No DaemonSet controller runs in the lab, so it has no pods.
func createDaemonSet(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	sel := map[string]string{"app": name}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: sel},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "plugin", Image: "kube-neuron"}}},
			},
		},
	}
	if _, err := framework.L.Client().AppsV1().DaemonSets(metav1.NamespaceSystem).Create(ctx, ds, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// launched returns the nodes the autoscaler launched.
func launched(t *testing.T, ctx context.Context) []corev1.Node {
	t.Helper()
	list, err := framework.L.Client().CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: autoscaler.LaunchedByLabel + "=" + autoscaler.LaunchedByValue})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

func names(nodes []corev1.Node) []string {
	var out []string
	for _, n := range nodes {
		out = append(out, n.Name+" ("+n.Labels[labels.InstanceType]+")")
	}
	sort.Strings(out)
	return out
}

// events returns the messages of the pod's events with the reason, oldest first.
func events(t *testing.T, ctx context.Context, ns, pod, reason string) []string {
	t.Helper()
	list, err := framework.L.Client().CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod + ",reason=" + reason})
	if err != nil {
		t.Fatal(err)
	}
	sort.SliceStable(list.Items, func(i, j int) bool {
		return list.Items[i].CreationTimestamp.Before(&list.Items[j].CreationTimestamp)
	})
	var out []string
	for _, e := range list.Items {
		out = append(out, e.Message)
	}
	return out
}

func waitEvent(t *testing.T, ctx context.Context, ns, pod, reason, want string) {
	t.Helper()
	framework.WaitFor(t, ctx, 60*time.Second, fmt.Sprintf("a %s event on %s saying %q", reason, pod, want), func(ctx context.Context) (bool, string, error) {
		msgs := events(t, ctx, ns, pod, reason)
		for _, m := range msgs {
			if strings.Contains(m, want) {
				return true, "", nil
			}
		}
		return false, fmt.Sprintf("events %q", msgs), nil
	})
}

func TestSeedWorkloadsGetNodes(t *testing.T) {
	ctx, ns := setup(t)
	files := map[string]string{
		"seed-000-one-device":  "examples/autoscaler/seed-000-one-device.yaml",
		"seed-000-two-cores":   "examples/autoscaler/seed-000-two-cores.yaml",
		"seed-000-eight-cores": "examples/autoscaler/seed-000-eight-cores.yaml",
	}
	for _, f := range files {
		framework.Apply(t, ctx, f, ns)
	}
	cat := topology.DefaultCatalog()
	for pod := range files {
		p := framework.WaitForPod(t, ctx, ns, pod, corev1.PodRunning, 2*time.Minute)
		node, err := framework.L.Client().CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if node.Labels[autoscaler.LaunchedByLabel] != autoscaler.LaunchedByValue {
			t.Errorf("pod %s runs on %s, which the autoscaler did not launch", pod, node.Name)
		}
		it, err := cat.Get(node.Labels[labels.InstanceType])
		if err != nil {
			t.Fatal(err)
		}
		waitEvent(t, ctx, ns, pod, plan.ReasonTriggeredScaleUp, it.Name)
	}
	t.Logf("fleet: %v", names(launched(t, ctx)))
}

func TestInvalidPodsGetEventsAndNoNode(t *testing.T) {
	ctx, ns := setup(t)
	framework.Apply(t, ctx, "examples/autoscaler/invalid-no-toleration.yaml", ns)
	framework.Apply(t, ctx, "examples/autoscaler/invalid-seven-devices-trn1.yaml", ns)
	waitEvent(t, ctx, ns, "invalid-no-toleration", plan.ReasonNotTriggerScaleUp, "aws.amazon.com/neuron=true:NoSchedule")
	waitEvent(t, ctx, ns, "invalid-no-toleration", plan.ReasonNotTriggerScaleUp, "Add a toleration for aws.amazon.com/neuron")
	waitEvent(t, ctx, ns, "invalid-seven-devices-trn1", plan.ReasonNotTriggerScaleUp, "1, 4, 8 or 16 devices, not 7")
	waitEvent(t, ctx, ns, "invalid-seven-devices-trn1", plan.ReasonNotTriggerScaleUp, "inf1.24xlarge")
	waitEvent(t, ctx, ns, "invalid-seven-devices-trn1", plan.ReasonNotTriggerScaleUp, "inf2.48xlarge")
	waitRounds(t, ctx)
	if nodes := launched(t, ctx); len(nodes) != 0 {
		t.Errorf("nodes launched for pods that cannot run: %v", names(nodes))
	}
}

func TestNoDevicePluginDaemonSet(t *testing.T) {
	ctx, ns := setup(t)
	ensureDaemonSet(t, ctx, false)
	framework.Apply(t, ctx, "examples/autoscaler/seed-000-one-device.yaml", ns)
	waitEvent(t, ctx, ns, "seed-000-one-device", plan.ReasonNotTriggerScaleUp, plan.MessageDevicePluginRequired)
	if msgs := events(t, ctx, ns, "seed-000-one-device", plan.ReasonNotTriggerScaleUp); !contains(msgs, "Neuron daemon set driver is required") {
		t.Errorf("events %q lack the seed's exact message", msgs)
	}
	if nodes := launched(t, ctx); len(nodes) != 0 {
		t.Fatalf("nodes launched without the device plugin DaemonSet: %v", names(nodes))
	}
	// Installed (still without pods: no Neuron node yet), it no longer blocks the first scale-up.
	ensureDaemonSet(t, ctx, true)
	framework.WaitForPod(t, ctx, ns, "seed-000-one-device", corev1.PodRunning, 2*time.Minute)
}

func contains(msgs []string, exact string) bool {
	for _, m := range msgs {
		if m == exact {
			return true
		}
	}
	return false
}

// mixedPods are 20 pending pods of several shapes and sizes, scheduled by my-scheduler with the
// topology rules (the extender, or neuron-kube-scheduler's plugin): the default scheduler counts
// devices only and would put, say, 2 devices on a trn1.32xlarge launched for other pods, where
// the topology rules refuse them.
func mixedPods(ns string) []*corev1.Pod {
	type spec struct {
		res      corev1.ResourceName
		n        int64
		selector map[string]string
	}
	specs := []spec{
		{topology.ResourceNeuron, 1, nil}, {topology.ResourceNeuron, 1, nil}, {topology.ResourceNeuron, 2, nil},
		{topology.ResourceNeuronCore, 2, nil}, {topology.ResourceNeuronCore, 1, nil}, {topology.ResourceNeuronCore, 4, nil},
		{topology.ResourceNeuron, 4, map[string]string{labels.InstanceFamily: "trn1"}},
		{topology.ResourceNeuron, 4, map[string]string{labels.InstanceFamily: "trn1"}},
		{topology.ResourceNeuron, 8, map[string]string{labels.InstanceFamily: "trn1"}},
		{topology.ResourceNeuronDevice, 1, map[string]string{labels.InstanceFamily: "inf2"}},
		{topology.ResourceNeuronDevice, 2, map[string]string{labels.InstanceFamily: "inf2"}},
		{topology.ResourceNeuronCore, 2, map[string]string{labels.InstanceFamily: "inf2"}},
		{topology.ResourceNeuron, 1, nil}, {topology.ResourceNeuronCore, 3, nil}, {topology.ResourceNeuronCore, 2, nil},
		{topology.ResourceNeuron, 3, nil}, {topology.ResourceNeuron, 1, map[string]string{labels.InstanceType: "inf2.xlarge"}},
		{topology.ResourceNeuronCore, 8, nil}, {topology.ResourceNeuron, 16, map[string]string{labels.InstanceFamily: "trn1"}},
		{topology.ResourceNeuronCore, 1, nil},
	}
	var out []*corev1.Pod
	for i, s := range specs {
		out = append(out, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("mixed-%02d", i), Namespace: ns},
			Spec: corev1.PodSpec{
				SchedulerName: "my-scheduler",
				NodeSelector:  s.selector,
				Tolerations:   []corev1.Toleration{{Key: labels.NeuronTaintKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
				Containers: []corev1.Container{{Name: "main", Image: "my-neuron-image", Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{s.res: *resource.NewQuantity(s.n, resource.DecimalSI)},
					Limits:   corev1.ResourceList{s.res: *resource.NewQuantity(s.n, resource.DecimalSI)},
				}}},
			},
		})
	}
	return out
}

func cost(t *testing.T, nodes []corev1.Node) float64 {
	t.Helper()
	cat := topology.DefaultCatalog()
	sum := 0.0
	for _, n := range nodes {
		it, err := cat.Get(n.Labels[labels.InstanceType])
		if err != nil || !it.PriceKnown() {
			t.Fatalf("node %s: type %q has no price (%v)", n.Name, n.Labels[labels.InstanceType], err)
		}
		sum += *it.PriceUSDPerHour
	}
	return sum
}

func TestTwentyMixedPodsGetTheCheapestFleet(t *testing.T) {
	ctx, ns := setup(t)
	c := framework.L.Client()
	// One batch: the autoscaler starts once the scheduler has refused all 20 pods, so that its
	// first round plans them together, as the planner below does.
	if err := framework.L.StopAutoscaler(); err != nil {
		t.Fatal(err)
	}
	pods := mixedPods(ns)
	var demands []plan.PodDemand
	for _, p := range pods {
		created, err := c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		demands = append(demands, plan.NewPodDemand(created, nil))
	}
	framework.WaitFor(t, ctx, 60*time.Second, "my-scheduler to refuse the 20 pods", func(ctx context.Context) (bool, string, error) {
		list, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, "", err
		}
		n := 0
		for i := range list.Items {
			if plan.WaitingForScaleUp(&list.Items[i]) {
				n++
			}
		}
		return n == len(pods), fmt.Sprintf("%d of %d unschedulable", n, len(pods)), nil
	})
	addr := freeAddress(t)
	if err := framework.L.StartAutoscaler(scaleDownAfter, "--metrics-address="+addr); err != nil {
		t.Fatal(err)
	}
	metricsURL = "http://" + addr + "/metrics"
	for _, p := range pods {
		framework.WaitForPod(t, ctx, ns, p.Name, corev1.PodRunning, 3*time.Minute)
	}
	nodes := launched(t, ctx)
	used := usedNodes(t, ctx, nodes)
	up, _ := plan.Plan(demands, nil, plan.Options{})
	t.Logf("fleet for 20 pods: %v, $%.4f/h, of which in use %v, $%.4f/h; the planner alone over all 20: %d nodes, $%.4f/h",
		names(nodes), cost(t, nodes), names(used), cost(t, used), len(up.New()), up.CostUSDPerHour)

	// Each pod runs where the plan put it: the node named by its first TriggeredScaleUp event.
	// The launched nodes hold pods off (kube-neuron.io/launching) until they serve and their
	// pods are nominated to them, and are released together. my-scheduler keeps each pod off
	// other nodes while the node launched for it is held (kube-neuron.io/planned-node), ranks
	// that node first once released, and keeps the room of the pods nominated to a node. Pods
	// still off their planned node are logged.
	launchedFor := map[string]bool{}
	var moved []plan.PodDemand
	for i, p := range pods {
		got, err := c.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		planned := ""
		for _, m := range events(t, ctx, ns, p.Name, plan.ReasonTriggeredScaleUp) {
			node, ok := plannedNode(m)
			if ok && planned == "" {
				planned = node
			}
			if ok && strings.Contains(m, "a new ") {
				launchedFor[node] = true
			}
		}
		if planned != got.Spec.NodeName {
			moved = append(moved, demands[i])
			t.Logf("pod %s planned onto %s runs on %s", p.Name, planned, got.Spec.NodeName)
		}
	}
	// What should hold: every pod runs on its planned node, and the nodes in use are the plan's
	// and cost what it costs (my-scheduler keeps each pod for its planned node, and the
	// launching taint holds the nodes until they are released together). The tolerance below is
	// for a loaded machine: at most 2 pods off their planned node, and for each of them at most
	// one node beyond the plan, no dearer than a node of its own for that pod.
	if len(moved) > 2 {
		t.Errorf("%d of %d pods run off their planned node, want at most 2", len(moved), len(pods))
	}
	usedCost := cost(t, used)
	// Counted on the nodes in use: a node launched for pods that then went elsewhere stays
	// empty, and the scale-down check below requires it to be removed.
	extra := len(used) - len(up.New())
	within := 0.0
	for _, d := range moved {
		one, _ := plan.Plan([]plan.PodDemand{d}, nil, plan.Options{})
		within += one.CostUSDPerHour
	}
	switch {
	case extra == 0 && usedCost <= up.CostUSDPerHour+1e-6:
		if usedCost < up.CostUSDPerHour-1e-6 {
			t.Logf("the nodes in use cost $%.4f/h, less than the plan's $%.4f/h: a planned node was left empty", usedCost, up.CostUSDPerHour)
		}
	case len(moved) > 0 && extra <= len(moved) && usedCost <= up.CostUSDPerHour+within+1e-6:
		// Also with no node beyond the plan: a pod that took a dearer node's room leaves its own
		// cheaper planned node empty (a CI run before the extender kept pods for their planned
		// node: $61.07/h against $54.81/h).
		t.Logf("%d nodes beyond the plan for the %d pods off their planned node: $%.4f/h in use, the plan $%.4f/h, tolerance $%.4f/h", extra, len(moved), usedCost, up.CostUSDPerHour, within)
	default:
		t.Errorf("the nodes in use cost $%.4f/h, the plan $%.4f/h; %d nodes in use of %d launched (%v), the plan has %d; %d of 20 pods off their planned node",
			usedCost, up.CostUSDPerHour, len(used), len(launchedFor), slices.Sorted(maps.Keys(launchedFor)), len(up.New()), len(moved))
	}
	if len(used) < len(nodes) {
		framework.WaitFor(t, ctx, 60*time.Second, "the nodes no pod uses to be scaled down", func(ctx context.Context) (bool, string, error) {
			left := launched(t, ctx)
			return len(left) == len(used), fmt.Sprintf("%d launched nodes, %d in use", len(left), len(used)), nil
		})
	}
}

// plannedNode returns the node a TriggeredScaleUp message names: "...: node X" for a new node,
// "node X (type), already launching, ..." for a launching one.
func plannedNode(msg string) (string, bool) {
	if _, node, ok := strings.Cut(msg, ": node "); ok {
		node, _, _ = strings.Cut(node, " ")
		return node, true
	}
	if rest, ok := strings.CutPrefix(msg, "node "); ok {
		node, _, _ := strings.Cut(rest, " ")
		return node, true
	}
	return "", false
}

// usedNodes returns the nodes that run a pod.
func usedNodes(t *testing.T, ctx context.Context, nodes []corev1.Node) []corev1.Node {
	t.Helper()
	var out []corev1.Node
	for _, n := range nodes {
		pods, err := framework.L.Client().CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + n.Name})
		if err != nil {
			t.Fatal(err)
		}
		if len(pods.Items) > 0 {
			out = append(out, n)
		}
	}
	return out
}

func TestRestartLaunchesNothingTwice(t *testing.T) {
	ctx, ns := setup(t)
	pods := mixedPods(ns)[:8]
	var demands []plan.PodDemand
	for _, p := range pods {
		created, err := framework.L.Client().CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		demands = append(demands, plan.NewPodDemand(created, nil))
	}
	// Restart as soon as the first node is launched, while its pods are pending.
	framework.WaitFor(t, ctx, 60*time.Second, "a first node to be launched", func(ctx context.Context) (bool, string, error) {
		return len(launched(t, ctx)) > 0, "", nil
	})
	if err := framework.L.StopAutoscaler(); err != nil {
		t.Fatal(err)
	}
	addr := freeAddress(t)
	if err := framework.L.StartAutoscaler(scaleDownAfter, "--metrics-address="+addr); err != nil {
		t.Fatal(err)
	}
	metricsURL = "http://" + addr + "/metrics"
	for _, p := range pods {
		framework.WaitForPod(t, ctx, ns, p.Name, corev1.PodRunning, 3*time.Minute)
	}
	nodes := launched(t, ctx)
	up, _ := plan.Plan(demands, nil, plan.Options{})
	t.Logf("fleet after a restart: %v, $%.4f/h; the planner alone: %d nodes, $%.4f/h", names(nodes), cost(t, nodes), len(up.New()), up.CostUSDPerHour)
	// Nothing is launched twice for the restart: at most one node per pod, and every node
	// launched before the restart is still counted after it (no pod pending on it was planned
	// again while it was launching). A pod can still get a second node when the scheduler put
	// another pod in its room (see TestTwentyMixedPodsGetTheCheapestFleet); that is logged.
	launchedNodes := map[string]bool{}
	for _, p := range pods {
		var launches []string
		for _, m := range events(t, ctx, ns, p.Name, plan.ReasonTriggeredScaleUp) {
			if _, node, ok := strings.Cut(m, ": node "); ok && strings.Contains(m, "a new ") {
				launches = append(launches, node)
				launchedNodes[node] = true
			}
		}
		if len(launches) > 1 {
			t.Logf("pod %s caused %d launches: %q", p.Name, len(launches), launches)
		}
	}
	if len(launchedNodes) > len(pods) {
		t.Errorf("%d nodes launched for %d pods", len(launchedNodes), len(pods))
	}
}
