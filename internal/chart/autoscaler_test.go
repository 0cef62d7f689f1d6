package chart

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/kube-neuron/kube-neuron/internal/autoscaler"
	"github.com/kube-neuron/kube-neuron/internal/autoscaler/plan"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

const autoscalerName = "neuron-autoscaler"

var (
	// ec2Settings are the values the ec2 provider requires.
	ec2Settings = []string{
		"autoscaler.ec2.launchTemplate=lt-0123456789abcdef0",
		"autoscaler.ec2.subnets={subnet-0a1b,subnet-0c2d}",
		"autoscaler.ec2.clusterName=prod",
	}
	// autoscalerEC2 enables the autoscaler with the default provider, ec2.
	autoscalerEC2 = append([]string{"autoscaler.enabled=true"}, ec2Settings...)

	// The autoscaler's objects in kube-system, as "Kind namespace/name".
	autoscalerObjects = []string{
		"ClusterRole /neuron-autoscaler",
		"ClusterRoleBinding /neuron-autoscaler",
		"Deployment kube-system/neuron-autoscaler",
		"Role kube-system/neuron-autoscaler",
		"RoleBinding kube-system/neuron-autoscaler",
		"ServiceAccount kube-system/neuron-autoscaler",
	}
	// autoscalerPDB: rendered when autoscaler.replicas > 1 (the default 2).
	autoscalerPDB = []string{"PodDisruptionBudget kube-system/neuron-autoscaler"}
)

func fieldEnv(path string) *corev1.EnvVarSource {
	return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}
}

// autoscalerEnv is the env of the container with the default values and provider, then the
// provider's env (nil for local: the ec2 settings are not rendered).
func autoscalerEnv(provider string, providerEnv ...corev1.EnvVar) []corev1.EnvVar {
	return append([]corev1.EnvVar{
		{Name: "NEURON_AUTOSCALER_PROVIDER", Value: provider},
		{Name: "NEURON_AUTOSCALER_BATCH_WINDOW", Value: "10s"},
		{Name: "NEURON_AUTOSCALER_SCALE_DOWN_AFTER", Value: "10m"},
		{Name: "NEURON_AUTOSCALER_RESYNC_INTERVAL", Value: "30s"},
		{Name: "NEURON_AUTOSCALER_MAX_NODES", Value: "0"},
		{Name: "NEURON_AUTOSCALER_MAX_DEVICES", Value: "0"},
		{Name: "NEURON_AUTOSCALER_FAMILIES", Value: ""},
		{Name: "NEURON_AUTOSCALER_DRY_RUN", Value: "false"},
		{Name: "NEURON_AUTOSCALER_ON_DEMAND_FALLBACK", Value: "true"},
		{Name: "NEURON_AUTOSCALER_NODE_STARTUP_ESTIMATE", Value: "10m"},
		{Name: "NEURON_AUTOSCALER_CAPACITY_BLOCK_DRAIN_LEAD", Value: "40m"},
		{Name: "NEURON_AUTOSCALER_ULTRASERVER_CAPACITY_BLOCK_DRAIN_LEAD", Value: "70m"},
		{Name: "NEURON_AUTOSCALER_LEADER_ELECT", Value: "true"},
		{Name: "POD_NAMESPACE", ValueFrom: fieldEnv("metadata.namespace")},
		{Name: "NEURON_METRICS_ADDRESS", Value: ":9466"},
	}, providerEnv...)
}

// ec2Env is the ec2 provider's env for ec2Settings; AWS_REGION is left out while the region is empty.
var ec2Env = []corev1.EnvVar{
	{Name: "NEURON_EC2_ENDPOINT", Value: ""},
	{Name: "NEURON_EC2_LAUNCH_TEMPLATE", Value: "lt-0123456789abcdef0"},
	{Name: "NEURON_EC2_LAUNCH_TEMPLATE_VERSION", Value: ""},
	{Name: "NEURON_EC2_SUBNETS", Value: "subnet-0a1b,subnet-0c2d"},
	{Name: "NEURON_EC2_CLUSTER_NAME", Value: "prod"},
	{Name: "NEURON_EC2_NODE_NAME_SOURCE", Value: "private-dns-name"},
	{Name: "NEURON_EC2_CAPACITY_RESERVATIONS", Value: "[]"},
}

