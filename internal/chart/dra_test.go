package chart

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/kube-neuron/kube-neuron/internal/autoscaler"
	"github.com/kube-neuron/kube-neuron/internal/labels"
)

const (
	draNS        = "neuron-dra-driver"
	draDaemonSet = "neuron-dra-driver-kubelet-plugin"
	draSA        = "neuron-dra-driver-sa"
	draPolicy    = "neuron-dra-driver-resourceslices-policy"
	computeType  = "eks.amazonaws.com/compute-type"
)

// seed003 is the --set flags of seed 003's install command: the DRA driver instead of the
// device plugin.
var seed003 = []string{"devicePlugin.enabled=false", "npd.enabled=false", "draDriver.enabled=true"}

// TestDRASeedInstall renders seed 003's install command: the DRA driver's objects and no device
// plugin. The DeviceClass decodes as resource.k8s.io/v1 (newTypes has no other version).
func TestDRASeedInstall(t *testing.T) {
	t.Parallel()
	m := render(t, seed003...)
	if got, want := m.names(), objects(draObjects); !slices.Equal(got, want) {
		t.Fatalf("rendered objects:\n  got  %q\n  want %q", got, want)
	}
	if m.find("DaemonSet", "kube-system", "neuron-device-plugin") != nil {
		t.Errorf("the device plugin DaemonSet is rendered")
	}
	checkDRA(t, m)
	checkDRADriver(t, m)
}

// TestDRAWithDevicePlugin: with devicePlugin.allowWithDRA both render (TestComponentPods
// checks that the DRA driver then runs only on the nodes labelled for it).
func TestDRAWithDevicePlugin(t *testing.T) {
	t.Parallel()
	m := render(t, "draDriver.enabled=true", "devicePlugin.allowWithDRA=true", "npd.enabled=false")
	checkDevicePlugin(t, m, "kube-system")
	checkDRADriver(t, m)
}

// checkDRADriver checks the kubelet plugin DaemonSet, its RBAC and the ResourceSlice policy with
// the default values; TestComponentPods checks its security context, affinity and env.
func checkDRADriver(t *testing.T, m manifest) {
	t.Helper()
	ds := get[appsv1.DaemonSet](t, m, "DaemonSet", draNS, draDaemonSet)
	wantLabels := map[string]string{
		"app":                         draDaemonSet,
		"app.kubernetes.io/name":      "neuron-dra-driver",
		"app.kubernetes.io/instance":  release,
		"app.kubernetes.io/component": "dra-driver",
	}
	pod := ds.Spec.Template
	for k, v := range wantLabels {
		if ds.Labels[k] != v || pod.Labels[k] != v {
			t.Errorf("label %s: DaemonSet %q, pod %q, want %q", k, ds.Labels[k], pod.Labels[k], v)
		}
	}
	for k, v := range ds.Spec.Selector.MatchLabels {
		if pod.Labels[k] != v {
			t.Errorf("the selector %s=%s does not match the pod labels %v", k, v, pod.Labels)
		}
	}
	wantStrategy := appsv1.DaemonSetUpdateStrategy{
		Type: appsv1.RollingUpdateDaemonSetStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDaemonSet{
			MaxUnavailable: ptr.To(intstr.FromInt32(0)),
			MaxSurge:       ptr.To(intstr.FromInt32(1)),
		},
	}
	if !reflect.DeepEqual(ds.Spec.UpdateStrategy, wantStrategy) {
		t.Errorf("updateStrategy = %+v, want RollingUpdate maxUnavailable 0 maxSurge 1", ds.Spec.UpdateStrategy)
	}

	spec := pod.Spec
	if spec.ServiceAccountName != draSA || spec.PriorityClassName != "system-node-critical" {
		t.Errorf("serviceAccountName %q priorityClassName %q, want %s system-node-critical", spec.ServiceAccountName, spec.PriorityClassName, draSA)
	}
	if spec.HostNetwork || spec.HostPID || spec.HostIPC {
		t.Errorf("the DRA driver needs no host namespaces")
	}
	wantTolerations := []corev1.Toleration{
		{Key: "CriticalAddonsOnly", Operator: corev1.TolerationOpExists},
		{Key: labels.NeuronTaintKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: autoscaler.LaunchingTaintKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: "sagemaker.amazonaws.com/node-health-status", Operator: corev1.TolerationOpEqual, Value: "Unschedulable", Effect: corev1.TaintEffectNoSchedule},
	}
	if !reflect.DeepEqual(spec.Tolerations, wantTolerations) {
		t.Errorf("tolerations = %+v, want %+v", spec.Tolerations, wantTolerations)
	}
	if len(spec.NodeSelector) != 0 {
		t.Errorf("nodeSelector = %v, want none (the affinity says where it runs)", spec.NodeSelector)
	}

	if len(spec.Containers) != 1 || len(spec.InitContainers) != 0 {
		t.Fatalf("want exactly one container, got %d (+%d init)", len(spec.Containers), len(spec.InitContainers))
	}
	c := spec.Containers[0]
	if c.Name != "neuron-dra-driver" || c.Image != testRegistry+"/neuron-dra-driver:0.1.0" || c.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("container %q image %q pull %q, want neuron-dra-driver %s/neuron-dra-driver:0.1.0 IfNotPresent", c.Name, c.Image, c.ImagePullPolicy, testRegistry)
	}
	if !slices.Equal(c.Command, []string{"/neuron-dra-driver"}) || len(c.Args) != 0 {
		t.Errorf("command %q args %q, want [/neuron-dra-driver] and no args", c.Command, c.Args)
	}
	checkDRAPorts(t, c, 51515, 9465)
	checkResources(t, c.Resources, "10m", "128Mi", "100m", "256Mi")
	checkMounts(t, spec, c, []mount{
		{"/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins_registry", corev1.HostPathDirectory, false},
		{"/var/lib/kubelet/plugins", "/var/lib/kubelet/plugins", corev1.HostPathDirectory, false},
		{"/var/run/cdi", "/var/run/cdi", corev1.HostPathDirectoryOrCreate, false},
		{"/sys", "/sys", corev1.HostPathDirectory, true},
		{"/opt/aws/neuron", "/opt/aws/neuron", corev1.HostPathDirectoryOrCreate, true},
	})

	checkDRARBAC(t, m)
	checkDRAPolicy(t, m)
}

