//go:build e2e

package chart

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-neuron/kube-neuron/test/e2e/framework"
)

// TestGeneratedCertificatesSurviveUpgrades installs the chart for real with helm (its
// certificates generated: scheduler.tls.generate, the default) and upgrades it: an upgrade keeps
// both Secrets and my-scheduler's pod template as they are, so running pods keep working; with a
// Secret gone, the next upgrade generates a new CA and both certificates, and my-scheduler's pod
// template changes so that it restarts with them.
func TestGeneratedCertificatesSurviveUpgrades(t *testing.T) {
	ctx := framework.Context(t)
	helm, err := framework.HelmPath()
	if err != nil {
		t.Fatal(err)
	}
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	const rel, ns = "tls-upgrade", "tls-upgrade"
	upgrade := func() {
		t.Helper()
		if out, err := framework.L.Helm(ctx, helm, "upgrade", "--install", rel, filepath.Join(root, framework.Chart), "--namespace", ns, "--create-namespace",
			"--set", "image.localImages=true", "--set", "scheduler.enabled=true", "--set", "scheduler.namespace="+ns,
			"--set", "npd.enabled=false", "--set", "devicePlugin.enabled=false", "--set", "scheduler.allowWithoutDevicePlugin=true"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	t.Cleanup(func() {
		if out, err := framework.L.Helm(context.Background(), helm, "uninstall", rel, "--namespace", ns, "--wait"); err != nil {
			t.Errorf("helm uninstall: %v\n%s", err, out)
		}
	})
	client := framework.L.Client()
	type state struct {
		server, client map[string][]byte
		checksum       string
	}
	read := func() state {
		t.Helper()
		var s state
		for name, data := range map[string]*map[string][]byte{"k8s-neuron-scheduler-tls": &s.server, "my-scheduler-extender-client-tls": &s.client} {
			sec, err := client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			*data = sec.Data
		}
		d, err := client.AppsV1().Deployments(ns).Get(ctx, "my-scheduler", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s.checksum = d.Spec.Template.Annotations["checksum/client-tls"]
		if len(s.server["ca.crt"]) == 0 || !bytes.Equal(s.server["ca.crt"], s.client["ca.crt"]) || s.checksum == "" {
			t.Fatalf("after the install: server ca.crt %d bytes, client ca.crt the same: %v, checksum %q", len(s.server["ca.crt"]), bytes.Equal(s.server["ca.crt"], s.client["ca.crt"]), s.checksum)
		}
		return s
	}
	same := func(a, b state) bool {
		for _, k := range []string{"tls.crt", "tls.key", "ca.crt"} {
			if !bytes.Equal(a.server[k], b.server[k]) || !bytes.Equal(a.client[k], b.client[k]) {
				return false
			}
		}
		return a.checksum == b.checksum
	}

	upgrade()
	first := read()
	upgrade()
	if second := read(); !same(first, second) {
		t.Errorf("helm upgrade replaced the generated certificates or my-scheduler's checksum (%q, then %q)", first.checksum, second.checksum)
	}

	if err := client.CoreV1().Secrets(ns).Delete(ctx, "my-scheduler-extender-client-tls", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	upgrade()
	third := read()
	if bytes.Equal(third.server["ca.crt"], first.server["ca.crt"]) || bytes.Equal(third.server["tls.crt"], first.server["tls.crt"]) || third.checksum == first.checksum {
		t.Errorf("with my-scheduler's Secret deleted, helm upgrade kept the old CA or serving certificate, or my-scheduler's checksum: want a new CA signing both")
	}
}
