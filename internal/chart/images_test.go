package chart

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// allComponents enables every component of the chart at once (my-scheduler in mode extender,
// which runs two images; mode plugin's neuron-kube-scheduler is TestSchedulerPluginMode's).
var allComponents = append([]string{
	"scheduler.enabled=true",
	extenderMode,
	"draDriver.enabled=true",
	"devicePlugin.allowWithDRA=true",
}, autoscalerEC2...)

// ownImages are the components that run kube-neuron's own images, one per binary (make images).
var ownImages = []string{"neuron-device-plugin", "neuron-scheduler-extender", "neuron-dra-driver", "neuron-autoscaler"}

// containerImages maps the name of each container of every DaemonSet and Deployment to it.
func containerImages(t *testing.T, m manifest) map[string]corev1.Container {
	t.Helper()
	got := map[string]corev1.Container{}
	for _, o := range m {
		var spec corev1.PodSpec
		switch obj := o.Obj.(type) {
		case *appsv1.DaemonSet:
			spec = obj.Spec.Template.Spec
		case *appsv1.Deployment:
			spec = obj.Spec.Template.Spec
		default:
			continue
		}
		for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
			if _, ok := got[c.Name]; ok {
				t.Fatalf("container %s twice", c.Name)
			}
			got[c.Name] = c
		}
	}
	return got
}

// TestEveryComponentRunsItsOwnImage checks that each component's container runs the image of its
// own binary, <image.registry>/<component>.image.repository:<image.tag>, and that the registry
// and tag values leave the images of my-scheduler and the node problem detector alone.
func TestEveryComponentRunsItsOwnImage(t *testing.T) {
	t.Parallel()
	var meta struct{ AppVersion string }
	readYAML(t, filepath.Join(chartDir, "Chart.yaml"), &meta)
	const ecr = "111122223333.dkr.ecr.us-west-2.amazonaws.com"
	others := map[string]string{
		"kube-scheduler":        "registry.k8s.io/kube-scheduler:v1.36.3",
		"node-problem-detector": "registry.k8s.io/node-problem-detector/node-problem-detector:v0.8.19",
	}
	for _, tc := range []struct {
		name string
		sets []string
		pull corev1.PullPolicy
		want map[string]string // container (the component) -> image
	}{
		{
			name: "local images: the bare names and the appVersion",
			sets: []string{"image.localImages=true"},
			pull: corev1.PullIfNotPresent,
			want: map[string]string{
				"neuron-device-plugin":      "neuron-device-plugin:" + meta.AppVersion,
				"neuron-scheduler-extender": "neuron-scheduler-extender:" + meta.AppVersion,
				"neuron-dra-driver":         "neuron-dra-driver:" + meta.AppVersion,
				"neuron-autoscaler":         "neuron-autoscaler:" + meta.AppVersion,
			},
		},
		{
			name: "an ECR registry, a tag and a pull policy",
			sets: []string{"image.registry=" + ecr, "image.tag=v9", "image.pullPolicy=Always"},
			pull: corev1.PullAlways,
			want: map[string]string{
				"neuron-device-plugin":      ecr + "/neuron-device-plugin:v9",
				"neuron-scheduler-extender": ecr + "/neuron-scheduler-extender:v9",
				"neuron-dra-driver":         ecr + "/neuron-dra-driver:v9",
				"neuron-autoscaler":         ecr + "/neuron-autoscaler:v9",
			},
		},
		{
			name: "a registry with a port, a path and a trailing slash; one repository renamed",
			sets: []string{"image.registry=registry.example.com:5000/ml/", "autoscaler.image.repository=mirror/scaler"},
			pull: corev1.PullIfNotPresent,
			want: map[string]string{
				"neuron-device-plugin":      "registry.example.com:5000/ml/neuron-device-plugin:" + meta.AppVersion,
				"neuron-scheduler-extender": "registry.example.com:5000/ml/neuron-scheduler-extender:" + meta.AppVersion,
				"neuron-dra-driver":         "registry.example.com:5000/ml/neuron-dra-driver:" + meta.AppVersion,
				"neuron-autoscaler":         "registry.example.com:5000/ml/mirror/scaler:" + meta.AppVersion,
			},
		},
		{
			name: "per component, as AWS's chart writes them: a repository with its registry, a tag, a pull policy",
			sets: []string{"image.registry=" + ecr, "devicePlugin.image.repository=registry.example.com:5000/ml/neuron-device-plugin",
				"devicePlugin.image.tag=v2", "image.pullPolicy=Always", "devicePlugin.image.pullPolicy=Always", "draDriver.image.tag=v3"},
			pull: corev1.PullAlways,
			want: map[string]string{
				"neuron-device-plugin":      "registry.example.com:5000/ml/neuron-device-plugin:v2",
				"neuron-scheduler-extender": ecr + "/neuron-scheduler-extender:" + meta.AppVersion,
				"neuron-dra-driver":         ecr + "/neuron-dra-driver:v3",
				"neuron-autoscaler":         ecr + "/neuron-autoscaler:" + meta.AppVersion,
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := containerImages(t, render(t, slices.Concat(allComponents, tc.sets)...))
			want := maps.Clone(tc.want)
			maps.Copy(want, others)
			if g, w := slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)); !slices.Equal(g, w) {
				t.Fatalf("containers %q, want %q", g, w)
			}
			for key, image := range want {
				if got[key].Image != image {
					t.Errorf("%s: image %q, want %q", key, got[key].Image, image)
				}
				if _, own := tc.want[key]; own && got[key].ImagePullPolicy != tc.pull {
					t.Errorf("%s: imagePullPolicy %q, want %q", key, got[key].ImagePullPolicy, tc.pull)
				}
			}
		})
	}
}

