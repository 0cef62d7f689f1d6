package plan

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/testkit"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// testPod starts a test pod called name that tolerates the Neuron taint, as the pods the
// autoscaler acts on do: testPod("p").Neuron(4).Selector(labels.InstanceType, "trn1.32xlarge").Obj().
func testPod(name string) *testkit.PodWrapper {
	return testkit.MakePod().Name(name).TolerateNeuron()
}

// demand is the pod's PodDemand, with the given DRA requests.
func demand(w *testkit.PodWrapper, dra ...DRARequest) PodDemand { return NewPodDemand(w.Obj(), dra) }

func qty(n int) resource.Quantity { return *resource.NewQuantity(int64(n), resource.DecimalSI) }

func itoa(i int) string { return string(rune('0' + i)) }

var allDaemonSets = Environment{DevicePlugin: true, DRADriver: true}

func messages(ps []Problem) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Message)
	}
	return out
}

// The three workloads of seed 000, verbatim.
const (
	seedDevice = `
spec:
  tolerations:
    - key: "aws.amazon.com/neuron"
      operator: Exists
      effect: NoSchedule
  containers:
    - image: my-neuron-image
      name: neuron-workload
      resources:
        requests:
          cpu: 4
          memory: 8Gi
          aws.amazon.com/neuron: 1
        limits:
          cpu: 4
          memory: 8Gi
          aws.amazon.com/neuron: 1
`
	seedCores = `
spec:
  tolerations:
    - key: "aws.amazon.com/neuron"
      operator: Exists
      effect: NoSchedule
  containers:
    - image: my-neuron-image
      name: neuron-workload
      resources:
        requests:
          cpu: 4
          memory: 8Gi
          aws.amazon.com/neuroncore: 2
        limits:
          cpu: 4
          memory: 8Gi
          aws.amazon.com/neuroncore: 2
`
	seedMultiple = `
spec:
  tolerations:
    - key: "aws.amazon.com/neuron"
      operator: Exists
      effect: NoSchedule
  containers:
    - image: my-neuron-image
      name: neuron-workload
      resources:
        requests:
          cpu: 8
          memory: 16Gi
          aws.amazon.com/neuroncore: 8
        limits:
          cpu: 8
          memory: 16Gi
          aws.amazon.com/neuroncore: 8
`
)

func seedPod(t *testing.T, name, spec string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{}
	if err := yaml.UnmarshalStrict([]byte(spec), p); err != nil {
		t.Fatal(err)
	}
	p.Namespace, p.Name, p.UID = "default", name, types.UID("uid-"+name)
	return p
}

const msg7OnTrn1 = "instance type trn1.32xlarge accepts aws.amazon.com/neuron requests of 1, 4, 8 or 16 devices, not 7; " +
	"types that can serve 7 devices: inf1.24xlarge ($4.721/h), inf2.48xlarge ($12.98127/h), trn3.48xlarge (price unknown). " +
	"Change the request or the pod's nodeSelector"

const msgToleration = "the pod does not tolerate the taint aws.amazon.com/neuron=true:NoSchedule that every Neuron node carries. " +
	"Add a toleration for aws.amazon.com/neuron to the pod: tolerations: [{key: aws.amazon.com/neuron, operator: Exists, effect: NoSchedule}]"

