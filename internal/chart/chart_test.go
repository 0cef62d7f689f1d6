package chart

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/kube-neuron/kube-neuron/internal/autoscaler"
	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// The objects of each component, as "Kind namespace/name".
var (
	devicePluginObjects = []string{
		"ClusterRole /neuron-device-plugin",
		"ClusterRoleBinding /neuron-device-plugin",
		"DaemonSet kube-system/neuron-device-plugin",
		"ServiceAccount kube-system/neuron-device-plugin",
		"NetworkPolicy kube-system/neuron-device-plugin-metrics",
		dashboardObject,
		"ValidatingAdmissionPolicy /neuron-device-plugin-node-status-policy",
		"ValidatingAdmissionPolicyBinding /neuron-device-plugin-node-status-policy-binding",
	}
	npdObjects = []string{
		"ClusterRole /neuron-node-problem-detector",
		"ClusterRoleBinding /neuron-node-problem-detector",
		"ConfigMap neuron-healthcheck-system/node-problem-detector-config",
		"DaemonSet neuron-healthcheck-system/node-problem-detector",
		"Namespace /neuron-healthcheck-system",
		"ServiceAccount neuron-healthcheck-system/node-problem-detector",
	}
	draObjects = []string{
		"ClusterRole /neuron-dra-driver-clusterrole",
		"ClusterRoleBinding /neuron-dra-driver-binding",
		"DaemonSet neuron-dra-driver/neuron-dra-driver-kubelet-plugin",
		"DeviceClass /neuron.aws.com",
		"Namespace /neuron-dra-driver",
		"ServiceAccount neuron-dra-driver/neuron-dra-driver-sa",
		"ValidatingAdmissionPolicy /neuron-dra-driver-resourceslices-policy",
		"ValidatingAdmissionPolicyBinding /neuron-dra-driver-resourceslices-policy-binding",
		"NetworkPolicy neuron-dra-driver/neuron-dra-driver-metrics",
		dashboardObject,
	}
)

// objects returns the names of the groups, sorted, each once (several groups list the dashboard,
// which the chart renders once).
func objects(groups ...[]string) []string {
	s := slices.Concat(groups...)
	slices.Sort(s)
	return slices.Compact(s)
}

// TestSeedInstallCommands renders the chart with the --set flags of the seeds' install commands.
func TestSeedInstallCommands(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		sets []string
		want []string
	}{{
		name: "(a) defaults: device plugin and node problem detector",
		want: objects(devicePluginObjects, npdObjects),
	}, {
		name: "(b) device plugin only",
		sets: []string{"npd.enabled=false"},
		want: objects(devicePluginObjects),
	}, {
		name: "(c) scheduler extender with a second scheduler",
		sets: []string{"scheduler.enabled=true", "npd.enabled=false"},
		want: objects(devicePluginObjects, mySchedulerObjects), // my-scheduler in the default mode, the plugin; checked in TestSchedulerSeedInstallCommands
	}, {
		name: "(d) scheduler extender with the default scheduler",
		sets: []string{"scheduler.enabled=true", "scheduler.customScheduler.enabled=false", "scheduler.defaultScheduler.enabled=true", "npd.enabled=false"},
		want: objects(devicePluginObjects, extenderObjects, pdbObjects, defaultSchedulerObjects),
	}, {
		name: "(e) DRA driver instead of the device plugin",
		sets: []string{"devicePlugin.enabled=false", "npd.enabled=false", "draDriver.enabled=true"},
		want: objects(draObjects),
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := render(t, tc.sets...)
			if got := m.names(); !slices.Equal(got, tc.want) {
				t.Fatalf("rendered objects:\n  got  %q\n  want %q", got, tc.want)
			}
			if slices.Contains(tc.want, "DaemonSet kube-system/neuron-device-plugin") {
				checkDevicePlugin(t, m, "kube-system")
			}
			if slices.Contains(tc.want, "DaemonSet neuron-healthcheck-system/node-problem-detector") {
				checkNPD(t, m)
			}
			if slices.Contains(tc.want, "DeviceClass /neuron.aws.com") {
				checkDRA(t, m)
			}
			for _, o := range m {
				l := objectLabels(o.Obj)
				if l["app.kubernetes.io/instance"] != release || l["app.kubernetes.io/part-of"] != "kube-neuron" || l["app.kubernetes.io/managed-by"] != "Helm" {
					t.Errorf("%s: labels %v lack the release labels", o, l)
				}
			}
		})
	}
}

func objectLabels(obj any) map[string]string {
	return reflect.ValueOf(obj).Elem().FieldByName("ObjectMeta").FieldByName("Labels").Interface().(map[string]string)
}

