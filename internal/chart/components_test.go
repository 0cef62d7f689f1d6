package chart

import (
	"reflect"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kube-neuron/kube-neuron/internal/autoscaler"
	"github.com/kube-neuron/kube-neuron/internal/labels"
)

// componentPod is what one component's pod carries in an install with the default values
// but sets: the pod's and the first container's security context, the affinity and the first
// container's env.
type componentPod struct {
	name               string
	sets               []string
	kind, ns, workload string                     // the Deployment or DaemonSet
	podSecurityContext *corev1.PodSecurityContext // nil: none
	securityContext    *corev1.SecurityContext
	affinity           *corev1.Affinity // values of In expressions compare as sets
	env                []corev1.EnvVar
}

// nonRoot is the container security context of the components that need no host access: the
// extender, the autoscaler and my-scheduler.
var nonRoot = &corev1.SecurityContext{
	AllowPrivilegeEscalation: ptr.To(false),
	Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	ReadOnlyRootFilesystem:   ptr.To(true),
	RunAsNonRoot:             ptr.To(true),
	RunAsUser:                ptr.To[int64](65532),
	SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
}

// nonRootPod is their pod security context.
var nonRootPod = &corev1.PodSecurityContext{
	RunAsNonRoot:   ptr.To(true),
	RunAsUser:      ptr.To[int64](65532),
	RunAsGroup:     ptr.To[int64](65532),
	SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
}

// neuronAffinity is the required node affinity of a Neuron node agent: two OR-ed terms, a node
// of a Neuron instance family (Karpenter's label) or of a Neuron instance type, each with the
// component's own expressions, extra.
func neuronAffinity(families, instances []string, extra ...corev1.NodeSelectorRequirement) *corev1.Affinity {
	var terms []corev1.NodeSelectorTerm
	for _, first := range []corev1.NodeSelectorRequirement{
		{Key: labels.InstanceFamily, Operator: corev1.NodeSelectorOpIn, Values: families},
		{Key: labels.InstanceType, Operator: corev1.NodeSelectorOpIn, Values: instances},
	} {
		terms = append(terms, corev1.NodeSelectorTerm{MatchExpressions: append([]corev1.NodeSelectorRequirement{first}, extra...)})
	}
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms},
	}}
}

// spreadOverNodes is the preferred anti-affinity that puts a Deployment's replicas on
// different nodes.
func spreadOverNodes(selector map[string]string) *corev1.PodAntiAffinity {
	return &corev1.PodAntiAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
		Weight: 100,
		PodAffinityTerm: corev1.PodAffinityTerm{
			TopologyKey:   "kubernetes.io/hostname",
			LabelSelector: &metav1.LabelSelector{MatchLabels: selector},
		},
	}}}
}

// asSets sorts the values of every In expression of the required node affinity, in place:
// values.yaml's order of the instance lists is not part of the contract.
func asSets(a *corev1.Affinity) *corev1.Affinity {
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return a
	}
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for i := range term.MatchExpressions {
			if term.MatchExpressions[i].Operator == corev1.NodeSelectorOpIn {
				slices.Sort(term.MatchExpressions[i].Values)
			}
		}
	}
	return a
}