// TestAutoscalerEC2 renders the autoscaler with the default provider, ec2, and its required
// settings: the Deployment, its env, the RBAC verb by verb, the Lease Role and the
// PodDisruptionBudget.
func TestAutoscalerEC2(t *testing.T) {
	t.Parallel()
	m := render(t, append([]string{"npd.enabled=false"}, autoscalerEC2...)...)
	if got, want := m.names(), objects(devicePluginObjects, autoscalerObjects, autoscalerPDB); !slices.Equal(got, want) {
		t.Fatalf("rendered objects:\n  got  %q\n  want %q", got, want)
	}
	checkDevicePlugin(t, m, "kube-system")
	checkAutoscaler(t, m, "kube-system", 2)
	checkAutoscalerRBAC(t, m, "kube-system", false)
	checkAutoscalerPDB(t, m, "kube-system")
	if sa := get[corev1.ServiceAccount](t, m, "ServiceAccount", "kube-system", autoscalerName); len(sa.Annotations) != 0 {
		t.Errorf("ServiceAccount annotations = %v, want none by default", sa.Annotations)
	}
	for _, o := range m {
		l := objectLabels(o.Obj)
		if l["app.kubernetes.io/instance"] != release || l["app.kubernetes.io/part-of"] != "kube-neuron" || l["app.kubernetes.io/managed-by"] != "Helm" {
			t.Errorf("%s: labels %v lack the release labels", o, l)
		}
	}
}

// TestAutoscalerLocal: the lab's provider creates Node objects, so only it may create nodes
// (and set their status); the ec2 settings are neither required nor rendered.
func TestAutoscalerLocal(t *testing.T) {
	t.Parallel()
	m := render(t, "autoscaler.enabled=true", "autoscaler.provider=local", "devicePlugin.enabled=false", "npd.enabled=false")
	if got, want := m.names(), objects(autoscalerObjects, autoscalerPDB); !slices.Equal(got, want) {
		t.Fatalf("rendered objects:\n  got  %q\n  want %q", got, want)
	}
	checkAutoscaler(t, m, "kube-system", 2)
	checkAutoscalerRBAC(t, m, "kube-system", true)
	checkAutoscalerPDB(t, m, "kube-system")
}

// checkAutoscaler checks the Deployment neuron-autoscaler with the default values;
// TestComponentPods checks its security context, affinity and env.
func checkAutoscaler(t *testing.T, m manifest, ns string, replicas int32) {
	t.Helper()
	d := get[appsv1.Deployment](t, m, "Deployment", ns, autoscalerName)
	wantLabels := map[string]string{
		"app.kubernetes.io/name":      autoscalerName,
		"app.kubernetes.io/instance":  release,
		"app.kubernetes.io/component": "autoscaler",
	}
	wantSelector := map[string]string{
		"app.kubernetes.io/name":     autoscalerName,
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
	if spec.ServiceAccountName != autoscalerName || spec.PriorityClassName != "system-cluster-critical" {
		t.Errorf("serviceAccountName %q priorityClassName %q, want %s system-cluster-critical", spec.ServiceAccountName, spec.PriorityClassName, autoscalerName)
	}
	if spec.HostNetwork || spec.HostPID || spec.HostIPC || len(spec.NodeSelector) != 0 {
		t.Errorf("hostNetwork %v hostPID %v hostIPC %v nodeSelector %v, want none", spec.HostNetwork, spec.HostPID, spec.HostIPC, spec.NodeSelector)
	}
	wantTolerations := []corev1.Toleration{{Key: "CriticalAddonsOnly", Operator: corev1.TolerationOpExists}}
	if !reflect.DeepEqual(spec.Tolerations, wantTolerations) {
		t.Errorf("tolerations = %+v, want %+v", spec.Tolerations, wantTolerations)
	}
	if len(spec.Volumes) != 0 {
		t.Errorf("volumes = %+v, want none", spec.Volumes)
	}

	if len(spec.Containers) != 1 || len(spec.InitContainers) != 0 {
		t.Fatalf("want exactly one container, got %d (+%d init)", len(spec.Containers), len(spec.InitContainers))
	}
	c := spec.Containers[0]
	if c.Name != autoscalerName || c.Image != testRegistry+"/neuron-autoscaler:0.1.0" || c.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("container %q image %q pull %q, want neuron-autoscaler %s/neuron-autoscaler:0.1.0 IfNotPresent", c.Name, c.Image, c.ImagePullPolicy, testRegistry)
	}
	if !slices.Equal(c.Command, []string{"/neuron-autoscaler"}) || len(c.Args) != 0 {
		t.Errorf("command %q args %q, want [/neuron-autoscaler] and no args", c.Command, c.Args)
	}
	wantPorts := []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9466, Protocol: corev1.ProtocolTCP}}
	if !reflect.DeepEqual(c.Ports, wantPorts) {
		t.Errorf("ports = %+v, want %+v", c.Ports, wantPorts)
	}
	checkHTTPProbe(t, "readinessProbe", c.ReadinessProbe, "/readyz", intstr.FromString("metrics"), "")
	checkHTTPProbe(t, "livenessProbe", c.LivenessProbe, "/healthz", intstr.FromString("metrics"), "")
	checkResources(t, c.Resources, "50m", "128Mi", "500m", "512Mi")
}

