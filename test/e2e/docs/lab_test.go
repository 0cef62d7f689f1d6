//go:build e2e

// Package docs replays, in a lab, the console blocks of README.md and docs/*.md that show what
// commands print against one (kubectl, make lab-status, kubectl-neuron nodes, the components'
// logs), so that they stay true; internal/cli's TestReadmeExamples replays the offline
// `$ bin/kubectl-neuron ...` lines. Blocks opt in with <!-- replay: lab ... --> (blocks_test.go).
//
// Every block replays in one lab, in order (README.md, then docs/*.md by name, top to bottom):
// a block sees what the blocks before it made. The lab is the one docs/autoscaler.md starts,
// `make lab-up FLEET=empty-fleet.yaml` (no Neuron node until the autoscaler launches one, every
// component, the chart installed with helm), run as make lab-up runs it (`neuron-lab serve`,
// here as a child of the test so that it ends with it) in the directory .lab of a checkout-like
// directory: the blocks' `.lab/...` and `examples/...` paths work there as in a checkout.
// Output and block are compared after the normalisations of blocks_test.go (what varies between
// runs, and nothing else); a block line ending in ` ...` stands for a longer line.
package docs

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kube-neuron/kube-neuron/internal/cli"
	"github.com/kube-neuron/kube-neuron/internal/lab"
	"github.com/kube-neuron/kube-neuron/test/e2e/framework"
)

// checkoutPath is how the blocks write the checkout's directory (the test's is a temporary one).
const checkoutPath = "/home/me/kube-neuron"

// commandTimeout bounds how long a read-only command is run again until its output is what the
// block shows.
const commandTimeout = 60 * time.Second

// TestLabConsoleBlocks replays every opted-in block in one lab; its subtests are named by the
// blocks' file:line.
func TestLabConsoleBlocks(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := readBlocks(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) == 0 {
		t.Fatal("no console block of README.md or docs/*.md is opted in to the lab replay (<!-- replay: lab --> right before its fence)")
	}
	checkLabStatusRecipe(t, root)
	r := startLab(t, root)
	begin := time.Now()
	for _, b := range blocks {
		t.Run(b.String(), func(t *testing.T) { r.replay(t, b) })
	}
	t.Logf("ran %d blocks in %v: %s", len(blocks), time.Since(begin).Round(time.Millisecond), strings.Join(names(blocks), ", "))
}

func names(blocks []block) []string {
	out := make([]string, len(blocks))
	for i, b := range blocks {
		out[i] = b.String()
	}
	return out
}

// checkLabStatusRecipe: the replay runs `make lab-status` as its recipe, neuron-lab status --dir
// .lab (LAB_DIR's default); it fails when the Makefile does something else.
func checkLabStatusRecipe(t *testing.T, root string) {
	data, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	mk := string(data)
	_, recipe, ok := strings.Cut(mk, "\nlab-status:")
	recipe, _, _ = strings.Cut(recipe, "\n\n")
	if !ok || !strings.HasSuffix(recipe, "\t@$(BIN)/neuron-lab status --dir $(LAB_DIR)") || !regexp.MustCompile(`\nLAB_DIR +\?= \.lab\n`).MatchString(mk) {
		t.Fatalf("the Makefile's lab-status is no longer `neuron-lab status --dir $(LAB_DIR)` with LAB_DIR .lab, which the replay runs for `make lab-status`:%s", recipe)
	}
}

// labRunner runs the blocks' commands in the checkout-like directory.
type labRunner struct {
	checkout, neuronLab string
	env                 []string
}

