//go:build e2e

package scheduler

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/kube-neuron/kube-neuron/internal/lab"
	"github.com/kube-neuron/kube-neuron/test/e2e/framework"
)

// pluginBinary is the path of neuron-kube-scheduler as hack/build-scheduler.sh builds it
// (without the race detector: the bench measures speed), built or found in its cache.
func pluginBinary() (string, error) {
	root, err := framework.RepoRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.Command(filepath.Join(root, "hack", "build-scheduler.sh"))
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "RACE=0")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("building neuron-kube-scheduler (hack/build-scheduler.sh): %w", err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "neuron-kube-scheduler"), nil
}

// pluginConfig is the configuration of the plugin scheduler of the kind called name: my-scheduler's
// (lab.PluginSchedulerConfig, best-fit) under the run's scheduler name; for plugin-adaptive
// without its percentageOfNodesToScore, so that the scheduler checks as many nodes per pod as
// plain; for plugin-sampled with NeuronTopology's candidateNodes 0 (no narrowing).
func pluginConfig(name, kind string) ([]byte, error) {
	return editConfig(lab.PluginSchedulerConfig("best-fit"), name, func(_, profile map[string]any) {
		switch kind {
		case kindPluginAdaptive:
			delete(profile, "percentageOfNodesToScore")
		case kindPluginSampled:
			for _, pc := range profile["pluginConfig"].([]any) {
				if pc := pc.(map[string]any); pc["name"] == "NeuronTopology" {
					pc["args"].(map[string]any)["candidateNodes"] = 0
				}
			}
		}
	})
}