// awsOnlyInstances are the instance types of AWS's chart (1.10.0) whose device counts are not
// public: the chart selects their nodes, the topology catalog does not know them.
var awsOnlyInstances = []string{"inf2e.32xlarge", "trn2e.48xlarge", "trn2n.48xlarge", "trn3en.24xlarge", "trn3n.48xlarge",
	"trn3p.48xlarge", "trn3pd98.48xlarge", "trn3s.48xlarge", "trn3s-es.48xlarge"}

// wantInstances is the default neuronInstances: every catalog type, plus awsOnlyInstances.
func wantInstances(t *testing.T) []string {
	t.Helper()
	s := append(topology.DefaultCatalog().Names(), awsOnlyInstances...)
	slices.Sort(s)
	return slices.Compact(s)
}

// wantFamilies is the default neuronNodes.instanceFamilies: the family of every wantInstances type.
func wantFamilies(t *testing.T) []string {
	t.Helper()
	var s []string
	for _, it := range wantInstances(t) {
		family, _, _ := strings.Cut(it, ".")
		s = append(s, family)
	}
	slices.Sort(s)
	return slices.Compact(s)
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// checkDevicePlugin checks the device plugin's DaemonSet and RBAC with the default values;
// TestComponentPods checks its security context, affinity and env.
func checkDevicePlugin(t *testing.T, m manifest, ns string) {
	t.Helper()
	ds := get[appsv1.DaemonSet](t, m, "DaemonSet", ns, "neuron-device-plugin")
	wantLabels := map[string]string{
		"app.kubernetes.io/name":      "neuron-device-plugin",
		"app.kubernetes.io/instance":  release,
		"app.kubernetes.io/component": "device-plugin",
	}
	for k, v := range wantLabels {
		if ds.Labels[k] != v {
			t.Errorf("DaemonSet label %s = %q, want %q", k, ds.Labels[k], v)
		}
	}
	pod := ds.Spec.Template
	for k, v := range ds.Spec.Selector.MatchLabels {
		if pod.Labels[k] != v {
			t.Errorf("the selector %s=%s does not match the pod labels %v", k, v, pod.Labels)
		}
	}
	if got := pod.Labels["name"]; got != "neuron-device-plugin-ds" {
		t.Errorf("pod label name = %q, want the published neuron-device-plugin-ds", got)
	}
	for k, v := range wantLabels {
		if pod.Labels[k] != v {
			t.Errorf("pod label %s = %q, want %q", k, pod.Labels[k], v)
		}
	}
	wantStrategy := appsv1.DaemonSetUpdateStrategy{
		Type:          appsv1.RollingUpdateDaemonSetStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: ptr.To(intstr.FromInt32(1))},
	}
	if !reflect.DeepEqual(ds.Spec.UpdateStrategy, wantStrategy) {
		t.Errorf("updateStrategy = %+v, want RollingUpdate maxUnavailable 1", ds.Spec.UpdateStrategy)
	}

	spec := pod.Spec
	if spec.ServiceAccountName != "neuron-device-plugin" {
		t.Errorf("serviceAccountName = %q", spec.ServiceAccountName)
	}
	if spec.PriorityClassName != "system-node-critical" {
		t.Errorf("priorityClassName = %q", spec.PriorityClassName)
	}
	wantTolerations := []corev1.Toleration{
		{Key: "CriticalAddonsOnly", Operator: corev1.TolerationOpExists},
		{Key: labels.NeuronTaintKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: autoscaler.LaunchingTaintKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
	}
	if !reflect.DeepEqual(spec.Tolerations, wantTolerations) {
		t.Errorf("tolerations = %+v, want %+v", spec.Tolerations, wantTolerations)
	}

	if len(spec.Containers) != 1 || len(spec.InitContainers) != 0 {
		t.Fatalf("want exactly one container, got %d (+%d init)", len(spec.Containers), len(spec.InitContainers))
	}
	c := spec.Containers[0]
	if c.Name != "neuron-device-plugin" || c.Image != testRegistry+"/neuron-device-plugin:0.1.0" || c.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("container %q image %q pull %q, want neuron-device-plugin %s/neuron-device-plugin:0.1.0 IfNotPresent", c.Name, c.Image, c.ImagePullPolicy, testRegistry)
	}
	if !slices.Equal(c.Command, []string{"/neuron-device-plugin"}) || len(c.Args) != 0 {
		t.Errorf("command %q args %q, want [/neuron-device-plugin] and no args", c.Command, c.Args)
	}
	wantPorts := []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9464, Protocol: corev1.ProtocolTCP}}
	if !reflect.DeepEqual(c.Ports, wantPorts) {
		t.Errorf("ports = %+v, want %+v", c.Ports, wantPorts)
	}
	if p := c.LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" || p.HTTPGet.Port != intstr.FromString("metrics") {
		t.Errorf("livenessProbe = %+v, want httpGet /healthz on port metrics", p)
	}
	checkResources(t, c.Resources, "10m", "32Mi", "100m", "128Mi")
	checkMounts(t, spec, c, []mount{
		{"/var/lib/kubelet/device-plugins", "/var/lib/kubelet/device-plugins", corev1.HostPathDirectory, false},
		{"/var/lib/kube-neuron/device-plugin", "/var/lib/kube-neuron/device-plugin", corev1.HostPathDirectoryOrCreate, false},
		{"/var/lib/kubelet/pod-resources", "/var/lib/kubelet/pod-resources", corev1.HostPathDirectory, true},
		{"/sys", "/sys", corev1.HostPathDirectory, true},
		{"/opt/aws/neuron", "/opt/aws/neuron", corev1.HostPathDirectoryOrCreate, true},
	})
	if spec.HostNetwork || spec.HostPID || spec.HostIPC {
		t.Errorf("the device plugin needs no host namespaces")
	}

	checkDevicePluginRBAC(t, m, ns)
}