// checkDRAAffinity checks the required node affinity: a Neuron node (checkNeuronAffinity), no
// EKS Fargate, hybrid or Auto Mode node, and the allocation-mode rule that keeps it off the
// device plugin's nodes.
func checkDRAAffinity(t *testing.T, spec corev1.PodSpec, instances []string, withDevicePlugin bool) {
	t.Helper()
	if len(spec.NodeSelector) != 0 {
		t.Errorf("nodeSelector = %v, want none (the affinity says where it runs)", spec.NodeSelector)
	}
	mode := corev1.NodeSelectorRequirement{Key: labels.AllocationMode, Operator: corev1.NodeSelectorOpNotIn, Values: []string{labels.AllocationModeDevicePlugin}}
	if withDevicePlugin {
		mode = corev1.NodeSelectorRequirement{Key: labels.AllocationMode, Operator: corev1.NodeSelectorOpIn, Values: []string{labels.AllocationModeDRA}}
	}
	checkNeuronAffinity(t, spec.Affinity, wantFamilies(t), instances, mode, notEKSComputeTypes)
}

// checkDRAPorts checks the gRPC health port (liveness, as published) and the metrics port
// (readiness on /readyz).
func checkDRAPorts(t *testing.T, c corev1.Container, health, metrics int32) {
	t.Helper()
	wantPorts := []corev1.ContainerPort{
		{Name: "healthcheck", ContainerPort: health, Protocol: corev1.ProtocolTCP},
		{Name: "metrics", ContainerPort: metrics, Protocol: corev1.ProtocolTCP},
	}
	if !reflect.DeepEqual(c.Ports, wantPorts) {
		t.Errorf("ports = %+v, want %+v", c.Ports, wantPorts)
	}
	wantLiveness := &corev1.Probe{
		ProbeHandler:        corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: health, Service: ptr.To("liveness")}},
		InitialDelaySeconds: 30, PeriodSeconds: 10, TimeoutSeconds: 5, FailureThreshold: 3,
	}
	if !reflect.DeepEqual(c.LivenessProbe, wantLiveness) {
		t.Errorf("livenessProbe = %+v, want %+v", c.LivenessProbe, wantLiveness)
	}
	wantReadiness := &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromString("metrics")}},
		PeriodSeconds: 10, TimeoutSeconds: 5, FailureThreshold: 3,
	}
	if !reflect.DeepEqual(c.ReadinessProbe, wantReadiness) {
		t.Errorf("readinessProbe = %+v, want %+v", c.ReadinessProbe, wantReadiness)
	}
}

