package chart

import (
	"maps"
	"path"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// The scheduler extender's objects in kube-system, as "Kind namespace/name", with the default
// TLS settings (the two Secrets: the chart generates the certificates).
var (
	extenderObjects = []string{
		"Secret kube-system/k8s-neuron-scheduler-tls",
		"Secret kube-system/my-scheduler-extender-client-tls",
		"ClusterRole /k8s-neuron-scheduler",
		"ClusterRoleBinding /k8s-neuron-scheduler",
		"Deployment kube-system/k8s-neuron-scheduler",
		"Role kube-system/k8s-neuron-scheduler",
		"RoleBinding kube-system/k8s-neuron-scheduler",
		"Service kube-system/k8s-neuron-scheduler",
		"ServiceAccount kube-system/k8s-neuron-scheduler",
	}
	// pdbObjects: rendered when scheduler.replicas > 1 (the default 2).
	pdbObjects = []string{"PodDisruptionBudget kube-system/k8s-neuron-scheduler"}
	// networkPolicyObjects: rendered by default with my-scheduler.
	networkPolicyObjects = []string{"NetworkPolicy kube-system/k8s-neuron-scheduler"}
	mySchedulerObjects   = []string{
		"ClusterRole /my-scheduler",
		"ClusterRoleBinding /my-scheduler",
		"ClusterRoleBinding /my-scheduler-as-kube-scheduler",
		"ClusterRoleBinding /my-scheduler-as-volume-scheduler",
		"ConfigMap kube-system/my-scheduler-config",
		"Deployment kube-system/my-scheduler",
		"ServiceAccount kube-system/my-scheduler",
	}
	defaultSchedulerObjects = []string{"ConfigMap kube-system/neuron-scheduler-extender-config"}
)

// schedulerConfig is the part of kubescheduler.config.k8s.io/v1 KubeSchedulerConfiguration the
// chart writes; decoding is strict, so any other field fails the test.
type schedulerConfig struct {
	APIVersion       string            `json:"apiVersion"`
	Kind             string            `json:"kind"`
	ClientConnection *clientConnection `json:"clientConnection,omitempty"`
	Profiles         []profile         `json:"profiles"`
	Extenders        []extender        `json:"extenders"`
	LeaderElection   leaderElection    `json:"leaderElection"`
}

type clientConnection struct {
	Kubeconfig string `json:"kubeconfig"`
}

type profile struct {
	SchedulerName string `json:"schedulerName"`
}

type extender struct {
	URLPrefix        string            `json:"urlPrefix"`
	FilterVerb       string            `json:"filterVerb"`
	PrioritizeVerb   string            `json:"prioritizeVerb"`
	BindVerb         string            `json:"bindVerb"`
	Weight           int64             `json:"weight"`
	EnableHTTPS      bool              `json:"enableHTTPS"`
	TLSConfig        *tlsConfig        `json:"tlsConfig,omitempty"`
	NodeCacheCapable bool              `json:"nodeCacheCapable"`
	HTTPTimeout      string            `json:"httpTimeout"`
	Ignorable        bool              `json:"ignorable"`
	ManagedResources []managedResource `json:"managedResources"`
}

type managedResource struct {
	Name               string `json:"name"`
	IgnoredByScheduler bool   `json:"ignoredByScheduler"`
}

type leaderElection struct {
	LeaderElect       bool   `json:"leaderElect"`
	ResourceNamespace string `json:"resourceNamespace,omitempty"`
	ResourceName      string `json:"resourceName,omitempty"`
}

// wantExtender is the extenders entry both registrations use, over plain HTTP.
func wantExtender(urlPrefix string, weight int64) extender {
	return extender{
		URLPrefix:        urlPrefix,
		FilterVerb:       "filter",
		PrioritizeVerb:   "prioritize",
		BindVerb:         "bind",
		Weight:           weight,
		NodeCacheCapable: true,
		HTTPTimeout:      "30s",
		Ignorable:        false,
		ManagedResources: []managedResource{
			{Name: "aws.amazon.com/neuron"},
			{Name: "aws.amazon.com/neuroncore"},
			{Name: "aws.amazon.com/neurondevice"},
		},
	}
}

// myTLS is my-scheduler's tlsConfig for the extender in namespace ns.
func myTLS(ns string) *tlsConfig {
	return &tlsConfig{
		ServerName: "k8s-neuron-scheduler." + ns + ".svc",
		CertFile:   "/etc/kubernetes/my-scheduler-tls/tls.crt",
		KeyFile:    "/etc/kubernetes/my-scheduler-tls/tls.key",
		CAFile:     "/etc/kubernetes/my-scheduler-tls/ca.crt",
	}
}

// defaultSchedulerTLS is the default scheduler's tlsConfig with the default file paths.
var defaultSchedulerTLS = &tlsConfig{
	ServerName: "k8s-neuron-scheduler.kube-system.svc",
	CertFile:   "/etc/kubernetes/pki/neuron-scheduler-extender/tls.crt",
	KeyFile:    "/etc/kubernetes/pki/neuron-scheduler-extender/tls.key",
	CAFile:     "/etc/kubernetes/pki/neuron-scheduler-extender/ca.crt",
}

// wantTLSExtender is wantExtender over HTTPS with the client certificate tc: the default.
func wantTLSExtender(urlPrefix string, weight int64, tc *tlsConfig) extender {
	e := wantExtender(urlPrefix, weight)
	e.EnableHTTPS, e.TLSConfig = true, tc
	return e
}

// configFrom decodes the KubeSchedulerConfiguration under key in the ConfigMap.
func configFrom(t *testing.T, m manifest, ns, name, key string) schedulerConfig {
	t.Helper()
	cm := get[corev1.ConfigMap](t, m, "ConfigMap", ns, name)
	if len(cm.Data) != 1 {
		t.Errorf("ConfigMap %s keys = %v, want only %s", name, slices.Sorted(maps.Keys(cm.Data)), key)
	}
	data, ok := cm.Data[key]
	if !ok {
		t.Fatalf("ConfigMap %s has no key %s", name, key)
	}
	var c schedulerConfig
	if err := yaml.UnmarshalStrict([]byte(data), &c); err != nil {
		t.Fatalf("ConfigMap %s %s: %v\n%s", name, key, err, data)
	}
	return c
}

func TestSchedulerSeedInstallCommands(t *testing.T) {
	t.Parallel()
	t.Run("(c) scheduler extender with a second scheduler", func(t *testing.T) {
		t.Parallel()
		m := render(t, "scheduler.enabled=true", "npd.enabled=false")
		if got, want := m.names(), objects(devicePluginObjects, extenderObjects, pdbObjects, networkPolicyObjects, mySchedulerObjects); !slices.Equal(got, want) {
			t.Fatalf("rendered objects:\n  got  %q\n  want %q", got, want)
		}
		checkDevicePlugin(t, m, "kube-system")
		checkExtender(t, m, "kube-system", 2, false)
		checkExtenderService(t, m, "kube-system", 12345, 0)
		checkExtenderRBAC(t, m, "kube-system")
		checkPDB(t, m, "kube-system")
		checkMyScheduler(t, m, "kube-system", false)

		got := configFrom(t, m, "kube-system", "my-scheduler-config", "my-scheduler-config.yaml")
		want := schedulerConfig{
			APIVersion: "kubescheduler.config.k8s.io/v1",
			Kind:       "KubeSchedulerConfiguration",
			Profiles:   []profile{{SchedulerName: "my-scheduler"}},
			Extenders:  []extender{wantTLSExtender("https://k8s-neuron-scheduler.kube-system.svc.cluster.local:12345", 10, myTLS("kube-system"))},
			LeaderElection: leaderElection{
				LeaderElect:       true,
				ResourceNamespace: "kube-system",
				ResourceName:      "my-scheduler",
			},
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("my-scheduler-config.yaml =\n  %+v\nwant\n  %+v", got, want)
		}
	})
	t.Run("(d) scheduler extender with the default scheduler", func(t *testing.T) {
		t.Parallel()
		m := render(t, "scheduler.enabled=true", "scheduler.customScheduler.enabled=false", "scheduler.defaultScheduler.enabled=true", "npd.enabled=false")
		if got, want := m.names(), objects(devicePluginObjects, extenderObjects, pdbObjects, defaultSchedulerObjects); !slices.Equal(got, want) {
			t.Fatalf("rendered objects:\n  got  %q\n  want %q", got, want)
		}
		for _, name := range m.names() {
			// The client certificate's Secret stays: its files go to the control-plane nodes.
			if strings.Contains(name, "my-scheduler") && name != "Secret kube-system/my-scheduler-extender-client-tls" {
				t.Errorf("rendered %s with customScheduler.enabled=false", name)
			}
		}
		checkDevicePlugin(t, m, "kube-system")
		checkExtender(t, m, "kube-system", 2, true)
		checkExtenderService(t, m, "kube-system", 12345, 32700)
		checkExtenderRBAC(t, m, "kube-system")
		checkPDB(t, m, "kube-system")

		got := configFrom(t, m, "kube-system", "neuron-scheduler-extender-config", "kube-scheduler-config.yaml")
		want := schedulerConfig{
			APIVersion:       "kubescheduler.config.k8s.io/v1",
			Kind:             "KubeSchedulerConfiguration",
			ClientConnection: &clientConnection{Kubeconfig: "/etc/kubernetes/scheduler.conf"},
			Profiles:         []profile{{SchedulerName: "default-scheduler"}},
			Extenders:        []extender{wantTLSExtender("https://127.0.0.1:32700", 10, defaultSchedulerTLS)},
			LeaderElection:   leaderElection{LeaderElect: true},
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("kube-scheduler-config.yaml =\n  %+v\nwant\n  %+v", got, want)
		}
	})
}

// checkExtender checks the extender's Deployment with the default values but replicas and
// hostNetwork; TestComponentPods checks its security context, affinity and env.
func checkExtender(t *testing.T, m manifest, ns string, replicas int32, hostNetwork bool) {
	t.Helper()
	d := get[appsv1.Deployment](t, m, "Deployment", ns, "k8s-neuron-scheduler")
	wantLabels := map[string]string{
		"app.kubernetes.io/name":      "neuron-scheduler-extender",
		"app.kubernetes.io/instance":  release,
		"app.kubernetes.io/component": "scheduler-extender",
	}
	wantSelector := map[string]string{
		"app.kubernetes.io/name":     "neuron-scheduler-extender",
		"app.kubernetes.io/instance": release,
	}
	pod := d.Spec.Template
	for k, v := range wantLabels {
		if d.Labels[k] != v || pod.Labels[k] != v {
			t.Errorf("label %s = %q (Deployment) %q (pod), want %q", k, d.Labels[k], pod.Labels[k], v)
		}
	}
	if d.Spec.Selector == nil || !reflect.DeepEqual(d.Spec.Selector.MatchLabels, wantSelector) || len(d.Spec.Selector.MatchExpressions) != 0 {
		t.Errorf("selector = %+v, want %v", d.Spec.Selector, wantSelector)
	}
	if got := ptr.Deref(d.Spec.Replicas, -1); got != replicas {
		t.Errorf("replicas = %d, want %d", got, replicas)
	}
	surge, unavailable := intstr.FromInt32(1), intstr.FromInt32(0)
	if hostNetwork {
		surge, unavailable = intstr.FromInt32(0), intstr.FromInt32(1)
	}
	wantStrategy := appsv1.DeploymentStrategy{
		Type:          appsv1.RollingUpdateDeploymentStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &surge, MaxUnavailable: &unavailable},
	}
	if !reflect.DeepEqual(d.Spec.Strategy, wantStrategy) {
		t.Errorf("strategy = %+v, want %+v", d.Spec.Strategy, wantStrategy)
	}
	if len(pod.Annotations) != 0 {
		t.Errorf("pod annotations = %v, want none by default", pod.Annotations)
	}

	spec := pod.Spec
	if spec.ServiceAccountName != "k8s-neuron-scheduler" || spec.PriorityClassName != "system-cluster-critical" {
		t.Errorf("serviceAccountName %q priorityClassName %q", spec.ServiceAccountName, spec.PriorityClassName)
	}
	if spec.SchedulerName != "" {
		t.Errorf("schedulerName = %q: the extender must not depend on the scheduler it serves", spec.SchedulerName)
	}
	if spec.HostNetwork != hostNetwork {
		t.Errorf("hostNetwork = %v, want %v", spec.HostNetwork, hostNetwork)
	}
	var wantNodeSelector map[string]string
	var wantTolerations []corev1.Toleration
	wantDNS := corev1.DNSPolicy("")
	if hostNetwork {
		wantNodeSelector = map[string]string{"node-role.kubernetes.io/control-plane": ""}
		wantTolerations = []corev1.Toleration{{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
		wantDNS = corev1.DNSClusterFirstWithHostNet
	}
	if !reflect.DeepEqual(spec.NodeSelector, wantNodeSelector) || !reflect.DeepEqual(spec.Tolerations, wantTolerations) || spec.DNSPolicy != wantDNS {
		t.Errorf("nodeSelector %v tolerations %+v dnsPolicy %q, want %v %+v %q", spec.NodeSelector, spec.Tolerations, spec.DNSPolicy, wantNodeSelector, wantTolerations, wantDNS)
	}
	wantSpread := []corev1.TopologySpreadConstraint{{
		MaxSkew:           1,
		TopologyKey:       "topology.kubernetes.io/zone",
		WhenUnsatisfiable: corev1.ScheduleAnyway,
		LabelSelector:     &metav1.LabelSelector{MatchLabels: wantSelector},
		MatchLabelKeys:    []string{"pod-template-hash"},
	}}
	if !reflect.DeepEqual(spec.TopologySpreadConstraints, wantSpread) {
		t.Errorf("topologySpreadConstraints = %+v, want %+v", spec.TopologySpreadConstraints, wantSpread)
	}
	// TLS is on by default: the serving certificate's Secret.
	wantVolumes := []corev1.Volume{{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "k8s-neuron-scheduler-tls"}}}}
	if !reflect.DeepEqual(spec.Volumes, wantVolumes) {
		t.Errorf("volumes = %+v, want %+v", spec.Volumes, wantVolumes)
	}

	if len(spec.Containers) != 1 || len(spec.InitContainers) != 0 {
		t.Fatalf("want exactly one container, got %d (+%d init)", len(spec.Containers), len(spec.InitContainers))
	}
	c := spec.Containers[0]
	if c.Name != "neuron-scheduler-extender" || c.Image != testRegistry+"/neuron-scheduler-extender:0.1.0" || c.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("container %q image %q pull %q, want neuron-scheduler-extender %s/neuron-scheduler-extender:0.1.0 IfNotPresent", c.Name, c.Image, c.ImagePullPolicy, testRegistry)
	}
	if !slices.Equal(c.Command, []string{"/neuron-scheduler-extender"}) || len(c.Args) != 0 {
		t.Errorf("command %q args %q, want [/neuron-scheduler-extender] and no args", c.Command, c.Args)
	}
	wantPorts := []corev1.ContainerPort{
		{Name: "https", ContainerPort: 12345, Protocol: corev1.ProtocolTCP},
		{Name: "metrics", ContainerPort: 9467, Protocol: corev1.ProtocolTCP},
	}
	if !reflect.DeepEqual(c.Ports, wantPorts) {
		t.Errorf("ports = %+v, want %+v", c.Ports, wantPorts)
	}
	// The probes use the metrics port, which needs no client certificate also with TLS on.
	checkHTTPProbe(t, "readinessProbe", c.ReadinessProbe, "/readyz", intstr.FromString("metrics"), "")
	checkHTTPProbe(t, "livenessProbe", c.LivenessProbe, "/healthz", intstr.FromString("metrics"), "")
	checkResources(t, c.Resources, "50m", "64Mi", "500m", "256Mi")
}

