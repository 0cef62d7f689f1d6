package chart

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

const (
	chartDir    = "../../deployments/helm/kube-neuron"
	buildScript = "../../hack/helm/build.sh"
	release     = "kube-neuron"
	releaseNS   = "kube-system"
)

var helmBin struct {
	once sync.Once
	path string
	err  error
}

// helmBinary returns the helm binary: $KUBE_NEURON_HELM, or the one hack/helm/build.sh builds
// (once per test process; the script itself caches it across runs).
func helmBinary(t testing.TB) string {
	t.Helper()
	helmBin.once.Do(func() {
		// helm reads the chart's files in a child process, which go test's result cache does
		// not see. Reading them here makes a change to the chart invalidate cached results.
		helmBin.err = touchChart()
		if helmBin.err != nil {
			return
		}
		if p := os.Getenv("KUBE_NEURON_HELM"); p != "" {
			helmBin.path = p
			return
		}
		var stderr bytes.Buffer
		cmd := exec.Command("bash", buildScript)
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			helmBin.err = fmt.Errorf("%s: %w\n%s", buildScript, err, stderr.String())
			return
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		helmBin.path = lines[len(lines)-1]
	})
	if helmBin.err != nil {
		t.Fatalf("helm binary: %v", helmBin.err)
	}
	return helmBin.path
}

func touchChart() error {
	return filepath.WalkDir(chartDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		_, err = os.ReadFile(path)
		return err
	})
}

// runHelm runs helm with args in a helm home of its own. It returns stdout, and an error that
// includes stderr when helm fails. A `helm template` gets image.registry=testRegistry first
// (later values override it), unless its --set flags say where the images come from: an install
// must name a registry.
func runHelm(t testing.TB, args ...string) (string, error) {
	t.Helper()
	if len(args) > 0 && args[0] == "template" && !slices.ContainsFunc(args, func(a string) bool {
		return strings.HasPrefix(a, "image.registry=") || strings.HasPrefix(a, "image.localImages=")
	}) {
		args = append([]string{args[0], "--set", "image.registry=" + testRegistry}, args[1:]...)
	}
	return runHelmExactly(t, args...)
}