// checkDRARBAC checks the published names and least privilege: ResourceSlices of its node
// (narrowed by the policy), the claims it prepares, its node's labels, its node's pods (the
// holders in its metrics), events.
func checkDRARBAC(t *testing.T, m manifest) {
	t.Helper()
	get[corev1.ServiceAccount](t, m, "ServiceAccount", draNS, draSA)
	role := get[rbacv1.ClusterRole](t, m, "ClusterRole", "", "neuron-dra-driver-clusterrole")
	wantRules := []rbacv1.PolicyRule{
		{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceslices"}, Verbs: []string{"list", "watch", "create", "update", "delete"}},
		{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
	}
	if !reflect.DeepEqual(role.Rules, wantRules) {
		t.Errorf("ClusterRole neuron-dra-driver-clusterrole rules =\n  %+v\nwant\n  %+v", role.Rules, wantRules)
	}
	checkBinding(t, get[rbacv1.ClusterRoleBinding](t, m, "ClusterRoleBinding", "", "neuron-dra-driver-binding"),
		"neuron-dra-driver-clusterrole", draNS, draSA)
}

// checkDRAPolicy checks the ValidatingAdmissionPolicy that keeps each driver pod to the
// ResourceSlices of its own node, and its binding.
func checkDRAPolicy(t *testing.T, m manifest) {
	t.Helper()
	vap := get[admissionregistrationv1.ValidatingAdmissionPolicy](t, m, "ValidatingAdmissionPolicy", "", draPolicy)
	spec := vap.Spec
	wantConstraints := &admissionregistrationv1.MatchResources{
		MatchPolicy: ptr.To(admissionregistrationv1.Equivalent),
		ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete},
			Rule: admissionregistrationv1.Rule{
				APIGroups: []string{"resource.k8s.io"}, APIVersions: []string{"v1"}, Resources: []string{"resourceslices"},
			},
		}}},
	}
	if !reflect.DeepEqual(spec.MatchConstraints, wantConstraints) {
		t.Errorf("matchConstraints = %+v, want %+v", spec.MatchConstraints, wantConstraints)
	}
	if spec.FailurePolicy == nil || *spec.FailurePolicy != admissionregistrationv1.Fail || spec.ParamKind != nil || len(spec.AuditAnnotations) != 0 {
		t.Errorf("failurePolicy %v paramKind %+v auditAnnotations %+v, want Fail and neither", spec.FailurePolicy, spec.ParamKind, spec.AuditAnnotations)
	}
	// The user the policy applies to is the DaemonSet's service account.
	user := "system:serviceaccount:" + draNS + ":" + get[appsv1.DaemonSet](t, m, "DaemonSet", draNS, draDaemonSet).Spec.Template.Spec.ServiceAccountName
	wantConditions := []admissionregistrationv1.MatchCondition{{Name: "isDRADriver", Expression: `request.userInfo.username == "` + user + `"`}}
	if !reflect.DeepEqual(spec.MatchConditions, wantConditions) {
		t.Errorf("matchConditions = %+v, want %+v", spec.MatchConditions, wantConditions)
	}
	wantVariables := []admissionregistrationv1.Variable{
		{Name: "userNodeName", Expression: `request.userInfo.extra[?'authentication.kubernetes.io/node-name'][0].orValue('')`},
		{Name: "objectNodeName", Expression: `(request.operation == 'DELETE' ? oldObject : object).spec.?nodeName.orValue('')`},
	}
	if !reflect.DeepEqual(spec.Variables, wantVariables) {
		t.Errorf("variables = %+v, want %+v", spec.Variables, wantVariables)
	}
	v := spec.Validations
	if len(v) != 2 {
		t.Fatalf("validations = %+v, want 2", v)
	}
	if v[0].Expression != "variables.userNodeName != ''" || !strings.Contains(v[0].Message, "names no node") || !strings.Contains(v[0].Message, "ServiceAccountTokenPodNodeInfo") {
		t.Errorf("validation 0 = %+v, want userNodeName != '' with a message about the token's node", v[0])
	}
	if v[1].Expression != "variables.userNodeName == variables.objectNodeName" || v[1].Message != "" ||
		!strings.Contains(v[1].MessageExpression, "variables.userNodeName") || !strings.Contains(v[1].MessageExpression, "variables.objectNodeName") {
		t.Errorf("validation 1 = %+v, want userNodeName == objectNodeName with a messageExpression naming both", v[1])
	}
	for i, val := range v {
		if val.Reason != nil {
			t.Errorf("validation %d reason = %v, want the default (Invalid)", i, *val.Reason)
		}
	}

	b := get[admissionregistrationv1.ValidatingAdmissionPolicyBinding](t, m, "ValidatingAdmissionPolicyBinding", "", draPolicy+"-binding")
	wantBinding := admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
		PolicyName:        draPolicy,
		ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
	}
	if !reflect.DeepEqual(b.Spec, wantBinding) {
		t.Errorf("binding spec = %+v, want %+v", b.Spec, wantBinding)
	}
}

