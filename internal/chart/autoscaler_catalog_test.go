package chart

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// catalogFile is docs/catalog.md's example: a price for a type whose price is unknown, and a new
// type. It starts with an indented comment and holds a quote and a non-ASCII character, which
// the ConfigMap must keep byte for byte.
const catalogFile = `  # prices of account 111122223333 ("on demand", µ-precise)
apiVersion: kube-neuron.io/v1
kind: InstanceCatalog
instanceTypes:
- name: trn2.48xlarge
  priceUSDPerHour: 44.70
- name: trn2n.48xlarge
  family: trn2n
  devices: 16
  physicalCoresPerDevice: 8
  defaultLNC: 2
  lncConfigurable: true
  deviceMemoryGiB: 96
  topology: torus
  vcpu: 192
  memoryGiB: 2048
`

// renderFiles renders the chart with --set-file key=<a file holding content> and the sets.
func renderFiles(t *testing.T, files map[string]string, sets ...string) manifest {
	t.Helper()
	args := append([]string{"template", release, chartDir, "--namespace", releaseNS}, setArgs(sets)...)
	for key, content := range files {
		p := filepath.Join(t.TempDir(), "file")
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--set-file", key+"="+p)
	}
	out, err := runHelm(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	m, err := decode(out)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// checkCatalogMount checks that the autoscaler reads its catalog from the ConfigMap's key: the
// key mounted read-only as a file, and NEURON_CATALOG naming that file.
func checkCatalogMount(t *testing.T, spec corev1.PodSpec, configMap, key string) {
	t.Helper()
	if len(spec.Volumes) != 1 || spec.Volumes[0].ConfigMap == nil {
		t.Fatalf("volumes = %+v, want the catalog's ConfigMap only", spec.Volumes)
	}
	v := spec.Volumes[0]
	wantSource := &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: configMap},
		Items:                []corev1.KeyToPath{{Key: key, Path: "catalog.yaml"}},
	}
	if !reflect.DeepEqual(v.ConfigMap, wantSource) {
		t.Errorf("catalog volume = %+v, want %+v", v.ConfigMap, wantSource)
	}
	c := spec.Containers[0]
	if len(c.VolumeMounts) != 1 || c.VolumeMounts[0].Name != v.Name || !c.VolumeMounts[0].ReadOnly {
		t.Fatalf("volume mounts = %+v, want %s read-only", c.VolumeMounts, v.Name)
	}
	file := path.Join(c.VolumeMounts[0].MountPath, v.ConfigMap.Items[0].Path)
	var catalogEnv []string
	for _, e := range c.Env {
		if e.Name == "NEURON_CATALOG" {
			catalogEnv = append(catalogEnv, e.Value)
		}
	}
	if !slices.Equal(catalogEnv, []string{file}) {
		t.Errorf("NEURON_CATALOG = %q, want the mounted file %s", catalogEnv, file)
	}
}