// checkHTTPProbe checks an httpGet probe; scheme "" is the default, HTTP.
func checkHTTPProbe(t *testing.T, what string, p *corev1.Probe, path string, port intstr.IntOrString, scheme corev1.URIScheme) {
	t.Helper()
	if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != path || p.HTTPGet.Port != port || p.HTTPGet.Scheme != scheme {
		t.Errorf("%s = %+v, want httpGet %s %s on port %s", what, p, scheme, path, port.String())
	}
}

// checkExtenderService checks the Service k8s-neuron-scheduler; nodePort 0 means ClusterIP.
func checkExtenderService(t *testing.T, m manifest, ns string, port, nodePort int32) {
	t.Helper()
	svc := get[corev1.Service](t, m, "Service", ns, "k8s-neuron-scheduler")
	d := get[appsv1.Deployment](t, m, "Deployment", ns, "k8s-neuron-scheduler")
	wantType := corev1.ServiceTypeClusterIP
	if nodePort != 0 {
		wantType = corev1.ServiceTypeNodePort
	}
	if svc.Spec.SessionAffinity != corev1.ServiceAffinityClientIP {
		t.Errorf("Service sessionAffinity = %q, want ClientIP (one scheduler keeps talking to the replica that holds its nodes' Leases)", svc.Spec.SessionAffinity)
	}
	if svc.Spec.Type != wantType {
		t.Errorf("Service type = %q, want %q", svc.Spec.Type, wantType)
	}
	if !reflect.DeepEqual(svc.Spec.Selector, d.Spec.Selector.MatchLabels) {
		t.Errorf("Service selector %v, want the Deployment's %v", svc.Spec.Selector, d.Spec.Selector.MatchLabels)
	}
	wantPorts := []corev1.ServicePort{{Name: "https", Port: port, TargetPort: intstr.FromString("https"), Protocol: corev1.ProtocolTCP, NodePort: nodePort}}
	if !reflect.DeepEqual(svc.Spec.Ports, wantPorts) {
		t.Errorf("Service ports = %+v, want %+v", svc.Spec.Ports, wantPorts)
	}
}