// TestDRAValuesReachTheDaemonSet checks that every draDriver value lands where it should.
func TestDRAValuesReachTheDaemonSet(t *testing.T) {
	t.Parallel()
	m := render(t, append(slices.Clone(seed003),
		"image.registry=registry.example.com/kube-neuron",
		"image.tag=v9",
		"image.pullPolicy=Always",
		"imagePullSecrets[0].name=pull",
		"neuronInstances={trn1.2xlarge,trn2.48xlarge}",
		"draDriver.args={--v=6}",
		"draDriver.sysfsRoot=/host",
		"draDriver.cdiRoot=/etc/cdi",
		"draDriver.kubeletRegistrarDirectoryPath=/kubelet/registry",
		"draDriver.kubeletPluginsDirectoryPath=/kubelet/plugins",
		"draDriver.healthcheckPort=50000",
		"draDriver.healthInterval=5s",
		"draDriver.metricsPort=9000",
		"draDriver.uncorrectableErrorTaintEffect=NoExecute",
		"draDriver.validatingAdmissionPolicy=false",
		"draDriver.priorityClassName=neuron",
		"draDriver.resources.limits.memory=1Gi",
		"draDriver.tolerations[0].key=dedicated",
		"draDriver.tolerations[0].operator=Equal",
		"draDriver.tolerations[0].value=ml",
		"draDriver.tolerations[0].effect=NoSchedule",
	)...)
	want := slices.DeleteFunc(objects(draObjects), func(s string) bool { return strings.HasPrefix(s, "ValidatingAdmissionPolicy") })
	if got := m.names(); !slices.Equal(got, want) {
		t.Fatalf("rendered %q, want %q (no policy)", got, want)
	}
	checkDRARBAC(t, m)
	spec := get[appsv1.DaemonSet](t, m, "DaemonSet", draNS, draDaemonSet).Spec.Template.Spec
	c := spec.Containers[0]
	if c.Image != "registry.example.com/kube-neuron/neuron-dra-driver:v9" || c.ImagePullPolicy != corev1.PullAlways {
		t.Errorf("image %q pull %q", c.Image, c.ImagePullPolicy)
	}
	if !reflect.DeepEqual(spec.ImagePullSecrets, []corev1.LocalObjectReference{{Name: "pull"}}) {
		t.Errorf("imagePullSecrets = %+v", spec.ImagePullSecrets)
	}
	if !slices.Equal(c.Args, []string{"--v=6"}) {
		t.Errorf("args = %q", c.Args)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	for k, v := range map[string]string{
		"NEURON_SYSFS_ROOT":                       "/host",
		"CDI_ROOT":                                "/etc/cdi",
		"KUBELET_REGISTRAR_DIRECTORY_PATH":        "/kubelet/registry",
		"KUBELET_PLUGINS_DIRECTORY_PATH":          "/kubelet/plugins",
		"HEALTHCHECK_PORT":                        "50000",
		"NEURON_HEALTH_INTERVAL":                  "5s",
		"NEURON_METRICS_ADDRESS":                  ":9000",
		"NEURON_UNCORRECTABLE_ERROR_TAINT_EFFECT": "NoExecute",
	} {
		if env[k] != v {
			t.Errorf("env %s = %q, want %q", k, env[k], v)
		}
	}
	checkDRAPorts(t, c, 50000, 9000)
	if spec.PriorityClassName != "neuron" {
		t.Errorf("priorityClassName = %q", spec.PriorityClassName)
	}
	checkResources(t, c.Resources, "10m", "128Mi", "100m", "1Gi")
	checkDRAAffinity(t, spec, []string{"trn1.2xlarge", "trn2.48xlarge"}, false)
	if n := len(spec.Tolerations); n != 5 || spec.Tolerations[4] != (corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "ml", Effect: corev1.TaintEffectNoSchedule}) {
		t.Errorf("tolerations = %+v, want the four fixed ones and dedicated=ml:NoSchedule", spec.Tolerations)
	}
	checkMounts(t, spec, c, []mount{
		{"/kubelet/registry", "/kubelet/registry", corev1.HostPathDirectory, false},
		{"/kubelet/plugins", "/kubelet/plugins", corev1.HostPathDirectory, false},
		{"/etc/cdi", "/etc/cdi", corev1.HostPathDirectoryOrCreate, false},
		{"/host/sys", "/sys", corev1.HostPathDirectory, true},
		{"/host/opt/aws/neuron", "/opt/aws/neuron", corev1.HostPathDirectoryOrCreate, true},
	})
}

