package framework

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kube-neuron/kube-neuron/internal/lab"
)

// Chart is the chart's directory, relative to the repository root.
const Chart = "deployments/helm/kube-neuron"

var helmOnce = sync.OnceValues(func() (string, error) { return builtBy("KUBE_NEURON_HELM", "helm") })

// builtBy returns $env when it is set, else the last line hack/<dir>/build.sh prints (the path of
// what it built, or found built before).
func builtBy(env, dir string) (string, error) {
	if p := os.Getenv(env); p != "" {
		return p, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	var stderr bytes.Buffer
	cmd := exec.Command(filepath.Join(root, "hack", dir, "build.sh"))
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("hack/%s/build.sh: %w\n%s", dir, err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1], nil
}

// HelmPath returns the pinned helm binary ($KUBE_NEURON_HELM, or the one hack/helm/build.sh
// builds).
func HelmPath() (string, error) { return helmOnce() }

// HelmTemplate runs `helm template <release> <chart> --namespace <ns> --set ...` with the pinned
// helm ($KUBE_NEURON_HELM, or the one hack/helm/build.sh builds) and returns its output, or
// helm's error message. A set that starts with -- is passed as a flag of its own, e.g.
// --set-literal=key=<a value with newlines and commas>, which --set would split.
func HelmTemplate(t testing.TB, release, ns string, sets ...string) (string, error) {
	t.Helper()
	helm, err := helmOnce()
	if err != nil {
		t.Fatal(err)
	}
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	// The lab's images are in its own registry under their bare names (make images).
	args := []string{"template", release, filepath.Join(root, Chart), "--namespace", ns, "--set", "image.localImages=true"}
	for _, s := range sets {
		if strings.HasPrefix(s, "--") {
			args = append(args, s)
			continue
		}
		args = append(args, "--set", s)
	}
	home := t.TempDir()
	cmd := exec.Command(helm, args...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(home, "cache"), "HELM_CONFIG_HOME="+filepath.Join(home, "config"), "HELM_DATA_HOME="+filepath.Join(home, "data"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// RenderChart renders the chart (HelmTemplate) and decodes its objects; helm's failure fails the
// test.
func RenderChart(t testing.TB, release, ns string, sets ...string) []*unstructured.Unstructured {
	t.Helper()
	out, err := HelmTemplate(t, release, ns, sets...)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "chart.yaml")
	if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	objs, err := lab.ReadObjects(path)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}
