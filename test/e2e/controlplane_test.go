//go:build e2e

package e2e

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2/ktesting"

	"github.com/kube-neuron/kube-neuron/internal/lab"
)

// controlPlaneBinDir returns the directory of the pinned control-plane binaries: $KUBE_NEURON_TOOLS_BIN,
// or what hack/build-tools.sh prints (it builds them on first use, which takes minutes).
func controlPlaneBinDir(t *testing.T) string {
	t.Helper()
	if dir := os.Getenv("KUBE_NEURON_TOOLS_BIN"); dir != "" {
		return dir
	}
	cmd := exec.Command("../../hack/build-tools.sh", "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hack/build-tools.sh failed (set KUBE_NEURON_TOOLS_BIN to skip it): %v", err)
	}
	return strings.TrimSpace(string(out))
}

// startTestControlPlane starts a control plane in a short directory under /tmp (Unix socket paths are
// limited to 108 bytes) and stops it when the test ends; on failure it logs the tails of the
// component logs.
func startTestControlPlane(t *testing.T, ctx context.Context, detach bool) *lab.ControlPlane {
	t.Helper()
	bin := controlPlaneBinDir(t)
	dir, err := os.MkdirTemp("/tmp", "kn-")
	if err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	cp, err := lab.StartControlPlane(ctx, lab.ControlPlaneOptions{BinDir: bin, Dir: dir, Detach: detach})
	if err != nil {
		_ = os.RemoveAll(dir)
		t.Fatal(err)
	}
	t.Logf("control plane ready %v after start (dir %s, detach %v)", time.Since(begin).Round(time.Millisecond), dir, detach)
	t.Cleanup(func() {
		if err := cp.Stop(); err != nil {
			t.Errorf("stop control plane: %v", err)
		}
		if t.Failed() {
			for _, name := range []string{lab.EtcdName, lab.APIServerName, lab.ControllerManagerName, lab.SchedulerName, "my-scheduler"} {
				t.Logf("--- %s:\n%s", cp.LogPath(name), lab.LogTail(cp.LogPath(name), 20))
			}
		}
		_ = os.RemoveAll(dir)
	})
	return cp
}

func pidGone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