func TestCheck(t *testing.T) {
	requestOnly := testPod("p").Obj()
	requestOnly.Spec.Containers = []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceName(topology.ResourceNeuron): qty(2)},
	}}}
	differ := testPod("p").DefaultedContainer("c0", topology.ResourceNeuron, 2).Obj()
	differ.Spec.Containers[0].Resources.Limits[corev1.ResourceName(topology.ResourceNeuron)] = qty(1)

	for _, tc := range []struct {
		name string
		d    PodDemand
		env  Environment
		want []string // messages, exactly
		has  []string // or substrings of the only message
	}{
		{name: "seed: whole device", d: NewPodDemand(seedPod(t, "p", seedDevice), nil), env: allDaemonSets},
		{name: "seed: cores", d: NewPodDemand(seedPod(t, "p", seedCores), nil), env: allDaemonSets},
		{name: "seed: multiple cores", d: NewPodDemand(seedPod(t, "p", seedMultiple), nil), env: allDaemonSets},
		{name: "not a Neuron pod", d: NewPodDemand(&corev1.Pod{}, nil), env: Environment{}},
		{
			name: "no device plugin DaemonSet: the seed's message, exactly",
			d:    demand(testPod("p").Neuron(1)), env: Environment{DRADriver: true},
			want: []string{MessageDevicePluginRequired},
		},
		{
			name: "DRA pod without the DRA driver",
			d:    demand(testPod("p"), DRARequest{Count: 4}), env: Environment{DevicePlugin: true},
			want: []string{MessageDRADriverRequired},
		},
		{name: "DRA pod with the DRA driver only", d: demand(testPod("p"), DRARequest{Count: 4}), env: Environment{DRADriver: true}},
		{
			name: "no toleration",
			d:    demand(testPod("p").Neuron(1).Tolerations()), env: allDaemonSets,
			want: []string{msgToleration},
		},
		{
			name: "no toleration and no device plugin: both",
			d:    demand(testPod("p").Neuron(1).Tolerations()), env: Environment{},
			want: []string{msgToleration, MessageDevicePluginRequired},
		},
		{
			name: "7 devices on trn1.32xlarge: the counts it accepts and the types that can serve 7",
			d:    demand(testPod("p").Neuron(7).Selector(labels.InstanceType, "trn1.32xlarge")), env: allDaemonSets,
			want: []string{msg7OnTrn1},
		},
		{name: "7 devices without a selector", d: demand(testPod("p").Neuron(7)), env: allDaemonSets},
		{
			name: "6 cores on trn1.32xlarge by node affinity",
			d:    demand(testPod("p").NeuronCores(6).Affinity(testkit.Term(testkit.Expr(labels.InstanceType, corev1.NodeSelectorOpIn, "trn1.32xlarge")))),
			env:  allDaemonSets,
			want: []string{"instance type trn1.32xlarge accepts aws.amazon.com/neuroncore requests of 1, 2, 8, 16 or 32 cores, not 6; " +
				"types that can serve 6 cores: inf1.6xlarge ($1.18/h), inf1.24xlarge ($4.721/h), inf2.24xlarge ($6.49063/h), inf2.48xlarge ($12.98127/h), " +
				"trn3.48xlarge (price unknown). Change the request or the pod's node affinity"},
		},
		{
			name: "family trn1: both types explained",
			d:    demand(testPod("p").Neuron(7).Selector(labels.InstanceFamily, "trn1")), env: allDaemonSets,
			has: []string{"no instance type the pod allows can serve 7 devices: trn1.2xlarge accepts aws.amazon.com/neuron requests of 1 device, not 7; " +
				"trn1.32xlarge accepts aws.amazon.com/neuron requests of 1, 4, 8 or 16 devices, not 7; types that can serve 7 devices: inf1.24xlarge"},
		},
		{
			name: "more devices than any type has",
			d:    demand(testPod("p").Neuron(17)), env: allDaemonSets,
			want: []string{"none of the 15 instance types the pod allows can serve 17 devices (the largest have 16 devices). Change the request"},
		},
		{
			name: "two containers that do not fit one node together",
			d:    demand(testPod("p").Neuron(12).Container("c1", topology.ResourceNeuron, 4).Selector(labels.InstanceType, "inf2.48xlarge")), env: allDaemonSets,
			want: []string{"instance type inf2.48xlarge has 12 devices (24 cores), too few for the pod's requests together (container main: 12 devices, container c1: 4 devices); " +
				"types that can serve the pod: inf1.24xlarge ($4.721/h), trn3.48xlarge (price unknown). Change the request or the pod's nodeSelector"},
		},
		{
			name: "request without a limit",
			d:    NewPodDemand(requestOnly, nil), env: allDaemonSets,
			has: []string{`container c requests aws.amazon.com/neuron: 2 without a limit: Neuron resources must be set in limits, equal to requests. Add resources.limits["aws.amazon.com/neuron"]: 2`},
		},
		{
			name: "request and limit differ",
			d:    NewPodDemand(differ, nil), env: allDaemonSets,
			has: []string{"container c0 requests aws.amazon.com/neuron: 2 but limits it to 1: Neuron requests and limits must be equal"},
		},
		{
			name: "nodeSelector on a label a new node does not carry",
			d:    demand(testPod("p").Neuron(1).Selector("team", "ml")), env: allDaemonSets,
			want: []string{"the pod's nodeSelector team=ml can never match a new Neuron node: new nodes carry only the labels " +
				"node.kubernetes.io/instance-type, karpenter.k8s.aws/instance-family, kubernetes.io/arch=amd64, kubernetes.io/os=linux, kube-neuron.io/allocation-mode, " +
				"kube-neuron.io/capacity-type and (in a reservation) kube-neuron.io/capacity-reservation-id. " +
				"Remove team from the pod's nodeSelector"},
		},
		{name: "nodeSelector on the labels a new node carries", d: demand(testPod("p").Neuron(1).Selector("kubernetes.io/os", "linux").Selector(labels.AllocationMode, "device-plugin")), env: allDaemonSets},
		{
			name: "node affinity that allows no type",
			d:    demand(testPod("p").Neuron(1).Affinity(testkit.Term(testkit.Expr("kubernetes.io/arch", corev1.NodeSelectorOpIn, "arm64")))), env: allDaemonSets,
			has: []string{"the pod's node affinity allows no Neuron instance type: a new node is labelled node.kubernetes.io/instance-type=<type>"},
		},
		{
			name: "device plugin pod selecting DRA nodes",
			d:    demand(testPod("p").Neuron(1).Selector(labels.AllocationMode, labels.AllocationModeDRA)), env: allDaemonSets,
			has: []string{"kube-neuron.io/allocation-mode=device-plugin"},
		},
		{
			name: "device plugin and DRA in one pod",
			d:    demand(testPod("p").Neuron(1), DRARequest{Count: 1}), env: allDaemonSets,
			has: []string{"a Neuron node runs either the device plugin or the DRA driver, never both"},
		},
		{
			name: "DRA claim on a type not in the catalog",
			d:    demand(testPod("p"), DRARequest{Count: 1, InstanceTypes: []string{"p5.48xlarge"}}), env: allDaemonSets,
			has: []string{"the pod's ResourceClaim selects instanceType p5.48xlarge, which is not in the instance catalog"},
		},
		{
			name: "DRA claim larger than its type",
			d:    demand(testPod("p"), DRARequest{Count: 4, InstanceTypes: []string{"trn2.3xlarge"}}), env: allDaemonSets,
			has: []string{"instance type trn2.3xlarge has 1 Neuron device, too few for the pod's claims (4 devices); types that can serve 4 devices: inf1.6xlarge"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Check(tc.d, tc.env)
			for _, p := range got {
				if p.Reason != ReasonNotTriggerScaleUp {
					t.Errorf("reason %q", p.Reason)
				}
			}
			msgs := messages(got)
			switch {
			case tc.has != nil:
				if len(msgs) != 1 || !strings.Contains(msgs[0], tc.has[0]) {
					t.Errorf("messages %q\nwant one containing %q", msgs, tc.has[0])
				}
			case !slices.Equal(msgs, tc.want):
				t.Errorf("messages\n%q\nwant\n%q", msgs, tc.want)
			}
		})
	}
}

