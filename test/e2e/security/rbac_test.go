//go:build e2e

package security

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/kube-neuron/kube-neuron/internal/autoscaler"
	"github.com/kube-neuron/kube-neuron/internal/autoscaler/plan"
	"github.com/kube-neuron/kube-neuron/internal/lab"
	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/test/e2e/framework"
)

// chartValues render the chart as the lab runs the components: the extender with my-scheduler
// (mode extender whatever the chart's default, no usage mirroring), the DRA driver next to the
// device plugin, the autoscaler's local provider.
var chartValues = []string{"npd.enabled=false", "scheduler.enabled=true", "scheduler.customScheduler.mode=extender", "draDriver.enabled=true", "devicePlugin.allowWithDRA=true",
	"autoscaler.enabled=true", "autoscaler.provider=local"}

// components maps each binary (its client-go user agent) to the chart's roles of its
// ServiceAccount: "ClusterRole name" or "Role namespace/name".
var components = map[string][]string{
	lab.ComponentDevicePlugin: {"ClusterRole neuron-device-plugin"},
	lab.ComponentExtender:     {"ClusterRole k8s-neuron-scheduler", "Role kube-system/k8s-neuron-scheduler"},
	lab.ComponentDRADriver:    {"ClusterRole neuron-dra-driver-clusterrole"},
	lab.ComponentAutoscaler:   {"ClusterRole neuron-autoscaler", "Role kube-system/neuron-autoscaler"},
}

// allowUnused are granted permissions the lab's flows do not exercise, each with the reason it
// is still needed: "component verb group/resource" -> reason.
var allowUnused = map[string]string{
	"neuron-device-plugin create /events":                         "the device plugin records events for refused Allocate calls and unhealthy devices, which this flow does not provoke",
	"neuron-device-plugin patch /events":                          "client-go's recorder patches an event only when the same event repeats",
	"neuron-scheduler-extender patch /events":                     "client-go's recorder patches an event only when the same event repeats",
	"neuron-scheduler-extender get /pods":                         "bind reads a pod from the API server when its informer has not seen the pod yet (or saw it replaced); the flow's pods reach the cache first",
	"neuron-scheduler-extender get coordination.k8s.io/leases":    "a node's bind Lease is read after a write lost to another replica; the flow's one replica creates each Lease held and never loses",
	"neuron-scheduler-extender update coordination.k8s.io/leases": "the holder renews a node's bind Lease 5 s after its last write, and replicas ask for and release Leases; the flow binds within 5 s with one replica",
	"neuron-dra-driver create /events":                            "the driver records events for failures (bad opaque configs, unhealthy devices) that this flow does not provoke",
	"neuron-dra-driver patch /events":                             "client-go's recorder patches an event only when the same event repeats",
	"neuron-dra-driver patch /nodes":                              "the driver patches its node only when the labels it sets differ; the lab creates the node with kube-neuron.io/allocation-mode=dra already",
	"neuron-dra-driver update resource.k8s.io/resourceslices":     "the ResourceSlice controller updates a slice when the node's devices change (health, LNC); the flow changes no device",
	"neuron-dra-driver delete resource.k8s.io/resourceslices":     "the ResourceSlice controller deletes the slices it no longer publishes; the flow changes no device",
	"neuron-autoscaler patch /events":                             "client-go's recorder patches an event only when the same event repeats within its cache window",
	"neuron-autoscaler create /pods/eviction":                     "the autoscaler evicts pods only from the nodes of a Capacity Block that ends soon; this flow has no reservation (test/e2e/autoscaler TestReservations drains one)",
}

// call is one request of the audit log, as RBAC sees it.
type call struct {
	verb, group, resource, subresource, namespace, name string
}

func (c call) String() string {
	res := c.resource
	if c.subresource != "" {
		res += "/" + c.subresource
	}
	where := c.name
	if c.namespace != "" {
		where = c.namespace + "/" + c.name
	}
	return fmt.Sprintf("%s %s/%s %s", c.verb, c.group, res, where)
}

