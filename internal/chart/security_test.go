package chart

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// certManagerObject is a cert-manager.io/v1 Certificate or Issuer with the fields the chart may
// set (cert-manager's documented names; strict decoding rejects any other).
type certManagerObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              certManagerSpec `json:"spec"`
}

type certManagerSpec struct {
	// Certificate.
	SecretName  string   `json:"secretName,omitempty"`
	IsCA        bool     `json:"isCA,omitempty"`
	CommonName  string   `json:"commonName,omitempty"`
	DNSNames    []string `json:"dnsNames,omitempty"`
	Duration    string   `json:"duration,omitempty"`
	RenewBefore string   `json:"renewBefore,omitempty"`
	Usages      []string `json:"usages,omitempty"`
	PrivateKey  *struct {
		Algorithm      string `json:"algorithm"`
		Size           int    `json:"size"`
		RotationPolicy string `json:"rotationPolicy,omitempty"`
	} `json:"privateKey,omitempty"`
	IssuerRef *issuerRef `json:"issuerRef,omitempty"`
	// Issuer.
	SelfSigned *struct{} `json:"selfSigned,omitempty"`
	CA         *struct {
		SecretName string `json:"secretName"`
	} `json:"ca,omitempty"`
}

type issuerRef struct {
	Name  string `json:"name"`
	Kind  string `json:"kind"`
	Group string `json:"group"`
}

// tlsConfig is kubescheduler.config.k8s.io/v1 ExtenderTLSConfig, as the chart writes it.
type tlsConfig struct {
	ServerName string `json:"serverName"`
	CertFile   string `json:"certFile"`
	KeyFile    string `json:"keyFile"`
	CAFile     string `json:"caFile"`
}

// extenderTLS decodes the tlsConfig of the first extender of a KubeSchedulerConfiguration in a
// ConfigMap (schedulerConfig leaves it out, so that TLS-less configurations stay exact).
func extenderTLS(t *testing.T, m manifest, name, key string) (urlPrefix string, enableHTTPS bool, tc *tlsConfig) {
	t.Helper()
	cm := get[corev1.ConfigMap](t, m, "ConfigMap", "kube-system", name)
	var cfg struct {
		Extenders []struct {
			URLPrefix   string     `json:"urlPrefix"`
			EnableHTTPS bool       `json:"enableHTTPS"`
			TLSConfig   *tlsConfig `json:"tlsConfig"`
		} `json:"extenders"`
	}
	if err := yaml.Unmarshal([]byte(cm.Data[key]), &cfg); err != nil || len(cfg.Extenders) != 1 {
		t.Fatalf("ConfigMap %s: %v %+v", name, err, cfg)
	}
	e := cfg.Extenders[0]
	return e.URLPrefix, e.EnableHTTPS, e.TLSConfig
}