func TestCheckTolerations(t *testing.T) {
	neuron := labels.NeuronTaintKey
	for _, tc := range []struct {
		name string
		tol  []corev1.Toleration
		ok   bool
	}{
		{"none", nil, false},
		{"Exists without a key tolerates every taint", []corev1.Toleration{{Operator: corev1.TolerationOpExists}}, true},
		{"the seed's: Exists on the key, NoSchedule", []corev1.Toleration{{Key: neuron, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}, true},
		{"Equal true", []corev1.Toleration{{Key: neuron, Operator: corev1.TolerationOpEqual, Value: "true", Effect: corev1.TaintEffectNoSchedule}}, true},
		{"operator empty means Equal", []corev1.Toleration{{Key: neuron, Value: "true", Effect: corev1.TaintEffectNoSchedule}}, true},
		{"empty effect matches every effect", []corev1.Toleration{{Key: neuron, Operator: corev1.TolerationOpExists}}, true},
		{"Equal with another value", []corev1.Toleration{{Key: neuron, Operator: corev1.TolerationOpEqual, Value: "false", Effect: corev1.TaintEffectNoSchedule}}, false},
		{"wrong effect", []corev1.Toleration{{Key: neuron, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}}, false},
		{"another taint's toleration does not matter", []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists}}, false},
		{"one of several", []corev1.Toleration{{Key: "x", Operator: corev1.TolerationOpExists}, {Key: neuron, Operator: corev1.TolerationOpExists}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Check(demand(testPod("p").Neuron(1).Tolerations(tc.tol...)), allDaemonSets)
			if ok := len(got) == 0; ok != tc.ok {
				t.Errorf("problems %q, want tolerated=%v", messages(got), tc.ok)
			}
			if !tc.ok && (len(got) != 1 || got[0].Message != msgToleration) {
				t.Errorf("messages %q, want the toleration message", messages(got))
			}
		})
	}
}