// startLab starts the lab in <checkout>/.lab and stops it when the test ends; on failure its
// directory is kept.
func startLab(t *testing.T, root string) *labRunner {
	binDir, err := framework.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	helm, err := framework.HelmPath()
	if err != nil {
		t.Fatal(err)
	}
	work, err := os.MkdirTemp("", "kube-neuron-docs-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // after the lab has stopped (cleanups run last first)
		if t.Failed() {
			t.Logf("the lab's directory is kept: %s (logs in %s)", filepath.Join(work, "kube-neuron", ".lab"), filepath.Join(work, "kube-neuron", ".lab", "logs"))
			return
		}
		_ = os.RemoveAll(work)
	})
	checkout := filepath.Join(work, "kube-neuron")
	components := filepath.Join(work, "bin")
	fleet := filepath.Join(work, "empty-fleet.yaml")
	if err := os.MkdirAll(filepath.Join(work, "home"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(checkout, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"examples", "deployments"} {
		if err := os.Symlink(filepath.Join(root, d), filepath.Join(checkout, d)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(fleet, []byte("nodes: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	build := time.Now()
	if err := framework.BuildComponents(components, append([]string{"neuron-lab"}, lab.DefaultComponents()...)...); err != nil {
		t.Fatal(err)
	}
	t.Logf("components built with -race in %v", time.Since(build).Round(time.Millisecond))
	r := &labRunner{checkout: checkout, neuronLab: filepath.Join(components, "neuron-lab")}
	dir := filepath.Join(checkout, ".lab")
	begin := time.Now()
	// What make lab-up runs in the background (lab.Up), without Setsid: the lab dies with the test.
	p, err := lab.StartProcess(lab.ProcessOptions{Name: "lab", Path: r.neuronLab, LogPath: filepath.Join(dir, lab.ServeLog), Args: []string{
		"serve", "--dir", dir, "--bin-dir", binDir, "--fleet", fleet, "--components", strings.Join(lab.DefaultComponents(), ","),
		"--chart", filepath.Join(checkout, framework.Chart), "--helm", helm,
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stop := time.Now()
		if err := p.Stop(time.Minute); err != nil {
			t.Error(err)
		}
		t.Logf("lab stopped in %v", time.Since(stop).Round(time.Millisecond))
	})
	framework.WaitFor(t, t.Context(), 3*time.Minute, "the lab to be ready", func(context.Context) (bool, string, error) {
		select {
		case <-p.Exited():
			return false, "", fmt.Errorf("the lab exited before it was ready: %v\n%s", p.ExitError(), lab.LogTail(filepath.Join(dir, lab.ServeLog), 30))
		default:
		}
		_, err := os.Stat(filepath.Join(dir, lab.ReadyFile))
		return err == nil, "no " + lab.ReadyFile + " yet", nil
	})
	t.Logf("lab ready in %v in %s", time.Since(begin).Round(time.Millisecond), dir)
	// kubectl-neuron runs in this process: relative paths and KUBECONFIG as in the checkout.
	t.Chdir(checkout)
	r.env = []string{
		"PATH=" + filepath.Join(dir, "bin") + string(os.PathListSeparator) + os.Getenv("PATH"),
		"KUBECONFIG=" + filepath.Join(dir, "kubeconfig"),
		"HOME=" + filepath.Join(work, "home"),
	}
	for _, e := range r.env {
		k, v, _ := strings.Cut(e, "=")
		t.Setenv(k, v)
	}
	return r
}

// replay applies the block's files, then runs its commands in order: a read-only one until its
// output is what the block shows (or commandTimeout passes), any other once.
func (r *labRunner) replay(t *testing.T, b block) {
	ctx := t.Context()
	for _, f := range b.apply {
		out, err := r.exec(ctx, []string{".lab/bin/kubectl", "apply", "-f", f}, nil)
		if err != nil {
			t.Fatalf("%s: kubectl apply -f %s: %v\n%s", b, f, err, out)
		}
	}
	for _, s := range b.steps {
		c, prog, err := parseCommand(s.command)
		if err != nil {
			t.Fatalf("%s:%d: %v", b.file, s.line, err)
		}
		want := normalise(s.want)
		begin := time.Now()
		waited := "" // what the first output lacked
		for {
			got := normalise(strings.Split(strings.TrimSuffix(r.run(ctx, c, prog), "\n"), "\n"))
			diff := mismatch(got, want)
			if diff == "" {
				t.Logf("%s:%d: $ %s: as the block shows after %v%s", b.file, s.line, s.command, time.Since(begin).Round(time.Millisecond), waited)
				break
			}
			if waited == "" {
				waited = "; at first " + diff
			}
			if !readOnly(c, prog) || time.Since(begin) > commandTimeout || ctx.Err() != nil {
				t.Fatalf("%s:%d: $ %s\n%s\nthe block shows (normalised):\n%s\nthe lab printed (normalised; the last output, after %v of tries):\n%s",
					b.file, s.line, s.command, diff, strings.Join(want, "\n"), time.Since(begin).Round(time.Second), strings.Join(got, "\n"))
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
}

// run runs a command as a terminal would show it (stdout and stderr, the first through the
// pipes), with the checkout's directory replaced by checkoutPath.
func (r *labRunner) run(ctx context.Context, c command, prog string) string {
	var out, errOut bytes.Buffer
	switch prog {
	case progKubectlNeuron:
		cli.Main(c.argv[1:], &out, &errOut)
	case progLabStatus:
		o, _ := r.exec(ctx, []string{r.neuronLab, "status", "--dir", ".lab"}, nil)
		out.Write(o)
	default:
		argv := c.argv
		if argv[0] == "kubectl" {
			argv = append([]string{".lab/bin/kubectl"}, argv[1:]...)
		}
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = r.checkout, append(os.Environ(), r.env...), &out, &errOut
		_ = cmd.Run() // the output says what went wrong; a block shows no exit status
	}
	text := out.Bytes()
	for _, p := range c.pipes {
		text, _ = r.exec(ctx, p, text) // grep's exit status 1 is no line selected: the output is empty
	}
	return strings.ReplaceAll(errOut.String()+string(text), r.checkout, checkoutPath)
}

// exec runs argv in the checkout with stdin and returns its stdout and stderr together.
func (r *labRunner) exec(ctx context.Context, argv []string, stdin []byte) ([]byte, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir, cmd.Env = r.checkout, append(os.Environ(), r.env...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	return cmd.CombinedOutput()
}