// checkExtenderRBAC checks the extender's ServiceAccount, ClusterRole and Role, verb by verb.
func checkExtenderRBAC(t *testing.T, m manifest, ns string) {
	t.Helper()
	get[corev1.ServiceAccount](t, m, "ServiceAccount", ns, "k8s-neuron-scheduler")
	role := get[rbacv1.ClusterRole](t, m, "ClusterRole", "", "k8s-neuron-scheduler")
	wantRules := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"pods/binding"}, Verbs: []string{"create"}},
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
	}
	if !reflect.DeepEqual(role.Rules, wantRules) {
		t.Errorf("ClusterRole k8s-neuron-scheduler rules =\n  %+v\nwant\n  %+v", role.Rules, wantRules)
	}
	checkBinding(t, get[rbacv1.ClusterRoleBinding](t, m, "ClusterRoleBinding", "", "k8s-neuron-scheduler"), "k8s-neuron-scheduler", ns, "k8s-neuron-scheduler")

	leases := get[rbacv1.Role](t, m, "Role", ns, "k8s-neuron-scheduler")
	wantLeaseRules := []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update"}},
	}
	if !reflect.DeepEqual(leases.Rules, wantLeaseRules) {
		t.Errorf("Role k8s-neuron-scheduler rules =\n  %+v\nwant\n  %+v", leases.Rules, wantLeaseRules)
	}
	rb := get[rbacv1.RoleBinding](t, m, "RoleBinding", ns, "k8s-neuron-scheduler")
	wantRef := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "k8s-neuron-scheduler"}
	wantSubjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "k8s-neuron-scheduler", Namespace: ns}}
	if rb.RoleRef != wantRef || !reflect.DeepEqual(rb.Subjects, wantSubjects) {
		t.Errorf("RoleBinding: roleRef %+v subjects %+v, want %+v %+v", rb.RoleRef, rb.Subjects, wantRef, wantSubjects)
	}
}