// auditEvent is the part of an audit.k8s.io/v1 Event the test reads.
type auditEvent struct {
	Stage     string `json:"stage"`
	Verb      string `json:"verb"`
	UserAgent string `json:"userAgent"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
		APIGroup    string `json:"apiGroup"`
	} `json:"objectRef"`
}

func TestRBACIsLeastPrivilege(t *testing.T) {
	ctx := framework.Context(t)
	runFlows(t, ctx)

	calls := readAudit(t, framework.L.ControlPlane().AuditLogPath())
	roles := chartRoles(t)
	for component, roleNames := range components {
		t.Run(component, func(t *testing.T) {
			var rules []grant
			for _, name := range roleNames {
				r, ok := roles[name]
				if !ok {
					t.Fatalf("the chart renders no %s", name)
				}
				rules = append(rules, r...)
			}
			got := calls[component]
			if len(got) == 0 {
				t.Fatalf("no API call of %s in the audit log", component)
			}
			used := map[string]bool{}
			var denied []string
			for c, n := range got {
				ok := false
				for _, g := range rules {
					if g.allows(c) {
						ok = true
						used[g.key(component)] = true
					}
				}
				if !ok {
					denied = append(denied, fmt.Sprintf("%s (%d times)", c, n))
				}
			}
			sort.Strings(denied)
			for _, d := range denied {
				t.Errorf("%s called %s, which the chart does not grant it", component, d)
			}
			var unused []string
			for _, g := range rules {
				k := g.key(component)
				if used[k] || slices.Contains(unused, k) {
					continue
				}
				if watch := (grant{verb: "watch", group: g.group, resource: g.resource}).key(component); g.verb == "list" && used[watch] {
					// client-go's informers list through a watch with sendInitialEvents
					// (WatchListClient, on by default since client-go 1.35); list stays for API
					// servers that do not serve streaming lists, where they fall back to it.
					continue
				}
				if reason, ok := allowUnused[k]; ok {
					t.Logf("granted, not used in the lab (allowed: %s): %s", reason, k)
					continue
				}
				unused = append(unused, k)
			}
			sort.Strings(unused)
			for _, u := range unused {
				t.Errorf("the chart grants %q and the lab's flows never used it: remove it, or say in allowUnused why it is needed", u)
			}
			var seen []string
			for c, n := range got {
				seen = append(seen, fmt.Sprintf("%s x%d", c, n))
			}
			sort.Strings(seen)
			t.Logf("%d distinct calls:\n  %s", len(seen), strings.Join(seen, "\n  "))
		})
	}
}

// grant is one verb on one resource of a rule, in a namespace ("" for a ClusterRole).
type grant struct {
	verb, group, resource, namespace string
	names                            []string
}

func (g grant) key(component string) string {
	return fmt.Sprintf("%s %s %s/%s", component, g.verb, g.group, g.resource)
}

// allows reports whether the grant authorizes the call the way RBAC does: a create, list or
// watch carries no name for resourceNames to match.
func (g grant) allows(c call) bool {
	res := c.resource
	if c.subresource != "" {
		res += "/" + c.subresource
	}
	if (g.verb != c.verb && g.verb != "*") || g.group != c.group || (g.resource != res && g.resource != "*") {
		return false
	}
	if g.namespace != "" && g.namespace != c.namespace {
		return false
	}
	if len(g.names) > 0 {
		if c.verb == "create" || c.verb == "list" || c.verb == "watch" || c.verb == "deletecollection" {
			return false
		}
		return slices.Contains(g.names, c.name)
	}
	return true
}

// chartRoles renders the chart and returns each ClusterRole's and Role's grants.
func chartRoles(t *testing.T) map[string][]grant {
	t.Helper()
	out := map[string][]grant{}
	for _, o := range framework.RenderChart(t, "kube-neuron", "kube-system", chartValues...) {
		var rules []rbacv1.PolicyRule
		var key, ns string
		switch o.GetKind() {
		case "ClusterRole":
			var r rbacv1.ClusterRole
			fromUnstructured(t, o, &r)
			rules, key = r.Rules, "ClusterRole "+r.Name
		case "Role":
			var r rbacv1.Role
			fromUnstructured(t, o, &r)
			rules, key, ns = r.Rules, "Role "+r.Namespace+"/"+r.Name, r.Namespace
		default:
			continue
		}
		for _, r := range rules {
			for _, v := range r.Verbs {
				for _, g := range r.APIGroups {
					for _, res := range r.Resources {
						out[key] = append(out[key], grant{verb: v, group: g, resource: res, namespace: ns, names: r.ResourceNames})
					}
				}
			}
		}
	}
	return out
}

func fromUnstructured(t *testing.T, o *unstructured.Unstructured, v any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, v); err != nil {
		t.Fatal(err)
	}
}

// readAudit returns, per component, the calls it made and how often.
func readAudit(t *testing.T, path string) map[string]map[call]int {
	t.Helper()
	if path == "" {
		t.Fatal("the lab writes no audit log")
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	out := map[string]map[call]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e auditEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if e.ObjectRef == nil || e.ObjectRef.Resource == "" {
			continue // discovery and other non-resource URLs, which every authenticated user may read
		}
		binary, _, _ := strings.Cut(e.UserAgent, "/")
		if _, ok := components[binary]; !ok {
			continue
		}
		r := e.ObjectRef
		c := call{verb: e.Verb, group: r.APIGroup, resource: r.Resource, subresource: r.Subresource, namespace: r.Namespace, name: r.Name}
		if out[binary] == nil {
			out[binary] = map[call]int{}
		}
		out[binary][c]++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// runFlows makes every component do its work: pods through my-scheduler and the extender, a
// pod the device plugin serves from the kubelet's ids, a DRA pod, a node the autoscaler
// launches and removes, and a pod it refuses.
func runFlows(t *testing.T, ctx context.Context) {
	t.Helper()
	c := framework.L.Client()
	ns := framework.CreateNamespace(t, ctx)
	applyChartObjects(t, ctx)

	// One after the other on trn1-a: a pod the default scheduler places while the extender's
	// is being admitted can take the same devices (docs/scheduler-extender.md, known problem).
	framework.Apply(t, ctx, "examples/extender/trn1-four-devices.yaml", ns) // my-scheduler + extender bind + device plugin
	framework.WaitForPod(t, ctx, ns, "trn1-four-devices", corev1.PodRunning, 2*time.Minute)
	framework.Apply(t, ctx, "examples/device-plugin/one-device.yaml", ns)         // default scheduler + device plugin (kubelet's ids)
	framework.Apply(t, ctx, "examples/dra/single-neuron-device.yaml", ns)         // DRA driver on trn1-s
	framework.Apply(t, ctx, "examples/autoscaler/invalid-no-toleration.yaml", ns) // NotTriggerScaleUp
	framework.Apply(t, ctx, "examples/extender/trn1-seven-devices.yaml", ns)      // the extender's UnsupportedNeuronRequest event
	one := corev1.ResourceList{"aws.amazon.com/neuron": *resource.NewQuantity(1, resource.DecimalSI)}
	scaleUp := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "needs-a-node", Namespace: ns},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{labels.InstanceType: "inf2.xlarge"},
			Tolerations:  []corev1.Toleration{{Key: labels.NeuronTaintKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			Containers:   []corev1.Container{{Name: "main", Image: "x", Resources: corev1.ResourceRequirements{Limits: one, Requests: one}}},
		},
	}
	if _, err := c.CoreV1().Pods(ns).Create(ctx, scaleUp, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"one-device", "neuron-dra-test-pod", "needs-a-node"} {
		framework.WaitForPod(t, ctx, ns, p, corev1.PodRunning, 3*time.Minute)
	}
	waitEvent(t, ctx, ns, "invalid-no-toleration", plan.ReasonNotTriggerScaleUp)
	waitEvent(t, ctx, ns, "trn1-seven-devices", "UnsupportedNeuronRequest")
	// Deleting the pods: the extender and the device plugin forget them, the DRA driver
	// unprepares its claim, the autoscaler cordons and removes its node.
	claims, err := c.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(claims.Items) == 0 {
		t.Fatal("the DRA pod has no ResourceClaim")
	}
	if err := c.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.WaitFor(t, ctx, 2*time.Minute, "the autoscaler to remove the node it launched", func(ctx context.Context) (bool, string, error) {
		list, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: autoscaler.LaunchedByLabel + "=" + autoscaler.LaunchedByValue})
		if err != nil {
			return false, err.Error(), nil
		}
		return len(list.Items) == 0, fmt.Sprintf("%d launched nodes", len(list.Items)), nil
	})
	framework.WaitFor(t, ctx, time.Minute, "the pods to be gone and the DRA driver to unprepare their claims", func(ctx context.Context) (bool, string, error) {
		pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		if len(pods.Items) > 0 {
			return false, fmt.Sprintf("%d pods left", len(pods.Items)), nil
		}
		for _, cl := range claims.Items {
			if specs := cdiSpecsOf(string(cl.UID)); len(specs) > 0 {
				return false, fmt.Sprintf("CDI specs of claim %s left: %v", cl.Name, specs), nil
			}
		}
		return true, "", nil
	})
}

// cdiSpecsOf returns the CDI spec files of a claim on every simulated node: the DRA driver
// removes them when the simulated kubelet unprepares the claim.
func cdiSpecsOf(uid string) []string {
	var out []string
	for _, n := range framework.L.Simulator().Nodes() {
		matches, _ := filepath.Glob(filepath.Join(n.CDIDir(), "*"+uid+"*"))
		out = append(out, matches...)
	}
	return out
}

func waitEvent(t *testing.T, ctx context.Context, ns, pod, reason string) {
	t.Helper()
	framework.WaitFor(t, ctx, time.Minute, fmt.Sprintf("a %s event on %s", reason, pod), func(ctx context.Context) (bool, string, error) {
		list, err := framework.L.Client().CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod + ",reason=" + reason})
		if err != nil {
			return false, err.Error(), nil
		}
		return len(list.Items) > 0, fmt.Sprintf("%d events", len(list.Items)), nil
	})
}

// applyChartObjects applies the chart's DeviceClass and DaemonSets for real: the scheduler
// needs the DeviceClass, the autoscaler looks for the DaemonSets (no DaemonSet controller runs in
// the lab: the components run as host processes).
func applyChartObjects(t *testing.T, ctx context.Context) {
	t.Helper()
	var docs []string
	for _, o := range framework.RenderChart(t, "kube-neuron", "kube-system", chartValues...) {
		if o.GetKind() != "DeviceClass" && o.GetKind() != "DaemonSet" && o.GetKind() != "Namespace" {
			continue
		}
		data, err := yaml.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, string(data))
	}
	path := filepath.Join(t.TempDir(), "chart-objects.yaml")
	if err := os.WriteFile(path, []byte(strings.Join(docs, "---\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	framework.Apply(t, ctx, path, metav1.NamespaceSystem)
}
