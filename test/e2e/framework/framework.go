// Package framework runs e2e tests against a lab: a real control plane on 127.0.0.1 with
// simulated Neuron nodes. Each test package gets one lab from Main; tests apply the files in
// examples/ with Apply and wait with WaitFor, whose failures say what was expected and what was
// last seen.
package framework

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/klog/v2"

	"github.com/kube-neuron/kube-neuron/internal/lab"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// FieldManager is the server-side apply field manager of the e2e tests.
const FieldManager = "kube-neuron-e2e"

// L is the test package's lab, set by Main.
var L *lab.Lab

// RepoRoot returns the repository root (the directory with the product go.mod).
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if data, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.HasPrefix(data, []byte("module github.com/kube-neuron/kube-neuron\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside the kube-neuron repository")
		}
		dir = parent
	}
}

// BinDir returns the directory of the pinned Kubernetes binaries: $KUBE_NEURON_TOOLS_BIN, or
// what hack/build-tools.sh prints (it builds them the first time).
func BinDir() (string, error) {
	if d := os.Getenv("KUBE_NEURON_TOOLS_BIN"); d != "" {
		return d, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.Command(filepath.Join(root, "hack", "build-tools.sh"), "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kubelet", "kube-proxy")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("building the pinned Kubernetes binaries (hack/build-tools.sh): %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// BuildComponents builds kube-neuron's binaries with the race detector into dir, so that the
// lab runs them as real processes whose races fail the test run. neuron-kube-scheduler
// (lab.ComponentKubeScheduler) is a module of its own: `RACE=1 hack/build-scheduler.sh` builds
// it into its cache, and dir gets it (a hard link or a copy).
func BuildComponents(dir string, names ...string) error {
	if len(names) == 0 {
		return nil
	}
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	var pkgs []string
	for _, n := range names {
		if n == lab.ComponentKubeScheduler {
			if err := buildKubeScheduler(root, dir); err != nil {
				return err
			}
			continue
		}
		pkgs = append(pkgs, "./cmd/"+n)
	}
	if len(pkgs) == 0 {
		return nil
	}
	cmd := exec.Command("go", append([]string{"build", "-race", "-o", dir + "/"}, pkgs...)...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building %v: %w\n%s", pkgs, err, out)
	}
	return nil
}

// buildKubeScheduler puts into dir the race-enabled neuron-kube-scheduler that
// hack/build-scheduler.sh builds (or finds in its cache).
func buildKubeScheduler(root, dir string) error {
	cmd := exec.Command(filepath.Join(root, "hack", "build-scheduler.sh"))
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "RACE=1")
	cmd.Stderr = os.Stderr
	begin := time.Now()
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("building %s (RACE=1 hack/build-scheduler.sh): %w", lab.ComponentKubeScheduler, err)
	}
	bin := filepath.Join(strings.TrimSpace(string(out)), lab.ComponentKubeScheduler)
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("hack/build-scheduler.sh printed %q, which holds no %s: %w", strings.TrimSpace(string(out)), lab.ComponentKubeScheduler, err)
	}
	fmt.Fprintf(os.Stderr, "e2e: %s (-race) ready in %v: %s\n", lab.ComponentKubeScheduler, time.Since(begin).Round(time.Millisecond), bin)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// A hard link or a copy, not a symbolic link: the script removes the cached builds of other
	// sources, and another checkout may build one while the lab runs.
	dst := filepath.Join(dir, lab.ComponentKubeScheduler)
	_ = os.Remove(dst)
	if os.Link(bin, dst) == nil {
		return nil
	}
	return copyExecutable(bin, dst)
}

func copyExecutable(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copying %s to %s: %w", src, dst, err)
	}
	return out.Close()
}

// EnsureComponents builds into the lab's component directory those of the components that are
// not there yet: for a test that starts a component its package's lab does not run (a switch
// to neuron-kube-scheduler).
func EnsureComponents(names ...string) error {
	var missing []string
	for _, n := range names {
		if _, err := os.Stat(L.ComponentPath(n)); err != nil {
			missing = append(missing, n)
		}
	}
	return BuildComponents(filepath.Dir(L.ComponentPath("x")), missing...)
}

// The ways my-scheduler runs in the e2e tests (KUBE_NEURON_SCHEDULING).
const (
	// SchedulingExtender: the stock kube-scheduler calling neuron-scheduler-extender.
	SchedulingExtender = "extender"
	// SchedulingPlugin: neuron-kube-scheduler, kube-scheduler with the NeuronTopology plugin.
	SchedulingPlugin = "plugin"
)

// SchedulingEnv chooses how my-scheduler runs: extender (the default) or plugin. In plugin mode
// Main and MainOptions run lab.ComponentKubeScheduler where a package asks for
// lab.ComponentExtender, so that the same tests run against both.
const SchedulingEnv = "KUBE_NEURON_SCHEDULING"

// Scheduling returns how my-scheduler runs in this test run: SchedulingExtender or
// SchedulingPlugin (from KUBE_NEURON_SCHEDULING; Main refuses any other value).
func Scheduling() string {
	mode, err := scheduling()
	if err != nil {
		panic(err)
	}
	return mode
}

