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

// pluginConfig is the configuration of the plugin scheduler called name: my-scheduler's
// (lab.PluginSchedulerConfig, best-fit) under the run's scheduler name; with adaptive, without
// its percentageOfNodesToScore, so that the scheduler checks as many nodes per pod as plain.
func pluginConfig(name string, adaptive bool) ([]byte, error) {
	return editConfig(lab.PluginSchedulerConfig("best-fit"), name, func(_, profile map[string]any) {
		if adaptive {
			delete(profile, "percentageOfNodesToScore")
		}
	})
}
