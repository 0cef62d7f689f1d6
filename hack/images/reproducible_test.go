package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// TestBuildIsReproducible builds the images of every component for linux/amd64 and linux/arm64
// from this checkout twice, the second time with an empty Go build cache (so every package and
// the standard library are compiled again), and checks that the two runs write the same bytes.
// It takes minutes (a cold build of everything twice over): `make images-verify` runs it, with
// KUBE_NEURON_IMAGES_VERIFY=1.
func TestBuildIsReproducible(t *testing.T) {
	if os.Getenv("KUBE_NEURON_IMAGES_VERIFY") == "" {
		t.Skip("set KUBE_NEURON_IMAGES_VERIFY=1 (make images-verify): builds everything twice, minutes")
	}
	var runs [2][]result
	for i := range runs {
		o := options{repo: "../.."}
		if err := o.complete("linux/amd64,linux/arm64", nil); err != nil {
			t.Fatal(err)
		}
		o.out = t.TempDir()
		o.log = t.Output()
		if i == 1 {
			o.env = []string{"GOCACHE=" + t.TempDir()}
		}
		rs, err := run(t.Context(), o)
		if err != nil {
			t.Fatalf("run %d: %v", i+1, err)
		}
		for _, r := range rs {
			t.Logf("run %d: %s %s", i+1, r.name, r.digest)
		}
		runs[i] = rs
	}
	if len(runs[0]) != len(components) || len(runs[1]) != len(components) {
		t.Fatalf("%d and %d images, want %d", len(runs[0]), len(runs[1]), len(components))
	}
	for i, a := range runs[0] {
		b := runs[1][i]
		if a.digest != b.digest {
			t.Errorf("%s: %s with the build cache, %s without", a.name, a.digest, b.digest)
			for j := range a.images {
				t.Errorf("  %s: %s, %s", a.images[j].platform, a.images[j].digest, b.images[j].digest)
			}
		}
		if !bytes.Equal(readFile(t, a.path), readFile(t, b.path)) {
			t.Errorf("%s: the archives differ", a.name)
		}
	}
}

// TestChartUsesTheseImages checks that the chart's default repository of each component is the
// image this program builds for it.
func TestChartUsesTheseImages(t *testing.T) {
	t.Parallel()
	values := string(readFile(t, filepath.Join("..", "..", "deployments", "helm", "kube-neuron", "values.yaml")))
	for _, c := range components {
		// image.repository of the component's values (pluginImage.repository for
		// neuron-kube-scheduler, which customScheduler nests deeper).
		if !regexp.MustCompile(`\n +repository: ` + regexp.QuoteMeta(c.name) + `\n`).MatchString(values) {
			t.Errorf("values.yaml has no image repository %s", c.name)
		}
		if _, err := os.Stat(filepath.Join("..", "..", c.module, c.pkgPath(), "main.go")); err != nil {
			t.Errorf("component %s is not a binary of %s: %v", c.name, filepath.Join(c.module, c.pkgPath()), err)
		}
	}
}