func checkDevicePluginRBAC(t *testing.T, m manifest, ns string) {
	t.Helper()
	get[corev1.ServiceAccount](t, m, "ServiceAccount", ns, "neuron-device-plugin")
	role := get[rbacv1.ClusterRole](t, m, "ClusterRole", "", "neuron-device-plugin")
	wantRules := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"nodes/status"}, Verbs: []string{"patch"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
	}
	if !reflect.DeepEqual(role.Rules, wantRules) {
		t.Errorf("ClusterRole neuron-device-plugin rules =\n  %+v\nwant\n  %+v", role.Rules, wantRules)
	}
	binding := get[rbacv1.ClusterRoleBinding](t, m, "ClusterRoleBinding", "", "neuron-device-plugin")
	checkBinding(t, binding, "neuron-device-plugin", ns, "neuron-device-plugin")
}

func checkBinding(t *testing.T, b *rbacv1.ClusterRoleBinding, role, ns, sa string) {
	t.Helper()
	wantRef := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role}
	wantSubjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns}}
	if b.RoleRef != wantRef || !reflect.DeepEqual(b.Subjects, wantSubjects) {
		t.Errorf("ClusterRoleBinding %s: roleRef %+v subjects %+v, want %+v %+v", b.Name, b.RoleRef, b.Subjects, wantRef, wantSubjects)
	}
}

// checkNeuronAffinity checks the required node affinity of a Neuron node agent against
// neuronAffinity, the instance lists as sets.
func checkNeuronAffinity(t *testing.T, a *corev1.Affinity, families, instances []string, extra ...corev1.NodeSelectorRequirement) {
	t.Helper()
	if got, want := asSets(a.DeepCopy()), asSets(neuronAffinity(families, instances, extra...).DeepCopy()); !reflect.DeepEqual(got, want) {
		t.Errorf("affinity =\n  %+v\nwant\n  %+v", got, want)
	}
}

// devicePluginExpressions keep the device plugin off the DRA driver's nodes and off EKS's own
// Neuron support (Fargate, hybrid and Auto Mode nodes).
var devicePluginExpressions = []corev1.NodeSelectorRequirement{
	{Key: labels.AllocationMode, Operator: corev1.NodeSelectorOpNotIn, Values: []string{labels.AllocationModeDRA}},
	notEKSComputeTypes,
}

// notEKSComputeTypes keeps every node agent off EKS Fargate, hybrid and Auto Mode nodes.
var notEKSComputeTypes = corev1.NodeSelectorRequirement{Key: computeType, Operator: corev1.NodeSelectorOpNotIn, Values: []string{"fargate", "hybrid", "auto"}}

func checkResources(t *testing.T, r corev1.ResourceRequirements, reqCPU, reqMem, limCPU, limMem string) {
	t.Helper()
	want := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(reqCPU), corev1.ResourceMemory: resource.MustParse(reqMem)},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(limCPU), corev1.ResourceMemory: resource.MustParse(limMem)},
	}
	if len(r.Requests) != len(want.Requests) || len(r.Limits) != len(want.Limits) || len(r.Claims) != 0 {
		t.Errorf("resources = %+v, want %+v", r, want)
		return
	}
	for _, l := range []struct{ got, want corev1.ResourceList }{{r.Requests, want.Requests}, {r.Limits, want.Limits}} {
		for name, q := range l.want {
			if got := l.got[name]; got.Cmp(q) != 0 {
				t.Errorf("resources = %+v, want %+v", r, want)
			}
		}
	}
}