func TestDRASchemaRejectsBadValues(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		set  string
		want string // in helm's message
	}{
		{"draDriver.enbled=true", "additional properties 'enbled' not allowed"},
		{"draDriver.hostNetwork=true", "additional properties 'hostNetwork' not allowed"},
		{"draDriver.healthcheckPort=0", "/draDriver/healthcheckPort"},
		{"draDriver.metricsPort=70000", "/draDriver/metricsPort"},
		{"draDriver.healthInterval=soon", "/draDriver/healthInterval"},
		{"draDriver.uncorrectableErrorTaintEffect=None", "/draDriver/uncorrectableErrorTaintEffect"},
		{"draDriver.sysfsRoot=host", "/draDriver/sysfsRoot"},
		{"draDriver.cdiRoot=var/run/cdi", "/draDriver/cdiRoot"},
		{"draDriver.kubeletRegistrarDirectoryPath=plugins_registry", "/draDriver/kubeletRegistrarDirectoryPath"},
		{"draDriver.kubeletPluginsDirectoryPath=plugins", "/draDriver/kubeletPluginsDirectoryPath"},
		{"draDriver.validatingAdmissionPolicy=maybe", "/draDriver/validatingAdmissionPolicy"},
		{"draDriver.args=--v=6", "/draDriver/args"},
		{"draDriver.resources.requests.gpu=1", "additional properties 'gpu' not allowed"},
		{"draDriver.tolerations[0].effect=Sometimes", "/draDriver/tolerations/0/effect"},
	} {
		t.Run(tc.set, func(t *testing.T) {
			t.Parallel()
			out, err := helmTemplate(t, append(slices.Clone(seed003), tc.set)...)
			if err == nil {
				t.Fatalf("rendered, want a schema error:\n%s", out)
			}
			if msg := err.Error(); !strings.Contains(msg, "values don't meet the specifications of the schema") || !strings.Contains(msg, tc.want) {
				t.Errorf("error does not mention %q:\n%v", tc.want, err)
			}
		})
	}
}

// TestDRAPortClash: the gRPC health service and the metrics server need two ports.
func TestDRAPortClash(t *testing.T) {
	t.Parallel()
	const msg = "draDriver.healthcheckPort and draDriver.metricsPort are both 9465: the DRA driver serves its gRPC health service and its HTTP metrics on two ports. Set one of them to another port."
	out, err := helmTemplate(t, append(slices.Clone(seed003), "draDriver.healthcheckPort=9465")...)
	if err == nil {
		t.Fatalf("rendered, want failure %q:\n%s", msg, out)
	}
	if !strings.Contains(err.Error(), msg) {
		t.Errorf("error does not say %q:\n%v", msg, err)
	}
	// The same values are fine while the DRA driver is off.
	render(t, "draDriver.healthcheckPort=9465")
}

