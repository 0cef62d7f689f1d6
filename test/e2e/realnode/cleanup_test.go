//go:build e2e

package realnode

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kube-neuron/kube-neuron/internal/lab"
	"github.com/kube-neuron/kube-neuron/internal/lab/realnode"
	"github.com/kube-neuron/kube-neuron/test/e2e/framework"
)

// hostState is what a lab with real nodes could leave on the host: mounts, network namespaces
// and links of the host's namespace, iptables rules, the lab's cgroups, ip_forward, and the
// paths a kubelet, containerd and the CNI plugins write to on a node.
type hostState struct {
	mounts, netns, links, iptables, cgroups, paths []string
	ipForward                                      string
}

// nodePaths are where a node's kubelet, containerd, CNI plugins and the chart's pods would write
// on the host if the node's own mounts did not hold them.
var nodePaths = []string{"/var/lib/kubelet", "/var/log/containers", "/var/log/pods", "/var/lib/cni", "/var/lib/containerd",
	"/run/containerd", "/run/netns", "/var/run/cdi", "/etc/cdi", "/etc/cni", "/opt/cni", "/opt/containerd", "/opt/aws",
	"/var/lib/kube-neuron", "/usr/libexec/kubernetes", "/run/nri", "/etc/kubernetes"}

// snapshot reads the host's state; cgroups of labs whose names start with skipCgroups (the
// package's own lab) are not part of it.
func snapshot(t *testing.T, skipCgroups string) hostState {
	t.Helper()
	var s hostState
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(strings.TrimSpace(string(data)), "\n") {
		if f := strings.Fields(line); len(f) > 4 {
			s.mounts = append(s.mounts, f[4])
		}
	}
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		s.netns = append(s.netns, e.Name())
	}
	out, err := exec.Command("ip", "-o", "link", "show").Output()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(line); len(f) > 1 {
			s.links = append(s.links, strings.TrimSuffix(f[1], ":"))
		}
	}
	for _, save := range []string{"iptables-save", "ip6tables-save"} {
		out, err := exec.Command(save).Output()
		if err != nil {
			t.Fatalf("%s: %v", save, err)
		}
		for line := range strings.SplitSeq(string(out), "\n") {
			if line != "" && !strings.HasPrefix(line, "#") {
				s.iptables = append(s.iptables, save+": "+line)
			}
		}
	}
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*" + realnode.CgroupPrefix + "/*")
	for _, d := range dirs {
		if !strings.HasPrefix(filepath.Base(d), skipCgroups) {
			s.cgroups = append(s.cgroups, d)
		}
	}
	for _, p := range nodePaths {
		if _, err := os.Lstat(p); err == nil {
			s.paths = append(s.paths, p)
		}
	}
	fwd, _ := os.ReadFile("/proc/sys/net/ipv4/ip_forward")
	s.ipForward = strings.TrimSpace(string(fwd))
	for _, l := range [][]string{s.mounts, s.netns, s.links, s.iptables, s.cgroups, s.paths} {
		slices.Sort(l)
	}
	return s
}

func (s hostState) diff(after hostState) []string {
	var d []string
	for _, c := range []struct {
		what          string
		before, after []string
	}{{"mounts", s.mounts, after.mounts}, {"network namespaces", s.netns, after.netns}, {"links", s.links, after.links},
		{"iptables rules", s.iptables, after.iptables}, {"cgroups", s.cgroups, after.cgroups}, {"paths", s.paths, after.paths}} {
		for _, a := range c.after {
			if !slices.Contains(c.before, a) {
				d = append(d, fmt.Sprintf("%s: %s was added", c.what, a))
			}
		}
		for _, b := range c.before {
			if !slices.Contains(c.after, b) {
				d = append(d, fmt.Sprintf("%s: %s was removed", c.what, b))
			}
		}
	}
	if s.ipForward != after.ipForward {
		d = append(d, fmt.Sprintf("net.ipv4.ip_forward went from %s to %s", s.ipForward, after.ipForward))
	}
	return d
}

// labProcesses are the host's processes of the lab in dir: those whose command line names the
// directory (the lab, the control plane, the node inits, kubelets, containerd) and those in its
// nodes' cgroups (the containers and their shims).
func labProcesses(dir, cgroup string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		cg, _ := os.ReadFile("/proc/" + e.Name() + "/cgroup")
		if bytes.Contains(cmdline, []byte(dir)) || bytes.Contains(cg, []byte(realnode.CgroupPrefix+"/"+cgroup)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestNothingLeftBehind runs a lab of its own with a real node, as `make lab-up` does (neuron-lab
// up, in the background), kills every process of it with SIGKILL, starts it again in the same
// directory (it must come up clean), stops it with `neuron-lab down` (make lab-down) and checks
// that the host is as it was before: no process, mount, network namespace, link, iptables rule,
// cgroup or node path left, ip_forward unchanged.
func TestNothingLeftBehind(t *testing.T) {
	ctx := framework.Context(t)
	dir := t.TempDir()
	fleet := filepath.Join(dir, "fleet.yaml")
	if err := os.WriteFile(fleet, []byte("nodes:\n- {name: cleanup-a, instanceType: trn1.2xlarge, kubelet: real}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	labDir := filepath.Join(dir, "lab")
	opts := lab.Options{}
	if err := framework.RealNodeOptions(&opts); err != nil {
		t.Fatal(err)
	}
	bin, err := framework.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	self := framework.L.ComponentPath("neuron-lab")
	args := []string{"--dir", labDir, "--bin-dir", bin, "--fleet", fleet, "--node-bin-dir", opts.NodeBinDir,
		"--images-dir", opts.ImagesDir, "--lab-images-dir", opts.LabImagesDir, "--chart", opts.Chart.Chart, "--helm", opts.Chart.Helm}
	neuronLab := func(cmd string, extra ...string) {
		t.Helper()
		c := exec.CommandContext(ctx, self, append(append([]string{cmd}, extra...), args...)...)
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("neuron-lab %s: %v\n%s\n%s", cmd, err, out, lab.LogTail(filepath.Join(labDir, lab.ServeLog), 30))
		}
	}
	abs, _ := filepath.Abs(labDir)
	cgroup := lab.CgroupName(abs)
	mainLab := lab.CgroupName(framework.L.ControlPlane().Dir())
	before := snapshot(t, mainLab)
	t.Cleanup(func() { _ = exec.Command(self, "down", "--dir", labDir).Run() })

	neuronLab("up")
	pids := labProcesses(abs, cgroup)
	if len(pids) < 5 {
		t.Fatalf("found %d processes of the lab, want its control plane, node init, kubelet, containerd, pods", len(pids))
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	framework.WaitFor(t, ctx, 30*time.Second, "every process of the killed lab to end", func(context.Context) (bool, string, error) {
		left := labProcesses(abs, cgroup)
		return len(left) == 0, fmt.Sprint(left), nil
	})

	neuronLab("up")
	neuronLab("down")
	framework.WaitFor(t, ctx, 30*time.Second, "the host to be as it was", func(context.Context) (bool, string, error) {
		d := before.diff(snapshot(t, mainLab))
		if left := labProcesses(abs, cgroup); len(left) > 0 {
			d = append(d, fmt.Sprintf("processes %v", left))
		}
		return len(d) == 0, strings.Join(d, "; "), nil
	})
}