func checkPDB(t *testing.T, m manifest, ns string) {
	t.Helper()
	pdb := get[policyv1.PodDisruptionBudget](t, m, "PodDisruptionBudget", ns, "k8s-neuron-scheduler")
	d := get[appsv1.Deployment](t, m, "Deployment", ns, "k8s-neuron-scheduler")
	one := intstr.FromInt32(1)
	want := policyv1.PodDisruptionBudgetSpec{MinAvailable: &one, Selector: d.Spec.Selector}
	if !reflect.DeepEqual(pdb.Spec, want) {
		t.Errorf("PodDisruptionBudget spec = %+v, want minAvailable 1 over the extender's pods", pdb.Spec)
	}
}

// checkMyScheduler checks my-scheduler's Deployment and RBAC with the default values but the mode
// (plugin: neuron-kube-scheduler); the caller checks its configuration and TestComponentPods its
// security context, affinity and env.
func checkMyScheduler(t *testing.T, m manifest, ns string, plugin bool) {
	t.Helper()
	d := get[appsv1.Deployment](t, m, "Deployment", ns, "my-scheduler")
	if got := ptr.Deref(d.Spec.Replicas, -1); got != 1 {
		t.Errorf("my-scheduler replicas = %d, want 1", got)
	}
	for k, v := range d.Spec.Selector.MatchLabels {
		if d.Spec.Template.Labels[k] != v {
			t.Errorf("my-scheduler selector %s=%s does not match the pod labels", k, v)
		}
	}
	spec := d.Spec.Template.Spec
	if spec.ServiceAccountName != "my-scheduler" {
		t.Errorf("my-scheduler serviceAccountName = %q", spec.ServiceAccountName)
	}
	if d.Spec.Template.Annotations["checksum/config"] == "" {
		t.Errorf("my-scheduler pod has no checksum/config annotation: a new configuration would not restart it")
	}
	// With the chart's generated certificates, new ones restart it (mode extender only).
	if got := d.Spec.Template.Annotations["checksum/client-tls"]; (got != "") == plugin {
		t.Errorf("my-scheduler pod annotation checksum/client-tls = %q in mode plugin=%v", got, plugin)
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("my-scheduler: want one container, got %d", len(spec.Containers))
	}
	c := spec.Containers[0]
	wantName, wantImage, wantCommand := "kube-scheduler", "registry.k8s.io/kube-scheduler:v1.36.3", "/usr/local/bin/kube-scheduler"
	if plugin {
		wantName, wantImage, wantCommand = "neuron-kube-scheduler", testRegistry+"/neuron-kube-scheduler:0.1.0", "/neuron-kube-scheduler"
	}
	if c.Name != wantName || c.Image != wantImage || !slices.Equal(c.Command, []string{wantCommand}) || c.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("my-scheduler container %q image %q command %q pull %q, want %q %q [%s] IfNotPresent", c.Name, c.Image, c.Command, c.ImagePullPolicy, wantName, wantImage, wantCommand)
	}
	const configFile = "/etc/kubernetes/my-scheduler/my-scheduler-config.yaml"
	if want := []string{"--config=" + configFile, "--v=2"}; !slices.Equal(c.Args, want) {
		t.Errorf("my-scheduler args = %q, want %q", c.Args, want)
	}
	checkHTTPProbe(t, "my-scheduler livenessProbe", c.LivenessProbe, "/healthz", intstr.FromInt32(10259), corev1.URISchemeHTTPS)
	checkHTTPProbe(t, "my-scheduler readinessProbe", c.ReadinessProbe, "/healthz", intstr.FromInt32(10259), corev1.URISchemeHTTPS)
	wantMounts := []corev1.VolumeMount{{Name: "config", MountPath: path.Dir(configFile), ReadOnly: true}}
	wantVolumes := []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "my-scheduler-config"}}}}}
	if !plugin { // the client certificate for the extender, TLS being the default
		wantMounts = append(wantMounts, corev1.VolumeMount{Name: "extender-client-tls", MountPath: "/etc/kubernetes/my-scheduler-tls", ReadOnly: true})
		wantVolumes = append(wantVolumes, corev1.Volume{Name: "extender-client-tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "my-scheduler-extender-client-tls"}}})
	}
	if !reflect.DeepEqual(c.VolumeMounts, wantMounts) || !reflect.DeepEqual(spec.Volumes, wantVolumes) {
		t.Errorf("my-scheduler mounts %+v volumes %+v, want %+v %+v", c.VolumeMounts, spec.Volumes, wantMounts, wantVolumes)
	}

	get[corev1.ServiceAccount](t, m, "ServiceAccount", ns, "my-scheduler")
	checkBinding(t, get[rbacv1.ClusterRoleBinding](t, m, "ClusterRoleBinding", "", "my-scheduler-as-kube-scheduler"), "system:kube-scheduler", ns, "my-scheduler")
	checkBinding(t, get[rbacv1.ClusterRoleBinding](t, m, "ClusterRoleBinding", "", "my-scheduler-as-volume-scheduler"), "system:volume-scheduler", ns, "my-scheduler")
	checkBinding(t, get[rbacv1.ClusterRoleBinding](t, m, "ClusterRoleBinding", "", "my-scheduler"), "my-scheduler", ns, "my-scheduler")
	role := get[rbacv1.ClusterRole](t, m, "ClusterRole", "", "my-scheduler")
	wantRules := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create", "get", "list", "update"}},
	}
	if !reflect.DeepEqual(role.Rules, wantRules) {
		t.Errorf("ClusterRole my-scheduler rules =\n  %+v\nwant\n  %+v", role.Rules, wantRules)
	}
}

