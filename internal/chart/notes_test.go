package chart

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// renderNotes renders templates/NOTES.txt, which `helm template` leaves out: it copies the chart,
// puts NOTES.txt beside Chart.yaml and renders it through tpl in a ConfigMap of its own.
func renderNotes(t *testing.T, sets ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "kube-neuron")
	if err := os.CopyFS(dir, os.DirFS(chartDir)); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "templates", "NOTES.txt"), filepath.Join(dir, "notes-under-test.txt")); err != nil {
		t.Fatal(err)
	}
	const tmpl = `apiVersion: v1
kind: ConfigMap
metadata:
  name: notes
data:
  notes: {{ tpl (.Files.Get "notes-under-test.txt") . | quote }}
`
	if err := os.WriteFile(filepath.Join(dir, "templates", "notes-under-test.yaml"), []byte(tmpl), fs.FileMode(0o644)); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"template", release, dir, "--namespace", releaseNS, "--show-only", "templates/notes-under-test.yaml"}, setArgs(sets)...)
	out, err := runHelm(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	m, err := decode(out)
	if err != nil {
		t.Fatal(err)
	}
	return get[corev1.ConfigMap](t, m, "ConfigMap", "", "notes").Data["notes"]
}

func TestNotes(t *testing.T) {
	t.Parallel()
	const (
		checkDS    = "kubectl get ds neuron-device-plugin -n kube-system"
		neuronCols = `kubectl get nodes "-o=custom-columns=NAME:.metadata.name,NeuronDevice:.status.allocatable.aws\.amazon\.com/neuron"`
		coreCols   = `kubectl get nodes "-o=custom-columns=NAME:.metadata.name,NeuronCore:.status.allocatable.aws\.amazon\.com/neuroncore"`
		checkNPD   = "kubectl get ds node-problem-detector -n neuron-healthcheck-system"
		checkDC    = "kubectl get deviceclass neuron.aws.com"
		extender   = "kubectl get deploy,svc k8s-neuron-scheduler -n kube-system"
	)
	for _, tc := range []struct {
		name      string
		sets      []string
		want, not []string
	}{
		{"defaults", nil, []string{checkDS, neuronCols, coreCols, checkNPD}, []string{checkDC, extender}},
		{"device plugin only", []string{"npd.enabled=false"}, []string{checkDS, neuronCols, coreCols}, []string{checkNPD, checkDC}},
		{"scheduler", []string{"scheduler.enabled=true", extenderMode, "npd.enabled=false"}, []string{checkDS, extender}, []string{checkNPD}},
		{"DRA", []string{"devicePlugin.enabled=false", "npd.enabled=false", "draDriver.enabled=true"}, []string{checkDC}, []string{checkDS, checkNPD}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			notes := renderNotes(t, tc.sets...)
			for _, s := range tc.want {
				if !strings.Contains(notes, s) {
					t.Errorf("NOTES.txt lacks %q:\n%s", s, notes)
				}
			}
			for _, s := range tc.not {
				if strings.Contains(notes, s) {
					t.Errorf("NOTES.txt has %q:\n%s", s, notes)
				}
			}
		})
	}
}
