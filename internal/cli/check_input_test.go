package cli

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckFilenames: -f takes directories (with -R their subdirectories), glob patterns, URLs
// and -, as kubectl does.
func TestCheckFilenames(t *testing.T) {
	tree := filepath.Join("testdata", "check", "tree")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/a.yaml" {
			http.NotFound(w, r)
			return
		}
		http.ServeFile(w, r, filepath.Join(tree, "a.yaml"))
	}))
	defer srv.Close()
	for _, tc := range []struct {
		name string
		args []string
		want string // the summary line
	}{
		{"the user's directory", []string{"-f", filepath.Join("..", "..", "examples", "extender")}, "6 Neuron pods checked: 1 error, 0 warnings"},
		{"a directory: its .json, .yaml and .yml files", []string{"-f", tree}, "3 Neuron pods checked: 0 errors, 0 warnings"},
		{"-R: and its subdirectories", []string{"-f", tree, "-R"}, "4 Neuron pods checked: 0 errors, 0 warnings"},
		{"--recursive", []string{"--filename", tree, "--recursive"}, "4 Neuron pods checked: 0 errors, 0 warnings"},
		{"a glob pattern", []string{"-f", filepath.Join(tree, "*.y*ml")}, "2 Neuron pods checked: 0 errors, 0 warnings"},
		{"comma-separated, as kubectl's -f", []string{"-f", filepath.Join(tree, "a.yaml") + "," + filepath.Join(tree, "c.json")}, "2 Neuron pods checked: 0 errors, 0 warnings"},
		{"a URL", []string{"-f", srv.URL + "/a.yaml"}, "1 Neuron pod checked: 0 errors, 0 warnings"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := run(t, append([]string{"check"}, tc.args...)...)
			if !strings.HasSuffix(stdout, tc.want+"\n") || code == ExitUsage {
				t.Errorf("exit %d, stdout:\n%s\nstderr: %s\nwant the summary %q", code, stdout, stderr, tc.want)
			}
		})
	}
}

func TestCheckFilenameErrors(t *testing.T) {
	empty := t.TempDir()
	if err := os.Mkdir(filepath.Join(empty, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"missing", []string{"-f", "testdata/nope.yaml"}, "-f testdata/nope.yaml: the path does not exist"},
		{"a glob that matches nothing", []string{"-f", "testdata/*.nope"}, "-f testdata/*.nope: the path does not exist"},
		{"a directory without manifests", []string{"-f", empty}, "the directory has no file ending in .json, .yaml, .yml (-R reads its subdirectories too)"},
		{"a file named explicitly is read whatever its extension", []string{"-f", "testdata/check/tree/notes.txt"}, "notes.txt: document 1"},
		{"stdin twice", []string{"-f", "-", "-f", "-"}, "-f - is given twice"},
		{"a URL that is not there", []string{"-f", srv.URL + "/x.yaml"}, "the server answered 404 Not Found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := run(t, append([]string{"check"}, tc.args...)...)
			if code != ExitUsage || stdout != "" || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit %d with %q", code, stdout, stderr, ExitUsage, tc.want)
			}
		})
	}
}

func TestCheckStdin(t *testing.T) {
	data, err := os.ReadFile("testdata/check/tree/a.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	cmd := NewCommand(&out, &errOut)
	cmd.SetIn(bytes.NewReader(data))
	cmd.SetArgs([]string{"check", "-f", "-", "-f", "testdata/check/tree/b.yml"})
	if err := cmd.Execute(); err != nil || !strings.HasSuffix(out.String(), "2 Neuron pods checked: 0 errors, 0 warnings\n") {
		t.Errorf("%v\n%s%s", err, out.String(), errOut.String())
	}
}

// TestCheckAPIVersions: an apiVersion a Kubernetes 1.34 or later cluster does not serve by
// default is an error that names it and says what to use; the pods of a v1beta1 template are
// still checked.
func TestCheckAPIVersions(t *testing.T) {
	stdout, stderr, code := run(t, "check", "-f", "testdata/check/seed-002-v1beta1.yaml", "-o", "json")
	if code != ExitRefused {
		t.Fatalf("exit %d, want %d\n%s%s", code, ExitRefused, stdout, stderr)
	}
	var got []Finding
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("findings %+v, want the apiVersion only (the template's 4 devices in one group are fine)", got)
	}
	f := got[0]
	for _, want := range []string{"apiVersion resource.k8s.io/v1beta1", "Use apiVersion: resource.k8s.io/v1", "Kubernetes 1.34 and later", "what check assumes"} {
		if !strings.Contains(f.Message, want) {
			t.Errorf("message lacks %q: %s", want, f.Message)
		}
	}
	if f.Object != "ResourceClaimTemplate 1x4-connected-neurons" || f.Severity != SeverityError || f.Reason != ReasonAPIVersionNotServed {
		t.Errorf("finding %+v", f)
	}
	// The pod is checked with the template read in the v1 layout.
	stdout, _, _ = run(t, "check", "-f", "testdata/check/seed-002-v1beta1.yaml")
	if !strings.HasSuffix(stdout, "1 Neuron pod checked: 1 error, 0 warnings\n") {
		t.Errorf("table:\n%s", stdout)
	}

	for _, tc := range []struct{ apiVersion, kind, want string }{
		{"extensions/v1beta1", "Deployment", "Kubernetes 1.16 stopped serving it for workloads. Use apiVersion: apps/v1"},
		{"batch/v1beta1", "CronJob", "Kubernetes 1.25 stopped serving it. Use apiVersion: batch/v1"},
		{"resource.k8s.io/v1beta2", "ResourceClaim", "Use apiVersion: resource.k8s.io/v1"},
		{"", "Pod", "the Pod has no apiVersion, and kubectl apply refuses it: add apiVersion: v1"},
	} {
		if msg := apiVersionProblem(tc.apiVersion, tc.kind); !strings.Contains(msg, tc.want) {
			t.Errorf("%s %s: %q, want %q", tc.apiVersion, tc.kind, msg, tc.want)
		}
	}
	for _, ok := range [][2]string{{"apps/v1", "Deployment"}, {"resource.k8s.io/v1", "ResourceClaimTemplate"}, {"v1", "Service"}, {"example.com/v1", "Widget"}} {
		if msg := apiVersionProblem(ok[0], ok[1]); msg != "" {
			t.Errorf("%v: %q, want none", ok, msg)
		}
	}
}

func TestCheckHelpSaysWhatItCannotKnow(t *testing.T) {
	stdout, _, code := run(t, "check", "--help")
	if code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{
		"What check cannot know offline",
		"Kubernetes 1.34 or later",
		"neuronDriverVersion and draDriverVersion",
		"free capacity",
		"admission webhooks",
		"-R, --recursive",
		"-f, --filename strings",
		"jsonpath=TEMPLATE",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("check --help lacks %q:\n%s", want, stdout)
		}
	}
}