// mount is a hostPath volume mounted into the container.
type mount struct {
	mountPath, hostPath string
	hostPathType        corev1.HostPathType
	readOnly            bool
}

// checkMounts checks that the container mounts exactly these hostPath volumes, and that the pod
// has no other volume.
func checkMounts(t *testing.T, spec corev1.PodSpec, c corev1.Container, want []mount) {
	t.Helper()
	volumes := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = v
	}
	var got []mount
	for _, vm := range c.VolumeMounts {
		v, ok := volumes[vm.Name]
		if !ok || v.HostPath == nil {
			t.Errorf("mount %s: volume %q is not a hostPath volume of the pod", vm.MountPath, vm.Name)
			continue
		}
		if vm.SubPath != "" || vm.MountPropagation != nil {
			t.Errorf("mount %s: unexpected subPath or propagation", vm.MountPath)
		}
		got = append(got, mount{vm.MountPath, v.HostPath.Path, ptr.Deref(v.HostPath.Type, ""), vm.ReadOnly})
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("mounts =\n  %+v\nwant\n  %+v", got, want)
	}
	if len(spec.Volumes) != len(want) {
		t.Errorf("the pod has %d volumes, want %d", len(spec.Volumes), len(want))
	}
}

// kernelMonitor is node-problem-detector's system log monitor configuration.
type kernelMonitor struct {
	Plugin     string `json:"plugin"`
	LogPath    string `json:"logPath"`
	Lookback   string `json:"lookback"`
	BufferSize int    `json:"bufferSize"`
	Source     string `json:"source"`
	Conditions []struct {
		Type    string `json:"type"`
		Reason  string `json:"reason"`
		Message string `json:"message"`
	} `json:"conditions"`
	Rules []struct {
		Type      string `json:"type"`
		Condition string `json:"condition"`
		Reason    string `json:"reason"`
		Pattern   string `json:"pattern"`
	} `json:"rules"`
}

// checkNPD checks node-problem-detector's objects with the default values; TestComponentPods
// checks its security context, affinity and env.
func checkNPD(t *testing.T, m manifest) {
	t.Helper()
	const ns = "neuron-healthcheck-system"
	get[corev1.Namespace](t, m, "Namespace", "", ns)
	cm := get[corev1.ConfigMap](t, m, "ConfigMap", ns, "node-problem-detector-config")
	var km kernelMonitor
	dec := json.NewDecoder(strings.NewReader(cm.Data["kernel-monitor.json"]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&km); err != nil {
		t.Fatalf("kernel-monitor.json: %v", err)
	}
	if km.Plugin != "kmsg" || km.LogPath != "/dev/kmsg" || km.Lookback != "5m" || km.BufferSize != 10 || km.Source != "kernel-monitor" {
		t.Errorf("kernel monitor = %+v", km)
	}
	if len(km.Conditions) != 1 || km.Conditions[0].Type != "NeuronHealth" || km.Conditions[0].Reason != "NeuronHasNoError" {
		t.Errorf("conditions = %+v, want NeuronHealth with reason NeuronHasNoError", km.Conditions)
	}
	var errs []string
	for _, r := range km.Rules {
		e := strings.TrimPrefix(r.Reason, "NeuronHasError_")
		if r.Type != "permanent" || r.Condition != "NeuronHealth" || r.Pattern != ".* NEURON_HW_ERR="+e+" .*" {
			t.Errorf("rule %+v", r)
		}
		errs = append(errs, e)
	}
	wantErrs := []string{"SRAM_UNCORRECTABLE_ERROR", "NC_UNCORRECTABLE_ERROR", "HBM_UNCORRECTABLE_ERROR", "DMA_ERROR", "HANG_ON_COLLECTIVES"}
	if !slices.Equal(errs, wantErrs) {
		t.Errorf("rules for %v, want %v", errs, wantErrs)
	}

	ds := get[appsv1.DaemonSet](t, m, "DaemonSet", ns, "node-problem-detector")
	spec := ds.Spec.Template.Spec
	if spec.ServiceAccountName != "node-problem-detector" {
		t.Errorf("serviceAccountName = %q", spec.ServiceAccountName)
	}
	wantTolerations := []corev1.Toleration{
		{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
	}
	if !reflect.DeepEqual(spec.Tolerations, wantTolerations) {
		t.Errorf("tolerations = %+v", spec.Tolerations)
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("want one container, got %d", len(spec.Containers))
	}
	c := spec.Containers[0]
	if c.Image != "registry.k8s.io/node-problem-detector/node-problem-detector:v0.8.19" {
		t.Errorf("image = %q", c.Image)
	}
	if !slices.Contains(c.Command, "--config.system-log-monitor=/config/kernel-monitor.json") || c.Command[0] != "/node-problem-detector" {
		t.Errorf("command = %q", c.Command)
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, vm := range c.VolumeMounts {
		mounts[vm.MountPath] = vm
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = v
	}
	if vm, ok := mounts["/config"]; !ok || volumes[vm.Name].ConfigMap == nil || volumes[vm.Name].ConfigMap.Name != cm.Name {
		t.Errorf("/config is not the ConfigMap %s", cm.Name)
	}
	if vm, ok := mounts["/dev/kmsg"]; !ok || !vm.ReadOnly || volumes[vm.Name].HostPath == nil || volumes[vm.Name].HostPath.Path != "/dev/kmsg" {
		t.Errorf("/dev/kmsg is not the host's, read-only")
	}

	get[corev1.ServiceAccount](t, m, "ServiceAccount", ns, "node-problem-detector")
	role := get[rbacv1.ClusterRole](t, m, "ClusterRole", "", "neuron-node-problem-detector")
	wantRules := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"nodes/status"}, Verbs: []string{"patch"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch", "update"}},
	}
	if !reflect.DeepEqual(role.Rules, wantRules) {
		t.Errorf("ClusterRole neuron-node-problem-detector rules =\n  %+v\nwant\n  %+v", role.Rules, wantRules)
	}
	checkBinding(t, get[rbacv1.ClusterRoleBinding](t, m, "ClusterRoleBinding", "", "neuron-node-problem-detector"),
		"neuron-node-problem-detector", ns, "node-problem-detector")
}

func checkDRA(t *testing.T, m manifest) {
	t.Helper()
	get[corev1.Namespace](t, m, "Namespace", "", "neuron-dra-driver")
	dc := get[resourcev1.DeviceClass](t, m, "DeviceClass", "", "neuron.aws.com")
	want := resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{
		CEL: &resourcev1.CELDeviceSelector{Expression: `device.driver == "neuron.aws.com"`},
	}}}
	if !reflect.DeepEqual(dc.Spec, want) {
		t.Errorf("DeviceClass spec = %+v, want %+v", dc.Spec, want)
	}
}