// checkAutoscalerRBAC checks least privilege, verb by verb, against what the controller and the
// providers call: node create and status update only for the local provider, which creates Node
// objects; the ec2 provider calls only EC2.
func checkAutoscalerRBAC(t *testing.T, m manifest, ns string, local bool) {
	t.Helper()
	get[corev1.ServiceAccount](t, m, "ServiceAccount", ns, autoscalerName)
	role := get[rbacv1.ClusterRole](t, m, "ClusterRole", "", autoscalerName)
	nodes := rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"list", "watch", "patch", "delete"}}
	wantRules := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list", "watch", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"pods/status"}, Verbs: []string{"patch"}},
		// The drain of the nodes of an ending Capacity Block: evictions, PDBs honoured.
		{APIGroups: []string{""}, Resources: []string{"pods/eviction"}, Verbs: []string{"create"}},
		nodes,
	}
	if local {
		nodes.Verbs = []string{"get", "list", "watch", "create", "patch", "delete"}
		wantRules = []rbacv1.PolicyRule{
			wantRules[0],
			wantRules[1],
			wantRules[2],
			nodes,
			{APIGroups: []string{""}, Resources: []string{"nodes/status"}, Verbs: []string{"update"}},
		}
	}
	wantRules = append(wantRules,
		rbacv1.PolicyRule{APIGroups: []string{"apps"}, Resources: []string{"daemonsets"}, Verbs: []string{"list", "watch"}},
		rbacv1.PolicyRule{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"deviceclasses", "resourceclaims", "resourceclaimtemplates", "resourceslices"}, Verbs: []string{"list", "watch"}},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
	)
	if !reflect.DeepEqual(role.Rules, wantRules) {
		t.Errorf("ClusterRole neuron-autoscaler rules =\n  %+v\nwant\n  %+v", role.Rules, wantRules)
	}
	checkBinding(t, get[rbacv1.ClusterRoleBinding](t, m, "ClusterRoleBinding", "", autoscalerName), autoscalerName, ns, autoscalerName)

	leases := get[rbacv1.Role](t, m, "Role", ns, autoscalerName)
	wantLeaseRules := []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: []string{autoscaler.LeaseName}, Verbs: []string{"get", "update"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create"}},
	}
	if !reflect.DeepEqual(leases.Rules, wantLeaseRules) {
		t.Errorf("Role neuron-autoscaler rules =\n  %+v\nwant\n  %+v", leases.Rules, wantLeaseRules)
	}
	rb := get[rbacv1.RoleBinding](t, m, "RoleBinding", ns, autoscalerName)
	wantRef := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: autoscalerName}
	wantSubjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: autoscalerName, Namespace: ns}}
	if rb.RoleRef != wantRef || !reflect.DeepEqual(rb.Subjects, wantSubjects) {
		t.Errorf("RoleBinding: roleRef %+v subjects %+v, want %+v %+v", rb.RoleRef, rb.Subjects, wantRef, wantSubjects)
	}
}

func checkAutoscalerPDB(t *testing.T, m manifest, ns string) {
	t.Helper()
	pdb := get[policyv1.PodDisruptionBudget](t, m, "PodDisruptionBudget", ns, autoscalerName)
	d := get[appsv1.Deployment](t, m, "Deployment", ns, autoscalerName)
	one := intstr.FromInt32(1)
	want := policyv1.PodDisruptionBudgetSpec{MinAvailable: &one, Selector: d.Spec.Selector}
	if !reflect.DeepEqual(pdb.Spec, want) {
		t.Errorf("PodDisruptionBudget spec = %+v, want minAvailable 1 over the autoscaler's pods", pdb.Spec)
	}
}

