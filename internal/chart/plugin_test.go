package chart

import (
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/kube-neuron/kube-neuron/internal/lab"
)

// pluginMode runs my-scheduler as neuron-kube-scheduler (the default).
const pluginMode = "scheduler.customScheduler.mode=plugin"

// extenderMode runs my-scheduler as the stock kube-scheduler calling the extender: the tests of
// the extender's objects set it.
const extenderMode = "scheduler.customScheduler.mode=extender"

// myConfig decodes my-scheduler's KubeSchedulerConfiguration as plain YAML, every field kept.
func myConfig(t *testing.T, m manifest, ns string) map[string]any {
	t.Helper()
	cm := get[corev1.ConfigMap](t, m, "ConfigMap", ns, "my-scheduler-config")
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(cm.Data["my-scheduler-config.yaml"]), &cfg); err != nil {
		t.Fatalf("my-scheduler-config.yaml: %v\n%s", err, cm.Data["my-scheduler-config.yaml"])
	}
	return cfg
}

// TestSchedulerPluginMode: in mode plugin my-scheduler is neuron-kube-scheduler with its RBAC and
// configuration, and nothing of the extender is rendered: no Deployment, Service, certificates,
// NetworkPolicy, PodDisruptionBudget or bind-Lease Role.
func TestSchedulerPluginMode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		sets []string
	}{
		{"defaults", nil},
		// The extender's TLS sources have nothing to secure.
		{"cert-manager asked for", []string{"scheduler.tls.certManager.enabled=true"}},
		{"your Secrets asked for", []string{"scheduler.tls.generate=false"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := render(t, append([]string{"scheduler.enabled=true", "npd.enabled=false", pluginMode}, tc.sets...)...)
			if got, want := m.names(), objects(devicePluginObjects, mySchedulerObjects); !slices.Equal(got, want) {
				t.Fatalf("rendered objects:\n  got  %q\n  want %q", got, want)
			}
			checkMyScheduler(t, m, "kube-system", true)
		})
	}
}

// TestPluginPercentageOfNodesToScore: customScheduler.pluginPercentageOfNodesToScore is the
// profile's percentageOfNodesToScore in mode plugin (0 leaves kube-scheduler's adaptive share),
// and mode extender keeps the adaptive share whatever it says.
func TestPluginPercentageOfNodesToScore(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		sets []string
		want any // the profile's percentageOfNodesToScore, nil for none
	}{
		{nil, float64(10)},
		{[]string{"scheduler.customScheduler.pluginPercentageOfNodesToScore=0"}, float64(0)},
		{[]string{"scheduler.customScheduler.pluginPercentageOfNodesToScore=50"}, float64(50)},
		{[]string{extenderMode, "scheduler.customScheduler.pluginPercentageOfNodesToScore=50"}, nil},
	} {
		m := render(t, append([]string{"scheduler.enabled=true", "npd.enabled=false"}, tc.sets...)...)
		profiles := myConfig(t, m, "kube-system")["profiles"].([]any)
		got := profiles[0].(map[string]any)["percentageOfNodesToScore"]
		if got != tc.want {
			t.Errorf("%v: percentageOfNodesToScore = %v, want %v", tc.sets, got, tc.want)
		}
	}
}

// TestPluginCandidateNodes: customScheduler.pluginCandidateNodes is NeuronTopology's
// args.candidateNodes in mode plugin (0 turns narrowing off); mode extender has no plugin args.
func TestPluginCandidateNodes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		sets []string
		want any // args.candidateNodes, nil for no NeuronTopology args
	}{
		{nil, float64(10)},
		{[]string{"scheduler.customScheduler.pluginCandidateNodes=0"}, float64(0)},
		{[]string{"scheduler.customScheduler.pluginCandidateNodes=25"}, float64(25)},
		{[]string{extenderMode, "scheduler.customScheduler.pluginCandidateNodes=25"}, nil},
	} {
		m := render(t, append([]string{"scheduler.enabled=true", "npd.enabled=false"}, tc.sets...)...)
		profile := myConfig(t, m, "kube-system")["profiles"].([]any)[0].(map[string]any)
		var got any
		if pcs, ok := profile["pluginConfig"].([]any); ok {
			for _, pc := range pcs {
				if pc := pc.(map[string]any); pc["name"] == "NeuronTopology" {
					got = pc["args"].(map[string]any)["candidateNodes"]
				}
			}
		}
		if got != tc.want {
			t.Errorf("%v: candidateNodes = %v, want %v", tc.sets, got, tc.want)
		}
	}
}