// TestAutoscalerCatalogInline: autoscaler.catalog.inline becomes the ConfigMap
// neuron-autoscaler-catalog, byte for byte, mounted where NEURON_CATALOG points, and the file
// there loads with the loader the autoscaler uses (topology.LoadCatalog, cmd/neuron-autoscaler)
// into the prices and types it gives. A change of the catalog changes the pod template.
func TestAutoscalerCatalogInline(t *testing.T) {
	t.Parallel()
	sets := []string{"autoscaler.enabled=true", "autoscaler.provider=local", "devicePlugin.enabled=false", "npd.enabled=false"}
	m := renderFiles(t, map[string]string{"autoscaler.catalog.inline": catalogFile}, sets...)
	want := objects(autoscalerObjects, autoscalerPDB, []string{"ConfigMap kube-system/neuron-autoscaler-catalog"})
	if got := m.names(); !slices.Equal(got, want) {
		t.Fatalf("rendered objects:\n  got  %q\n  want %q", got, want)
	}
	cm := get[corev1.ConfigMap](t, m, "ConfigMap", "kube-system", "neuron-autoscaler-catalog")
	if l := cm.Labels; l["app.kubernetes.io/name"] != autoscalerName || l["app.kubernetes.io/instance"] != release {
		t.Errorf("ConfigMap labels %v lack the autoscaler's", l)
	}
	if len(cm.Data) != 1 || cm.Data["catalog.yaml"] != catalogFile {
		t.Fatalf("ConfigMap data = %q, want catalog.yaml = %q", cm.Data, catalogFile)
	}

	d := get[appsv1.Deployment](t, m, "Deployment", "kube-system", autoscalerName)
	checkCatalogMount(t, d.Spec.Template.Spec, "neuron-autoscaler-catalog", "catalog.yaml")

	// What the autoscaler reads at the mounted path.
	file := filepath.Join(t.TempDir(), "catalog.yaml")
	if err := os.WriteFile(file, []byte(cm.Data["catalog.yaml"]), 0o444); err != nil {
		t.Fatal(err)
	}
	cat, err := topology.LoadCatalog(file)
	if err != nil {
		t.Fatalf("the rendered catalog does not load: %v", err)
	}
	if it, err := cat.Get("trn2.48xlarge"); err != nil || !it.PriceKnown() || *it.PriceUSDPerHour != 44.70 || it.Devices != 16 {
		t.Errorf("trn2.48xlarge = %+v (%v), want the built-in type priced at 44.70", it, err)
	}
	if it, err := cat.Get("trn2n.48xlarge"); err != nil || it.Family != "trn2n" || it.Devices != 16 {
		t.Errorf("trn2n.48xlarge = %+v (%v), want the added type", it, err)
	}
	if _, err := cat.Get("inf2.xlarge"); err != nil {
		t.Errorf("the catalog extends the built-in one, but inf2.xlarge is gone: %v", err)
	}

	sum := sha256.Sum256([]byte(catalogFile))
	if got := d.Spec.Template.Annotations["checksum/catalog"]; got != hex.EncodeToString(sum[:]) {
		t.Errorf("pod annotation checksum/catalog = %q, want the catalog's sha256 %x", got, sum)
	}
	other := renderFiles(t, map[string]string{"autoscaler.catalog.inline": catalogFile + "- name: trn3.48xlarge\n  priceUSDPerHour: 60\n"}, sets...)
	d2 := get[appsv1.Deployment](t, other, "Deployment", "kube-system", autoscalerName)
	if a, b := d.Spec.Template.Annotations["checksum/catalog"], d2.Spec.Template.Annotations["checksum/catalog"]; a == b {
		t.Errorf("two catalogs give the same pod template annotation %q: a new catalog would not restart the autoscaler", a)
	}

	// Nothing of it while the autoscaler is off.
	if got := renderFiles(t, map[string]string{"autoscaler.catalog.inline": catalogFile}).names(); slices.Contains(got, "ConfigMap kube-system/neuron-autoscaler-catalog") {
		t.Errorf("rendered %q with the autoscaler off", got)
	}
}

// TestAutoscalerCatalogConfigMap: autoscaler.catalog.configMapName mounts your ConfigMap's key
// (catalog.yaml unless configMapKey says otherwise), in autoscaler.namespace, and the chart
// makes no ConfigMap of its own.
func TestAutoscalerCatalogConfigMap(t *testing.T) {
	t.Parallel()
	m := render(t, "autoscaler.enabled=true", "autoscaler.provider=local", "autoscaler.namespace=neuron", "autoscaler.catalog.configMapName=neuron-prices",
		"devicePlugin.enabled=false", "npd.enabled=false")
	for _, o := range m {
		if o.Kind == "ConfigMap" {
			t.Errorf("rendered %s: the ConfigMap is the user's", o)
		}
	}
	d := get[appsv1.Deployment](t, m, "Deployment", "neuron", autoscalerName)
	checkCatalogMount(t, d.Spec.Template.Spec, "neuron-prices", "catalog.yaml")
	if len(d.Spec.Template.Annotations) != 0 {
		t.Errorf("pod annotations = %v: the chart cannot see the user's ConfigMap, so no checksum", d.Spec.Template.Annotations)
	}
}
