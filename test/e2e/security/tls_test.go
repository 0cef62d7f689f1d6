//go:build e2e

package security

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/lab"
	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/test/e2e/framework"
)

// TestExtenderTLSWithKubeScheduler starts neuron-scheduler-extender with --tls-cert-file,
// --tls-private-key-file and --client-ca-file, and a real kube-scheduler with the
// KubeSchedulerConfiguration the chart renders with scheduler.tls.enabled (its urlPrefix and file
// paths pointed at this host): a pod through that scheduler is filtered, bound and served over
// HTTPS with client authentication, and a caller without the client certificate is refused.
func TestExtenderTLSWithKubeScheduler(t *testing.T) {
	ctx := framework.Context(t)
	dir := t.TempDir()
	pki, err := lab.GeneratePKI(filepath.Join(dir, "pki"))
	if err != nil {
		t.Fatal(err)
	}
	const serverName = "k8s-neuron-scheduler.kube-system.svc" // the chart's tlsConfig.serverName
	serverCert, serverKey, err := pki.IssueServingCert("extender", []string{serverName}, []net.IP{net.ParseIP("127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	clientCert, clientKey, err := pki.IssueClientCert("my-scheduler-tls", "my-scheduler")
	if err != nil {
		t.Fatal(err)
	}
	ports := freePorts(t, 2)
	addr, metrics := fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])
	p, err := lab.StartProcess(lab.ProcessOptions{
		Name: "neuron-scheduler-extender-tls",
		Path: framework.L.ComponentPath(lab.ComponentExtender),
		Args: []string{"--kubeconfig=" + framework.L.ControlPlane().Kubeconfig(), "--bind-address=127.0.0.1", fmt.Sprintf("--port=%d", ports[0]),
			"--lease-namespace=kube-system", "-v=4"},
		// The flags through the chart's env vars.
		Env:     []string{"NEURON_METRICS_ADDRESS=" + metrics, "NEURON_TLS_CERT_FILE=" + serverCert, "NEURON_TLS_PRIVATE_KEY_FILE=" + serverKey, "NEURON_CLIENT_CA_FILE=" + pki.CACert},
		LogPath: framework.L.ControlPlane().LogPath("neuron-scheduler-extender-tls"),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop(5 * time.Second) })
	plain := &http.Client{Timeout: 5 * time.Second}
	framework.WaitFor(t, ctx, 60*time.Second, "the TLS extender's /readyz on its metrics address", func(ctx context.Context) (bool, string, error) {
		resp, err := plain.Get("http://" + metrics + "/readyz")
		if err != nil {
			return false, err.Error(), nil
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status, nil
	})

	// Without a client certificate: refused.
	pool := x509.NewCertPool()
	caPEM, err := os.ReadFile(pki.CACert)
	if err != nil {
		t.Fatal(err)
	}
	pool.AppendCertsFromPEM(caPEM)
	anonymous := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: serverName, MinVersion: tls.VersionTLS12}}}
	resp, err := anonymous.Post("https://"+addr+"/bind", "application/json", bytes.NewReader([]byte(`{"PodName":"x","PodNamespace":"default","Node":"trn1-a"}`)))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("bind without a client certificate: %s, want 403 Forbidden", resp.Status)
	}

	// The chart's my-scheduler configuration with TLS, pointed at this extender.
	var cfgData string
	for _, o := range framework.RenderChart(t, "kube-neuron", "kube-system", "scheduler.enabled=true", "scheduler.customScheduler.mode=extender", "scheduler.tls.enabled=true") {
		if o.GetKind() == "ConfigMap" && o.GetName() == "my-scheduler-config" {
			cfgData, _, _ = unstructuredString(o.Object, "data", "my-scheduler-config.yaml")
		}
	}
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(cfgData), &cfg); err != nil || cfg == nil {
		t.Fatalf("the chart's my-scheduler-config.yaml: %v\n%s", err, cfgData)
	}
	const scheduler = "my-scheduler-tls"
	cfg["profiles"].([]any)[0].(map[string]any)["schedulerName"] = scheduler
	ext := cfg["extenders"].([]any)[0].(map[string]any)
	if ext["enableHTTPS"] != true || !strings.HasPrefix(ext["urlPrefix"].(string), "https://") {
		t.Fatalf("the chart's extender entry is not HTTPS: %v", ext)
	}
	ext["urlPrefix"] = "https://" + addr
	tc := ext["tlsConfig"].(map[string]any)
	if tc["serverName"] != serverName {
		t.Fatalf("tlsConfig.serverName = %v, want %s", tc["serverName"], serverName)
	}
	tc["certFile"], tc["keyFile"], tc["caFile"] = clientCert, clientKey, pki.CACert
	data, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := framework.L.ControlPlane().StartScheduler(ctx, scheduler, data); err != nil {
		t.Fatal(err)
	}

	ns := framework.CreateNamespace(t, ctx)
	four := corev1.ResourceList{"aws.amazon.com/neuron": *resource.NewQuantity(4, resource.DecimalSI)}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "over-tls", Namespace: ns},
		Spec: corev1.PodSpec{
			SchedulerName: scheduler,
			NodeSelector:  map[string]string{labels.InstanceType: "trn1.32xlarge"},
			Tolerations:   []corev1.Toleration{{Key: labels.NeuronTaintKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			Containers:    []corev1.Container{{Name: "main", Image: "x", Resources: corev1.ResourceRequirements{Limits: four, Requests: four}}},
		},
	}
	if _, err := framework.L.Client().CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = framework.L.Client().CoreV1().Pods(ns).Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	})
	got := framework.WaitForPod(t, ctx, ns, pod.Name, corev1.PodRunning, 2*time.Minute)
	rec, err := allocation.Parse(got.Annotations[allocation.Annotation])
	if err != nil || rec.Node != "trn1-a" || len(rec.Containers) != 1 || len(rec.Containers[0].Devices) != 4 {
		t.Errorf("pod %s: allocation record %+v (%v), want 4 devices on trn1-a written by the TLS extender", pod.Name, rec, err)
	}
	// Only my-scheduler-tls schedules the pod, and it knows only the TLS extender.
	if got.Spec.NodeName != "trn1-a" {
		t.Errorf("pod %s on node %q, want trn1-a", pod.Name, got.Spec.NodeName)
	}
}

func unstructuredString(obj map[string]any, fields ...string) (string, bool, error) {
	var cur any = obj
	for _, f := range fields {
		m, ok := cur.(map[string]any)
		if !ok {
			return "", false, nil
		}
		cur = m[f]
	}
	s, ok := cur.(string)
	return s, ok, nil
}

func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var out []int
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		_ = l.Close()
	}
	return out
}
