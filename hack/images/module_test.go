package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// writeFiles writes files (path -> content) under dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		path := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestComponentOfAnotherModule builds a component of the product module and one of a module in
// a subdirectory (as neuron-kube-scheduler's scheduler/) from a small repository, twice with
// different build caches: each binary comes from its own module, the version flags come from
// that module's k8s.io/kubernetes requirement, and the builds are byte-identical.
func TestComponentOfAnotherModule(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	writeFiles(t, repo, map[string]string{
		"go.mod":                "module example.com/product\n\ngo 1.24\n",
		"cmd/one/main.go":       "package main\n\nfunc main() { println(\"one\") }\n",
		"sched/go.mod":          "module example.com/product/sched\n\ngo 1.24\n",
		"sched/cmd/two/main.go": "package main\n\nfunc main() { println(\"two\") }\n",
	})
	cs := []component{{name: "one", user: rootUser}, {name: "two", user: nonrootUser, module: "sched"}}
	p := v1.Platform{OS: "linux", Architecture: "arm64"}
	var bins [2]map[string][]byte
	for i := range bins {
		dir := t.TempDir()
		if err := goBuild(t.Context(), repo, dir, p, cs, []string{"GOCACHE=" + t.TempDir()}, io.Discard); err != nil {
			t.Fatal(err)
		}
		bins[i] = map[string][]byte{}
		for _, c := range cs {
			bins[i][c.name] = readFile(t, filepath.Join(dir, c.name))
		}
	}
	for _, c := range cs {
		if !bytes.Equal(bins[0][c.name], bins[1][c.name]) {
			t.Errorf("%s: two builds differ", c.name)
		}
	}
	if !bytes.Contains(bins[0]["two"], []byte("example.com/product/sched/cmd/two")) || bytes.Contains(bins[0]["one"], []byte("example.com/product/sched")) {
		t.Errorf("binary two is not built from the module in sched/, or one is")
	}

	// The version flags: from the requirement of k8s.io/kubernetes in the module's go.mod (only
	// read: the module above requires nothing, so that its build downloads nothing).
	writeFiles(t, repo, map[string]string{"sched/go.mod": "module example.com/product/sched\n\ngo 1.24\n\nrequire (\n\tk8s.io/api v0.36.3\n\tk8s.io/kubernetes v1.36.3\n)\n"})
	c := component{name: "two", module: "sched", kubeVersion: true}
	if err := c.resolveVersionFlags(repo); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"-X k8s.io/component-base/version.gitVersion=v1.36.3", "-X k8s.io/component-base/version.gitMinor=36",
		"-X k8s.io/client-go/pkg/version.gitMajor=1", "-X k8s.io/client-go/pkg/version.gitTreeState=clean"} {
		if !strings.Contains(c.ldflags(), want) {
			t.Errorf("ldflags %q lack %q", c.ldflags(), want)
		}
	}
	if got := c.buildCommand(p); !strings.HasPrefix(got, "cd sched && CGO_ENABLED=0 GOOS=linux GOARCH=arm64 go build -trimpath -buildvcs=false -ldflags='-s -w -buildid= -X ") || !strings.HasSuffix(got, " ./cmd/two") {
		t.Errorf("build command %q", got)
	}
	writeFiles(t, repo, map[string]string{"sched/go.mod": "module example.com/product/sched\n\ngo 1.24\n"})
	if err := (&component{name: "two", module: "sched", kubeVersion: true}).resolveVersionFlags(repo); err == nil || !strings.Contains(err.Error(), "requires no k8s.io/kubernetes") {
		t.Errorf("a module without k8s.io/kubernetes: %v, want an error saying so", err)
	}
}
