//go:build e2e

package realnode

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/lab/standin"
	"github.com/kube-neuron/kube-neuron/test/e2e/framework"
)

// printed is what the stand-in workload of one container printed: its environment and the
// Neuron device nodes it sees.
type printed struct {
	env     map[string]string
	devices []string
}

// logsOf waits until the container has printed its report and returns it (kubectl logs: the API
// server reads it from the real kubelet).
func logsOf(t *testing.T, ctx context.Context, pod *corev1.Pod, container string) printed {
	t.Helper()
	var p printed
	framework.WaitFor(t, ctx, 30*time.Second, fmt.Sprintf("the log of %s/%s container %s", pod.Namespace, pod.Name, container), func(ctx context.Context) (bool, string, error) {
		raw, err := framework.L.Client().CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{Container: container}).DoRaw(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		env, devices, ok := standin.Parse(string(raw))
		p = printed{env: env, devices: devices}
		return ok, string(raw), nil
	})
	return p
}

func deviceNodes(ids []int) []string {
	out := make([]string, 0, len(ids))
	for _, d := range ids {
		out = append(out, "/dev/neuron"+strconv.Itoa(d))
	}
	return out
}

func list(ids []int) string {
	s := make([]string, len(ids))
	for i, v := range ids {
		s[i] = strconv.Itoa(v)
	}
	return strings.Join(s, ",")
}

// checkRecordRuns checks every Neuron container of a running pod against the pod's allocation
// record: the device nodes it sees are the record's devices, NEURON_RT_VISIBLE_CORES its cores,
// and AWS_NEURON_VISIBLE_DEVICES its devices for a device request. It returns the record.
func checkRecordRuns(t *testing.T, ctx context.Context, ns, name string) *allocation.Record {
	t.Helper()
	pod := framework.WaitForPod(t, ctx, ns, name, corev1.PodRunning, 90*time.Second)
	var rec *allocation.Record
	framework.WaitFor(t, ctx, 20*time.Second, "pod "+name+" to be served", func(ctx context.Context) (bool, string, error) {
		p, err := framework.L.Client().CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		r, err := allocation.RecordOf(p)
		if err != nil || r == nil {
			return false, fmt.Sprintf("record: %v", err), nil
		}
		rec, pod = r, p
		return p.Annotations[allocation.Allocated] == "true", p.Annotations[allocation.Annotation], nil
	})
	if rec.Node != pod.Spec.NodeName {
		t.Errorf("pod %s runs on %s, its record names %s", name, pod.Spec.NodeName, rec.Node)
	}
	for _, c := range rec.Containers {
		got := logsOf(t, ctx, pod, c.Name)
		if want := deviceNodes(c.Devices); !slices.Equal(got.devices, want) {
			t.Errorf("pod %s container %s sees %v, its record gives %v", name, c.Name, got.devices, want)
		}
		if got.env[allocation.EnvVisibleCores] != list(c.Cores) {
			t.Errorf("pod %s container %s: %s=%q, its record gives cores %v", name, c.Name, allocation.EnvVisibleCores, got.env[allocation.EnvVisibleCores], c.Cores)
		}
		if c.Resource != "aws.amazon.com/neuroncore" && got.env[allocation.EnvVisibleDevices] != list(c.Devices) {
			t.Errorf("pod %s container %s: %s=%q, its record gives devices %v", name, c.Name, allocation.EnvVisibleDevices, got.env[allocation.EnvVisibleDevices], c.Devices)
		}
	}
	return rec
}

// deletePod deletes a pod and waits until it is gone (the real kubelet ends its containers).
func deletePod(t *testing.T, ctx context.Context, ns, name string) {
	t.Helper()
	if err := framework.L.Client().CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, ctx, ns, name, 60*time.Second)
}

func waitGone(t *testing.T, ctx context.Context, ns, name string, timeout time.Duration) {
	t.Helper()
	framework.WaitFor(t, ctx, timeout, "pod "+ns+"/"+name+" to be gone", func(ctx context.Context) (bool, string, error) {
		p, err := framework.L.Client().CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return true, "", nil
		}
		return false, framework.DescribePod(ctx, p), nil
	})
}

// allocatable is a node's allocatable count of resource.
func allocatable(t *testing.T, ctx context.Context, node string, resource corev1.ResourceName) int64 {
	t.Helper()
	n, err := framework.L.Client().CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	q := n.Status.Allocatable[resource]
	return q.Value()
}

func waitAllocatable(t *testing.T, ctx context.Context, node string, resource corev1.ResourceName, want int64, timeout time.Duration) {
	t.Helper()
	framework.WaitFor(t, ctx, timeout, fmt.Sprintf("node %s to advertise %d %s", node, want, resource), func(ctx context.Context) (bool, string, error) {
		got := allocatable(t, ctx, node, resource)
		return got == want, fmt.Sprintf("%d", got), nil
	})
}

// componentPod is the running pod of a chart DaemonSet on a node.
func componentPod(t *testing.T, ctx context.Context, ns, selector, node string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	framework.WaitFor(t, ctx, 90*time.Second, fmt.Sprintf("a ready %s pod on %s", selector, node), func(ctx context.Context) (bool, string, error) {
		pods, err := framework.L.Client().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector, FieldSelector: "spec.nodeName=" + node})
		if err != nil {
			return false, err.Error(), nil
		}
		var states []string
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && ready(p) {
				pod = p
				return true, "", nil
			}
			states = append(states, framework.DescribePod(ctx, p))
		}
		return false, strings.Join(states, "; "), nil
	})
	return pod
}

func ready(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Selectors of the chart's DaemonSet pods.
const (
	devicePluginPods = "name=neuron-device-plugin-ds"
	draDriverPods    = "app=neuron-dra-driver-kubelet-plugin"
	draNamespace     = "neuron-dra-driver"
)

// newNamespace makes a namespace for the test; when the test ends its pods are deleted and
// waited for, and the real device-plugin nodes advertise all their devices again, so the next
// test starts on empty nodes (a real kubelet reports allocatable every 10 s: a pod placed on a
// stale view fails at admission, see docs/device-plugin.md).
func newNamespace(t *testing.T, ctx context.Context) string {
	t.Helper()
	ns := framework.CreateNamespace(t, ctx)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		c := framework.L.Client()
		if err := c.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
			t.Errorf("deleting the pods of %s: %v", ns, err)
			return
		}
		framework.WaitFor(t, ctx, 2*time.Minute, "the pods and claims of "+ns+" to be gone", func(ctx context.Context) (bool, string, error) {
			pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err.Error(), nil
			}
			claims, err := c.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err.Error(), nil
			}
			return len(pods.Items)+len(claims.Items) == 0, fmt.Sprintf("%d pods, %d claims", len(pods.Items), len(claims.Items)), nil
		})
		for node, devices := range map[string]int64{inf2Node: 12, trn1Node: 16} {
			waitAllocatable(t, ctx, node, neuronRes, devices, time.Minute)
		}
	})
	return ns
}