// runHelmExactly is runHelm with the args as given.
func runHelmExactly(t testing.TB, args ...string) (string, error) {
	t.Helper()
	home := t.TempDir()
	cmd := exec.CommandContext(t.Context(), helmBinary(t), args...)
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

// setArgs turns "key=value" pairs into --set flags.
func setArgs(sets []string) []string {
	var args []string
	for _, s := range sets {
		if strings.HasPrefix(s, "--") { // a flag of its own, e.g. --set-json=key=[]
			args = append(args, s)
			continue
		}
		args = append(args, "--set", s)
	}
	return args
}

// testRegistry is the registry the tests' installs pull kube-neuron's images from, as a user's
// install must name one (image.registry).
const testRegistry = "111122223333.dkr.ecr.us-west-2.amazonaws.com"

// helmTemplate runs `helm template kube-neuron <chart> --namespace kube-system --set ...`, with
// image.registry=testRegistry unless the sets say where the images come from (runHelm).
func helmTemplate(t testing.TB, sets ...string) (string, error) {
	t.Helper()
	args := append([]string{"template", release, chartDir, "--namespace", releaseNS}, setArgs(sets)...)
	return runHelm(t, args...)
}

// object is one rendered document, decoded strictly into its API type.
type object struct {
	Kind, Namespace, Name string
	Obj                   any
}

func (o object) String() string { return o.Kind + " " + o.Namespace + "/" + o.Name }

// manifest is what the chart rendered.
type manifest []object

// newTypes maps apiVersion and kind to a constructor of the API type. A kind the chart starts to
// render must be added here, so the tests notice it.
var newTypes = map[string]func() any{
	"v1 Namespace":                  func() any { return &corev1.Namespace{} },
	"v1 ServiceAccount":             func() any { return &corev1.ServiceAccount{} },
	"v1 ConfigMap":                  func() any { return &corev1.ConfigMap{} },
	"v1 Service":                    func() any { return &corev1.Service{} },
	"v1 Secret":                     func() any { return &corev1.Secret{} },
	"apps/v1 DaemonSet":             func() any { return &appsv1.DaemonSet{} },
	"apps/v1 Deployment":            func() any { return &appsv1.Deployment{} },
	"policy/v1 PodDisruptionBudget": func() any { return &policyv1.PodDisruptionBudget{} },
	"rbac.authorization.k8s.io/v1 ClusterRole":        func() any { return &rbacv1.ClusterRole{} },
	"rbac.authorization.k8s.io/v1 ClusterRoleBinding": func() any { return &rbacv1.ClusterRoleBinding{} },
	"rbac.authorization.k8s.io/v1 Role":               func() any { return &rbacv1.Role{} },
	"rbac.authorization.k8s.io/v1 RoleBinding":        func() any { return &rbacv1.RoleBinding{} },
	"resource.k8s.io/v1 DeviceClass":                  func() any { return &resourcev1.DeviceClass{} },
	"admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy": func() any {
		return &admissionregistrationv1.ValidatingAdmissionPolicy{}
	},
	"admissionregistration.k8s.io/v1 ValidatingAdmissionPolicyBinding": func() any {
		return &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	},
	"admissionregistration.k8s.io/v1 MutatingAdmissionPolicy": func() any {
		return &admissionregistrationv1.MutatingAdmissionPolicy{}
	},
	"admissionregistration.k8s.io/v1 MutatingAdmissionPolicyBinding": func() any {
		return &admissionregistrationv1.MutatingAdmissionPolicyBinding{}
	},
	"networking.k8s.io/v1 NetworkPolicy": func() any { return &networkingv1.NetworkPolicy{} },
	// cert-manager's types are not a dependency: certManagerObject lists the fields the chart
	// may set (strict decoding rejects any other).
	"cert-manager.io/v1 Certificate": func() any { return &certManagerObject{} },
	"cert-manager.io/v1 Issuer":      func() any { return &certManagerObject{} },
}

// render renders the chart with the given --set values; it fails the test if helm fails.
func render(t testing.TB, sets ...string) manifest {
	t.Helper()
	out, err := helmTemplate(t, sets...)
	if err != nil {
		t.Fatal(err)
	}
	m, err := decode(out)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// decode splits helm's output into documents and decodes each into its API type, rejecting
// unknown fields.
func decode(out string) (manifest, error) {
	var m manifest
	for i, doc := range splitDocuments(out) {
		var head struct {
			metav1.TypeMeta   `json:",inline"`
			metav1.ObjectMeta `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			return nil, fmt.Errorf("document %d: %w\n%s", i, err, doc)
		}
		if head.Kind == "" && head.Name == "" {
			continue // only comments
		}
		newObj, ok := newTypes[head.APIVersion+" "+head.Kind]
		if !ok {
			return nil, fmt.Errorf("document %d: unexpected %s %s %s/%s: add the type to newTypes", i, head.APIVersion, head.Kind, head.Namespace, head.Name)
		}
		obj := newObj()
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			return nil, fmt.Errorf("%s %s/%s: %w", head.Kind, head.Namespace, head.Name, err)
		}
		m = append(m, object{Kind: head.Kind, Namespace: head.Namespace, Name: head.Name, Obj: obj})
	}
	return m, nil
}

func splitDocuments(out string) []string {
	var docs []string
	var cur strings.Builder
	for line := range strings.Lines(out) {
		if strings.TrimRight(line, " \r\n") == "---" {
			docs = append(docs, cur.String())
			cur.Reset()
			continue
		}
		cur.WriteString(line)
	}
	return append(docs, cur.String())
}

// names lists the objects as "Kind namespace/name", sorted.
func (m manifest) names() []string {
	var s []string
	for _, o := range m {
		s = append(s, o.String())
	}
	slices.Sort(s)
	return s
}

// find returns the object of that kind, namespace and name, or nil.
func (m manifest) find(kind, namespace, name string) any {
	for _, o := range m {
		if o.Kind == kind && o.Namespace == namespace && o.Name == name {
			return o.Obj
		}
	}
	return nil
}

// get returns the object of type T with that namespace and name, failing the test without one.
func get[T any](t testing.TB, m manifest, kind, namespace, name string) *T {
	t.Helper()
	obj, ok := m.find(kind, namespace, name).(*T)
	if !ok {
		t.Fatalf("no %s %s/%s among %v", kind, namespace, name, m.names())
	}
	return obj
}
