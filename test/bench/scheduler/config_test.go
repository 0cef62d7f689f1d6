//go:build e2e

package scheduler

import (
	"slices"
	"testing"

	"sigs.k8s.io/yaml"
)

// The plugin runs under the run's scheduler name with my-scheduler's plugins and arguments.
func TestPluginConfig(t *testing.T) {
	data, err := pluginConfig("bench-plugin-0-3", kindPlugin)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Profiles []struct {
			SchedulerName string `json:"schedulerName"`
			Plugins       struct {
				MultiPoint struct {
					Enabled []struct {
						Name   string `json:"name"`
						Weight int    `json:"weight"`
					} `json:"enabled"`
				} `json:"multiPoint"`
				Bind struct {
					Enabled []struct {
						Name string `json:"name"`
					} `json:"enabled"`
				} `json:"bind"`
			} `json:"plugins"`
			PluginConfig []struct {
				Name string         `json:"name"`
				Args map[string]any `json:"args"`
			} `json:"pluginConfig"`
		} `json:"profiles"`
	}
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	if len(cfg.Profiles) != 1 {
		t.Fatalf("%d profiles, want 1:\n%s", len(cfg.Profiles), data)
	}
	p := cfg.Profiles[0]
	if p.SchedulerName != "bench-plugin-0-3" {
		t.Errorf("schedulerName %q, want bench-plugin-0-3", p.SchedulerName)
	}
	if len(p.Plugins.MultiPoint.Enabled) != 1 || p.Plugins.MultiPoint.Enabled[0].Name != "NeuronTopology" || p.Plugins.MultiPoint.Enabled[0].Weight != 10 {
		t.Errorf("multiPoint %+v, want NeuronTopology with weight 10", p.Plugins.MultiPoint.Enabled)
	}
	var bind []string
	for _, b := range p.Plugins.Bind.Enabled {
		bind = append(bind, b.Name)
	}
	if !slices.Equal(bind, []string{"NeuronTopology", "DefaultBinder"}) {
		t.Errorf("bind %v, want [NeuronTopology DefaultBinder]", bind)
	}
	if len(p.PluginConfig) != 1 || p.PluginConfig[0].Name != "NeuronTopology" || p.PluginConfig[0].Args["policy"] != "best-fit" || p.PluginConfig[0].Args["candidateNodes"] != float64(10) {
		t.Errorf("pluginConfig %+v, want NeuronTopology with policy best-fit and candidateNodes 10", p.PluginConfig)
	}
	if got := percentageOfNodesToScore(t, data); got == nil || *got != 10 {
		t.Errorf("percentageOfNodesToScore %v, want my-scheduler's 10", got)
	}
	// plugin-adaptive: the same profile with kube-scheduler's adaptive share, plain's.
	adaptive, err := pluginConfig("bench-plugin-adaptive-0-1", kindPluginAdaptive)
	if err != nil {
		t.Fatal(err)
	}
	if got := percentageOfNodesToScore(t, adaptive); got != nil {
		t.Errorf("plugin-adaptive: percentageOfNodesToScore %d, want none", *got)
	}
	// plugin-sampled: the same profile without narrowing.
	sampled, err := pluginConfig("bench-plugin-sampled-0-1", kindPluginSampled)
	if err != nil {
		t.Fatal(err)
	}
	var sc struct {
		Profiles []struct {
			PluginConfig []struct {
				Args map[string]any `json:"args"`
			} `json:"pluginConfig"`
		} `json:"profiles"`
	}
	if err := yaml.Unmarshal(sampled, &sc); err != nil {
		t.Fatal(err)
	}
	if args := sc.Profiles[0].PluginConfig[0].Args; args["candidateNodes"] != float64(0) || args["policy"] != "best-fit" {
		t.Errorf("plugin-sampled: args %v, want policy best-fit and candidateNodes 0", args)
	}
	if got := percentageOfNodesToScore(t, sampled); got == nil || *got != 10 {
		t.Errorf("plugin-sampled: percentageOfNodesToScore %v, want my-scheduler's 10", got)
	}
}

// percentageOfNodesToScore is the first profile's, nil when it has none.
func percentageOfNodesToScore(t *testing.T, data []byte) *int {
	t.Helper()
	var cfg struct {
		Profiles []struct {
			PercentageOfNodesToScore *int `json:"percentageOfNodesToScore"`
		} `json:"profiles"`
	}
	if err := yaml.Unmarshal(data, &cfg); err != nil || len(cfg.Profiles) == 0 {
		t.Fatalf("%v, %d profiles:\n%s", err, len(cfg.Profiles), data)
	}
	return cfg.Profiles[0].PercentageOfNodesToScore
}

// Over as many iterations as schedulers, each scheduler takes every pair of mirrored positions
// once.
func TestRunOrder(t *testing.T) {
	for _, tc := range []struct {
		kinds []string
		want  [][]string
	}{
		{[]string{"a", "b"}, [][]string{{"a", "b", "b", "a"}, {"b", "a", "a", "b"}, {"a", "b", "b", "a"}}},
		{[]string{"a", "b", "c"}, [][]string{{"a", "b", "c", "c", "b", "a"}, {"b", "c", "a", "a", "c", "b"}, {"c", "a", "b", "b", "a", "c"}}},
		{[]string{"a"}, [][]string{{"a", "a"}, {"a", "a"}}},
	} {
		before := slices.Clone(tc.kinds)
		for i, want := range tc.want {
			if got := runOrder(tc.kinds, i); !slices.Equal(got, want) {
				t.Errorf("runOrder(%v, %d) = %v, want %v", tc.kinds, i, got, want)
			}
		}
		if !slices.Equal(tc.kinds, before) {
			t.Errorf("runOrder changed its input %v", tc.kinds)
		}
	}
}

// A node is part-used while it holds fewer one-core pods than it has cores.
func TestPartUsed(t *testing.T) {
	cores := map[string]int64{"inf2-0": 24, "inf2-1": 24, "trn1-0": 32}
	pods := map[string]int64{"inf2-0": 24, "inf2-1": 2, "trn1-0": 31}
	if got := partUsed(pods, cores); got != 2 {
		t.Errorf("partUsed = %d, want 2 (inf2-1 and trn1-0)", got)
	}
	if got := partUsed(map[string]int64{"inf2-0": 24}, cores); got != 0 {
		t.Errorf("partUsed of a full node = %d, want 0", got)
	}
}