// TestContradictoryValuesFail checks that values that cannot work together fail the render with
// a message that says what to do.
func TestContradictoryValuesFail(t *testing.T) {
	t.Parallel()
	const draMsg = "devicePlugin.enabled and draDriver.enabled are both true: a node must run the device plugin or the DRA driver, never both. " +
		"Set --set devicePlugin.enabled=false (DRA only), or label the DRA nodes kube-neuron.io/allocation-mode=dra and set devicePlugin.allowWithDRA=true to run both on different nodes."
	const schedulerMsg = "scheduler.customScheduler.enabled and scheduler.defaultScheduler.enabled are both true: the scheduler extender registers with one scheduler. " +
		"Set --set scheduler.customScheduler.enabled=false to use the default scheduler, or leave scheduler.defaultScheduler.enabled=false to use the second scheduler my-scheduler."
	for _, tc := range []struct {
		name string
		sets []string
		want string
	}{
		{"DRA driver with the device plugin", []string{"draDriver.enabled=true"}, draMsg},
		{"DRA driver with the device plugin, without npd", []string{"draDriver.enabled=true", "npd.enabled=false", "devicePlugin.allowWithDRA=false"}, draMsg},
		{"both scheduler registrations", []string{"scheduler.enabled=true", extenderMode, "scheduler.defaultScheduler.enabled=true"}, schedulerMsg},
		{"both scheduler registrations, extender off", []string{"scheduler.defaultScheduler.enabled=true", extenderMode, "scheduler.customScheduler.enabled=true"}, schedulerMsg},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out, err := helmTemplate(t, tc.sets...)
			if err == nil {
				t.Fatalf("rendered, want failure %q:\n%s", tc.want, out)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error does not say %q:\n%v", tc.want, err)
			}
		})
	}
}

// TestDevicePluginAndDRAOnDifferentNodes: with allowWithDRA both render, and the device plugin
// stays off the nodes labelled for the DRA driver.
func TestDevicePluginAndDRAOnDifferentNodes(t *testing.T) {
	t.Parallel()
	m := render(t, "draDriver.enabled=true", "devicePlugin.allowWithDRA=true", "npd.enabled=false")
	if got, want := m.names(), objects(devicePluginObjects, draObjects); !slices.Equal(got, want) {
		t.Fatalf("rendered %q, want %q", got, want)
	}
	checkDevicePlugin(t, m, "kube-system")
	checkDRA(t, m)
}