// TestAutoscalerValues checks that every autoscaler value lands where it should.
func TestAutoscalerValues(t *testing.T) {
	t.Parallel()
	m := render(t, append(slices.Clone(autoscalerEC2),
		"npd.enabled=false",
		"devicePlugin.enabled=false",
		"image.registry=registry.example.com/kube-neuron",
		"image.tag=v9",
		"image.pullPolicy=Always",
		"imagePullSecrets[0].name=pull",
		"autoscaler.namespace=neuron",
		"autoscaler.replicas=3",
		"autoscaler.batchWindow=5s",
		"autoscaler.scaleDownAfter=1h30m",
		"autoscaler.resyncInterval=1m",
		"autoscaler.maxNodes=20",
		"autoscaler.maxDevices=256",
		"autoscaler.families={trn1,inf2}",
		"autoscaler.dryRun=true",
		"autoscaler.metricsPort=9000",
		"autoscaler.args={--v=5}",
		`autoscaler.podAnnotations.prometheus\.io/scrape=true`,
		"autoscaler.priorityClassName=neuron",
		"autoscaler.resources.limits.memory=2Gi",
		"autoscaler.tolerations[0].key=dedicated",
		"autoscaler.tolerations[0].operator=Exists",
		`autoscaler.serviceAccount.annotations.eks\.amazonaws\.com/role-arn=arn:aws:iam::111122223333:role/neuron-autoscaler`,
		"autoscaler.ec2.region=us-west-2",
		"autoscaler.ec2.endpoint=https://ec2.us-west-2.amazonaws.com",
		"autoscaler.ec2.launchTemplateVersion=$Default",
		"autoscaler.ec2.nodeNameSource=instance-id",
		"autoscaler.catalog.configMapName=neuron-prices",
		"autoscaler.catalog.configMapKey=prices.yaml",
		"autoscaler.onDemandFallback=false",
		"autoscaler.nodeStartupEstimate=15m",
		"autoscaler.capacityBlocks.drainLead=45m",
		"autoscaler.capacityBlocks.ultraServerDrainLead=1h15m",
		"autoscaler.ec2.capacityReservations[0].id=cr-0123456789abcdef0",
		"autoscaler.ec2.capacityReservations[1].tags.team=ml",
	)...)
	want := sorted([]string{
		"ClusterRole /neuron-autoscaler", "ClusterRoleBinding /neuron-autoscaler",
		"Deployment neuron/neuron-autoscaler", "PodDisruptionBudget neuron/neuron-autoscaler",
		"Role neuron/neuron-autoscaler", "RoleBinding neuron/neuron-autoscaler", "ServiceAccount neuron/neuron-autoscaler",
	})
	if got := m.names(); !slices.Equal(got, want) {
		t.Fatalf("rendered %q, want %q", got, want)
	}
	checkAutoscalerRBAC(t, m, "neuron", false)
	checkAutoscalerPDB(t, m, "neuron")
	sa := get[corev1.ServiceAccount](t, m, "ServiceAccount", "neuron", autoscalerName)
	if want := map[string]string{"eks.amazonaws.com/role-arn": "arn:aws:iam::111122223333:role/neuron-autoscaler"}; !reflect.DeepEqual(sa.Annotations, want) {
		t.Errorf("ServiceAccount annotations = %v, want %v", sa.Annotations, want)
	}

	d := get[appsv1.Deployment](t, m, "Deployment", "neuron", autoscalerName)
	if got := ptr.Deref(d.Spec.Replicas, -1); got != 3 {
		t.Errorf("replicas = %d, want 3", got)
	}
	pod := d.Spec.Template
	if want := map[string]string{"prometheus.io/scrape": "true"}; !reflect.DeepEqual(pod.Annotations, want) {
		t.Errorf("pod annotations = %v, want %v", pod.Annotations, want)
	}
	spec := pod.Spec
	c := spec.Containers[0]
	if c.Image != "registry.example.com/kube-neuron/neuron-autoscaler:v9" || c.ImagePullPolicy != corev1.PullAlways || !slices.Equal(c.Args, []string{"--v=5"}) {
		t.Errorf("image %q pull %q args %q", c.Image, c.ImagePullPolicy, c.Args)
	}
	if !reflect.DeepEqual(spec.ImagePullSecrets, []corev1.LocalObjectReference{{Name: "pull"}}) || spec.PriorityClassName != "neuron" {
		t.Errorf("imagePullSecrets %+v priorityClassName %q", spec.ImagePullSecrets, spec.PriorityClassName)
	}
	wantTolerations := []corev1.Toleration{
		{Key: "CriticalAddonsOnly", Operator: corev1.TolerationOpExists},
		{Key: "dedicated", Operator: corev1.TolerationOpExists},
	}
	if !reflect.DeepEqual(spec.Tolerations, wantTolerations) {
		t.Errorf("tolerations = %+v, want %+v", spec.Tolerations, wantTolerations)
	}
	wantEnv := []corev1.EnvVar{
		{Name: "NEURON_AUTOSCALER_PROVIDER", Value: "ec2"},
		{Name: "NEURON_AUTOSCALER_BATCH_WINDOW", Value: "5s"},
		{Name: "NEURON_AUTOSCALER_SCALE_DOWN_AFTER", Value: "1h30m"},
		{Name: "NEURON_AUTOSCALER_RESYNC_INTERVAL", Value: "1m"},
		{Name: "NEURON_AUTOSCALER_MAX_NODES", Value: "20"},
		{Name: "NEURON_AUTOSCALER_MAX_DEVICES", Value: "256"},
		{Name: "NEURON_AUTOSCALER_FAMILIES", Value: "trn1,inf2"},
		{Name: "NEURON_AUTOSCALER_DRY_RUN", Value: "true"},
		{Name: "NEURON_AUTOSCALER_ON_DEMAND_FALLBACK", Value: "false"},
		{Name: "NEURON_AUTOSCALER_NODE_STARTUP_ESTIMATE", Value: "15m"},
		{Name: "NEURON_AUTOSCALER_CAPACITY_BLOCK_DRAIN_LEAD", Value: "45m"},
		{Name: "NEURON_AUTOSCALER_ULTRASERVER_CAPACITY_BLOCK_DRAIN_LEAD", Value: "1h15m"},
		{Name: "NEURON_AUTOSCALER_LEADER_ELECT", Value: "true"},
		{Name: "POD_NAMESPACE", ValueFrom: fieldEnv("metadata.namespace")},
		{Name: "NEURON_METRICS_ADDRESS", Value: ":9000"},
		{Name: "NEURON_CATALOG", Value: "/etc/neuron-autoscaler/catalog/catalog.yaml"},
		{Name: "AWS_REGION", Value: "us-west-2"},
		{Name: "NEURON_EC2_ENDPOINT", Value: "https://ec2.us-west-2.amazonaws.com"},
		{Name: "NEURON_EC2_LAUNCH_TEMPLATE", Value: "lt-0123456789abcdef0"},
		{Name: "NEURON_EC2_LAUNCH_TEMPLATE_VERSION", Value: "$Default"},
		{Name: "NEURON_EC2_SUBNETS", Value: "subnet-0a1b,subnet-0c2d"},
		{Name: "NEURON_EC2_CLUSTER_NAME", Value: "prod"},
		{Name: "NEURON_EC2_NODE_NAME_SOURCE", Value: "instance-id"},
		{Name: "NEURON_EC2_CAPACITY_RESERVATIONS", Value: `[{"id":"cr-0123456789abcdef0"},{"tags":{"team":"ml"}}]`},
	}
	if !reflect.DeepEqual(c.Env, wantEnv) {
		t.Errorf("env =\n  %+v\nwant\n  %+v", c.Env, wantEnv)
	}
	if len(c.Ports) != 1 || c.Ports[0].ContainerPort != 9000 || c.Ports[0].Name != "metrics" {
		t.Errorf("ports = %+v, want metrics 9000", c.Ports)
	}
	checkResources(t, c.Resources, "50m", "128Mi", "500m", "2Gi")
	// Your ConfigMap's key, mounted where NEURON_CATALOG says; the chart makes no ConfigMap.
	checkCatalogMount(t, spec, "neuron-prices", "prices.yaml")

	// Every env var is one of neuron-autoscaler's, and every flag but --kubeconfig (in-cluster)
	// has its env var.
	flagEnv := autoscalerFlagEnv(t)
	var names []string
	for _, e := range c.Env {
		if !slices.Contains(flagEnv, e.Name) {
			t.Errorf("env %s is no flag's env var in cmd/neuron-autoscaler (%v)", e.Name, flagEnv)
		}
		names = append(names, e.Name)
	}
	for _, name := range flagEnv {
		// NEURON_LOCAL_RESERVATIONS names a file of the lab's (local provider) reservations,
		// which the lab passes; the chart's local provider has none.
		if !slices.Contains(names, name) && name != "KUBECONFIG" && name != "NEURON_LOCAL_RESERVATIONS" {
			t.Errorf("flag env var %s is not set by the chart", name)
		}
	}
}

