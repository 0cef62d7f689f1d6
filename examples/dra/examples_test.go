package dra_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"

	neuronv1 "github.com/kube-neuron/kube-neuron/api/neuron.aws.com/v1"
	"github.com/kube-neuron/kube-neuron/internal/labels"
)

// workload is a pod spec from a file: a Pod's or a StatefulSet's template.
type workload struct {
	file, name string
	spec       corev1.PodSpec
}

// TestExamples decodes every document of every file strictly into its k8s.io/api type and checks
// that the templates' opaque configs decode, that every pod uses a template of this directory and
// tolerates the Neuron taint, and that names do not collide when all files share a namespace.
func TestExamples(t *testing.T) {
	files, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no *.yaml files")
	}
	templates := map[string]string{} // template name -> file
	var workloads []workload
	names := map[string]string{} // kind/name -> file
	for _, file := range files {
		docs := documents(t, file)
		if len(docs) < 2 {
			t.Errorf("%s: %d documents, want a template and what uses it", file, len(docs))
			continue
		}
		for i, doc := range docs {
			var meta metav1.TypeMeta
			if err := yaml.Unmarshal(doc, &meta); err != nil {
				t.Fatalf("%s document %d: %v", file, i, err)
			}
			if i == 0 && meta.Kind != "ResourceClaimTemplate" {
				t.Errorf("%s: first document is a %s, want the ResourceClaimTemplate", file, meta.Kind)
			}
			var name string
			switch gvk := meta.APIVersion + " " + meta.Kind; gvk {
			case "resource.k8s.io/v1 ResourceClaimTemplate":
				var rct resourcev1.ResourceClaimTemplate
				if !decodeStrict(t, file, doc, &rct) {
					continue
				}
				checkTemplate(t, file, &rct)
				name = rct.Name
				templates[name] = file
			case "v1 Pod":
				var pod corev1.Pod
				if !decodeStrict(t, file, doc, &pod) {
					continue
				}
				name = pod.Name
				workloads = append(workloads, workload{file: file, name: "pod " + name, spec: pod.Spec})
			case "apps/v1 StatefulSet":
				var sts appsv1.StatefulSet
				if !decodeStrict(t, file, doc, &sts) {
					continue
				}
				name = sts.Name
				workloads = append(workloads, workload{file: file, name: "statefulset " + name, spec: sts.Spec.Template.Spec})
			default:
				t.Errorf("%s document %d: unexpected %s", file, i, gvk)
				continue
			}
			key := meta.Kind + "/" + name
			if other, ok := names[key]; ok {
				t.Errorf("%s: %s is also in %s; names must be unique across the directory", file, key, other)
			}
			names[key] = file
		}
	}
	for _, w := range workloads {
		checkWorkload(t, w, templates)
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range files {
		if !bytes.Contains(readme, []byte("`"+file+"`")) {
			t.Errorf("README.md does not list %s", file)
		}
	}
}

// documents splits a file into its YAML documents.
func documents(t *testing.T, file string) [][]byte {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := utilyaml.NewYAMLReader(bufio.NewReader(f))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) > 0 {
			docs = append(docs, doc)
		}
	}
}

func stripComments(doc []byte) []byte {
	var out []byte
	for line := range bytes.Lines(doc) {
		if !bytes.HasPrefix(bytes.TrimSpace(line), []byte("#")) {
			out = append(out, line...)
		}
	}
	return out
}

// decodeStrict decodes doc into obj refusing unknown and duplicate fields. UnmarshalStrict
// matches field names case-insensitively, as encoding/json does, but the API server does not; so
// every key of the document must also appear, spelt the same, in obj's own encoding. It reports
// whether obj is fit to check further.
func decodeStrict(t *testing.T, file string, doc []byte, obj any) bool {
	t.Helper()
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		t.Errorf("%s: %v", file, err)
		return false
	}
	var source, decoded map[string]any
	raw, err := yaml.YAMLToJSONStrict(doc)
	if err == nil {
		err = json.Unmarshal(raw, &source)
	}
	if err == nil {
		raw, err = json.Marshal(obj)
	}
	if err == nil {
		err = json.Unmarshal(raw, &decoded)
	}
	if err != nil {
		t.Errorf("%s: %v", file, err)
		return false
	}
	missing := missingKeys("", source, decoded)
	for _, path := range missing {
		t.Errorf("%s: field %s is not in %T as spelt (check its case)", file, path, obj)
	}
	return len(missing) == 0
}