// TestSchemaRejectsBadValues checks values.schema.json: unknown keys at every level, enums,
// types and formats.
func TestSchemaRejectsBadValues(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		set  string
		want string // in helm's message
	}{
		{"devicePlugin.enbled=true", "additional properties 'enbled' not allowed"},
		{"devicePlugin.allocationSource=bogus", "value must be one of 'auto', 'extender', 'kubelet'"},
		{"npd.enable=false", "additional properties 'enable' not allowed"},
		{"scheduler.customScheduler.enbled=false", "additional properties 'enbled' not allowed"},
		{"scheduler.customScheduler.pluginPercentageOfNodesToScore=101", "/scheduler/customScheduler/pluginPercentageOfNodesToScore"},
		{"scheduler.customScheduler.pluginCandidateNodes=-1", "/scheduler/customScheduler/pluginCandidateNodes"},
		{"scheduler.customScheduler.pluginCandidateNodes=ten", "/scheduler/customScheduler/pluginCandidateNodes"},
		{"draDriver.image.digest=x", "additional properties 'digest' not allowed"},
		{"autoscaler.enabled=yes", "/autoscaler/enabled"},
		{"neuronInstance={trn1.2xlarge}", "additional properties 'neuronInstance' not allowed"},
		{"image.pullPolicy=Sometimes", "/image/pullPolicy"},
		{"devicePlugin.metricsPort=70000", "/devicePlugin/metricsPort"},
		{"devicePlugin.healthInterval=soon", "/devicePlugin/healthInterval"},
		{"devicePlugin.kubeletDevicePluginDir=relative/dir", "/devicePlugin/kubeletDevicePluginDir"},
		{"devicePlugin.stateDir=state", "/devicePlugin/stateDir"},
		{"devicePlugin.resources.requests.cpu=lots", "/devicePlugin/resources/requests/cpu"},
		{"devicePlugin.tolerations[0].keyy=x", "additional properties 'keyy' not allowed"},
		{"npd.nodeProblemDetector.image.tg=v1", "additional properties 'tg' not allowed"},
	} {
		t.Run(tc.set, func(t *testing.T) {
			t.Parallel()
			out, err := helmTemplate(t, tc.set)
			if err == nil {
				t.Fatalf("rendered, want a schema error:\n%s", out)
			}
			if msg := err.Error(); !strings.Contains(msg, "values don't meet the specifications of the schema") || !strings.Contains(msg, tc.want) {
				t.Errorf("error does not mention %q:\n%v", tc.want, err)
			}
		})
	}
}