// autoscalerFlagEnv reads the env var names of neuron-autoscaler's flags from its main.go.
func autoscalerFlagEnv(t *testing.T) []string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", "..", "cmd", "neuron-autoscaler", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile(`(?s)env := map\[string\]string\{(.*?)\n\t\}`).FindSubmatch(src)
	if block == nil {
		t.Fatal("cmd/neuron-autoscaler/main.go has no env := map[string]string{...}")
	}
	var names []string
	for _, kv := range regexp.MustCompile(`"[a-z0-9-]+": "([A-Z0-9_]+)"`).FindAllSubmatch(block[1], -1) {
		names = append(names, string(kv[1]))
	}
	if len(names) < 10 {
		t.Fatalf("found only %v in main.go's env map", names)
	}
	return names
}

// TestAutoscalerOneReplica: one replica renders no PodDisruptionBudget (it would block every drain).
func TestAutoscalerOneReplica(t *testing.T) {
	t.Parallel()
	m := render(t, append([]string{"autoscaler.replicas=1", "devicePlugin.enabled=false", "npd.enabled=false"}, autoscalerEC2...)...)
	if got, want := m.names(), objects(autoscalerObjects); !slices.Equal(got, want) {
		t.Fatalf("rendered objects:\n  got  %q\n  want %q", got, want)
	}
	checkAutoscaler(t, m, "kube-system", 1)
}