// TestDevicePluginAndDRANeverShareANode renders every combination of the two components and
// evaluates both DaemonSets' node affinity against nodes with every mix of instance type,
// allocation-mode label and EKS compute type: no node may run both, and each runs the expected
// one.
func TestDevicePluginAndDRANeverShareANode(t *testing.T) {
	t.Parallel()
	var nodes []map[string]string
	for _, it := range []string{"", "trn2.48xlarge", "inf2.xlarge", "m5.large"} {
		for _, mode := range []string{"", "none", labels.AllocationModeDevicePlugin, labels.AllocationModeDRA, "other"} {
			for _, ct := range []string{"", "ec2", "fargate", "hybrid", "auto"} {
				l := map[string]string{}
				if it != "" {
					l[labels.InstanceType] = it
				}
				switch mode {
				case "":
				case "none":
					l[labels.AllocationMode] = "" // present, empty
				default:
					l[labels.AllocationMode] = mode
				}
				if ct != "" {
					l[computeType] = ct
				}
				nodes = append(nodes, l)
			}
		}
	}
	// want says which DaemonSet should run on a node: the device plugin wherever it is
	// installed and the node is not labelled dra; the DRA driver on the nodes labelled dra,
	// and, without the device plugin, on every node not labelled device-plugin; both only on
	// Neuron instance types, and neither on Fargate, hybrid or Auto Mode nodes (EKS runs its own
	// Neuron support there).
	want := func(devicePlugin, dra bool, l map[string]string) []string {
		if it := l[labels.InstanceType]; it != "trn2.48xlarge" && it != "inf2.xlarge" {
			return nil
		}
		mode, ct := l[labels.AllocationMode], l[computeType]
		eks := ct == "fargate" || ct == "hybrid" || ct == "auto"
		switch {
		case devicePlugin && mode != labels.AllocationModeDRA && !eks:
			return []string{"neuron-device-plugin"}
		case dra && ct != "fargate" && ct != "hybrid" && ct != "auto" &&
			(mode == labels.AllocationModeDRA || !devicePlugin && mode != labels.AllocationModeDevicePlugin):
			return []string{draDaemonSet}
		}
		return nil
	}
	for _, devicePlugin := range []bool{false, true} {
		for _, allow := range []bool{false, true} {
			for _, dra := range []bool{false, true} {
				sets := []string{
					"npd.enabled=false",
					fmt.Sprintf("devicePlugin.enabled=%t", devicePlugin),
					fmt.Sprintf("devicePlugin.allowWithDRA=%t", allow),
					fmt.Sprintf("draDriver.enabled=%t", dra),
				}
				t.Run(strings.Join(sets[1:], " "), func(t *testing.T) {
					t.Parallel()
					if devicePlugin && dra && !allow {
						if _, err := helmTemplate(t, sets...); err == nil {
							t.Fatal("rendered, want the device plugin / DRA contradiction error")
						}
						return
					}
					m := render(t, sets...)
					daemonSets := map[string]corev1.PodSpec{}
					for _, o := range m {
						if ds, ok := o.Obj.(*appsv1.DaemonSet); ok {
							daemonSets[ds.Name] = ds.Spec.Template.Spec
						}
					}
					if got, wantDS := sorted(slices.Collect(maps.Keys(daemonSets))), wantDaemonSets(devicePlugin, dra); !slices.Equal(got, wantDS) {
						t.Fatalf("DaemonSets %q, want %q", got, wantDS)
					}
					for _, l := range nodes {
						var got []string
						for _, name := range sorted(slices.Collect(maps.Keys(daemonSets))) {
							if runsOn(t, daemonSets[name], l) {
								got = append(got, name)
							}
						}
						if len(got) > 1 {
							t.Errorf("node %v runs both %q", l, got)
						}
						if w := want(devicePlugin, dra, l); !slices.Equal(got, w) {
							t.Errorf("node %v runs %q, want %q", l, got, w)
						}
					}
				})
			}
		}
	}
}