func TestSchedulerTLS(t *testing.T) {
	t.Parallel()
	m := render(t, "scheduler.enabled=true", "npd.enabled=false", "scheduler.tls.enabled=true")
	d := get[appsv1.Deployment](t, m, "Deployment", "kube-system", "k8s-neuron-scheduler")
	spec := d.Spec.Template.Spec
	c := spec.Containers[0]
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	for k, v := range map[string]string{
		"NEURON_TLS_CERT_FILE":        "/etc/neuron-scheduler-extender/tls/tls.crt",
		"NEURON_TLS_PRIVATE_KEY_FILE": "/etc/neuron-scheduler-extender/tls/tls.key",
		"NEURON_CLIENT_CA_FILE":       "/etc/neuron-scheduler-extender/tls/ca.crt",
		"NEURON_METRICS_ADDRESS":      ":9467",
	} {
		if env[k] != v {
			t.Errorf("env %s = %q, want %q", k, env[k], v)
		}
	}
	// Every flag of neuron-scheduler-extender but --kubeconfig (in-cluster) and --catalog (the
	// built-in catalog) has its env var here, and every env var is a flag's.
	src, err := os.ReadFile(filepath.Join("..", "..", "cmd", "neuron-scheduler-extender", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	_, block, _ := strings.Cut(string(src), "env := map[string]string{")
	block, _, _ = strings.Cut(block, "}\n")
	var flagEnv []string
	for _, kv := range regexp.MustCompile(`"[a-z0-9-]+": "([A-Z0-9_]+)"`).FindAllStringSubmatch(block, -1) {
		flagEnv = append(flagEnv, kv[1])
	}
	for _, name := range flagEnv {
		if _, ok := env[name]; !ok && name != "KUBECONFIG" && name != "NEURON_CATALOG" {
			t.Errorf("flag env var %s of neuron-scheduler-extender is not set by the chart", name)
		}
	}
	for name := range env {
		if !slices.Contains(flagEnv, name) {
			t.Errorf("env %s is no flag's env var in cmd/neuron-scheduler-extender (%v)", name, flagEnv)
		}
	}
	wantMounts := []corev1.VolumeMount{{Name: "tls", MountPath: "/etc/neuron-scheduler-extender/tls", ReadOnly: true}}
	wantVolumes := []corev1.Volume{{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "k8s-neuron-scheduler-tls"}}}}
	if !reflect.DeepEqual(c.VolumeMounts, wantMounts) || !reflect.DeepEqual(spec.Volumes, wantVolumes) {
		t.Errorf("mounts %+v volumes %+v, want the Secret k8s-neuron-scheduler-tls", c.VolumeMounts, spec.Volumes)
	}
	if want := []corev1.ContainerPort{{Name: "https", ContainerPort: 12345, Protocol: corev1.ProtocolTCP}, {Name: "metrics", ContainerPort: 9467, Protocol: corev1.ProtocolTCP}}; !reflect.DeepEqual(c.Ports, want) {
		t.Errorf("ports = %+v, want %+v", c.Ports, want)
	}
	checkHTTPProbe(t, "readinessProbe", c.ReadinessProbe, "/readyz", intstr.FromString("metrics"), "")
	svc := get[corev1.Service](t, m, "Service", "kube-system", "k8s-neuron-scheduler")
	if want := []corev1.ServicePort{{Name: "https", Port: 12345, TargetPort: intstr.FromString("https"), Protocol: corev1.ProtocolTCP}}; !reflect.DeepEqual(svc.Spec.Ports, want) {
		t.Errorf("Service ports = %+v, want %+v", svc.Spec.Ports, want)
	}

	url, https, tc := extenderTLS(t, m, "my-scheduler-config", "my-scheduler-config.yaml")
	wantTLS := &tlsConfig{
		ServerName: "k8s-neuron-scheduler.kube-system.svc",
		CertFile:   "/etc/kubernetes/my-scheduler-tls/tls.crt",
		KeyFile:    "/etc/kubernetes/my-scheduler-tls/tls.key",
		CAFile:     "/etc/kubernetes/my-scheduler-tls/ca.crt",
	}
	if url != "https://k8s-neuron-scheduler.kube-system.svc.cluster.local:12345" || !https || !reflect.DeepEqual(tc, wantTLS) {
		t.Errorf("my-scheduler's extender: %s enableHTTPS %v tlsConfig %+v, want https, %+v", url, https, tc, wantTLS)
	}
	my := get[appsv1.Deployment](t, m, "Deployment", "kube-system", "my-scheduler").Spec.Template.Spec
	mounts := my.Containers[0].VolumeMounts
	if len(mounts) != 2 || mounts[1] != (corev1.VolumeMount{Name: "extender-client-tls", MountPath: "/etc/kubernetes/my-scheduler-tls", ReadOnly: true}) ||
		len(my.Volumes) != 2 || my.Volumes[1].Secret == nil || my.Volumes[1].Secret.SecretName != "my-scheduler-extender-client-tls" {
		t.Errorf("my-scheduler mounts %+v volumes %+v, want the Secret my-scheduler-extender-client-tls at /etc/kubernetes/my-scheduler-tls", mounts, my.Volumes)
	}

	// The default scheduler reads the files from its control-plane node.
	m = render(t, "scheduler.enabled=true", "scheduler.customScheduler.enabled=false", "scheduler.defaultScheduler.enabled=true",
		"scheduler.tls.enabled=true", "scheduler.defaultScheduler.tls.caFile=/etc/ca.pem")
	url, https, tc = extenderTLS(t, m, "neuron-scheduler-extender-config", "kube-scheduler-config.yaml")
	wantTLS = &tlsConfig{
		ServerName: "k8s-neuron-scheduler.kube-system.svc",
		CertFile:   "/etc/kubernetes/pki/neuron-scheduler-extender/tls.crt",
		KeyFile:    "/etc/kubernetes/pki/neuron-scheduler-extender/tls.key",
		CAFile:     "/etc/ca.pem",
	}
	if url != "https://127.0.0.1:32700" || !https || !reflect.DeepEqual(tc, wantTLS) {
		t.Errorf("default scheduler's extender: %s enableHTTPS %v tlsConfig %+v, want https, %+v", url, https, tc, wantTLS)
	}
	// Without TLS neither configuration has a tlsConfig (schedulerConfig decodes them strictly).
}