// TestValuesReachTheDaemonSet checks that every device plugin value lands where it should.
func TestValuesReachTheDaemonSet(t *testing.T) {
	t.Parallel()
	m := render(t,
		"npd.enabled=false",
		"image.registry=registry.example.com/kube-neuron",
		"image.tag=v9",
		"image.pullPolicy=Always",
		"imagePullSecrets[0].name=pull",
		"neuronInstances={trn1.2xlarge,trn2.48xlarge}",
		"devicePlugin.namespace=neuron",
		"devicePlugin.args={--v=5}",
		"devicePlugin.sysfsRoot=/host",
		"devicePlugin.kubeletDevicePluginDir=/kubelet/dp",
		"devicePlugin.kubeletPodResourcesSocket=/kubelet/pr/kubelet.sock",
		"devicePlugin.stateDir=/state/dp",
		"devicePlugin.healthInterval=5s",
		"devicePlugin.allocationSource=kubelet",
		"devicePlugin.metricsPort=9000",
		"devicePlugin.priorityClassName=neuron",
		"devicePlugin.resources.limits.memory=1Gi",
		"devicePlugin.tolerations[0].key=dedicated",
		"devicePlugin.tolerations[0].operator=Equal",
		"devicePlugin.tolerations[0].value=ml",
		"devicePlugin.tolerations[0].effect=NoSchedule",
	)
	if got, want := m.names(), sorted([]string{
		"ClusterRole /neuron-device-plugin", "ClusterRoleBinding /neuron-device-plugin",
		"DaemonSet neuron/neuron-device-plugin", "ServiceAccount neuron/neuron-device-plugin",
		"NetworkPolicy neuron/neuron-device-plugin-metrics", dashboardObject,
		"ValidatingAdmissionPolicy /" + devicePluginPolicy, "ValidatingAdmissionPolicyBinding /" + devicePluginPolicy + "-binding",
	}); !slices.Equal(got, want) {
		t.Fatalf("rendered %q, want %q", got, want)
	}
	checkDevicePluginRBAC(t, m, "neuron")
	ds := get[appsv1.DaemonSet](t, m, "DaemonSet", "neuron", "neuron-device-plugin")
	spec := ds.Spec.Template.Spec
	c := spec.Containers[0]
	if c.Image != "registry.example.com/kube-neuron/neuron-device-plugin:v9" || c.ImagePullPolicy != corev1.PullAlways {
		t.Errorf("image %q pull %q", c.Image, c.ImagePullPolicy)
	}
	if !reflect.DeepEqual(spec.ImagePullSecrets, []corev1.LocalObjectReference{{Name: "pull"}}) {
		t.Errorf("imagePullSecrets = %+v", spec.ImagePullSecrets)
	}
	if !slices.Equal(c.Args, []string{"--v=5"}) {
		t.Errorf("args = %q", c.Args)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	for k, v := range map[string]string{
		"NEURON_SYSFS_ROOT":            "/host",
		"KUBELET_DEVICE_PLUGIN_DIR":    "/kubelet/dp",
		"KUBELET_POD_RESOURCES_SOCKET": "/kubelet/pr/kubelet.sock",
		"NEURON_STATE_DIR":             "/state/dp",
		"NEURON_HEALTH_INTERVAL":       "5s",
		"NEURON_ALLOCATION_SOURCE":     "kubelet",
		"NEURON_METRICS_ADDRESS":       ":9000",
	} {
		if env[k] != v {
			t.Errorf("env %s = %q, want %q", k, env[k], v)
		}
	}
	if len(c.Ports) != 1 || c.Ports[0].ContainerPort != 9000 || c.Ports[0].Name != "metrics" {
		t.Errorf("ports = %+v, want metrics 9000", c.Ports)
	}
	if spec.PriorityClassName != "neuron" {
		t.Errorf("priorityClassName = %q", spec.PriorityClassName)
	}
	checkResources(t, c.Resources, "10m", "32Mi", "100m", "1Gi")
	checkNeuronAffinity(t, spec.Affinity, wantFamilies(t), []string{"trn1.2xlarge", "trn2.48xlarge"}, devicePluginExpressions...)
	if n := len(spec.Tolerations); n != 4 || spec.Tolerations[3] != (corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "ml", Effect: corev1.TaintEffectNoSchedule}) {
		t.Errorf("tolerations = %+v, want the three fixed ones and dedicated=ml:NoSchedule", spec.Tolerations)
	}
	checkMounts(t, spec, c, []mount{
		{"/kubelet/dp", "/kubelet/dp", corev1.HostPathDirectory, false},
		{"/state/dp", "/state/dp", corev1.HostPathDirectoryOrCreate, false},
		{"/kubelet/pr", "/kubelet/pr", corev1.HostPathDirectory, true},
		{"/host/sys", "/sys", corev1.HostPathDirectory, true},
		{"/host/opt/aws/neuron", "/opt/aws/neuron", corev1.HostPathDirectoryOrCreate, true},
	})
}

// TestAutoscalerAlone: with only the autoscaler enabled, the chart renders the autoscaler's own
// objects and nothing else.
func TestAutoscalerAlone(t *testing.T) {
	t.Parallel()
	m := render(t, append([]string{"devicePlugin.enabled=false", "npd.enabled=false"}, autoscalerEC2...)...)
	if got, want := m.names(), objects(autoscalerObjects, autoscalerPDB); !slices.Equal(got, want) {
		t.Errorf("rendered %q, want %q", got, want)
	}
}

// TestLint runs `helm lint --strict` on the chart with the seeds' values.
func TestLint(t *testing.T) {
	t.Parallel()
	for _, sets := range [][]string{
		nil,
		{"npd.enabled=false"},
		{"scheduler.enabled=true", "scheduler.customScheduler.enabled=false", "scheduler.defaultScheduler.enabled=true"},
		{"devicePlugin.enabled=false", "npd.enabled=false", "draDriver.enabled=true"},
	} {
		t.Run(strings.Join(append([]string{"lint"}, sets...), " "), func(t *testing.T) {
			t.Parallel()
			out, err := runHelm(t, append([]string{"lint", "--strict", chartDir, "--namespace", releaseNS}, setArgs(sets)...)...)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(out, "[WARNING]") || strings.Contains(out, "[ERROR]") || !strings.Contains(out, "0 chart(s) failed") {
				t.Errorf("helm lint is not clean:\n%s", out)
			}
		})
	}
}