// missingKeys lists the object keys of source, as paths, that decoded lacks.
func missingKeys(path string, source, decoded any) []string {
	var missing []string
	switch s := source.(type) {
	case map[string]any:
		d, _ := decoded.(map[string]any)
		for k, v := range s {
			dv, ok := d[k]
			if !ok {
				missing = append(missing, path+"."+k)
				continue
			}
			missing = append(missing, missingKeys(path+"."+k, v, dv)...)
		}
	case []any:
		d, _ := decoded.([]any)
		for i, v := range s {
			if i < len(d) {
				missing = append(missing, missingKeys(path+"[]", v, d[i])...)
			}
		}
	}
	return missing
}

// checkTemplate checks a template's v1 shape and its opaque configs. The CEL selectors are left to
// the API server (the e2e tests apply these files): compiling them here would pull cel-go into
// go.mod.
func checkTemplate(t *testing.T, file string, rct *resourcev1.ResourceClaimTemplate) {
	t.Helper()
	devices := rct.Spec.Spec.Devices
	var requests []string
	for _, r := range devices.Requests {
		if r.Exactly == nil || r.Exactly.DeviceClassName != neuronv1.DriverName {
			t.Errorf("%s: request %q has no exactly with deviceClassName %s", file, r.Name, neuronv1.DriverName)
		}
		requests = append(requests, r.Name)
	}
	for _, c := range devices.Constraints {
		for _, r := range c.Requests {
			if !slices.Contains(requests, r) {
				t.Errorf("%s: a constraint names request %q; the template has %v", file, r, requests)
			}
		}
	}
	for i, c := range devices.Config {
		for _, r := range c.Requests {
			if !slices.Contains(requests, r) {
				t.Errorf("%s: config %d names request %q; the template has %v", file, i, r, requests)
			}
		}
		if c.Opaque == nil {
			t.Errorf("%s: config %d is not opaque", file, i)
			continue
		}
		if c.Opaque.Driver != neuronv1.DriverName {
			t.Errorf("%s: config %d is for driver %q, want %s", file, i, c.Opaque.Driver, neuronv1.DriverName)
		}
		if _, err := neuronv1.Decode(c.Opaque.Parameters.Raw); err != nil {
			t.Errorf("%s: config %d: %v", file, i, err)
		}
	}
}

// checkWorkload checks that a pod spec's claims come from templates of this directory, that its
// containers use claims it declares, and that it tolerates the Neuron nodes' taint.
func checkWorkload(t *testing.T, w workload, templates map[string]string) {
	t.Helper()
	var claims []string
	for _, c := range w.spec.ResourceClaims {
		if c.ResourceClaimTemplateName == nil {
			t.Errorf("%s: %s: claim %q names no ResourceClaimTemplate", w.file, w.name, c.Name)
			continue
		}
		if _, ok := templates[*c.ResourceClaimTemplateName]; !ok {
			t.Errorf("%s: %s: template %q is in no file of this directory", w.file, w.name, *c.ResourceClaimTemplateName)
		}
		claims = append(claims, c.Name)
	}
	if len(claims) == 0 {
		t.Errorf("%s: %s uses no ResourceClaimTemplate", w.file, w.name)
	}
	for _, c := range w.spec.Containers {
		for _, rc := range c.Resources.Claims {
			if !slices.Contains(claims, rc.Name) {
				t.Errorf("%s: %s: container %s uses claim %q; the pod declares %s", w.file, w.name, c.Name, rc.Name, strings.Join(claims, ", "))
			}
		}
	}
	taint := &corev1.Taint{Key: labels.NeuronTaintKey, Value: labels.NeuronTaintValue, Effect: labels.NeuronTaintEffect}
	if !slices.ContainsFunc(w.spec.Tolerations, func(tol corev1.Toleration) bool {
		return tol.ToleratesTaint(klog.Background(), taint, false)
	}) {
		t.Errorf("%s: %s does not tolerate %s", w.file, w.name, taint.ToString())
	}
}