func TestSchedulerCertManager(t *testing.T) {
	t.Parallel()
	own := render(t, "scheduler.enabled=true", "npd.enabled=false", "scheduler.tls.enabled=true", "scheduler.tls.certManager.enabled=true")
	var names []string
	for _, n := range own.names() {
		if strings.HasPrefix(n, "Certificate ") || strings.HasPrefix(n, "Issuer ") {
			names = append(names, n)
		}
	}
	want := []string{
		"Certificate kube-system/k8s-neuron-scheduler",
		"Certificate kube-system/k8s-neuron-scheduler-ca",
		"Certificate kube-system/my-scheduler-extender-client",
		"Issuer kube-system/k8s-neuron-scheduler-ca",
		"Issuer kube-system/k8s-neuron-scheduler-selfsigned",
	}
	if !slices.Equal(names, want) {
		t.Fatalf("cert-manager objects %q, want %q", names, want)
	}
	ca := get[certManagerObject](t, own, "Certificate", "kube-system", "k8s-neuron-scheduler-ca").Spec
	if !ca.IsCA || ca.SecretName != "k8s-neuron-scheduler-ca" || *ca.IssuerRef != (issuerRef{"k8s-neuron-scheduler-selfsigned", "Issuer", "cert-manager.io"}) {
		t.Errorf("CA Certificate %+v", ca)
	}
	if is := get[certManagerObject](t, own, "Issuer", "kube-system", "k8s-neuron-scheduler-ca").Spec; is.CA == nil || is.CA.SecretName != "k8s-neuron-scheduler-ca" {
		t.Errorf("CA Issuer %+v", is)
	}
	server := get[certManagerObject](t, own, "Certificate", "kube-system", "k8s-neuron-scheduler").Spec
	wantDNS := []string{"k8s-neuron-scheduler", "k8s-neuron-scheduler.kube-system", "k8s-neuron-scheduler.kube-system.svc", "k8s-neuron-scheduler.kube-system.svc.cluster.local"}
	if server.SecretName != "k8s-neuron-scheduler-tls" || !slices.Equal(server.DNSNames, wantDNS) || !slices.Contains(server.Usages, "server auth") ||
		*server.IssuerRef != (issuerRef{"k8s-neuron-scheduler-ca", "Issuer", "cert-manager.io"}) || server.Duration != "2160h" || server.RenewBefore != "720h" {
		t.Errorf("serving Certificate %+v", server)
	}
	client := get[certManagerObject](t, own, "Certificate", "kube-system", "my-scheduler-extender-client").Spec
	if client.SecretName != "my-scheduler-extender-client-tls" || !slices.Equal(client.Usages, []string{"client auth", "digital signature", "key encipherment"}) || len(client.DNSNames) != 0 {
		t.Errorf("client Certificate %+v", client)
	}

	// Your issuer: no CA of the chart's own.
	yours := render(t, "scheduler.enabled=true", "scheduler.tls.enabled=true", "scheduler.tls.certManager.enabled=true",
		"scheduler.tls.certManager.issuerRef.name=corp-ca", "scheduler.tls.certManager.issuerRef.kind=ClusterIssuer",
		"scheduler.tls.serverSecretName=ext", "scheduler.tls.clientSecretName=cli", "scheduler.tls.certManager.duration=24h", "scheduler.tls.certManager.renewBefore=8h")
	for _, name := range []string{"k8s-neuron-scheduler", "my-scheduler-extender-client"} {
		c := get[certManagerObject](t, yours, "Certificate", "kube-system", name).Spec
		if *c.IssuerRef != (issuerRef{"corp-ca", "ClusterIssuer", "cert-manager.io"}) || c.Duration != "24h" || c.RenewBefore != "8h" {
			t.Errorf("Certificate %s: %+v", name, c)
		}
	}
	if yours.find("Issuer", "kube-system", "k8s-neuron-scheduler-ca") != nil {
		t.Errorf("rendered the chart's own CA with issuerRef.name set")
	}
	if v := get[appsv1.Deployment](t, yours, "Deployment", "kube-system", "k8s-neuron-scheduler").Spec.Template.Spec.Volumes; len(v) != 1 || v[0].Secret.SecretName != "ext" {
		t.Errorf("extender volumes %+v, want the Secret ext", v)
	}
}

