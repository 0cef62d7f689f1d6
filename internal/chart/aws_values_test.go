package chart

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// awsValues is the values file of AWS's neuron-helm-chart 1.10.0, as a user moving over has it.
const awsValues = "testdata/aws-neuron-helm-chart-1.10.0-values.yaml"

// awsValuesFile writes AWS's values file, changed by edit, to a file of the test's and returns
// its path.
func awsValuesFile(t *testing.T, edit func(v map[string]any)) string {
	t.Helper()
	data, err := os.ReadFile(awsValues)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := yaml.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	edit(v)
	out, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// withoutAWSImages removes the image keys of the components AWS's chart and this one share,
// as docs/migration.md tells a user to.
func withoutAWSImages(v map[string]any) {
	for _, c := range []string{"devicePlugin", "draDriver", "scheduler"} {
		delete(v[c].(map[string]any), "image")
	}
}

// TestAWSValuesFileAsIs: AWS's values file unchanged names AWS's images, which are not
// kube-neuron's: the install fails with a message that says so and what to do.
func TestAWSValuesFileAsIs(t *testing.T) {
	t.Parallel()
	_, err := runHelmExactly(t, "template", release, chartDir, "--namespace", releaseNS, "--values", awsValues, "--set", "image.registry="+testRegistry)
	want := "devicePlugin.image.repository is AWS's image, not kube-neuron's: remove it or point it at kube-neuron's neuron-device-plugin (docs/images.md)"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %v, want %q", err, want)
	}
}

// TestAWSValuesFileWithoutItsImages: AWS's values file without its image keys, and the registry
// of kube-neuron's images, is a correct install: the keys both charts have mean the same thing,
// and the AWS keys without a counterpart here hold AWS's defaults, ignored and listed in
// NOTES.txt.
func TestAWSValuesFileWithoutItsImages(t *testing.T) {
	t.Parallel()
	values := awsValuesFile(t, withoutAWSImages)
	out, err := runHelmExactly(t, "template", release, chartDir, "--namespace", releaseNS, "--values", values, "--set", "image.registry="+testRegistry)
	if err != nil {
		t.Fatal(err)
	}
	m, err := decode(out)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := m.names(), objects(devicePluginObjects, npdObjects); !slices.Equal(got, want) {
		t.Fatalf("rendered objects:\n  got  %q\n  want %q", got, want)
	}
	ds := get[appsv1.DaemonSet](t, m, "DaemonSet", "kube-system", "neuron-device-plugin")
	spec := ds.Spec.Template.Spec
	if c := spec.Containers[0]; c.Image != testRegistry+"/neuron-device-plugin:0.1.0" {
		t.Errorf("device plugin image %q", c.Image)
	}
	if spec.PriorityClassName != "system-node-critical" {
		t.Errorf("priorityClassName %q", spec.PriorityClassName)
	}
	sagemaker := corev1.Toleration{Key: "sagemaker.amazonaws.com/node-health-status", Operator: corev1.TolerationOpEqual, Value: "Unschedulable", Effect: corev1.TaintEffectNoSchedule}
	if !slices.Contains(spec.Tolerations, sagemaker) {
		t.Errorf("tolerations %v lack AWS's %v", spec.Tolerations, sagemaker)
	}
	// neuronInstances, ml.* types included, select the nodes.
	var instances []string
	for _, term := range spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		if term.MatchExpressions[0].Key == "node.kubernetes.io/instance-type" {
			instances = term.MatchExpressions[0].Values
		}
	}
	if !slices.Contains(instances, "ml.trn1.32xlarge") || !slices.Contains(instances, "trn3s-es.48xlarge") {
		t.Errorf("instance types %v, want AWS's neuronInstances", instances)
	}
	// npd.nodeProblemDetector.image and npd.config.kernelMonitor are honoured.
	npd := get[appsv1.DaemonSet](t, m, "DaemonSet", "neuron-healthcheck-system", "node-problem-detector")
	if c := npd.Spec.Template.Spec.Containers[0]; c.Image != "registry.k8s.io/node-problem-detector/node-problem-detector:v1.36.0" {
		t.Errorf("node problem detector image %q", c.Image)
	}
	cm := get[corev1.ConfigMap](t, m, "ConfigMap", "neuron-healthcheck-system", "node-problem-detector-config")
	if !strings.Contains(cm.Data["kernel-monitor.json"], `"NeuronHasError_HANG_ON_COLLECTIVES"`) || !strings.Contains(cm.Data["kernel-monitor.json"], `"plugin": "kmsg"`) {
		t.Errorf("kernel monitor is not npd.config.kernelMonitor:\n%s", cm.Data["kernel-monitor.json"])
	}

	notes := renderNotes(t, "--values="+values)
	ignored := map[string][]string{} // parent -> keys, as NOTES.txt lists them
	for _, line := range strings.Split(notes, "\n") {
		if parent, keys, ok := strings.Cut(strings.TrimPrefix(line, "  "), ": "); ok && strings.HasPrefix(line, "  ") && !strings.Contains(parent, " ") {
			ignored[parent] = strings.Split(keys, ", ")
		}
	}
	for _, key := range []string{"devicePlugin.env", "draDriver.livenessProbe", "ultraserverOperator.enabled", "npd.nodeRecovery.enabled", "scheduler.customScheduler.livenessProbe", "npd.config.name"} {
		parent, name := key[:strings.LastIndex(key, ".")], key[strings.LastIndex(key, ".")+1:]
		if !slices.Contains(ignored[parent], name) {
			t.Errorf("NOTES.txt does not list %s as ignored:\n%s", key, notes)
		}
	}
	if slices.Contains(ignored["devicePlugin"], "tolerations") {
		t.Errorf("NOTES.txt lists devicePlugin.tolerations, which is honoured, as ignored")
	}
}

