package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kube-neuron/kube-neuron/internal/lab"
)

// fakeServeEnv makes the test binary play a lab's own process (`neuron-lab serve`) until SIGTERM.
const fakeServeEnv = "KUBE_NEURON_LAB_TEST_FAKE_SERVE"

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "serve" && os.Getenv(fakeServeEnv) != "1" {
		// A test reached `up`, which runs this binary as the lab: fail at once.
		fmt.Fprintln(os.Stderr, "the test binary does not run labs")
		os.Exit(2)
	}
	if os.Getenv(fakeServeEnv) == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		select {
		case <-ctx.Done():
		case <-time.After(time.Minute):
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// neuronLab runs neuron-lab in the test's process and returns its exit code, stdout and stderr.
func neuronLab(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr strings.Builder
	code := run(context.Background(), args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestComponentsDefaultToAllWithTheAutoscaler(t *testing.T) {
	code, out, _ := neuronLab(t, "up", "--help")
	if want := "--components strings"; code != 0 || !strings.Contains(out, want) {
		t.Fatalf("neuron-lab up --help (exit %d):\n%s\nwant %q", code, out, want)
	}
	if want := "(default [neuron-device-plugin,neuron-dra-driver,neuron-scheduler-extender,neuron-autoscaler])"; !strings.Contains(out, want) {
		t.Errorf("neuron-lab up --help:\n%s\nwant the default %s", out, want)
	}
}

// TestErrorsArePrintedOnce: a bad fleet file or component name says what is wrong once, on
// stderr, and exits 1.
func TestErrorsArePrintedOnce(t *testing.T) {
	dir := t.TempDir()
	fleet := filepath.Join(dir, "fleet.yaml")
	if err := os.WriteFile(fleet, []byte("nodes: [{name: x, instanceType: trn9.large}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"fleet", []string{"up", "--fleet", fleet}, "error: fleet file " + fleet + `: nodes[0] (x): instance type "trn9.large" is not in the catalog`},
		{"unknown field", []string{"up", "--fleet", writeFile(t, dir, "typo.yaml", "nodes: [{name: x, instanceType: trn1.32xlarge, kubelets: real}]\n")}, `unknown field "kubelets"`},
		{"component", []string{"up", "--components", "neuron-device-plugin,neuron-autoscaller"}, `error: unknown component "neuron-autoscaller": name them as a comma list of`},
		{"missing binary", []string{"up", "--components", "neuron-dra-driver"}, "error: component neuron-dra-driver is not in "},
		{"missing scheduler", []string{"up", "--components", "neuron-kube-scheduler"}, "from the directory hack/build-scheduler.sh prints"},
		{"two schedulers", []string{"up", "--components", "neuron-scheduler-extender,neuron-kube-scheduler"}, "both run my-scheduler"},
		{"argument", []string{"status", "extra"}, `error: unknown command "extra" for "neuron-lab status"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := neuronLab(t, append(tc.args, "--dir", filepath.Join(dir, "lab"), "--bin-dir", dir)...)
			if code != 1 || out != "" {
				t.Errorf("exit %d, stdout %q; want 1 and nothing", code, out)
			}
			if !strings.Contains(errOut, tc.want) || strings.Count(errOut, "\n") != 1 {
				t.Errorf("stderr:\n%s\nwant one line with %q", errOut, tc.want)
			}
		})
	}
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestStatusAndDown: `status` exits 1 without a lab and 0 with one, and shows its nodes,
// components and kubeconfig; `down` says what it stopped, or that nothing ran.
func TestStatusAndDown(t *testing.T) {
	dir := t.TempDir()
	code, out, errOut := neuronLab(t, "status", "--dir", dir)
	if code != 1 || out != "no lab runs in "+dir+": start one with `make lab-up`\n" || errOut != "" {
		t.Errorf("status without a lab: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, errOut = neuronLab(t, "down", "--dir", dir)
	if code != 0 || out != "no lab runs in "+dir+": nothing to stop\n" || errOut != "" {
		t.Errorf("down without a lab: exit %d, stdout %q, stderr %q", code, out, errOut)
	}

	// A lab: its own process, its ready file and an API server that knows one node.
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/api/v1/nodes":
			fmt.Fprint(w, `{"kind":"NodeList","apiVersion":"v1","items":[{"metadata":{"name":"trn1-a","labels":{"node.kubernetes.io/instance-type":"trn1.32xlarge","kube-neuron.io/allocation-mode":"device-plugin","kube-neuron.io/lab-kubelet":"simulated"}},"status":{"conditions":[{"type":"Ready","status":"True"}]}}]}`)
		case "/api/v1/pods":
			fmt.Fprint(w, `{"kind":"PodList","apiVersion":"v1","items":[]}`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer api.Close()
	kubeconfig := writeFile(t, dir, "kubeconfig", "apiVersion: v1\nkind: Config\nclusters: [{name: lab, cluster: {server: "+api.URL+"}}]\n"+
		"contexts: [{name: lab, context: {cluster: lab, user: admin}}]\ncurrent-context: lab\nusers: [{name: admin, user: {}}]\n")
	ready, _ := json.Marshal(lab.ReadyInfo{Kubeconfig: kubeconfig, Kubectl: filepath.Join(dir, "bin", "kubectl"), StartedIn: "1s",
		Nodes: []string{"trn1-a"}, Components: lab.DefaultComponents()})
	writeFile(t, dir, lab.ReadyFile, string(ready))
	serve := exec.Command(os.Args[0], "serve")
	serve.Env = append(os.Environ(), fakeServeEnv+"=1")
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = serve.Wait(); close(exited) }()
	t.Cleanup(func() { _ = serve.Process.Kill(); <-exited })
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", serve.Process.Pid)); strings.Contains(string(cmdline), "serve") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the fake lab process did not start within 10 s")
		}
	}
	writeFile(t, dir, lab.PIDFile, strconv.Itoa(serve.Process.Pid))

	code, out, errOut = neuronLab(t, "status", "--dir", dir)
	for _, want := range []string{"a lab runs in " + dir, "kubeconfig: " + kubeconfig, "nodes (1):\n  trn1-a  trn1.32xlarge  device-plugin  simulated kubelet  Ready",
		"neuron-autoscaler", "pending pods: none"} {
		if !strings.Contains(out, want) {
			t.Errorf("status:\n%s\nwant %q", out, want)
		}
	}
	if code != 0 || errOut != "" {
		t.Errorf("status of a running lab: exit %d, stderr %q", code, errOut)
	}
	code, out, errOut = neuronLab(t, "down", "--dir", dir)
	if want := fmt.Sprintf("stopped the lab in %s (pid %d): nodes trn1-a", dir, serve.Process.Pid); code != 0 || !strings.HasPrefix(out, want) || errOut != "" {
		t.Errorf("down: exit %d, stdout %q, stderr %q; want %q", code, out, errOut, want)
	}
	if code, _, _ = neuronLab(t, "status", "--dir", dir); code != 1 {
		t.Errorf("status after down: exit %d, want 1", code)
	}
}