func TestSchedulerNetworkPolicy(t *testing.T) {
	t.Parallel()
	m := render(t, "scheduler.enabled=true", "npd.enabled=false")
	np := get[networkingv1.NetworkPolicy](t, m, "NetworkPolicy", "kube-system", "k8s-neuron-scheduler")
	ext := get[appsv1.Deployment](t, m, "Deployment", "kube-system", "k8s-neuron-scheduler")
	my := get[appsv1.Deployment](t, m, "Deployment", "kube-system", "my-scheduler")
	if !reflect.DeepEqual(np.Spec.PodSelector, *ext.Spec.Selector) {
		t.Errorf("podSelector %+v, want the extender's selector %+v", np.Spec.PodSelector, ext.Spec.Selector)
	}
	tcp := corev1.ProtocolTCP
	port := func(n int) []networkingv1.NetworkPolicyPort {
		return []networkingv1.NetworkPolicyPort{{Port: ptr.To(intstr.FromInt(n)), Protocol: &tcp}}
	}
	want := networkingv1.NetworkPolicySpec{
		PodSelector: *ext.Spec.Selector,
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
		Ingress: []networkingv1.NetworkPolicyIngressRule{
			{Ports: port(12345), From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: my.Spec.Selector.MatchLabels}}}},
			{Ports: port(9467)},
		},
	}
	if !reflect.DeepEqual(np.Spec, want) {
		t.Errorf("NetworkPolicy spec =\n  %+v\nwant\n  %+v", np.Spec, want)
	}
	for k, v := range my.Spec.Selector.MatchLabels {
		if my.Spec.Template.Labels[k] != v {
			t.Errorf("my-scheduler's pods lack %s=%s: the policy would shut them out", k, v)
		}
	}

	// Scrapers from one namespace only.
	m = render(t, "scheduler.enabled=true", `scheduler.networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.kubernetes\.io/metadata\.name=monitoring`)
	np = get[networkingv1.NetworkPolicy](t, m, "NetworkPolicy", "kube-system", "k8s-neuron-scheduler")
	wantFrom := []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "monitoring"}}}}
	if !reflect.DeepEqual(np.Spec.Ingress[1].From, wantFrom) {
		t.Errorf("metrics rule from %+v, want %+v", np.Spec.Ingress[1].From, wantFrom)
	}

	// The default scheduler: only with the control plane's CIDRs.
	defaultMode := []string{"scheduler.enabled=true", "scheduler.customScheduler.enabled=false", "scheduler.defaultScheduler.enabled=true"}
	if m = render(t, defaultMode...); m.find("NetworkPolicy", "kube-system", "k8s-neuron-scheduler") != nil {
		t.Errorf("rendered a NetworkPolicy in default-scheduler mode without controlPlaneCIDRs")
	}
	m = render(t, append(defaultMode, "scheduler.networkPolicy.controlPlaneCIDRs={10.0.0.0/24,10.0.1.0/24}")...)
	np = get[networkingv1.NetworkPolicy](t, m, "NetworkPolicy", "kube-system", "k8s-neuron-scheduler")
	wantFrom = []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/24"}}, {IPBlock: &networkingv1.IPBlock{CIDR: "10.0.1.0/24"}}}
	if !reflect.DeepEqual(np.Spec.Ingress[0].From, wantFrom) {
		t.Errorf("extender rule from %+v, want %+v", np.Spec.Ingress[0].From, wantFrom)
	}
	if m = render(t, "scheduler.enabled=true", "scheduler.networkPolicy.enabled=false"); m.find("NetworkPolicy", "kube-system", "k8s-neuron-scheduler") != nil {
		t.Errorf("rendered a NetworkPolicy with networkPolicy.enabled=false")
	}
}