// TestDefaultImagesAreTheBinaries checks that the default repositories are the binaries of cmd/
// that `make images` builds (hack/images), one per component.
func TestDefaultImagesAreTheBinaries(t *testing.T) {
	t.Parallel()
	type image struct {
		Image struct {
			Repository string `json:"repository"`
		} `json:"image"`
	}
	var values struct {
		DevicePlugin image `json:"devicePlugin"`
		Scheduler    image `json:"scheduler"`
		DRADriver    image `json:"draDriver"`
		Autoscaler   image `json:"autoscaler"`
	}
	readYAML(t, filepath.Join(chartDir, "values.yaml"), &values)
	got := []string{
		values.DevicePlugin.Image.Repository,
		values.Scheduler.Image.Repository,
		values.DRADriver.Image.Repository,
		values.Autoscaler.Image.Repository,
	}
	if !slices.Equal(got, ownImages) {
		t.Errorf("devicePlugin, scheduler, draDriver, autoscaler image.repository = %q, want %q", got, ownImages)
	}
	for _, name := range got {
		if _, err := os.Stat(filepath.Join("../../cmd", name, "main.go")); err != nil {
			t.Errorf("image.repository %q is not a binary of cmd/: %v", name, err)
		}
	}
}

// TestImageSchema checks the image values against values.schema.json: a single-image key
// image.repository (one image for every component) is an error that names it, and registries
// and tags must be references.
func TestImageSchema(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		set  string
		want string // in helm's message; empty: renders
	}{
		{"image.repository=registry.example.com/kube-neuron", "additional properties 'repository' not allowed"},
		{"devicePlugin.image.digest=sha256:0", "additional properties 'digest' not allowed"},
		{"devicePlugin.image.tag=v1", ""},
		{"devicePlugin.image.tag=v1:latest", "/devicePlugin/image/tag"},
		{"autoscaler.image.repository=", "/autoscaler/image/repository"},
		{"draDriver.image.repository=Neuron", "/draDriver/image/repository"},
		{"image.registry=https://registry.example.com", "/image/registry"},
		{"image.registry=registry.example.com/Team", "/image/registry"},
		{"image.tag=v1:latest", "/image/tag"},
		{"image.tag=-v1", "/image/tag"},
		{"image.registry=111122223333.dkr.ecr.us-west-2.amazonaws.com", ""},
		{"image.registry=localhost:5000", ""},
		{"image.registry=registry.example.com/team/", ""},
		{"image.tag=0.1.0-rc.1_amd64", ""},
	} {
		t.Run(tc.set, func(t *testing.T) {
			t.Parallel()
			out, err := helmTemplate(t, tc.set)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("want it to render: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("rendered, want a schema error:\n%s", out)
			}
			if msg := err.Error(); !strings.Contains(msg, "values don't meet the specifications of the schema") || !strings.Contains(msg, tc.want) {
				t.Errorf("error does not mention %q:\n%v", tc.want, err)
			}
		})
	}
}