// TestComponentPods checks every component's security context, affinity and env, install by
// install, in one table.
func TestComponentPods(t *testing.T) {
	t.Parallel()
	families, instances := wantFamilies(t), wantInstances(t)
	draMode := func(op corev1.NodeSelectorOperator, mode string) corev1.NodeSelectorRequirement {
		return corev1.NodeSelectorRequirement{Key: labels.AllocationMode, Operator: op, Values: []string{mode}}
	}
	deviceEnv := []corev1.EnvVar{
		{Name: "NODE_NAME", ValueFrom: fieldEnv("spec.nodeName")},
		{Name: "NEURON_SYSFS_ROOT", Value: "/"},
		{Name: "KUBELET_DEVICE_PLUGIN_DIR", Value: "/var/lib/kubelet/device-plugins"},
		{Name: "KUBELET_POD_RESOURCES_SOCKET", Value: "/var/lib/kubelet/pod-resources/kubelet.sock"},
		{Name: "NEURON_STATE_DIR", Value: "/var/lib/kube-neuron/device-plugin"},
		{Name: "NEURON_HEALTH_INTERVAL", Value: "1s"},
		{Name: "NEURON_ALLOCATION_SOURCE", Value: "auto"},
		{Name: "NEURON_METRICS_ADDRESS", Value: ":9464"},
	}
	draEnv := []corev1.EnvVar{
		{Name: "NODE_NAME", ValueFrom: fieldEnv("spec.nodeName")},
		{Name: "POD_UID", ValueFrom: fieldEnv("metadata.uid")},
		{Name: "POD_NAMESPACE", ValueFrom: fieldEnv("metadata.namespace")},
		{Name: "NEURON_SYSFS_ROOT", Value: "/"},
		{Name: "CDI_ROOT", Value: "/var/run/cdi"},
		{Name: "KUBELET_REGISTRAR_DIRECTORY_PATH", Value: "/var/lib/kubelet/plugins_registry"},
		{Name: "KUBELET_PLUGINS_DIRECTORY_PATH", Value: "/var/lib/kubelet/plugins"},
		{Name: "HEALTHCHECK_PORT", Value: "51515"},
		{Name: "NEURON_HEALTH_INTERVAL", Value: "1s"},
		{Name: "NEURON_METRICS_ADDRESS", Value: ":9465"},
		{Name: "NEURON_UNCORRECTABLE_ERROR_TAINT_EFFECT", Value: "NoSchedule"},
	}
	draSecurity := &corev1.SecurityContext{Privileged: ptr.To(true), ReadOnlyRootFilesystem: ptr.To(true)}
	autoscalerAffinity := &corev1.Affinity{
		// Never on a node it launched (it removes those once they are empty).
		NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
				{Key: autoscaler.LaunchedByLabel, Operator: corev1.NodeSelectorOpDoesNotExist},
			}}},
		}},
		PodAntiAffinity: spreadOverNodes(map[string]string{"app.kubernetes.io/name": autoscalerName, "app.kubernetes.io/instance": release}),
	}
	for _, tc := range []componentPod{{
		name: "device plugin", kind: "DaemonSet", ns: "kube-system", workload: "neuron-device-plugin",
		securityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr.To(false),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			ReadOnlyRootFilesystem:   ptr.To(true),
			RunAsUser:                ptr.To[int64](0),
			SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		affinity: neuronAffinity(families, instances, devicePluginExpressions...),
		env:      deviceEnv,
	}, {
		name: "node problem detector", kind: "DaemonSet", ns: "neuron-healthcheck-system", workload: "node-problem-detector",
		securityContext: &corev1.SecurityContext{Privileged: ptr.To(true)},
		affinity:        neuronAffinity(families, instances, notEKSComputeTypes),
		env:             []corev1.EnvVar{{Name: "NODE_NAME", ValueFrom: fieldEnv("spec.nodeName")}},
	}, {
		name: "DRA driver alone", sets: seed003, kind: "DaemonSet", ns: draNS, workload: draDaemonSet,
		securityContext: draSecurity,
		affinity:        neuronAffinity(families, instances, draMode(corev1.NodeSelectorOpNotIn, labels.AllocationModeDevicePlugin), notEKSComputeTypes),
		env:             draEnv,
	}, {
		name: "DRA driver next to the device plugin", sets: []string{"draDriver.enabled=true", "devicePlugin.allowWithDRA=true", "npd.enabled=false"},
		kind: "DaemonSet", ns: draNS, workload: draDaemonSet,
		securityContext: draSecurity,
		affinity:        neuronAffinity(families, instances, draMode(corev1.NodeSelectorOpIn, labels.AllocationModeDRA), notEKSComputeTypes),
		env:             draEnv,
	}, {
		name: "scheduler extender", sets: []string{"scheduler.enabled=true", "npd.enabled=false"},
		kind: "Deployment", ns: "kube-system", workload: "k8s-neuron-scheduler",
		podSecurityContext: nonRootPod, securityContext: nonRoot,
		affinity: &corev1.Affinity{PodAntiAffinity: spreadOverNodes(map[string]string{
			"app.kubernetes.io/name": "neuron-scheduler-extender", "app.kubernetes.io/instance": release,
		})},
		env: []corev1.EnvVar{
			{Name: "PORT", Value: "12345"},
			{Name: "NEURON_PLACEMENT_POLICY", Value: "best-fit"},
			{Name: "POD_NAMESPACE", ValueFrom: fieldEnv("metadata.namespace")},
			{Name: "NEURON_MIRROR_USAGE_ANNOTATIONS", Value: "false"},
			{Name: "NEURON_METRICS_ADDRESS", Value: ":9467"},
			{Name: "NEURON_TLS_CERT_FILE", Value: "/etc/neuron-scheduler-extender/tls/tls.crt"},
			{Name: "NEURON_TLS_PRIVATE_KEY_FILE", Value: "/etc/neuron-scheduler-extender/tls/tls.key"},
			{Name: "NEURON_CLIENT_CA_FILE", Value: "/etc/neuron-scheduler-extender/tls/ca.crt"},
		},
	}, {
		name: "my-scheduler", sets: []string{"scheduler.enabled=true", "npd.enabled=false"},
		kind: "Deployment", ns: "kube-system", workload: "my-scheduler",
		podSecurityContext: nonRootPod, securityContext: nonRoot,
	}, {
		name: "my-scheduler, mode plugin", sets: []string{"scheduler.enabled=true", "scheduler.customScheduler.mode=plugin", "npd.enabled=false"},
		kind: "Deployment", ns: "kube-system", workload: "my-scheduler",
		podSecurityContext: nonRootPod, securityContext: nonRoot,
	}, {
		name: "autoscaler, ec2", sets: append([]string{"npd.enabled=false"}, autoscalerEC2...),
		kind: "Deployment", ns: "kube-system", workload: autoscalerName,
		podSecurityContext: nonRootPod, securityContext: nonRoot, affinity: autoscalerAffinity,
		env: autoscalerEnv("ec2", ec2Env...),
	}, {
		name: "autoscaler, local", sets: []string{"autoscaler.enabled=true", "autoscaler.provider=local", "devicePlugin.enabled=false", "npd.enabled=false"},
		kind: "Deployment", ns: "kube-system", workload: autoscalerName,
		podSecurityContext: nonRootPod, securityContext: nonRoot, affinity: autoscalerAffinity,
		env: autoscalerEnv("local"),
	}, {
		name: "autoscaler, local with ec2 settings given anyway (not rendered)",
		sets: append([]string{"autoscaler.provider=local", "autoscaler.ec2.region=us-west-2", "npd.enabled=false"}, autoscalerEC2...),
		kind: "Deployment", ns: "kube-system", workload: autoscalerName,
		podSecurityContext: nonRootPod, securityContext: nonRoot, affinity: autoscalerAffinity,
		env: autoscalerEnv("local"),
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			spec := podSpec(t, render(t, tc.sets...), tc.kind, tc.ns, tc.workload)
			if len(spec.Containers) == 0 {
				t.Fatalf("%s %s/%s has no container", tc.kind, tc.ns, tc.workload)
			}
			c := spec.Containers[0]
			podSC := spec.SecurityContext
			if podSC != nil && reflect.DeepEqual(*podSC, corev1.PodSecurityContext{}) {
				podSC = nil
			}
			if !reflect.DeepEqual(podSC, tc.podSecurityContext) {
				t.Errorf("pod securityContext = %+v, want %+v", podSC, tc.podSecurityContext)
			}
			if !reflect.DeepEqual(c.SecurityContext, tc.securityContext) {
				t.Errorf("securityContext = %+v, want %+v", c.SecurityContext, tc.securityContext)
			}
			if got, want := asSets(spec.Affinity.DeepCopy()), asSets(tc.affinity.DeepCopy()); !reflect.DeepEqual(got, want) {
				t.Errorf("affinity =\n  %+v\nwant\n  %+v", got, want)
			}
			if !reflect.DeepEqual(c.Env, tc.env) {
				t.Errorf("env =\n  %+v\nwant\n  %+v", c.Env, tc.env)
			}
		})
	}
}

// podSpec is the pod template of the Deployment or DaemonSet.
func podSpec(t *testing.T, m manifest, kind, ns, name string) corev1.PodSpec {
	t.Helper()
	if kind == "Deployment" {
		return get[appsv1.Deployment](t, m, kind, ns, name).Spec.Template.Spec
	}
	return get[appsv1.DaemonSet](t, m, kind, ns, name).Spec.Template.Spec
}