func TestSchedulerAdmissionPolicy(t *testing.T) {
	t.Parallel()
	if m := render(t, "scheduler.enabled=true"); m.find("MutatingAdmissionPolicy", "", "neuron-pods-use-my-scheduler") != nil {
		t.Errorf("rendered the admission policy by default")
	}
	m := render(t, "scheduler.enabled=true", "scheduler.admissionPolicy.enabled=true", "scheduler.admissionPolicy.failurePolicy=Ignore",
		"scheduler.admissionPolicy.namespaceSelector.matchLabels.team=ml")
	p := get[admissionregistrationv1.MutatingAdmissionPolicy](t, m, "MutatingAdmissionPolicy", "", "neuron-pods-use-my-scheduler")
	if ptr.Deref(p.Spec.FailurePolicy, "") != admissionregistrationv1.Ignore || p.Spec.ReinvocationPolicy != admissionregistrationv1.NeverReinvocationPolicy {
		t.Errorf("failurePolicy %v reinvocationPolicy %v", p.Spec.FailurePolicy, p.Spec.ReinvocationPolicy)
	}
	rules := p.Spec.MatchConstraints.ResourceRules
	if len(rules) != 1 || !slices.Equal(rules[0].Resources, []string{"pods"}) || !slices.Equal(rules[0].Operations, []admissionregistrationv1.OperationType{admissionregistrationv1.Create}) {
		t.Errorf("resourceRules %+v, want pods CREATE", rules)
	}
	var conditions string
	for _, c := range p.Spec.MatchConditions {
		conditions += c.Expression + "\n"
	}
	for _, s := range []string{"aws.amazon.com/neuron'", "aws.amazon.com/neurondevice'", "aws.amazon.com/neuroncore'", "initContainers", "limits", "requests", "'default-scheduler'"} {
		if !strings.Contains(conditions, s) {
			t.Errorf("matchConditions lack %q:\n%s", s, conditions)
		}
	}
	if len(p.Spec.Mutations) != 1 || p.Spec.Mutations[0].ApplyConfiguration == nil || !strings.Contains(p.Spec.Mutations[0].ApplyConfiguration.Expression, `schedulerName: "my-scheduler"`) {
		t.Errorf("mutations %+v", p.Spec.Mutations)
	}
	b := get[admissionregistrationv1.MutatingAdmissionPolicyBinding](t, m, "MutatingAdmissionPolicyBinding", "", "neuron-pods-use-my-scheduler")
	if b.Spec.PolicyName != p.Name || b.Spec.MatchResources == nil || !reflect.DeepEqual(b.Spec.MatchResources.NamespaceSelector, &metav1.LabelSelector{MatchLabels: map[string]string{"team": "ml"}}) {
		t.Errorf("binding %+v", b.Spec)
	}
}