// TestSchedulerValues checks that every scheduler value lands where it should.
func TestSchedulerValues(t *testing.T) {
	t.Parallel()
	m := render(t,
		"npd.enabled=false",
		"image.registry=registry.example.com/kube-neuron",
		"image.tag=v9",
		"imagePullSecrets[0].name=pull",
		"scheduler.enabled=true",
		"scheduler.namespace=neuron",
		"scheduler.replicas=3",
		"scheduler.port=8080",
		"scheduler.metricsPort=9090",
		"scheduler.policy=first-fit",
		"scheduler.mirrorUsageAnnotations=true",
		"scheduler.extenderWeight=5",
		"scheduler.args={--v=5}",
		`scheduler.podAnnotations.prometheus\.io/scrape=true`,
		`scheduler.podAnnotations.prometheus\.io/port=8080`,
		"scheduler.priorityClassName=neuron",
		"scheduler.resources.limits.memory=1Gi",
		"scheduler.tolerations[0].key=dedicated",
		"scheduler.tolerations[0].operator=Exists",
		"scheduler.customScheduler.replicas=2",
		"scheduler.customScheduler.image=mirror.example.com/kube-scheduler@sha256:0123",
		"scheduler.customScheduler.imagePullPolicy=Always",
	)
	d := get[appsv1.Deployment](t, m, "Deployment", "neuron", "k8s-neuron-scheduler")
	if got := ptr.Deref(d.Spec.Replicas, -1); got != 3 {
		t.Errorf("replicas = %d, want 3", got)
	}
	pod := d.Spec.Template
	wantAnnotations := map[string]string{"prometheus.io/scrape": "true", "prometheus.io/port": "8080"}
	if !reflect.DeepEqual(pod.Annotations, wantAnnotations) {
		t.Errorf("pod annotations = %v, want %v", pod.Annotations, wantAnnotations)
	}
	spec := pod.Spec
	c := spec.Containers[0]
	if c.Image != "registry.example.com/kube-neuron/neuron-scheduler-extender:v9" || !slices.Equal(c.Args, []string{"--v=5"}) {
		t.Errorf("image %q args %q", c.Image, c.Args)
	}
	if !reflect.DeepEqual(spec.ImagePullSecrets, []corev1.LocalObjectReference{{Name: "pull"}}) || spec.PriorityClassName != "neuron" {
		t.Errorf("imagePullSecrets %+v priorityClassName %q", spec.ImagePullSecrets, spec.PriorityClassName)
	}
	if want := []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists}}; !reflect.DeepEqual(spec.Tolerations, want) {
		t.Errorf("tolerations = %+v, want %+v", spec.Tolerations, want)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	for k, v := range map[string]string{"PORT": "8080", "NEURON_PLACEMENT_POLICY": "first-fit", "NEURON_MIRROR_USAGE_ANNOTATIONS": "true", "NEURON_METRICS_ADDRESS": ":9090"} {
		if env[k] != v {
			t.Errorf("env %s = %q, want %q", k, env[k], v)
		}
	}
	if len(c.Ports) != 2 || c.Ports[0].ContainerPort != 8080 || c.Ports[0].Name != "https" || c.Ports[1].ContainerPort != 9090 || c.Ports[1].Name != "metrics" {
		t.Errorf("ports = %+v, want https 8080 and metrics 9090", c.Ports)
	}
	np := get[networkingv1.NetworkPolicy](t, m, "NetworkPolicy", "neuron", "k8s-neuron-scheduler")
	if p := np.Spec.Ingress[0].Ports[0].Port; p.IntValue() != 8080 || np.Spec.Ingress[1].Ports[0].Port.IntValue() != 9090 {
		t.Errorf("NetworkPolicy ports %+v, want 8080 and 9090", np.Spec.Ingress)
	}
	get[policyv1.PodDisruptionBudget](t, m, "PodDisruptionBudget", "neuron", "my-scheduler")
	checkResources(t, c.Resources, "50m", "64Mi", "500m", "1Gi")
	checkExtenderService(t, m, "neuron", 8080, 0)
	get[policyv1.PodDisruptionBudget](t, m, "PodDisruptionBudget", "neuron", "k8s-neuron-scheduler")
	leases := get[rbacv1.RoleBinding](t, m, "RoleBinding", "neuron", "k8s-neuron-scheduler")
	if leases.Subjects[0].Namespace != "neuron" {
		t.Errorf("RoleBinding subjects = %+v", leases.Subjects)
	}

	my := get[appsv1.Deployment](t, m, "Deployment", "neuron", "my-scheduler")
	if got := ptr.Deref(my.Spec.Replicas, -1); got != 2 {
		t.Errorf("my-scheduler replicas = %d, want 2", got)
	}
	if mc := my.Spec.Template.Spec.Containers[0]; mc.Image != "mirror.example.com/kube-scheduler@sha256:0123" || mc.ImagePullPolicy != corev1.PullAlways {
		t.Errorf("my-scheduler image %q pull %q", mc.Image, mc.ImagePullPolicy)
	}
	cfg := configFrom(t, m, "neuron", "my-scheduler-config", "my-scheduler-config.yaml")
	if want := []extender{wantTLSExtender("https://k8s-neuron-scheduler.neuron.svc.cluster.local:8080", 5, myTLS("neuron"))}; !reflect.DeepEqual(cfg.Extenders, want) {
		t.Errorf("extenders = %+v, want %+v", cfg.Extenders, want)
	}
	if want := (leaderElection{LeaderElect: true, ResourceNamespace: "neuron", ResourceName: "my-scheduler"}); cfg.LeaderElection != want {
		t.Errorf("leaderElection = %+v, want %+v", cfg.LeaderElection, want)
	}
	for _, name := range []string{"my-scheduler-as-kube-scheduler", "my-scheduler-as-volume-scheduler", "my-scheduler"} {
		if b := get[rbacv1.ClusterRoleBinding](t, m, "ClusterRoleBinding", "", name); b.Subjects[0].Namespace != "neuron" {
			t.Errorf("ClusterRoleBinding %s subjects = %+v", name, b.Subjects)
		}
	}
}

