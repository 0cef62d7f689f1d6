//go:build e2e

package benchutil

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/kube-neuron/kube-neuron/internal/lab"
	"github.com/kube-neuron/kube-neuron/test/e2e/framework"
)

// Lab is a benchmark's control plane: kube-apiserver, etcd and the controllers, no node.
type Lab struct {
	// Ctx carries the logger, which writes to Dir/bench-klog.log.
	Ctx    context.Context
	Dir    string
	CP     *lab.ControlPlane
	Client kubernetes.Interface
}

// StartLab starts a control plane in a new directory /tmp/<dirPrefix>*, with klog writing to a
// file there (the components log every bind: the cost stays, the terminal stays readable),
// and creates Namespace. When the benchmark ends it stops the control plane and removes the
// directory, unless the benchmark failed or keep is set.
func StartLab(b *testing.B, dirPrefix string, keep bool) *Lab {
	binDir, err := framework.BinDir()
	if err != nil {
		b.Fatal(err)
	}
	dir, err := os.MkdirTemp("/tmp", dirPrefix)
	if err != nil {
		b.Fatal(err)
	}
	logFile, err := os.Create(filepath.Join(dir, "bench-klog.log"))
	if err != nil {
		b.Fatal(err)
	}
	klog.LogToStderr(false)
	klog.SetOutput(logFile)
	b.Cleanup(func() {
		klog.Flush()
		klog.LogToStderr(true)
		_ = logFile.Close()
	})
	ctx := klog.NewContext(context.Background(), klog.Background())
	cp, err := lab.StartControlPlane(ctx, lab.ControlPlaneOptions{BinDir: binDir, Dir: dir})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := cp.Stop(); err != nil {
			b.Errorf("stopping the control plane: %v", err)
		}
		if b.Failed() || keep {
			fmt.Fprintf(os.Stderr, "bench: lab directory kept: %s (logs in %s/logs)\n", dir, dir)
		} else {
			_ = os.RemoveAll(dir)
		}
	})
	client, err := kubernetes.NewForConfig(cp.RESTConfig())
	if err != nil {
		b.Fatal(err)
	}
	if err := CreateNamespace(ctx, client, Namespace); err != nil {
		b.Fatal(err)
	}
	return &Lab{Ctx: ctx, Dir: dir, CP: cp, Client: client}
}

// PIDOf is the pid of the control plane's process called name, 0 when none runs.
func PIDOf(cp *lab.ControlPlane, name string) int {
	for _, p := range cp.Processes() {
		if p.Name == name {
			return p.PID
		}
	}
	return 0
}

// StopProcess stops the control plane's process called name (a scheduler under test) by its
// pid: SIGTERM, then SIGKILL after 5 s. It is a no-op when the process already exited.
func StopProcess(cp *lab.ControlPlane, name string) error {
	pid := PIDOf(cp, name)
	if pid == 0 {
		return nil
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(5 * time.Second)
	killed := false
	for {
		running := slices.ContainsFunc(cp.Processes(), func(s lab.State) bool { return s.PID == pid })
		if !running {
			return nil
		}
		if time.Now().After(deadline) {
			if killed {
				return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", name, pid)
			}
			_ = syscall.Kill(pid, syscall.SIGKILL)
			killed, deadline = true, time.Now().Add(10*time.Second)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestProcess names this process in CPUSeconds.
const TestProcess = "test process"

// CPUSeconds returns the CPU time (user+system) of the control plane's processes by name and
// of this test process (TestProcess), from /proc.
func CPUSeconds(cp *lab.ControlPlane) map[string]float64 {
	out := map[string]float64{}
	for _, p := range cp.Processes() {
		if s, err := ProcCPU(p.PID); err == nil {
			out[p.Name] = s
		}
	}
	if s, err := ProcCPU(os.Getpid()); err == nil {
		out[TestProcess] = s
	}
	return out
}

// ProcCPU reads utime+stime of /proc/<pid>/stat in seconds (USER_HZ is 100 on Linux).
func ProcCPU(pid int) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	ut, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	return (ut + st) / 100, nil
}