func TestDaemonSets(t *testing.T) {
	ds := func(name, tmplName string, tmplLabels map[string]string) *appsv1.DaemonSet {
		d := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system"}}
		d.Spec.Template.Name, d.Spec.Template.Labels = tmplName, tmplLabels
		return d
	}
	for _, tc := range []struct {
		name       string
		ds         *appsv1.DaemonSet
		plugin, dr bool
	}{
		{"the published chart's device plugin", ds("neuron-device-plugin", "", nil), true, false},
		{"name contains it (a release prefix)", ds("my-release-neuron-device-plugin-ds", "", nil), true, false},
		{"pod template name contains it", ds("accelerators", "neuron-device-plugin-pod", nil), true, false},
		{"a label alone is not enough for the device plugin", ds("accelerators", "", map[string]string{"app": "neuron-device-plugin"}), false, false},
		{"our chart's DRA kubelet plugin", ds("neuron-dra-driver-kubelet-plugin", "", map[string]string{"app": "neuron-dra-driver-kubelet-plugin"}), false, true},
		{"DRA driver by its template label", ds("dra", "", map[string]string{"app": "neuron-dra-driver-kubelet-plugin"}), false, true},
		{"DRA driver by its template name", ds("dra", "neuron-dra-driver-kubelet-plugin", nil), false, true},
		{"node problem detector", ds("node-problem-detector", "", map[string]string{"app": "npd"}), false, false},
		{"another device plugin", ds("nvidia-device-plugin-daemonset", "", nil), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := IsDevicePluginDaemonSet(tc.ds); got != tc.plugin {
				t.Errorf("IsDevicePluginDaemonSet = %v, want %v", got, tc.plugin)
			}
			if got := IsDRADriverDaemonSet(tc.ds); got != tc.dr {
				t.Errorf("IsDRADriverDaemonSet = %v, want %v", got, tc.dr)
			}
		})
	}
}

func TestAllows(t *testing.T) {
	cat := topology.DefaultCatalog()
	allowed := func(d PodDemand) []string {
		var out []string
		for _, it := range cat.Types() {
			if d.Allows(it) {
				out = append(out, it.Name)
			}
		}
		return out
	}
	in, notIn := corev1.NodeSelectorOpIn, corev1.NodeSelectorOpNotIn
	for _, tc := range []struct {
		name string
		d    PodDemand
		want []string
	}{
		{"instance type selector", demand(testPod("p").Selector(labels.InstanceType, "inf2.xlarge")), []string{"inf2.xlarge"}},
		{"family selector", demand(testPod("p").Selector(labels.InstanceFamily, "trn1")), []string{"trn1.2xlarge", "trn1.32xlarge"}},
		{"selector and affinity together", demand(testPod("p").Selector(labels.InstanceFamily, "inf1").
			Affinity(testkit.Term(testkit.Expr(labels.InstanceType, notIn, "inf1.xlarge", "inf1.2xlarge")))), []string{"inf1.6xlarge", "inf1.24xlarge"}},
		{"terms are ORed", demand(testPod("p").Affinity(
			testkit.Term(testkit.Expr(labels.InstanceType, in, "trn1.32xlarge")),
			testkit.Term(testkit.Expr(labels.InstanceFamily, in, "trn1n")))), []string{"trn1.32xlarge", "trn1n.32xlarge"}},
		{"expressions are ANDed", demand(testPod("p").Affinity(testkit.Term(
			testkit.Expr(labels.InstanceFamily, in, "inf2", "trn1"),
			testkit.Expr(labels.InstanceType, in, "trn1.2xlarge", "trn2.3xlarge")))), []string{"trn1.2xlarge"}},
		{"Exists on a label new nodes carry", demand(testPod("p").Selector(labels.InstanceFamily, "trn2").
			Affinity(testkit.Term(testkit.Expr(labels.InstanceType, corev1.NodeSelectorOpExists)))), []string{"trn2.3xlarge", "trn2.48xlarge"}},
		{"DoesNotExist on another label", demand(testPod("p").Selector(labels.InstanceFamily, "trn2").
			Affinity(testkit.Term(testkit.Expr("gpu", corev1.NodeSelectorOpDoesNotExist)))), []string{"trn2.3xlarge", "trn2.48xlarge"}},
		{"In on another label", demand(testPod("p").Affinity(testkit.Term(testkit.Expr("gpu", in, "yes")))), nil},
		{"an empty term matches nothing", demand(testPod("p").Affinity(corev1.NodeSelectorTerm{})), nil},
		{"DRA claim's instance types", demand(testPod("p"), DRARequest{Count: 1, InstanceTypes: []string{"trn2.48xlarge"}}), []string{"trn2.48xlarge"}},
		{"DRA pods select the dra mode", demand(testPod("p").Selector(labels.AllocationMode, "dra").Selector(labels.InstanceFamily, "trn3"), DRARequest{Count: 1}), []string{"trn3.48xlarge"}},
		{"device plugin pods do not get dra nodes", demand(testPod("p").Selector(labels.AllocationMode, "dra").Neuron(1)), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := allowed(tc.d); !slices.Equal(got, tc.want) {
				t.Errorf("allowed %v, want %v", got, tc.want)
			}
		})
	}
}