// TestSchedulerDefaultSchedulerValues: the NodePort, the weight and the kubeconfig reach the
// default scheduler's configuration.
func TestSchedulerDefaultSchedulerValues(t *testing.T) {
	t.Parallel()
	m := render(t, "scheduler.enabled=true", "scheduler.customScheduler.enabled=false", "scheduler.defaultScheduler.enabled=true",
		"scheduler.defaultScheduler.nodePort=31000", "scheduler.defaultScheduler.kubeconfig=/var/lib/kube-scheduler/kubeconfig",
		"scheduler.extenderWeight=3", "scheduler.tolerations[0].key=dedicated", "scheduler.tolerations[0].operator=Exists")
	checkExtenderService(t, m, "kube-system", 12345, 31000)
	cfg := configFrom(t, m, "kube-system", "neuron-scheduler-extender-config", "kube-scheduler-config.yaml")
	if want := []extender{wantTLSExtender("https://127.0.0.1:31000", 3, defaultSchedulerTLS)}; !reflect.DeepEqual(cfg.Extenders, want) {
		t.Errorf("extenders = %+v, want %+v", cfg.Extenders, want)
	}
	if cfg.ClientConnection == nil || cfg.ClientConnection.Kubeconfig != "/var/lib/kube-scheduler/kubeconfig" {
		t.Errorf("clientConnection = %+v", cfg.ClientConnection)
	}
	spec := get[appsv1.Deployment](t, m, "Deployment", "kube-system", "k8s-neuron-scheduler").Spec.Template.Spec
	want := []corev1.Toleration{
		{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: "dedicated", Operator: corev1.TolerationOpExists},
	}
	if !reflect.DeepEqual(spec.Tolerations, want) {
		t.Errorf("tolerations = %+v, want %+v", spec.Tolerations, want)
	}
}

