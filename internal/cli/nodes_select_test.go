package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/kube-neuron/kube-neuron/internal/labels"
)

func TestNodesNamesAndSelector(t *testing.T) {
	objs := append(cluster(), neuronNode("trn1-b", "trn1.32xlarge", labels.AllocationModeDevicePlugin, 16, 32))
	for _, tc := range []struct {
		name string
		no   nodesOptions
		want string
	}{
		{"a name", nodesOptions{names: []string{"trn2-a"}}, "node/trn2-a\n"},
		{"names in the order given, once each", nodesOptions{names: []string{"trn2-a", "trn1-a", "trn2-a"}}, "node/trn2-a\nnode/trn1-a\n"},
		{"--node", nodesOptions{node: "trn1-b"}, "node/trn1-b\n"},
		{"a selector", nodesOptions{selector: labels.AllocationMode + "=" + labels.AllocationModeDevicePlugin}, "node/trn1-a\nnode/trn1-b\n"},
		{"a set selector", nodesOptions{selector: labels.InstanceType + " in (trn2.48xlarge)"}, "node/trn2-a\n"},
		{"every Neuron node", nodesOptions{}, "node/trn1-a\nnode/trn1-b\nnode/trn2-a\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.no.output = outName
			stdout, stderr, err := runNodesOn(t, objs, tc.no)
			if err != nil || stderr != "" || stdout != tc.want {
				t.Errorf("err %v, stderr %q, stdout %q, want %q", err, stderr, stdout, tc.want)
			}
		})
	}
	_, _, err := runNodesOn(t, objs, nodesOptions{selector: "team=none"})
	if exitCode(err) != ExitNoNodes || !strings.Contains(err.Error(), "no Neuron node matches -l team=none") {
		t.Errorf("a selector that matches nothing: %v", err)
	}
	_, _, err = runNodesOn(t, objs, nodesOptions{names: []string{"trn1-a", "missing"}})
	if exitCode(err) != ExitNoNodes || !strings.Contains(err.Error(), `node "missing" not found`) {
		t.Errorf("a missing name: %v", err)
	}
}

func TestNodesOutputFormats(t *testing.T) {
	stdout, _, err := runNodesOn(t, cluster(), nodesOptions{output: "yaml"})
	if err != nil {
		t.Fatal(err)
	}
	var reports []NodeReport
	if err := yaml.UnmarshalStrict([]byte(stdout), &reports); err != nil || len(reports) != 2 || reports[0].Name != "trn1-a" || len(reports[0].Holders) != 2 {
		t.Errorf("-o yaml: %v %+v\n%s", err, reports, stdout)
	}
	for _, tc := range []struct{ template, want string }{
		{`{[*].name}`, "trn1-a trn2-a"},
		{`{range [*]}{.name}{"\t"}{.devices.free}{"\n"}{end}`, "trn1-a\t[5,6,7,8,9,10,11,12,13,14,15]\ntrn2-a\t[0,1,2,3,8,9,10,11,12,13,14,15]\n"},
		{`{[0].holders[0].pod}`, "train"},
		{`{[1].lnc}`, "2"},
	} {
		stdout, _, err := runNodesOn(t, cluster(), nodesOptions{output: "jsonpath=" + tc.template})
		if err != nil || stdout != tc.want {
			t.Errorf("-o jsonpath=%s: %v, %q, want %q", tc.template, err, stdout, tc.want)
		}
	}
}

func TestOutputFlag(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  string // the error, "" for none
	}{
		{"table", ""}, {"wide", ""}, {"json", ""}, {"yaml", ""}, {"name", ""}, {"jsonpath={.a}", ""},
		{"jsonpath", "-o jsonpath needs a template"},
		{"jsonpath=", "-o jsonpath= has an empty template"},
		{"jsonpath={.a", "-o jsonpath={.a: unclosed action"},
		{"json=x", `output format "json=x" is not supported: use one of [table wide json yaml name jsonpath=TEMPLATE]`},
		{"go-template={{.}}", `output format "go-template={{.}}" is not supported`},
	} {
		_, err := parseOutput(tc.value, commandFormats["nodes"]...)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || exitCode(err) != ExitUsage) {
			t.Errorf("-o %s: %v, want %q", tc.value, err, tc.want)
		}
	}
}

// TestClientFlags: nodes and cleanup take kubectl's client flags from k8s.io/cli-runtime.
func TestClientFlags(t *testing.T) {
	for _, command := range []string{"nodes", "cleanup"} {
		stdout, _, code := run(t, command, "--help")
		if code != ExitOK {
			t.Fatalf("%s --help: exit %d", command, code)
		}
		for _, flag := range []string{"--kubeconfig", "--context", "--cluster", "--user", "-s, --server", "--token", "--as ", "--as-group", "--request-timeout",
			"--certificate-authority", "--insecure-skip-tls-verify", "--tls-server-name"} {
			if !strings.Contains(stdout, flag) {
				t.Errorf("%s --help lacks %s", command, flag)
			}
		}
	}
	ns := NewCommand(nil, nil)
	cleanup, _, _ := ns.Find([]string{"cleanup"})
	if f := cleanup.Flags().Lookup("namespace"); f == nil || f.DefValue != "kube-system" || f.Shorthand != "n" {
		t.Errorf("cleanup -n: %+v, want the default kube-system", f)
	}
	nodes, _, _ := ns.Find([]string{"nodes"})
	if nodes.Flags().Lookup("namespace") != nil {
		t.Error("nodes lists cluster-scoped nodes and pods of every namespace: it has no -n")
	}

	dir := t.TempDir()
	t.Setenv("HOME", dir)
	t.Setenv("KUBECONFIG", filepath.Join(dir, "none"))
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	unreachable := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(unreachable, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: ctx, context: {cluster: c, user: u}}]
current-context: ctx
`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		args     []string
		wantCode int
		want     string
	}{
		{"no kubeconfig", []string{"nodes"}, ExitCluster, "no kubeconfig found"},
		{"--server and --token without a kubeconfig", []string{"nodes", "--server", "https://127.0.0.1:2", "--token", "t", "--as", "someone"}, ExitCluster, "cannot list nodes: Get \"https://127.0.0.1:2/api/v1/nodes"},
		{"--server overrides the kubeconfig's", []string{"nodes", "--kubeconfig", unreachable, "-s", "https://127.0.0.1:3"}, ExitCluster, "https://127.0.0.1:3/api/v1/nodes"},
		{"--request-timeout", []string{"nodes", "--kubeconfig", unreachable, "--request-timeout", "5s", "trn1-a"}, ExitCluster, "timeout=5s"},
		{"bad --request-timeout", []string{"nodes", "--kubeconfig", unreachable, "--request-timeout", "soon"}, ExitUsage, `--request-timeout "soon": write a duration`},
		{"cleanup: --context", []string{"cleanup", "--kubeconfig", unreachable, "--context", "nope"}, ExitUsage, `--context "nope": the kubeconfig has no such context`},
		{"cleanup: -n", []string{"cleanup", "--kubeconfig", unreachable, "-n", "neuron-system"}, ExitCluster, "127.0.0.1:1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := run(t, tc.args...)
			if code != tc.wantCode || stdout != "" || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d (want %d), stdout %q, stderr %q (want %q)", code, tc.wantCode, stdout, stderr, tc.want)
			}
		})
	}
}