func wantDaemonSets(devicePlugin, dra bool) []string {
	var s []string
	if devicePlugin {
		s = append(s, "neuron-device-plugin")
	}
	if dra {
		s = append(s, draDaemonSet)
	}
	return sorted(s)
}

// nodeSelectorOps maps node selector operators to label selector operators; a required node
// affinity term is a label selector over the node's labels (the scheduler's nodeaffinity
// helper converts them the same way).
var nodeSelectorOps = map[corev1.NodeSelectorOperator]selection.Operator{
	corev1.NodeSelectorOpIn:           selection.In,
	corev1.NodeSelectorOpNotIn:        selection.NotIn,
	corev1.NodeSelectorOpExists:       selection.Exists,
	corev1.NodeSelectorOpDoesNotExist: selection.DoesNotExist,
	corev1.NodeSelectorOpGt:           selection.GreaterThan,
	corev1.NodeSelectorOpLt:           selection.LessThan,
}

// runsOn reports whether a pod with this spec may be scheduled to a node with these labels, by
// its nodeSelector and required node affinity (terms ORed, expressions ANDed, an empty term
// matches nothing).
func runsOn(t *testing.T, spec corev1.PodSpec, nodeLabels map[string]string) bool {
	t.Helper()
	set := k8slabels.Set(nodeLabels)
	if !k8slabels.SelectorFromSet(spec.NodeSelector).Matches(set) {
		return false
	}
	if spec.Affinity == nil || spec.Affinity.NodeAffinity == nil || spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return true
	}
	for _, term := range spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		if len(term.MatchFields) != 0 {
			t.Fatalf("matchFields %+v: not evaluated by this test", term.MatchFields)
		}
		if len(term.MatchExpressions) == 0 {
			continue
		}
		sel := k8slabels.NewSelector()
		for _, e := range term.MatchExpressions {
			op, ok := nodeSelectorOps[e.Operator]
			if !ok {
				t.Fatalf("unknown operator in %+v", e)
			}
			r, err := k8slabels.NewRequirement(e.Key, op, e.Values)
			if err != nil {
				t.Fatalf("%+v: %v", e, err)
			}
			sel = sel.Add(*r)
		}
		if sel.Matches(set) {
			return true
		}
	}
	return false
}

func TestDRANotes(t *testing.T) {
	t.Parallel()
	const (
		checkDS      = "kubectl get ds neuron-dra-driver-kubelet-plugin -n neuron-dra-driver"
		checkSlices  = "kubectl get resourceslices --field-selector spec.driver=neuron.aws.com"
		checkDC      = "kubectl get deviceclass neuron.aws.com"
		notPlugin    = "not labelled kube-neuron.io/allocation-mode=device-plugin"
		labelDRA     = "kubectl label node <node> kube-neuron.io/allocation-mode=dra"
		policy       = "ValidatingAdmissionPolicy neuron-dra-driver-resourceslices-policy"
		devicePlugin = "kubectl get ds neuron-device-plugin -n kube-system"
	)
	for _, tc := range []struct {
		name      string
		sets      []string
		want, not []string
	}{
		{"seed 003", seed003, []string{checkDS, checkSlices, checkDC, notPlugin, policy}, []string{labelDRA, devicePlugin}},
		{"with the device plugin", []string{"draDriver.enabled=true", "devicePlugin.allowWithDRA=true"}, []string{checkDS, labelDRA, devicePlugin}, []string{notPlugin}},
		{"no policy", append(slices.Clone(seed003), "draDriver.validatingAdmissionPolicy=false"), []string{checkDS}, []string{policy}},
		{"defaults", nil, nil, []string{checkDS, checkSlices}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			notes := renderNotes(t, tc.sets...)
			for _, s := range tc.want {
				if !strings.Contains(notes, s) {
					t.Errorf("NOTES.txt lacks %q:\n%s", s, notes)
				}
			}
			for _, s := range tc.not {
				if strings.Contains(notes, s) {
					t.Errorf("NOTES.txt has %q:\n%s", s, notes)
				}
			}
		})
	}
}