func scheduling() (string, error) {
	switch v := os.Getenv(SchedulingEnv); v {
	case "", SchedulingExtender:
		return SchedulingExtender, nil
	case SchedulingPlugin:
		return SchedulingPlugin, nil
	default:
		return "", fmt.Errorf("%s=%q: want %s (the stock kube-scheduler with neuron-scheduler-extender, the default) or %s (neuron-kube-scheduler)",
			SchedulingEnv, v, SchedulingExtender, SchedulingPlugin)
	}
}

// schedulingComponents swaps lab.ComponentExtender for lab.ComponentKubeScheduler in plugin mode.
func schedulingComponents(mode string, components []string) []string {
	if mode != SchedulingPlugin {
		return components
	}
	out := slices.Clone(components)
	for i, c := range out {
		if c == lab.ComponentExtender {
			out[i] = lab.ComponentKubeScheduler
		}
	}
	return out
}

// Main starts the package's lab with the fleet and the components, runs the tests and stops the
// lab, also when the run is interrupted. On failure the lab's directory (logs of every process)
// is kept.
func Main(m *testing.M, fleet *lab.FleetFile, components ...string) int {
	return MainOptions(m, lab.Options{Fleet: fleet, Components: components})
}

// MainOptions is Main with more of the lab's options (AuditLog, AutoscalerArgs, Manifests, LWS); it
// sets BinDir, Dir, ComponentBinDir and Verbosity itself, runs lab.ComponentKubeScheduler in place
// of lab.ComponentExtender when KUBE_NEURON_SCHEDULING=plugin (Scheduling), and builds
// o.Components (and, with LWS,
// the LeaderWorkerSet controller: LWSDir). A fleet with
// real nodes also gets what they need (RealNodeOptions) and the chart, installed with helm.
func MainOptions(m *testing.M, o lab.Options) int {
	mode, err := scheduling()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	o.Components = schedulingComponents(mode, o.Components)
	if slices.Contains(o.Components, lab.ComponentKubeScheduler) {
		fmt.Fprintf(os.Stderr, "e2e: %s=%s: my-scheduler is %s\n", SchedulingEnv, mode, lab.ComponentKubeScheduler)
	}
	components := o.Components
	real := false
	if o.Fleet != nil {
		cat := o.Catalog
		if cat == nil {
			cat = topology.DefaultCatalog()
		}
		specs, err := o.Fleet.Expand(cat)
		if err != nil {
			fmt.Fprintln(os.Stderr, "e2e: fleet:", err)
			return 1
		}
		real = lab.HasRealNodes(specs)
	}
	if real {
		if why := RealNodesSkipped(); why != "" {
			fmt.Fprintln(os.Stderr, "e2e:", why)
			return 0
		}
		if why := lab.RealNodesUnavailable(); why != "" {
			fmt.Fprintf(os.Stderr, "e2e: the real-node tier cannot run here: %s. Run it as root on Linux with namespaces, or set KUBE_NEURON_REAL_NODES=0 to opt out of it.\n", why)
			return 1
		}
		if err := RealNodeOptions(&o); err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			return 1
		}
		components = append(slices.Clone(components), "neuron-lab")
		// The real-node tests run `neuron-lab up` as make lab-up does (TestNothingLeftBehind),
		// which runs every component by default, the autoscaler too: build them all.
		for _, c := range lab.DefaultComponents() {
			if !slices.Contains(components, c) {
				components = append(components, c)
			}
		}
	}
	binDir, err := BinDir()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	if o.LWS && o.LWSDir == "" {
		if o.LWSDir, err = LWSDir(); err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			return 1
		}
	}
	dir, err := os.MkdirTemp("", "kube-neuron-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	componentDir := filepath.Join(dir, "bin")
	if err := BuildComponents(componentDir, components...); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	begin := time.Now()
	o.BinDir, o.Dir, o.ComponentBinDir, o.Verbosity = binDir, dir, componentDir, 4
	L, err = lab.Start(ctx, o)
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: starting the lab: %v\n(lab directory kept: %s)\n", err, dir)
		return 1
	}
	fmt.Fprintf(os.Stderr, "e2e: lab with %d nodes ready in %v (directory %s)\n", len(L.Nodes()), time.Since(begin).Round(time.Millisecond), dir)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		if _, ok := <-sigs; ok {
			fmt.Fprintln(os.Stderr, "e2e: interrupted: stopping the lab")
			_ = L.Stop()
			os.Exit(130)
		}
	}()
	code := m.Run()
	signal.Stop(sigs)
	close(sigs)
	if err := L.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: stopping the lab:", err)
		if code == 0 {
			code = 1
		}
	}
	if code == 0 {
		_ = os.RemoveAll(dir)
	} else {
		fmt.Fprintf(os.Stderr, "e2e: tests failed; the lab's logs are in %s/logs\n", dir)
	}
	return code
}