// TestChartMetadata checks Chart.yaml and that values.yaml's instance types track the catalog.
func TestChartMetadata(t *testing.T) {
	t.Parallel()
	var meta struct {
		APIVersion, Name, Version, AppVersion string
	}
	readYAML(t, filepath.Join(chartDir, "Chart.yaml"), &meta)
	if meta.APIVersion != "v2" || meta.Name != "kube-neuron" || meta.Version != "0.1.0" || meta.AppVersion != "0.1.0" {
		t.Errorf("Chart.yaml = %+v, want apiVersion v2, name kube-neuron, version and appVersion 0.1.0", meta)
	}
	var values struct {
		NeuronInstances []string `json:"neuronInstances"`
	}
	readYAML(t, filepath.Join(chartDir, "values.yaml"), &values)
	if got, want := sorted(values.NeuronInstances), wantInstances(t); !slices.Equal(got, want) {
		t.Errorf("values.yaml neuronInstances = %q, want the catalog's types plus AWS's others: %q", got, want)
	}
	var schema map[string]any
	data, err := os.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &schema); err != nil {
		t.Fatalf("values.schema.json: %v", err)
	}
	if schema["$schema"] != "http://json-schema.org/draft-07/schema#" {
		t.Errorf("values.schema.json $schema = %v, want draft-07", schema["$schema"])
	}
	checkClosed(t, "#", schema)
}

// checkClosed checks that every object with properties in the schema sets additionalProperties: false.
func checkClosed(t *testing.T, path string, node any) {
	t.Helper()
	switch n := node.(type) {
	case map[string]any:
		if _, ok := n["properties"]; ok && n["additionalProperties"] != false {
			t.Errorf("values.schema.json %s: additionalProperties is not false", path)
		}
		for k, v := range n {
			checkClosed(t, path+"/"+k, v)
		}
	case []any:
		for i, v := range n {
			checkClosed(t, fmt.Sprintf("%s/%d", path, i), v)
		}
	}
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestNeuronNodeSelection: a Neuron DaemonSet finds a node by its Karpenter instance family, by
// its instance type, or by a label of the user's own, whichever it has (a type newer than the
// chart still runs the plugin on Karpenter's nodes), and extraMatchExpressions keep it off nodes.
func TestNeuronNodeSelection(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		sets []string
		node map[string]string
		want bool
	}{
		{"a type the chart lists", nil, map[string]string{labels.InstanceType: "trn1.32xlarge"}, true},
		{"a type newer than the chart, on a Karpenter node", nil, map[string]string{labels.InstanceType: "trn9.48xlarge", labels.InstanceFamily: "trn2"}, true},
		{"a type newer than the chart, no family label", nil, map[string]string{labels.InstanceType: "trn9.48xlarge"}, false},
		{"not a Neuron node", nil, map[string]string{labels.InstanceType: "m7i.xlarge", labels.InstanceFamily: "m7i"}, false},
		{"the user's label, any value", []string{"neuronNodes.nodeLabel.key=example.com/accelerator"}, map[string]string{"example.com/accelerator": "x"}, true},
		{"the user's label with a value", []string{"neuronNodes.nodeLabel.key=example.com/accelerator", "neuronNodes.nodeLabel.values={neuron}"}, map[string]string{"example.com/accelerator": "neuron"}, true},
		{"the user's label with another value", []string{"neuronNodes.nodeLabel.key=example.com/accelerator", "neuronNodes.nodeLabel.values={neuron}"}, map[string]string{"example.com/accelerator": "gpu"}, false},
		{"kept off by an extra expression", []string{"--set-json=neuronNodes.extraMatchExpressions=[{\"key\":\"kube-neuron.io/lab-kubelet\",\"operator\":\"NotIn\",\"values\":[\"simulated\"]}]"},
			map[string]string{labels.InstanceType: "trn1.32xlarge", "kube-neuron.io/lab-kubelet": "simulated"}, false},
		{"the extra expression lets the others be", []string{"--set-json=neuronNodes.extraMatchExpressions=[{\"key\":\"kube-neuron.io/lab-kubelet\",\"operator\":\"NotIn\",\"values\":[\"simulated\"]}]"},
			map[string]string{labels.InstanceType: "trn1.32xlarge", labels.InstanceFamily: "trn1", "kube-neuron.io/lab-kubelet": "real"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := render(t, append([]string{"draDriver.enabled=true", "devicePlugin.allowWithDRA=true"}, tc.sets...)...)
			for _, o := range m {
				ds, ok := o.Obj.(*appsv1.DaemonSet)
				if !ok {
					continue
				}
				node := maps.Clone(tc.node)
				if ds.Name == draDaemonSet {
					node[labels.AllocationMode] = labels.AllocationModeDRA
				}
				if got := runsOn(t, ds.Spec.Template.Spec, node); got != tc.want {
					t.Errorf("DaemonSet %s on node %v: runs %t, want %t", ds.Name, node, got, tc.want)
				}
			}
		})
	}
}