// TestAutoscalerNeedsEC2Settings: the ec2 provider without a launch template, subnets or a
// cluster name fails the install with a message naming the values to set.
func TestAutoscalerNeedsEC2Settings(t *testing.T) {
	t.Parallel()
	const why = "the ec2 provider launches Neuron nodes from a launch template into the first of the subnets with capacity, " +
		"and tags them with the cluster name so that it lists and terminates only this cluster's instances. Set "
	const (
		setLT      = "--set autoscaler.ec2.launchTemplate=<launch template id lt-... or name>"
		setSubnets = "--set autoscaler.ec2.subnets={subnet-...,subnet-...}"
		setCluster = "--set autoscaler.ec2.clusterName=<cluster name>"
		orLocal    = " (or --set autoscaler.provider=local in the lab)."
	)
	for _, tc := range []struct {
		name string
		sets []string
		want string
	}{
		{"nothing", nil, "autoscaler.provider is ec2 and autoscaler.ec2.launchTemplate, autoscaler.ec2.subnets, autoscaler.ec2.clusterName are empty: " +
			why + setLT + " " + setSubnets + " " + setCluster + orLocal},
		{"no launch template", []string{ec2Settings[1], ec2Settings[2]}, "autoscaler.provider is ec2 and autoscaler.ec2.launchTemplate is empty: " + why + setLT + orLocal},
		{"no subnets", []string{ec2Settings[0], ec2Settings[2]}, "autoscaler.provider is ec2 and autoscaler.ec2.subnets is empty: " + why + setSubnets + orLocal},
		{"no cluster name", []string{ec2Settings[0], ec2Settings[1]}, "autoscaler.provider is ec2 and autoscaler.ec2.clusterName is empty: " + why + setCluster + orLocal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out, err := helmTemplate(t, append([]string{"autoscaler.enabled=true"}, tc.sets...)...)
			if err == nil {
				t.Fatalf("rendered, want failure %q:\n%s", tc.want, out)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error does not say %q:\n%v", tc.want, err)
			}
		})
	}
	// Nothing is required while the autoscaler is off or uses the local provider.
	render(t)
	render(t, "autoscaler.enabled=true", "autoscaler.provider=local")
}