// TestSchedulerOneReplica: one replica renders no PodDisruptionBudget (it would block every drain).
func TestSchedulerOneReplica(t *testing.T) {
	t.Parallel()
	m := render(t, "scheduler.enabled=true", "scheduler.replicas=1", "npd.enabled=false")
	if got, want := m.names(), objects(devicePluginObjects, extenderObjects, networkPolicyObjects, mySchedulerObjects); !slices.Equal(got, want) {
		t.Fatalf("rendered objects:\n  got  %q\n  want %q", got, want)
	}
	checkExtender(t, m, "kube-system", 1, false)
}

// TestSchedulerWithoutRegistration: with neither registration the extender alone renders.
func TestSchedulerWithoutRegistration(t *testing.T) {
	t.Parallel()
	m := render(t, "scheduler.enabled=true", "scheduler.customScheduler.enabled=false", "npd.enabled=false")
	if got, want := m.names(), objects(devicePluginObjects, extenderObjects, pdbObjects, networkPolicyObjects); !slices.Equal(got, want) {
		t.Fatalf("rendered objects:\n  got  %q\n  want %q", got, want)
	}
}

// TestSchedulerNeedsDevicePlugin: the extender writes allocations that the device plugin serves.
func TestSchedulerNeedsDevicePlugin(t *testing.T) {
	t.Parallel()
	const msg = "scheduler.enabled is true and devicePlugin.enabled is false: the scheduler extender needs the device plugin, which serves the allocation the extender writes on each pod. " +
		"Leave devicePlugin.enabled=true, or set scheduler.allowWithoutDevicePlugin=true if another component runs kube-neuron's device plugin."
	for _, sets := range [][]string{
		{"scheduler.enabled=true", "devicePlugin.enabled=false"},
		{"scheduler.enabled=true", "devicePlugin.enabled=false", "npd.enabled=false", "draDriver.enabled=true"},
	} {
		t.Run(strings.Join(sets, " "), func(t *testing.T) {
			t.Parallel()
			out, err := helmTemplate(t, sets...)
			if err == nil {
				t.Fatalf("rendered, want failure %q:\n%s", msg, out)
			}
			if !strings.Contains(err.Error(), msg) {
				t.Errorf("error does not say %q:\n%v", msg, err)
			}
		})
	}
	for _, sets := range [][]string{
		{"scheduler.allowWithoutDevicePlugin=true"},
		{"devicePlugin.allowWithDRA=true"},
	} {
		t.Run(strings.Join(sets, " "), func(t *testing.T) {
			t.Parallel()
			m := render(t, append([]string{"scheduler.enabled=true", "devicePlugin.enabled=false", "npd.enabled=false"}, sets...)...)
			if got, want := m.names(), objects(extenderObjects, pdbObjects, networkPolicyObjects, mySchedulerObjects); !slices.Equal(got, want) {
				t.Fatalf("rendered objects:\n  got  %q\n  want %q", got, want)
			}
		})
	}
}

func TestSchedulerSchemaRejectsBadValues(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		set  string
		want string // in helm's message
	}{
		{"scheduler.policy=worst-fit", "value must be one of 'best-fit', 'first-fit'"},
		{"scheduler.replicas=-1", "/scheduler/replicas"},
		{"scheduler.port=0", "/scheduler/port"},
		{"scheduler.extenderWeight=0", "/scheduler/extenderWeight"},
		{"scheduler.mirrorUsageAnnotations=maybe", "/scheduler/mirrorUsageAnnotations"},
		{"scheduler.namespace=Kube_System", "/scheduler/namespace"},
		{"scheduler.podAnnotations.scrape.now=true", "/scheduler/podAnnotations/scrape"},
		{"scheduler.resources.limits.cpu=lots", "/scheduler/resources/limits/cpu"},
		{"scheduler.replica=2", "additional properties 'replica' not allowed"},
		{"scheduler.customScheduler.imag=x", "additional properties 'imag' not allowed"},
		{"scheduler.customScheduler.image=", "/scheduler/customScheduler/image"},
		{"scheduler.customScheduler.replicas=-1", "/scheduler/customScheduler/replicas"},
		{"scheduler.defaultScheduler.nodePort=70000", "/scheduler/defaultScheduler/nodePort"},
		{"scheduler.defaultScheduler.kubeconfig=scheduler.conf", "/scheduler/defaultScheduler/kubeconfig"},
		{"scheduler.defaultScheduler.port=1", "additional properties 'port' not allowed"},
	} {
		t.Run(tc.set, func(t *testing.T) {
			t.Parallel()
			out, err := helmTemplate(t, "scheduler.enabled=true", tc.set)
			if err == nil {
				t.Fatalf("rendered, want a schema error:\n%s", out)
			}
			if msg := err.Error(); !strings.Contains(msg, "values don't meet the specifications of the schema") || !strings.Contains(msg, tc.want) {
				t.Errorf("error does not mention %q:\n%v", tc.want, err)
			}
		})
	}
}