func TestControlPlane(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	cp := startTestControlPlane(t, ctx, false)
	client, err := kubernetes.NewForConfig(cp.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	procs := cp.Processes()
	var names []string
	for _, p := range procs {
		names = append(names, p.Name)
	}
	if want := []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"}; !slices.Equal(names, want) {
		t.Errorf("processes %v, want %v", names, want)
	}
	if st, err := lab.ReadState(cp.Dir()); err != nil || len(st) != 4 {
		t.Errorf("state.json holds %d records (%v), want 4", len(st), err)
	}

	t.Run("version", func(t *testing.T) {
		v, err := client.Discovery().ServerVersion()
		if err != nil {
			t.Fatal(err)
		}
		if v.GitVersion != "v1.36.3" {
			t.Errorf("apiserver version %q, want v1.36.3", v.GitVersion)
		}
	})

	t.Run("resource.k8s.io/v1", func(t *testing.T) {
		rl, err := client.Discovery().ServerResourcesForGroupVersion("resource.k8s.io/v1")
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range rl.APIResources {
			got = append(got, r.Name)
		}
		for _, want := range []string{"deviceclasses", "resourceclaims", "resourceclaimtemplates", "resourceslices"} {
			if !slices.Contains(got, want) {
				t.Errorf("resource.k8s.io/v1 serves %v, missing %s", got, want)
			}
		}
	})

	t.Run("kubectl", func(t *testing.T) {
		out, err := exec.Command(filepath.Join(cp.BinDir(), "kubectl"), "--kubeconfig", cp.Kubeconfig(), "get", "ns").CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl get ns: %v\n%s", err, out)
		}
		for _, ns := range []string{"default", "kube-system"} {
			if !strings.Contains(string(out), ns) {
				t.Errorf("kubectl get ns does not list %s:\n%s", ns, out)
			}
		}
	})

	t.Run("second scheduler binds a pod", func(t *testing.T) {
		config := []byte(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: my-scheduler
`)
		if err := cp.StartScheduler(ctx, "my-scheduler", config); err != nil {
			t.Fatal(err)
		}
		if err := cp.StartScheduler(ctx, "my-scheduler", config); err == nil {
			t.Error("a second scheduler with the same name started")
		}
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: "lab-node-1", Labels: map[string]string{"kubernetes.io/hostname": "lab-node-1"}},
			Status: corev1.NodeStatus{
				Capacity: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi"), corev1.ResourcePods: resource.MustParse("110"),
				},
				Allocatable: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi"), corev1.ResourcePods: resource.MustParse("110"),
				},
				Conditions: []corev1.NodeCondition{{
					Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
					LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(),
				}},
			},
		}
		if _, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "scheduled-by-my-scheduler", Namespace: metav1.NamespaceDefault},
			Spec: corev1.PodSpec{
				SchedulerName: "my-scheduler",
				Containers: []corev1.Container{{
					Name: "pause", Image: "registry.k8s.io/pause:3.10",
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}},
				}},
			},
		}
		if _, err := client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		begin := time.Now()
		var bound *corev1.Pod
		if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			bound, err = client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
			return err == nil && bound.Spec.NodeName != "", err
		}); err != nil {
			t.Fatalf("pod not bound: %v (last seen: %+v)", err, bound)
		}
		if bound.Spec.NodeName != node.Name {
			t.Errorf("pod bound to %q, want %q", bound.Spec.NodeName, node.Name)
		}
		t.Logf("pod bound to %s %v after creation", bound.Spec.NodeName, time.Since(begin).Round(time.Millisecond))
		// The Scheduled event names the scheduler that bound it.
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
			evs, err := client.EventsV1().Events(pod.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "regarding.name=" + pod.Name})
			if err != nil {
				return false, err
			}
			for _, e := range evs.Items {
				if e.Reason == "Scheduled" {
					if e.ReportingController != "my-scheduler" {
						t.Errorf("Scheduled event reported by %q, want my-scheduler", e.ReportingController)
					}
					return true, nil
				}
			}
			return false, nil
		}); err != nil {
			t.Errorf("no Scheduled event for the pod: %v", err)
		}
		// Without a kubelet, only a zero grace period deletes the pod.
		if err := client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, *metav1.NewDeleteOptions(0)); err != nil {
			t.Error(err)
		}
	})

	procs = cp.Processes()
	if len(procs) != 5 {
		t.Errorf("%d processes run, want 5 (with my-scheduler): %+v", len(procs), procs)
	}
	begin := time.Now()
	if err := cp.Stop(); err != nil {
		t.Fatal(err)
	}
	t.Logf("control plane stopped in %v", time.Since(begin).Round(time.Millisecond))
	if err := cp.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	for _, p := range procs {
		if !pidGone(p.PID) {
			t.Errorf("%s (pid %d) still alive after Stop", p.Name, p.PID)
		}
	}
	if st, err := lab.ReadState(cp.Dir()); err != nil || len(st) != 0 {
		t.Errorf("state after Stop: %+v (%v), want none", st, err)
	}
}

// TestControlPlaneDetachedStopFromState is the lab-up / lab-down path: a detached control
// plane stopped from its state file alone.
func TestControlPlaneDetachedStopFromState(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	cp := startTestControlPlane(t, ctx, true)
	st, err := lab.ReadState(cp.Dir())
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != 4 {
		t.Fatalf("state holds %+v, want 4 processes", st)
	}
	for _, e := range st {
		sid, _, errno := syscall.RawSyscall(syscall.SYS_GETSID, uintptr(e.PID), 0, 0)
		if errno != 0 || int(sid) != e.PID {
			t.Errorf("%s (pid %d) is not detached into its own session (sid %d, %v)", e.Name, e.PID, sid, errno)
		}
	}
	// A second control plane in the same directory is refused while this one runs.
	if _, err := lab.StartControlPlane(ctx, lab.ControlPlaneOptions{BinDir: cp.BinDir(), Dir: cp.Dir()}); err == nil ||
		!strings.Contains(err.Error(), "already runs a lab") {
		t.Errorf("second StartControlPlane in a running lab directory: %v, want a refusal", err)
	}
	begin := time.Now()
	if err := lab.StopFromState(cp.Dir()); err != nil {
		t.Fatal(err)
	}
	t.Logf("StopFromState took %v", time.Since(begin).Round(time.Millisecond))
	for _, e := range st {
		// A child that exited but is not yet reaped by its Process is a zombie for a moment.
		deadline := time.Now().Add(5 * time.Second)
		for !pidGone(e.PID) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if !pidGone(e.PID) {
			t.Errorf("%s (pid %d) still alive 5 s after StopFromState", e.Name, e.PID)
		}
	}
	if left, err := lab.ReadState(cp.Dir()); err != nil || len(left) != 0 {
		t.Errorf("state after StopFromState: %+v (%v), want none", left, err)
	}
}