// TestAWSValuesFileWithTheExtender: the seeds' extender install with AWS's values file: my-scheduler
// runs the kube-scheduler image AWS's file names, in its table form, with its replica counts.
func TestAWSValuesFileWithTheExtender(t *testing.T) {
	t.Parallel()
	values := awsValuesFile(t, withoutAWSImages)
	out, err := runHelmExactly(t, "template", release, chartDir, "--namespace", releaseNS, "--values", values,
		"--set", "image.registry="+testRegistry, "--set", "scheduler.enabled=true", "--set", extenderMode, "--set", "npd.enabled=false", "--set", "scheduler.replicaCount=3")
	if err != nil {
		t.Fatal(err)
	}
	m, err := decode(out)
	if err != nil {
		t.Fatal(err)
	}
	my := get[appsv1.Deployment](t, m, "Deployment", "kube-system", "my-scheduler")
	if c := my.Spec.Template.Spec.Containers[0]; c.Image != "public.ecr.aws/eks-distro/kubernetes/kube-scheduler:v1.31.12-eks-1-31-30" || c.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("my-scheduler image %q pull %q", c.Image, c.ImagePullPolicy)
	}
	if *my.Spec.Replicas != 1 {
		t.Errorf("my-scheduler replicas %d, want scheduler.customScheduler.replicaCount 1", *my.Spec.Replicas)
	}
	ext := get[appsv1.Deployment](t, m, "Deployment", "kube-system", "k8s-neuron-scheduler")
	if *ext.Spec.Replicas != 3 {
		t.Errorf("extender replicas %d, want scheduler.replicaCount 3", *ext.Spec.Replicas)
	}
	if ext.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("extender strategy %v, want scheduler.strategy (Recreate)", ext.Spec.Strategy)
	}
}