// TestSchedulerPluginProfileIsTheLabs: the chart's profile is exactly the one
// lab.PluginSchedulerConfig gives neuron-kube-scheduler in the lab and the e2e tests, for both
// policies, so that the two cannot drift; the chart adds leader election, on the Lease of mode
// extender.
func TestSchedulerPluginProfileIsTheLabs(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{"best-fit", "first-fit"} {
		t.Run(policy, func(t *testing.T) {
			t.Parallel()
			m := render(t, "scheduler.enabled=true", pluginMode, "scheduler.policy="+policy, "scheduler.namespace=neuron")
			got := myConfig(t, m, "neuron")
			var want map[string]any
			if err := yaml.Unmarshal(lab.PluginSchedulerConfig(policy), &want); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(slices.Sorted(maps.Keys(want)), []string{"apiVersion", "kind", "profiles"}) {
				t.Fatalf("lab.PluginSchedulerConfig has keys %v: the test compares apiVersion, kind and profiles", slices.Sorted(maps.Keys(want)))
			}
			for _, k := range []string{"apiVersion", "kind", "profiles"} {
				if !reflect.DeepEqual(got[k], want[k]) {
					t.Errorf("%s =\n  %v\nwant lab.PluginSchedulerConfig(%q)'s\n  %v", k, got[k], policy, want[k])
				}
			}
			wantLeader := map[string]any{"leaderElect": true, "resourceNamespace": "neuron", "resourceName": "my-scheduler"}
			if !reflect.DeepEqual(got["leaderElection"], wantLeader) {
				t.Errorf("leaderElection = %v, want %v", got["leaderElection"], wantLeader)
			}
			if extra := slices.DeleteFunc(slices.Sorted(maps.Keys(got)), func(k string) bool {
				return slices.Contains([]string{"apiVersion", "kind", "profiles", "leaderElection"}, k)
			}); len(extra) != 0 {
				t.Errorf("my-scheduler-config.yaml has %v besides the lab's profile and leader election", extra)
			}
		})
	}
	// The same Lease in mode extender: a switch never has two leaders.
	ext := myConfig(t, render(t, "scheduler.enabled=true", "scheduler.namespace=neuron"), "neuron")
	if le := ext["leaderElection"].(map[string]any); le["resourceName"] != "my-scheduler" || le["resourceNamespace"] != "neuron" || le["leaderElect"] != true {
		t.Errorf("mode extender leaderElection = %v, want the Lease neuron/my-scheduler", le)
	}
}

// TestSchedulerPluginValues: replicas (with their PodDisruptionBudget), the plugin's image from
// image.registry and image.tag or its own pluginImage values; customScheduler.image, the
// kube-scheduler of mode extender, is not used.
func TestSchedulerPluginValues(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		sets      []string
		wantImage string
		wantPull  corev1.PullPolicy
	}{
		{"registry and tag", []string{"image.registry=registry.example.com/ml", "image.tag=v9", "image.pullPolicy=Always"},
			"registry.example.com/ml/neuron-kube-scheduler:v9", corev1.PullAlways},
		{"its own repository, tag and pull policy; kube-scheduler's image ignored", []string{"scheduler.customScheduler.pluginImage.repository=mirror.example.com/nks",
			"scheduler.customScheduler.pluginImage.tag=v2", "scheduler.customScheduler.pluginImage.pullPolicy=Never",
			"scheduler.customScheduler.image.repository=registry.k8s.io/kube-scheduler", "scheduler.customScheduler.image.tag=v1.34.2"},
			"mirror.example.com/nks:v2", corev1.PullNever},
		{"local images", []string{"image.localImages=true", "image.registry="}, "neuron-kube-scheduler:0.1.0", corev1.PullIfNotPresent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := render(t, append([]string{"scheduler.enabled=true", pluginMode, "scheduler.customScheduler.replicas=3"}, tc.sets...)...)
			d := get[appsv1.Deployment](t, m, "Deployment", "kube-system", "my-scheduler")
			if got := ptr.Deref(d.Spec.Replicas, -1); got != 3 {
				t.Errorf("replicas = %d, want 3", got)
			}
			get[policyv1.PodDisruptionBudget](t, m, "PodDisruptionBudget", "kube-system", "my-scheduler")
			c := d.Spec.Template.Spec.Containers[0]
			if c.Image != tc.wantImage || c.ImagePullPolicy != tc.wantPull {
				t.Errorf("image %q pull %q, want %q %q", c.Image, c.ImagePullPolicy, tc.wantImage, tc.wantPull)
			}
		})
	}
}

