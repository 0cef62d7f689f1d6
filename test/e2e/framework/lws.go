package framework

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

var lwsOnce = sync.OnceValues(func() (string, error) {
	if d := os.Getenv("KUBE_NEURON_LWS_DIR"); d != "" {
		return d, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	var stderr bytes.Buffer
	cmd := exec.Command(filepath.Join(root, "hack", "lws", "build.sh"))
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("hack/lws/build.sh: %w\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1], nil
})

// LWSDir returns the directory of the LeaderWorkerSet controller and its manifests
// ($KUBE_NEURON_LWS_DIR, or what hack/lws/build.sh prints; it builds them the first time).
// MainOptions calls it for a lab with Options.LWS and no LWSDir.
func LWSDir() (string, error) { return lwsOnce() }