// RealNodesSkipped says why the real-node tier does not run, "" when it does: only when
// KUBE_NEURON_REAL_NODES=0 opts out of it.
func RealNodesSkipped() string {
	if os.Getenv("KUBE_NEURON_REAL_NODES") == "0" {
		return "KUBE_NEURON_REAL_NODES=0: the real-node tier does not run (unset it to run it)"
	}
	return ""
}

// RealNodeOptions sets what real nodes need in o: the flags in $KUBE_NEURON_REAL_NODE_FLAGS
// (make e2e passes them), or what hack/real-nodes.sh prints (it makes them the first time), and
// the chart, installed with the pinned helm.
func RealNodeOptions(o *lab.Options) error {
	flags := os.Getenv("KUBE_NEURON_REAL_NODE_FLAGS")
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	if flags == "" {
		cmd := exec.Command(filepath.Join(root, "hack", "real-nodes.sh"))
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			return fmt.Errorf("hack/real-nodes.sh: %w", err)
		}
		flags = strings.TrimSpace(string(out))
	}
	f := strings.Fields(flags)
	for i := 0; i+1 < len(f); i += 2 {
		switch f[i] {
		case "--node-bin-dir":
			o.NodeBinDir = f[i+1]
		case "--images-dir":
			o.ImagesDir = f[i+1]
		case "--lab-images-dir":
			o.LabImagesDir = f[i+1]
		}
	}
	if o.NodeBinDir == "" || o.ImagesDir == "" || o.LabImagesDir == "" {
		return fmt.Errorf("real-node flags %q lack --node-bin-dir, --images-dir or --lab-images-dir (hack/real-nodes.sh prints them)", flags)
	}
	helm, err := helmOnce()
	if err != nil {
		return err
	}
	if o.Chart == nil {
		o.Chart = &lab.ChartOptions{Helm: helm, Chart: filepath.Join(root, Chart), Wait: 4 * time.Minute}
	}
	return nil
}

// Context returns a context for a test, with a logger, cancelled at the end of the test.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return klog.NewContext(ctx, klog.Background().WithValues("test", t.Name()))
}

// Apply applies every object of the YAML file (path relative to the repository root, or
// absolute) with server-side apply, in namespace ns where the object names none, and returns
// the objects as applied.
func Apply(t testing.TB, ctx context.Context, path, ns string) []*unstructured.Unstructured {
	t.Helper()
	if !filepath.IsAbs(path) {
		root, err := RepoRoot()
		if err != nil {
			t.Fatal(err)
		}
		path = filepath.Join(root, path)
	}
	objs, err := lab.ApplyFile(ctx, L.RESTConfig(), FieldManager, path, ns)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// CreateNamespace creates a namespace for the test and deletes it when the test ends.
func CreateNamespace(t testing.TB, ctx context.Context) string {
	t.Helper()
	name := strings.Map(func(r rune) rune {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			return r
		}
		return '-'
	}, strings.ToLower(t.Name()))
	if len(name) > 50 {
		name = name[:50]
	}
	name = strings.Trim(name, "-") + fmt.Sprintf("-%d", time.Now().UnixNano()%100000)
	if _, err := L.Client().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = L.Client().CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

// WaitFor polls cond until it is done or timeout passes; the failure message names what was
// awaited and the last status cond reported.
func WaitFor(t testing.TB, ctx context.Context, timeout time.Duration, what string, cond func(ctx context.Context) (done bool, status string, err error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var status string
	for {
		done, s, err := cond(ctx)
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if s != "" {
			status = s
		}
		if done {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("timed out after %v waiting for %s; last seen: %s", timeout, what, status)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// WaitForPod waits until the pod is in the phase; on timeout the message has the pod's status
// and events.
func WaitForPod(t testing.TB, ctx context.Context, ns, name string, phase corev1.PodPhase, timeout time.Duration) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	WaitFor(t, ctx, timeout, fmt.Sprintf("pod %s/%s to be %s", ns, name, phase), func(ctx context.Context) (bool, string, error) {
		p, err := L.Client().CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, "not found", nil
		}
		if err != nil {
			return false, err.Error(), nil
		}
		pod = p
		return p.Status.Phase == phase, DescribePod(ctx, p), nil
	})
	return pod
}

// DescribePod summarises a pod's state and its events for failure messages.
func DescribePod(ctx context.Context, p *corev1.Pod) string {
	var b strings.Builder
	fmt.Fprintf(&b, "phase %s, node %q", p.Status.Phase, p.Spec.NodeName)
	if p.Status.Reason != "" {
		fmt.Fprintf(&b, ", reason %s: %s", p.Status.Reason, p.Status.Message)
	}
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			fmt.Fprintf(&b, "; %s: %s", c.Type, c.Message)
		}
	}
	events, err := L.Client().CoreV1().Events(p.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + p.Name})
	if err == nil {
		for _, e := range events.Items {
			fmt.Fprintf(&b, "; event %s %s: %s", e.Type, e.Reason, e.Message)
		}
	}
	return b.String()
}