// TestPriorityClasses: node agents are evicted last on their node, the cluster-wide components
// after ordinary workloads.
func TestPriorityClasses(t *testing.T) {
	t.Parallel()
	m := render(t, append([]string{"scheduler.enabled=true", "draDriver.enabled=true", "devicePlugin.allowWithDRA=true"}, autoscalerEC2...)...)
	for _, tc := range []struct{ kind, ns, name, want string }{
		{"DaemonSet", "kube-system", "neuron-device-plugin", "system-node-critical"},
		{"DaemonSet", "neuron-dra-driver", "neuron-dra-driver-kubelet-plugin", "system-node-critical"},
		{"DaemonSet", "neuron-healthcheck-system", "node-problem-detector", "system-node-critical"},
		{"Deployment", "kube-system", "k8s-neuron-scheduler", "system-cluster-critical"},
		{"Deployment", "kube-system", "my-scheduler", "system-cluster-critical"},
		{"Deployment", "kube-system", "neuron-autoscaler", "system-cluster-critical"},
	} {
		var got string
		switch o := m.find(tc.kind, tc.ns, tc.name).(type) {
		case *appsv1.DaemonSet:
			got = o.Spec.Template.Spec.PriorityClassName
		case *appsv1.Deployment:
			got = o.Spec.Template.Spec.PriorityClassName
		default:
			t.Fatalf("no %s %s/%s", tc.kind, tc.ns, tc.name)
		}
		if got != tc.want {
			t.Errorf("%s %s/%s priorityClassName = %q, want %q", tc.kind, tc.ns, tc.name, got, tc.want)
		}
	}
	if m := render(t, "npd.priorityClassName=neuron-node"); get[appsv1.DaemonSet](t, m, "DaemonSet", "neuron-healthcheck-system", "node-problem-detector").Spec.Template.Spec.PriorityClassName != "neuron-node" {
		t.Errorf("npd.priorityClassName does not reach the DaemonSet")
	}
}

// TestValuesSchemaComplete walks values.yaml: every key must be a property of its object in
// values.schema.json, with a type that admits the default value.
func TestValuesSchemaComplete(t *testing.T) {
	t.Parallel()
	var values map[string]any
	readYAML(t, filepath.Join(chartDir, "values.yaml"), &values)
	data, err := os.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema map[string]any
	if err := json.Unmarshal(data, &schema); err != nil {
		t.Fatal(err)
	}
	defs, _ := schema["definitions"].(map[string]any)
	resolve := func(node map[string]any) map[string]any {
		for {
			ref, ok := node["$ref"].(string)
			if !ok {
				return node
			}
			node, _ = defs[strings.TrimPrefix(ref, "#/definitions/")].(map[string]any)
		}
	}
	var walk func(path string, v any, node map[string]any)
	walk = func(path string, v any, node map[string]any) {
		node = resolve(node)
		if node == nil {
			t.Errorf("values.yaml %s: no schema", path)
			return
		}
		if !typeAdmits(node["type"], v) {
			t.Errorf("values.yaml %s = %v: the schema's type %v does not admit it", path, v, node["type"])
		}
		switch v := v.(type) {
		case map[string]any:
			props, _ := node["properties"].(map[string]any)
			extra, _ := node["additionalProperties"].(map[string]any)
			if props == nil && extra == nil {
				if len(v) > 0 {
					t.Errorf("values.yaml %s: an object the schema describes no key of", path)
				}
				return
			}
			for _, k := range sortedKeys(v) {
				p, ok := props[k].(map[string]any)
				if !ok {
					if extra == nil {
						t.Errorf("values.yaml %s.%s is not in values.schema.json", path, k)
						continue
					}
					p = extra
				}
				walk(path+"."+k, v[k], p)
			}
		case []any:
			items, _ := node["items"].(map[string]any)
			for i, item := range v {
				if items == nil {
					t.Errorf("values.yaml %s: a list without an items schema", path)
					break
				}
				walk(fmt.Sprintf("%s[%d]", path, i), item, items)
			}
		}
	}
	walk("", values, schema)
}