func TestAutoscalerSchemaRejectsBadValues(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		set  string
		want string // in helm's message
	}{
		{"autoscaler.enbled=true", "additional properties 'enbled' not allowed"},
		{"autoscaler.leaderElect=false", "additional properties 'leaderElect' not allowed"},
		{"autoscaler.ec2.subnet=subnet-0a1b", "additional properties 'subnet' not allowed"},
		{"autoscaler.serviceAccount.name=x", "additional properties 'name' not allowed"},
		{"autoscaler.provider=gcp", "value must be one of 'ec2', 'local'"},
		{"autoscaler.provider=", "value must be one of 'ec2', 'local'"},
		{"autoscaler.batchWindow=soon", "/autoscaler/batchWindow"},
		{"autoscaler.batchWindow=10", "/autoscaler/batchWindow"},
		{"autoscaler.scaleDownAfter=10 minutes", "/autoscaler/scaleDownAfter"},
		{"autoscaler.scaleDownAfter=-1m", "/autoscaler/scaleDownAfter"},
		{"autoscaler.resyncInterval=1d", "/autoscaler/resyncInterval"},
		{"autoscaler.families={trn1,p5}", "/autoscaler/families/1"},
		{"autoscaler.families={trn1,trn1}", "/autoscaler/families"},
		{"autoscaler.families=trn1", "/autoscaler/families"},
		{"autoscaler.replicas=0", "/autoscaler/replicas"},
		{"autoscaler.maxNodes=-1", "/autoscaler/maxNodes"},
		{"autoscaler.maxDevices=many", "/autoscaler/maxDevices"},
		{"autoscaler.dryRun=maybe", "/autoscaler/dryRun"},
		{"autoscaler.metricsPort=0", "/autoscaler/metricsPort"},
		{"autoscaler.namespace=Kube_System", "/autoscaler/namespace"},
		{"autoscaler.podAnnotations.scrape.now=true", "/autoscaler/podAnnotations/scrape"},
		{"autoscaler.resources.limits.cpu=lots", "/autoscaler/resources/limits/cpu"},
		{"autoscaler.tolerations[0].effect=Sometimes", "/autoscaler/tolerations/0/effect"},
		{"autoscaler.ec2.region=Oregon", "/autoscaler/ec2/region"},
		{"autoscaler.ec2.endpoint=ec2.us-west-2.amazonaws.com", "/autoscaler/ec2/endpoint"},
		{"autoscaler.ec2.launchTemplate=neuron nodes", "/autoscaler/ec2/launchTemplate"},
		{"autoscaler.ec2.launchTemplateVersion=latest", "/autoscaler/ec2/launchTemplateVersion"},
		{"autoscaler.ec2.subnets={subnet-0a1b,my-subnet}", "/autoscaler/ec2/subnets/1"},
		{"autoscaler.ec2.subnets={}", "/autoscaler/ec2/subnets/0"},
		{`autoscaler.ec2.subnets={subnet-0a1b\,subnet-0c2d}`, "/autoscaler/ec2/subnets/0"},
		{"autoscaler.ec2.clusterName=-prod", "/autoscaler/ec2/clusterName"},
		{"autoscaler.ec2.nodeNameSource=hostname", "value must be one of 'private-dns-name', 'instance-id'"},
		{"autoscaler.ec2.nodeNameSource=", "value must be one of 'private-dns-name', 'instance-id'"},
		{"autoscaler.catalog.file=prices.yaml", "additional properties 'file' not allowed"},
		{"autoscaler.catalog.configMapName=Neuron_Prices", "/autoscaler/catalog/configMapName"},
		{"autoscaler.catalog.configMapKey=prices/catalog.yaml", "/autoscaler/catalog/configMapKey"},
		{"autoscaler.catalog.configMapKey=", "/autoscaler/catalog/configMapKey"},
		{"autoscaler.onDemandFallback=sometimes", "/autoscaler/onDemandFallback"},
		{"autoscaler.nodeStartupEstimate=10", "/autoscaler/nodeStartupEstimate"},
		{"autoscaler.capacityBlocks.drainLead=40 minutes", "/autoscaler/capacityBlocks/drainLead"},
		{"autoscaler.capacityBlocks.ultraServerDrainLead=-70m", "/autoscaler/capacityBlocks/ultraServerDrainLead"},
		{"autoscaler.capacityBlocks.lead=40m", "additional properties 'lead' not allowed"},
		{"autoscaler.ec2.capacityReservations[0].id=odcr-1", "/autoscaler/ec2/capacityReservations/0/id"},
		{"autoscaler.ec2.capacityReservations[0].name=cr-1", "additional properties 'name' not allowed"},
		{"autoscaler.ec2.capacityReservations[0].id=cr-0a,autoscaler.ec2.capacityReservations[0].tags.team=ml", "/autoscaler/ec2/capacityReservations/0"},
	} {
		t.Run(tc.set, func(t *testing.T) {
			t.Parallel()
			out, err := helmTemplate(t, append(slices.Clone(autoscalerEC2), tc.set)...)
			if err == nil {
				t.Fatalf("rendered, want a schema error:\n%s", out)
			}
			if msg := err.Error(); !strings.Contains(msg, "values don't meet the specifications of the schema") || !strings.Contains(msg, tc.want) {
				t.Errorf("error does not mention %q:\n%v", tc.want, err)
			}
		})
	}
}

// TestAutoscalerSchemaAcceptsGoodValues: values the binary accepts pass the schema.
func TestAutoscalerSchemaAcceptsGoodValues(t *testing.T) {
	t.Parallel()
	for _, set := range []string{
		"autoscaler.scaleDownAfter=0s",
		"autoscaler.batchWindow=1m30s",
		"autoscaler.resyncInterval=500ms",
		"autoscaler.families={trn2u}",
		"autoscaler.ec2.region=us-gov-west-1",
		"autoscaler.ec2.launchTemplate=neuron-nodes/trn1_v2",
		"autoscaler.ec2.launchTemplateVersion=$Latest",
		"autoscaler.ec2.clusterName=my.cluster.k8s.local",
		"autoscaler.ec2.endpoint=http://localhost:4566",
		"autoscaler.ec2.nodeNameSource=instance-id",
		"autoscaler.catalog.configMapName=neuron.prices",
		"autoscaler.catalog.configMapKey=Prices_2026.yaml",
		"autoscaler.onDemandFallback=false",
		"autoscaler.capacityBlocks.drainLead=2m",
		"autoscaler.ec2.capacityReservations[0].id=cr-0123456789abcdef0",
		"autoscaler.ec2.capacityReservations[0].tags.purpose=training",
	} {
		t.Run(set, func(t *testing.T) {
			t.Parallel()
			render(t, append(slices.Clone(autoscalerEC2), set)...)
		})
	}
}