func TestSchedulerLint(t *testing.T) {
	t.Parallel()
	for _, sets := range [][]string{
		{"scheduler.enabled=true", "npd.enabled=false"},
		{"scheduler.enabled=true", "scheduler.customScheduler.enabled=false", "scheduler.defaultScheduler.enabled=true", "npd.enabled=false"},
		{"scheduler.enabled=true", "scheduler.replicas=1", `scheduler.podAnnotations.prometheus\.io/scrape=true`},
		{"scheduler.enabled=true", "scheduler.tls.enabled=true", "scheduler.tls.certManager.enabled=true", "scheduler.admissionPolicy.enabled=true", "scheduler.customScheduler.replicas=2"},
		{"scheduler.enabled=true", "scheduler.customScheduler.mode=plugin", "scheduler.admissionPolicy.enabled=true", "scheduler.customScheduler.replicas=2"},
		{"scheduler.enabled=true", "scheduler.tls.enabled=false"},
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

func TestSchedulerNotes(t *testing.T) {
	t.Parallel()
	const (
		check      = "kubectl get deploy,svc k8s-neuron-scheduler -n kube-system"
		url        = "https://k8s-neuron-scheduler.kube-system.svc.cluster.local:12345"
		plainURL   = "http://k8s-neuron-scheduler.kube-system.svc.cluster.local:12345"
		generated  = "(the chart generated both and its CA; helm upgrade keeps them"
		open       = "Anyone who can reach that port can bind pods"
		optIn      = "schedulerName: my-scheduler"
		checkMy    = "kubectl get deploy my-scheduler -n kube-system"
		getConfig  = `kubectl get configmap neuron-scheduler-extender-config -n kube-system -o jsonpath='{.data.kube-scheduler-config\.yaml}'`
		configFlag = "--config=/etc/kubernetes/kube-scheduler-config.yaml"
		noPolicy   = "does not\n  work on Kubernetes 1.23 and later"
	)
	for _, tc := range []struct {
		name      string
		sets      []string
		want, not []string
	}{
		{"second scheduler", []string{"scheduler.enabled=true"}, []string{check, url, optIn, checkMy, "need a client certificate", generated}, []string{getConfig, configFlag, open, plainURL, "neuron-kube-scheduler"}},
		{"plain HTTP", []string{"scheduler.enabled=true", "scheduler.tls.enabled=false"}, []string{plainURL, open}, []string{url, "client certificate"}},
		{"plugin", []string{"scheduler.enabled=true", "scheduler.customScheduler.mode=plugin", "scheduler.admissionPolicy.enabled=true"},
			[]string{"neuron-kube-scheduler (scheduler.customScheduler.mode plugin)", optIn, checkMy, "no extender runs", "MutatingAdmissionPolicy neuron-pods-use-my-scheduler"},
			[]string{check, url, plainURL, "client certificate", open}},
		{"default scheduler", []string{"scheduler.enabled=true", "scheduler.customScheduler.enabled=false", "scheduler.defaultScheduler.enabled=true"},
			[]string{check, getConfig, configFlag, noPolicy, "https://127.0.0.1:32700",
				`kubectl get secret my-scheduler-extender-client-tls -n kube-system -o jsonpath='{.data.tls\.key}' | base64 -d > /etc/kubernetes/pki/neuron-scheduler-extender/tls.key`},
			[]string{optIn, checkMy}},
		{"off", nil, nil, []string{check, optIn, getConfig}},
		{"TLS from your Secrets and the admission policy", []string{"scheduler.enabled=true", "scheduler.tls.generate=false", "scheduler.admissionPolicy.enabled=true"},
			[]string{"https://k8s-neuron-scheduler.kube-system.svc.cluster.local:12345", "need a client certificate signed by the ca.crt of Secret\n  k8s-neuron-scheduler-tls",
				"(create both Secrets yourself: docs/security.md)", "MutatingAdmissionPolicy neuron-pods-use-my-scheduler", "port 9467"},
			[]string{plainURL, open, generated}},
		{"default scheduler with TLS", []string{"scheduler.enabled=true", "scheduler.customScheduler.enabled=false", "scheduler.defaultScheduler.enabled=true", "scheduler.tls.enabled=true", "scheduler.tls.certManager.enabled=true"},
			[]string{"https://127.0.0.1:32700", "Copy tls.crt, tls.key and ca.crt of Secret my-scheduler-extender-client-tls to /etc/kubernetes/pki/neuron-scheduler-extender/"},
			[]string{"create both Secrets yourself", generated}},
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

func TestSchedulerMirrorNeedsNodePatch(t *testing.T) {
	for mirror, want := range map[string]bool{"true": true, "false": false} {
		m := render(t, "scheduler.enabled=true", "npd.enabled=false", "scheduler.mirrorUsageAnnotations="+mirror)
		role := get[rbacv1.ClusterRole](t, m, "ClusterRole", "", "k8s-neuron-scheduler")
		for _, r := range role.Rules {
			if slices.Contains(r.Resources, "nodes") && slices.Contains(r.Verbs, "patch") != want {
				t.Errorf("mirrorUsageAnnotations=%s: nodes verbs %v", mirror, r.Verbs)
			}
		}
	}
}

// TestSchedulerWithoutReplicas: 0 replicas of the extender and of my-scheduler render
// Deployments that run nothing, without a PodDisruptionBudget, and NOTES.txt says what that
// means (the local lab installs the chart so when it runs both as host processes).
func TestSchedulerWithoutReplicas(t *testing.T) {
	t.Parallel()
	m := render(t, "scheduler.enabled=true", "scheduler.replicas=0", "scheduler.customScheduler.replicas=0")
	for _, o := range m {
		switch obj := o.Obj.(type) {
		case *appsv1.Deployment:
			if obj.Spec.Replicas == nil || *obj.Spec.Replicas != 0 {
				t.Errorf("Deployment %s: replicas %v, want 0", obj.Name, obj.Spec.Replicas)
			}
		case *policyv1.PodDisruptionBudget:
			t.Errorf("PodDisruptionBudget %s rendered for 0 replicas", obj.Name)
		}
	}
	notes := renderNotes(t, "scheduler.enabled=true", "scheduler.replicas=0", "scheduler.customScheduler.replicas=0")
	for _, want := range []string{"scheduler.replicas is 0: no extender runs", "scheduler.customScheduler.replicas is 0: no my-scheduler runs"} {
		if !strings.Contains(notes, want) {
			t.Errorf("NOTES.txt lacks %q", want)
		}
	}
}