// typeAdmits reports whether a JSON schema type (a name or a list of names; nil admits all)
// admits v as sigs.k8s.io/yaml decodes it.
func typeAdmits(typ any, v any) bool {
	var names []string
	switch typ := typ.(type) {
	case nil:
		return true
	case string:
		names = []string{typ}
	case []any:
		for _, n := range typ {
			names = append(names, fmt.Sprint(n))
		}
	}
	for _, n := range names {
		switch x := v.(type) {
		case map[string]any:
			if n == "object" {
				return true
			}
		case []any:
			if n == "array" {
				return true
			}
		case string:
			if n == "string" {
				return true
			}
		case bool:
			if n == "boolean" {
				return true
			}
		case float64:
			if n == "number" || (n == "integer" && x == float64(int64(x))) {
				return true
			}
		case nil:
			if n == "null" {
				return true
			}
		}
	}
	return false
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// contradictions are values that cannot work together, one case per `fail` of the chart's
// kube-neuron.validate; want is the start of the message.
var contradictions = []struct {
	name string
	sets []string
	want string
}{
	{"no way to find Neuron nodes", []string{"--set-json=neuronInstances=[]", "--set-json=neuronNodes.instanceFamilies=[]"},
		"neuronInstances, neuronNodes.instanceFamilies and neuronNodes.nodeLabel.key are all empty: the Neuron DaemonSets would select no node."},
	{"device plugin and DRA driver", []string{"draDriver.enabled=true"},
		"devicePlugin.enabled and draDriver.enabled are both true: a node must run the device plugin or the DRA driver, never both."},
	{"DRA ports", []string{"devicePlugin.enabled=false", "draDriver.enabled=true", "draDriver.metricsPort=51515"},
		"draDriver.healthcheckPort and draDriver.metricsPort are both 51515"},
	{"both scheduler registrations", []string{"scheduler.enabled=true", "scheduler.defaultScheduler.enabled=true"},
		"scheduler.customScheduler.enabled and scheduler.defaultScheduler.enabled are both true"},
	{"the plugin and the default scheduler", []string{"scheduler.enabled=true", "scheduler.customScheduler.mode=plugin", "scheduler.defaultScheduler.enabled=true"},
		"scheduler.customScheduler.mode is plugin and scheduler.defaultScheduler.enabled is true: my-scheduler (neuron-kube-scheduler) and the default scheduler with the extender would both place Neuron pods on the same nodes"},
	{"AWS's extender image as the plugin's", []string{"scheduler.enabled=true", "scheduler.customScheduler.mode=plugin", "scheduler.customScheduler.pluginImage.repository=public.ecr.aws/neuron/neuron-scheduler"},
		"scheduler.customScheduler.pluginImage.repository is AWS's image, not kube-neuron's: AWS's neuron-scheduler is an extender"},
	{"no registry for the plugin's image", []string{"image.registry=", "devicePlugin.image.repository=r.example.com/neuron-device-plugin", "scheduler.enabled=true", "scheduler.customScheduler.mode=plugin"},
		"image.registry is empty, so scheduler.customScheduler.pluginImage (neuron-kube-scheduler:0.1.0) would be pulled by bare name"},
	{"admission policy without my-scheduler", []string{"scheduler.admissionPolicy.enabled=true"},
		"scheduler.admissionPolicy.enabled sets schedulerName: my-scheduler on Neuron pods, but my-scheduler is not installed"},
	{"admission policy with the default scheduler", []string{"scheduler.enabled=true", "scheduler.customScheduler.enabled=false", "scheduler.defaultScheduler.enabled=true", "scheduler.admissionPolicy.enabled=true"},
		"scheduler.admissionPolicy.enabled sets schedulerName: my-scheduler on Neuron pods, but my-scheduler is not installed"},
	{"extender ports", []string{"scheduler.enabled=true", "scheduler.metricsPort=12345"},
		"scheduler.port and scheduler.metricsPort are both 12345"},
	{"cert-manager without TLS", []string{"scheduler.enabled=true", "scheduler.tls.enabled=false", "scheduler.tls.certManager.enabled=true"},
		"scheduler.tls.certManager.enabled issues the extender's certificates, but scheduler.tls.enabled is false"},
	{"extender without the device plugin", []string{"scheduler.enabled=true", "devicePlugin.enabled=false"},
		"scheduler.enabled is true and devicePlugin.enabled is false: the scheduler extender needs the device plugin"},
	{"ec2 provider without settings", []string{"autoscaler.enabled=true"},
		"autoscaler.provider is ec2 and autoscaler.ec2.launchTemplate, autoscaler.ec2.subnets, autoscaler.ec2.clusterName are empty"},
	{"two catalogs", []string{"autoscaler.enabled=true", "autoscaler.provider=local", "autoscaler.catalog.inline=kind: InstanceCatalog", "autoscaler.catalog.configMapName=neuron-prices"},
		"autoscaler.catalog.inline and autoscaler.catalog.configMapName are both set: the autoscaler reads one catalog file, from the ConfigMap the chart makes of autoscaler.catalog.inline or from your ConfigMap neuron-prices. " +
			"Set only one: --set autoscaler.catalog.configMapName= to use the inline catalog, or --set autoscaler.catalog.inline= to use your ConfigMap."},
	{"a catalog that is no YAML mapping", []string{"autoscaler.enabled=true", "autoscaler.provider=local", "autoscaler.catalog.inline=prices: trn2: 44"},
		"autoscaler.catalog.inline is not a YAML mapping: error converting YAML to JSON: yaml: mapping values are not allowed in this context. It must be an instance catalog file"},
	{"a catalog of another kind", []string{"autoscaler.enabled=true", "autoscaler.provider=local", "autoscaler.catalog.inline=kind: ConfigMap"},
		`autoscaler.catalog.inline has apiVersion "" and kind "ConfigMap": an instance catalog file has apiVersion: kube-neuron.io/v1 and kind: InstanceCatalog (docs/catalog.md).`},
	{"no registry for the images", []string{"image.registry="},
		`image.registry is empty, so devicePlugin.image (neuron-device-plugin:0.1.0) would be pulled by bare name, which no node can pull: kube-neuron's images are not on a public registry. ` +
			`Build them (make images) and push them to a registry of yours (docs/images.md, "Push"), then --set image.registry=<registry>, e.g. 111122223333.dkr.ecr.us-west-2.amazonaws.com; ` +
			`or set image.localImages=true when the images are already loaded into every node's container runtime under these names.`},
	{"AWS's device plugin image", []string{"devicePlugin.image.repository=public.ecr.aws/neuron/neuron-device-plugin"},
		"devicePlugin.image.repository is AWS's image, not kube-neuron's: remove it or point it at kube-neuron's neuron-device-plugin (docs/images.md)"},
	{"an instance type kube-neuron does not know", []string{"neuronInstances={trn1.2xlarge,trn9.xlarge}"},
		`neuronInstances has "trn9.xlarge", which is not a Neuron instance type kube-neuron knows.`},
	{"an AWS key without a counterpart, not at AWS's default", []string{"ultraserverOperator.enabled=true"},
		"ultraserverOperator.enabled is true, but kube-neuron has no UltraServer operator"},
	{"AWS's custom scheduler image as a table without a tag", []string{"scheduler.enabled=true", "scheduler.customScheduler.image.repository=registry.k8s.io/kube-scheduler"},
		"scheduler.customScheduler.image.tag is required when scheduler.customScheduler.image is a table"},
}

// TestEveryContradictionIsRefused renders every contradiction and checks that each `fail` of the
// chart's templates has a case here, so that a new one cannot go untested.
func TestEveryContradictionIsRefused(t *testing.T) {
	t.Parallel()
	failRE := regexp.MustCompile(`fail (?:\(printf )?"([^"]{20,})`)
	var fails []string
	templates, err := filepath.Glob(filepath.Join(chartDir, "templates", "*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range templates {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range failRE.FindAllStringSubmatch(string(data), -1) {
			fails = append(fails, m[1])
		}
	}
	if len(fails) < 8 {
		t.Fatalf("found %d fail calls in the templates, want at least 8", len(fails))
	}
	for _, f := range fails {
		prefix := f
		if i := strings.Index(prefix, "%"); i >= 0 {
			prefix = prefix[:i]
		}
		covered := false
		for _, c := range contradictions {
			covered = covered || strings.HasPrefix(c.want, prefix) || strings.HasPrefix(prefix, c.want)
		}
		if !covered {
			t.Errorf("no contradictions case for the template's fail %q", f)
		}
	}
	for _, tc := range contradictions {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out, err := helmTemplate(t, tc.sets...)
			if err == nil {
				t.Fatalf("rendered, want a failure starting %q:\n%.400s", tc.want, out)
			}
			if !strings.Contains(err.Error(), "execution error at (kube-neuron/templates/validate.yaml") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error does not say %q:\n%v", tc.want, err)
			}
		})
	}
}