// TestAutoscalerLaunchTemplateVersionNumber: a version number may be a YAML number, and is
// written as an integer however large.
func TestAutoscalerLaunchTemplateVersionNumber(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	values := filepath.Join(dir, "values.yaml")
	if err := os.WriteFile(values, []byte("autoscaler:\n  ec2:\n    launchTemplateVersion: 10000000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{setArgs([]string{"autoscaler.ec2.launchTemplateVersion=12"}), "12"},
		{[]string{"--values", values}, "10000000"},
	} {
		out, err := runHelm(t, append(append([]string{"template", release, chartDir, "--namespace", releaseNS}, setArgs(autoscalerEC2)...), tc.args...)...)
		if err != nil {
			t.Fatal(err)
		}
		m, err := decode(out)
		if err != nil {
			t.Fatal(err)
		}
		c := get[appsv1.Deployment](t, m, "Deployment", "kube-system", autoscalerName).Spec.Template.Spec.Containers[0]
		for _, e := range c.Env {
			if e.Name == "NEURON_EC2_LAUNCH_TEMPLATE_VERSION" && e.Value != tc.want {
				t.Errorf("%v: NEURON_EC2_LAUNCH_TEMPLATE_VERSION = %q, want %q", tc.args, e.Value, tc.want)
			}
		}
	}
	if _, err := helmTemplate(t, append(slices.Clone(autoscalerEC2), "autoscaler.ec2.launchTemplateVersion=0")...); err == nil || !strings.Contains(err.Error(), "/autoscaler/ec2/launchTemplateVersion") {
		t.Errorf("version 0 rendered or failed for another reason: %v", err)
	}
}

// TestAutoscalerFamiliesAreTheCatalogs: the schema allows exactly the catalog's families.
func TestAutoscalerFamiliesAreTheCatalogs(t *testing.T) {
	t.Parallel()
	var schema struct {
		Properties struct {
			Autoscaler struct {
				Properties struct {
					Families struct {
						Items struct {
							Enum []string `json:"enum"`
						} `json:"items"`
					} `json:"families"`
				} `json:"properties"`
			} `json:"autoscaler"`
		} `json:"properties"`
	}
	data, err := os.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &schema); err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, it := range topology.DefaultCatalog().Types() {
		want = append(want, it.Family)
	}
	want = slices.Compact(sorted(want))
	if got := sorted(schema.Properties.Autoscaler.Properties.Families.Items.Enum); !slices.Equal(got, want) {
		t.Errorf("values.schema.json autoscaler.families enum = %q, want the catalog's families %q", got, want)
	}
}

func TestAutoscalerLint(t *testing.T) {
	t.Parallel()
	for _, sets := range [][]string{
		autoscalerEC2,
		append([]string{"autoscaler.replicas=1", "autoscaler.dryRun=true", `autoscaler.podAnnotations.prometheus\.io/scrape=true`,
			`autoscaler.serviceAccount.annotations.eks\.amazonaws\.com/role-arn=arn:aws:iam::111122223333:role/neuron-autoscaler`}, autoscalerEC2...),
		{"autoscaler.enabled=true", "autoscaler.provider=local", "devicePlugin.enabled=false", "npd.enabled=false", "draDriver.enabled=true"},
		append([]string{"autoscaler.catalog.configMapName=neuron-prices", "autoscaler.ec2.nodeNameSource=instance-id"}, autoscalerEC2...),
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

func TestAutoscalerNotes(t *testing.T) {
	t.Parallel()
	const (
		check       = "kubectl get deploy neuron-autoscaler -n kube-system"
		events      = "kubectl get events --field-selector reason=" + plan.ReasonTriggeredScaleUp + " -A"
		refused     = "kubectl get events --field-selector reason=" + plan.ReasonNotTriggerScaleUp + " -A"
		ec2         = "launch template lt-0123456789abcdef0 into subnets subnet-0a1b, subnet-0c2d"
		podIdentity = "EKS Pod Identity"
		dryRunHint  = "set autoscaler.dryRun=true"
		dryRun      = "Dry run: it only logs and emits events"
		local       = "provider local"
		nothing     = "every component that this chart version has is disabled"
	)
	for _, tc := range []struct {
		name      string
		sets      []string
		want, not []string
	}{
		{"ec2", autoscalerEC2, []string{check, events, refused, ec2, podIdentity, dryRunHint}, []string{dryRun, local}},
		{"ec2 with IRSA, dry run", append([]string{"autoscaler.dryRun=true", `autoscaler.serviceAccount.annotations.eks\.amazonaws\.com/role-arn=arn:aws:iam::1:role/x`}, autoscalerEC2...),
			[]string{check, events, ec2, dryRun}, []string{podIdentity, dryRunHint}},
		{"local", []string{"autoscaler.enabled=true", "autoscaler.provider=local"}, []string{check, events, local}, []string{ec2, podIdentity}},
		{"autoscaler alone", append([]string{"devicePlugin.enabled=false", "npd.enabled=false"}, autoscalerEC2...), []string{check}, []string{nothing}},
		{"off", nil, nil, []string{check, events, autoscalerName}},
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
