package lab

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"
)

// ChartOptions install the Helm chart into a lab, as a user installs it: `helm upgrade
// --install` with the pinned helm against the lab's API server.
type ChartOptions struct {
	// Helm is the helm binary (hack/helm/build.sh prints it); Chart the chart's directory.
	Helm, Chart string
	// Release is the release name (default ChartRelease), installed in ChartNamespace.
	Release string
	// ValuesFiles and Set are more values after the lab's own (LabChartValues).
	ValuesFiles []string
	Set         []string
	// Wait bounds the wait for the chart's pods to be ready (default 3 minutes).
	Wait time.Duration
}

// The lab's release of the chart.
const (
	ChartRelease   = "kube-neuron"
	ChartNamespace = "kube-system"
)

// LabChartValues are the values the lab installs the chart with: every component but the node
// problem detector, the device plugin and the DRA driver side by side (each node is labelled
// with its allocation mode), the chart's pods kept off simulated nodes (the lab runs those
// nodes' components as host processes), and one replica of the extender and my-scheduler when
// real nodes can run them (none otherwise: the lab runs them as host processes). With
// verbosity > 0 the components log at that -v, as the lab's host processes do.
func LabChartValues(realNodes bool, verbosity int) map[string]any {
	replicas := 0
	if realNodes {
		replicas = 1
	}
	args := []string{}
	if verbosity > 0 {
		args = []string{fmt.Sprintf("--v=%d", verbosity)}
	}
	return map[string]any{
		// make images puts the images into the lab's registry under their bare names.
		"image":        map[string]any{"localImages": true},
		"npd":          map[string]any{"enabled": false},
		"draDriver":    map[string]any{"enabled": true, "args": args},
		"devicePlugin": map[string]any{"allowWithDRA": true, "args": args},
		"scheduler": map[string]any{
			"enabled":  true,
			"replicas": replicas,
			// The real-node tier checks the extender's pods (mutual TLS between them and
			// my-scheduler, the Service's DNS name); its TestChartSwitchesToPluginOnRealNodes
			// upgrades the release to the plugin mode and back, and the lab's host processes run
			// the plugin mode's scenarios (KUBE_NEURON_SCHEDULING=plugin).
			"customScheduler": map[string]any{"replicas": replicas, "mode": "extender"},
			"args":            args,
		},
		"neuronNodes": map[string]any{
			"extraMatchExpressions": []any{map[string]any{
				"key": LabKubeletLabel, "operator": "NotIn", "values": []string{KubeletSimulated},
			}},
		},
	}
}

// InstallChart runs `helm upgrade --install` of the chart against the lab and waits until the
// release's pods are ready.
func (l *Lab) InstallChart(ctx context.Context, o ChartOptions) error {
	if o.Release == "" {
		o.Release = ChartRelease
	}
	if o.Wait == 0 {
		o.Wait = 3 * time.Minute
	}
	values, err := yaml.Marshal(LabChartValues(l.real != nil, l.opts.Verbosity))
	if err != nil {
		return err
	}
	valuesFile := filepath.Join(l.cp.Dir(), "config", "chart-values.yaml")
	if err := os.WriteFile(valuesFile, values, 0o644); err != nil {
		return err
	}
	args := []string{"upgrade", "--install", o.Release, o.Chart, "--namespace", ChartNamespace,
		"--kubeconfig", l.cp.Kubeconfig(), "-f", valuesFile}
	for _, f := range o.ValuesFiles {
		args = append(args, "-f", f)
	}
	for _, s := range o.Set {
		args = append(args, "--set", s)
	}
	if _, err := l.Helm(ctx, o.Helm, args...); err != nil {
		return err
	}
	return l.waitForRelease(ctx, o.Release, o.Wait)
}

// Helm runs the helm binary against the lab (its cache and configuration in the lab's
// directory) and returns its output.
func (l *Lab) Helm(ctx context.Context, helm string, args ...string) (string, error) {
	home := filepath.Join(l.cp.Dir(), "helm")
	cmd := exec.CommandContext(ctx, helm, args...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"), "HELM_DATA_HOME="+filepath.Join(home, "data"),
		"KUBECONFIG="+l.cp.Kubeconfig())
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String(), nil
}

// waitForRelease waits until every pod of the release and of the lab's CoreDNS runs ready, and
// every DaemonSet of the release has a ready pod on each node it selects.
func (l *Lab) waitForRelease(ctx context.Context, release string, timeout time.Duration) error {
	var last string
	var never error // a pod no node will take
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		pods, err := l.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + release})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		dns, err := l.client.CoreV1().Pods(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
		if err == nil {
			pods.Items = append(pods.Items, dns.Items...)
		}
		var waiting []string
		facts := PendingFacts{SystemNode: l.real != nil, MyScheduler: true, Autoscaler: slices.Contains(l.opts.Components, ComponentAutoscaler)}
		for _, p := range pods.Items {
			if podReady(&p) {
				continue
			}
			if p.Status.Phase != corev1.PodPending || p.Spec.NodeName != "" {
				waiting = append(waiting, fmt.Sprintf("%s/%s on %q: %s", p.Namespace, p.Name, p.Spec.NodeName, podState(&p)))
				continue
			}
			why := ExplainPending(&p, nil, facts)
			// No node will ever take the extender's or my-scheduler's pods in a lab without
			// real nodes: say so now rather than after the timeout.
			if !facts.SystemNode && unschedulable(&p) && isChartScheduler(&p) {
				never = fmt.Errorf("%s/%s is Pending: %s", p.Namespace, p.Name, strings.ReplaceAll(why, "\n", "; "))
				return false, never
			}
			waiting = append(waiting, fmt.Sprintf("%s/%s is Pending: %s", p.Namespace, p.Name, strings.ReplaceAll(why, "\n", "; ")))
		}
		dss, err := l.client.AppsV1().DaemonSets("").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + release})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		for _, ds := range dss.Items {
			if ds.Status.ObservedGeneration < ds.Generation || ds.Status.NumberReady < ds.Status.DesiredNumberScheduled {
				waiting = append(waiting, fmt.Sprintf("DaemonSet %s/%s: %d of %d pods ready", ds.Namespace, ds.Name, ds.Status.NumberReady, ds.Status.DesiredNumberScheduled))
			}
		}
		last = strings.Join(waiting, "; ")
		return len(waiting) == 0, nil
	})
	switch {
	case never != nil:
		return never
	case err != nil:
		return fmt.Errorf("the chart's pods are not ready after %v: %s: %w", timeout, last, err)
	}
	return nil
}

func podReady(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podState says why a pod is not ready: its phase and the first waiting container's reason.
func podState(p *corev1.Pod) string {
	s := string(p.Status.Phase)
	for _, cs := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
		if w := cs.State.Waiting; w != nil {
			return s + ", " + cs.Name + " " + w.Reason + ": " + w.Message
		}
		if t := cs.State.Terminated; t != nil {
			return fmt.Sprintf("%s, %s terminated %s (exit %d): %s", s, cs.Name, t.Reason, t.ExitCode, t.Message)
		}
	}
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			return s + ", " + c.Message
		}
	}
	return s
}