func TestWaitingForScaleUp(t *testing.T) {
	unschedulable := corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable}
	pending := func(conds ...corev1.PodCondition) *corev1.Pod {
		p := testPod("p").Neuron(1).Obj()
		p.Status.Phase = corev1.PodPending
		p.Status.Conditions = conds
		return p
	}
	bound := pending(unschedulable)
	bound.Spec.NodeName = "n"
	deleting := pending(unschedulable)
	deleting.DeletionTimestamp = &metav1.Time{}
	running := pending(unschedulable)
	running.Status.Phase = corev1.PodRunning
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{"unschedulable", pending(unschedulable), true},
		{"not yet tried", pending(), false},
		{"scheduling gated", pending(corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonSchedulingGated}), false},
		{"bound", bound, false},
		{"deleting", deleting, false},
		{"running", running, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := WaitingForScaleUp(tc.pod); got != tc.want {
				t.Errorf("WaitingForScaleUp = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestDRARequestsOf(t *testing.T) {
	exact := func(class string, mode resourcev1.DeviceAllocationMode, count int64, cel ...string) resourcev1.DeviceRequest {
		r := resourcev1.DeviceRequest{Name: "neurons", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: class, AllocationMode: mode, Count: count}}
		for _, e := range cel {
			r.Exactly.Selectors = append(r.Exactly.Selectors, resourcev1.DeviceSelector{CEL: &resourcev1.CELDeviceSelector{Expression: e}})
		}
		return r
	}
	spec := func(rs ...resourcev1.DeviceRequest) resourcev1.ResourceClaimSpec {
		return resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: rs}}
	}
	const trn2 = "device.attributes['neuron.aws.com'].instanceType == 'trn2.48xlarge'"
	for _, tc := range []struct {
		name string
		spec resourcev1.ResourceClaimSpec
		want []DRARequest
	}{
		{"seed example 1: 4 connected devices on trn2.48xlarge", spec(exact(DeviceClass, resourcev1.DeviceAllocationModeExactCount, 4, trn2)),
			[]DRARequest{{Count: 4, InstanceTypes: []string{"trn2.48xlarge"}}}},
		{"seed example 2: all devices", spec(exact(DeviceClass, resourcev1.DeviceAllocationModeAll, 0, trn2)),
			[]DRARequest{{All: true, InstanceTypes: []string{"trn2.48xlarge"}}}},
		{"seed RCT2: a conjunction with the driver version", spec(exact(DeviceClass, resourcev1.DeviceAllocationModeExactCount, 8,
			trn2+" &&\n device.attributes['neuron.aws.com'].neuronDriverVersion == '2.24.7.0'")),
			[]DRARequest{{Count: 8, InstanceTypes: []string{"trn2.48xlarge"}}}},
		{"double quotes, reversed", spec(exact(DeviceClass, "", 0, `"trn1.2xlarge" == device.attributes["neuron.aws.com"].instanceType`)),
			[]DRARequest{{Count: 1, InstanceTypes: []string{"trn1.2xlarge"}}}},
		{"a disjunction is not read", spec(exact(DeviceClass, "", 2, trn2+" || device.attributes['neuron.aws.com'].instanceType == 'trn1.32xlarge'")),
			[]DRARequest{{Count: 2}}},
		{"a negation is not read", spec(exact(DeviceClass, "", 2, "!("+trn2+")")), []DRARequest{{Count: 2}}},
		{"!= elsewhere does not stop the read", spec(exact(DeviceClass, "", 2, trn2+" && device.attributes['neuron.aws.com'].deviceId != 0")),
			[]DRARequest{{Count: 2, InstanceTypes: []string{"trn2.48xlarge"}}}},
		{"two types in one conjunction allow none", spec(exact(DeviceClass, "", 1, trn2, "device.attributes['neuron.aws.com'].instanceType == 'trn1.2xlarge'")),
			[]DRARequest{{Count: 1, InstanceTypes: []string{}}}},
		{"another device class", spec(exact("gpu.nvidia.com", "", 1)), nil},
		{"firstAvailable: the first Neuron subrequest", spec(resourcev1.DeviceRequest{Name: "r", FirstAvailable: []resourcev1.DeviceSubRequest{
			{Name: "gpu", DeviceClassName: "gpu.nvidia.com", Count: 1},
			{Name: "big", DeviceClassName: DeviceClass, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 8},
			{Name: "small", DeviceClassName: DeviceClass, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 4},
		}}), []DRARequest{{Count: 8, FirstAvailable: true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := DRARequestsOf(tc.spec)
			for i := range got {
				// Every request keeps its name and its expressions for CEL evaluation
				// (TestDeviceTemplatesResolve); the table is about what is read from them.
				if got[i].Name == "" {
					t.Errorf("request %d has no name", i)
				}
				var exprs []string
				for _, r := range tc.spec.Devices.Requests {
					subs := []resourcev1.DeviceSubRequest{}
					if r.Exactly != nil {
						subs = append(subs, resourcev1.DeviceSubRequest{Name: "", Selectors: r.Exactly.Selectors})
					}
					subs = append(subs, r.FirstAvailable...)
					for _, sub := range subs {
						if got[i].Name == r.Name || got[i].Name == r.Name+"/"+sub.Name {
							for _, sel := range sub.Selectors {
								exprs = append(exprs, sel.CEL.Expression)
							}
						}
					}
				}
				if !slices.Equal(got[i].Selectors, exprs) {
					t.Errorf("request %s: selectors %q, want %q", got[i].Name, got[i].Selectors, exprs)
				}
				got[i].Name, got[i].Selectors = "", nil
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("DRARequestsOf = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestFormatSizes(t *testing.T) {
	for _, tc := range []struct {
		sizes []int
		unit  topology.Unit
		want  string
	}{
		{[]int{1}, topology.UnitDevice, "1 device"},
		{[]int{1, 4, 8, 16}, topology.UnitDevice, "1, 4, 8 or 16 devices"},
		{[]int{1, 2, 3, 4}, topology.UnitDevice, "1 to 4 devices"},
		{[]int{1, 2, 8, 16, 32}, topology.UnitCore, "1, 2, 8, 16 or 32 cores"},
		{[]int{1, 2, 3, 4, 16, 32, 64}, topology.UnitCore, "1 to 4, 16, 32 or 64 cores"},
	} {
		if got := FormatSizes(tc.sizes, tc.unit); got != tc.want {
			t.Errorf("FormatSizes(%v) = %q, want %q", tc.sizes, got, tc.want)
		}
	}
}

func TestNewNodeLabelsAndTaint(t *testing.T) {
	it, _ := topology.DefaultCatalog().Lookup("trn1.32xlarge")
	want := map[string]string{
		"node.kubernetes.io/instance-type": "trn1.32xlarge", "karpenter.k8s.aws/instance-family": "trn1",
		"kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux", "kube-neuron.io/allocation-mode": "dra",
	}
	if got := NewNodeLabels(it, labels.AllocationModeDRA); !reflect.DeepEqual(got, want) {
		t.Errorf("NewNodeLabels = %v, want %v", got, want)
	}
	if got := NeuronTaint(); got.ToString() != "aws.amazon.com/neuron=true:NoSchedule" {
		t.Errorf("NeuronTaint = %s", got.ToString())
	}
}