// TestAWSKeysWithoutACounterpart: an AWS key this chart has no counterpart for fails the install,
// naming the key, unless it holds AWS's default.
func TestAWSKeysWithoutACounterpart(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		edit func(v map[string]any)
		want string
	}{
		{"an environment of the device plugin's own", func(v map[string]any) {
			v["devicePlugin"].(map[string]any)["env"] = []any{map[string]any{"name": "FOO", "value": "bar"}}
		}, `devicePlugin.env is [{"name":"FOO","value":"bar"}], but the chart sets the device plugin's environment from its own values`},
		{"node recovery on", func(v map[string]any) {
			v["npd"].(map[string]any)["nodeRecovery"].(map[string]any)["enabled"] = true
		}, "npd.nodeRecovery.enabled is true, but kube-neuron's node problem detector sets the NeuronHealth condition but does not replace nodes"},
		{"a service account name", func(v map[string]any) {
			v["draDriver"].(map[string]any)["serviceAccount"].(map[string]any)["name"] = "mine"
		}, "draDriver.serviceAccount is "},
		{"an instance type nobody knows", func(v map[string]any) {
			v["neuronInstances"] = append(v["neuronInstances"].([]any), "trn9.xlarge")
		}, `neuronInstances has "trn9.xlarge"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			values := awsValuesFile(t, func(v map[string]any) { withoutAWSImages(v); tc.edit(v) })
			_, err := runHelmExactly(t, "template", release, chartDir, "--namespace", releaseNS, "--values", values, "--set", "image.registry="+testRegistry)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}

// TestSeedCommandsNeedARegistry: the seeds' install commands, as the seeds give them, name no
// registry: kube-neuron's images are on none a node can pull from, so the install fails with the
// message that says how to push them; with image.registry, or image.localImages, it renders.
func TestSeedCommandsNeedARegistry(t *testing.T) {
	t.Parallel()
	for _, sets := range [][]string{nil, {"npd.enabled=false"}, {"scheduler.enabled=true", "npd.enabled=false"}, {"devicePlugin.enabled=false", "npd.enabled=false", "draDriver.enabled=true"}} {
		args := append([]string{"template", release, chartDir, "--namespace", releaseNS}, setArgs(sets)...)
		_, err := runHelmExactly(t, args...)
		if err == nil || !strings.Contains(err.Error(), "image.registry is empty, so ") {
			t.Errorf("seed command with %v: error %v, want the image.registry message", sets, err)
		}
		for _, extra := range []string{"image.registry=" + testRegistry, "image.localImages=true"} {
			if _, err := runHelmExactly(t, append(args, "--set", extra)...); err != nil {
				t.Errorf("seed command with %v and %s: %v", sets, extra, err)
			}
		}
	}
}

// TestInstanceTypesFileIsTheCatalog: the chart's list of catalog types is the built-in catalog's.
func TestInstanceTypesFileIsTheCatalog(t *testing.T) {
	t.Parallel()
	var types struct{ Catalog, NotModelled []string }
	readYAML(t, filepath.Join(chartDir, "files", "instance-types.yaml"), &types)
	if got, want := types.Catalog, topology.DefaultCatalog().Names(); !slices.Equal(got, want) {
		t.Errorf("files/instance-types.yaml catalog %v, want the built-in catalog's %v", got, want)
	}
	for _, n := range types.NotModelled {
		if slices.Contains(types.Catalog, n) {
			t.Errorf("%s is in the catalog and in notModelled", n)
		}
	}
}

// TestMigrationTableCoversAWSValues: docs/migration.md says, for every key of AWS's 1.10.0
// values file, what it does here: by its path, or as <c>.<key> for the components the table
// abbreviates so.
func TestMigrationTableCoversAWSValues(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/migration.md")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(awsValues)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := yaml.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	abbreviated := []string{"devicePlugin", "draDriver", "scheduler", "scheduler.customScheduler", "npd"}
	// Tables whose keys the doc names one by one; the other tables are named as a whole.
	deeper := map[string]bool{"devicePlugin": true, "draDriver": true, "scheduler": true, "scheduler.customScheduler": true,
		"scheduler.defaultScheduler": true, "ultraserverOperator": true, "npd": true, "npd.config": true, "npd.nodeProblemDetector": true, "npd.nodeRecovery": true}
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, val := range m {
			path := strings.TrimPrefix(prefix+"."+k, ".")
			if sub, ok := val.(map[string]any); ok && deeper[path] {
				walk(path, sub)
				continue
			}
			mentioned := strings.Contains(string(doc), "`"+path+"`") || strings.Contains(string(doc), "`"+path+".") ||
				slices.ContainsFunc(abbreviated, func(c string) bool { return prefix == c && strings.Contains(string(doc), "`<c>."+k+"`") })
			if !mentioned {
				t.Errorf("docs/migration.md does not say what AWS's key %s does here", path)
			}
		}
	}
	walk("", v)
}