func TestSchedulerModeSchema(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		set  string
		want string
	}{
		{"scheduler.customScheduler.mode=framework", "value must be one of 'extender', 'plugin'"},
		{"scheduler.customScheduler.mode=", "value must be one of 'extender', 'plugin'"},
		{"scheduler.customScheduler.pluginImage.repository=", "/scheduler/customScheduler/pluginImage/repository"},
		{"scheduler.customScheduler.pluginImage.digest=sha256:0", "additional properties 'digest' not allowed"},
		{"scheduler.tls.generate=maybe", "/scheduler/tls/generate"},
	} {
		t.Run(tc.set, func(t *testing.T) {
			t.Parallel()
			out, err := helmTemplate(t, "scheduler.enabled=true", tc.set)
			if err == nil {
				t.Fatalf("rendered, want a schema error:\n%.300s", out)
			}
			if msg := err.Error(); !strings.Contains(msg, "values don't meet the specifications of the schema") || !strings.Contains(msg, tc.want) {
				t.Errorf("error does not mention %q:\n%v", tc.want, err)
			}
		})
	}
}

// TestSchedulerModeWithoutMyScheduler: the mode is my-scheduler's; without my-scheduler the
// extender runs as before (the default-scheduler registration, or the extender alone).
func TestSchedulerModeWithoutMyScheduler(t *testing.T) {
	t.Parallel()
	m := render(t, "scheduler.enabled=true", "npd.enabled=false", pluginMode, "scheduler.customScheduler.enabled=false", "scheduler.defaultScheduler.enabled=true")
	if got, want := m.names(), objects(devicePluginObjects, extenderObjects, pdbObjects, defaultSchedulerObjects); !slices.Equal(got, want) {
		t.Fatalf("rendered objects:\n  got  %q\n  want %q", got, want)
	}
	checkExtender(t, m, "kube-system", 2, true)
}

// TestSchedulerValuesWithoutTheNewKeys: `helm upgrade --reuse-values` of a release older than
// customScheduler.mode, customScheduler.pluginImage and tls.generate renders with that release's
// values, which lack them (null deletes a key, as there); the chart then takes their defaults.
func TestSchedulerValuesWithoutTheNewKeys(t *testing.T) {
	t.Parallel()
	old := []string{"scheduler.enabled=true", "npd.enabled=false", "scheduler.customScheduler.mode=null", "scheduler.customScheduler.pluginImage=null", "scheduler.tls.generate=null"}
	m := render(t, old...)
	if got, want := m.names(), objects(devicePluginObjects, extenderObjects, pdbObjects, networkPolicyObjects, mySchedulerObjects); !slices.Equal(got, want) {
		t.Fatalf("rendered objects:\n  got  %q\n  want %q", got, want)
	}
	checkExtender(t, m, "kube-system", 2, false)
	checkMyScheduler(t, m, "kube-system", false)
	// The plugin's image has its default too.
	m = render(t, append(old, "scheduler.customScheduler.mode=plugin")...)
	checkMyScheduler(t, m, "kube-system", true)
}
