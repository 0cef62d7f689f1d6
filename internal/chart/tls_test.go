package chart

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	neuronextender "github.com/kube-neuron/kube-neuron/internal/extender"
	"github.com/kube-neuron/kube-neuron/internal/testkit"
)

// generatedTLS is what the chart generates with the default TLS settings: the extender's Secret
// and my-scheduler's.
type generatedTLS struct {
	server, client *corev1.Secret
}

// renderTLS renders the chart and returns the two Secrets in ns, checking their type and keys.
func renderTLS(t *testing.T, ns string, sets ...string) (manifest, generatedTLS) {
	t.Helper()
	m := render(t, sets...)
	g := generatedTLS{
		server: get[corev1.Secret](t, m, "Secret", ns, "k8s-neuron-scheduler-tls"),
		client: get[corev1.Secret](t, m, "Secret", ns, "my-scheduler-extender-client-tls"),
	}
	for _, s := range []*corev1.Secret{g.server, g.client} {
		if keys := slices.Sorted(func(yield func(string) bool) {
			for k := range s.Data {
				if !yield(k) {
					return
				}
			}
		}); s.Type != corev1.SecretTypeTLS || !slices.Equal(keys, []string{"ca.crt", "tls.crt", "tls.key"}) {
			t.Fatalf("Secret %s: type %q keys %v, want kubernetes.io/tls with ca.crt, tls.crt, tls.key", s.Name, s.Type, keys)
		}
	}
	return m, g
}

func parseCert(t *testing.T, what string, data []byte) *x509.Certificate {
	t.Helper()
	block, rest := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" || len(bytes.TrimSpace(rest)) != 0 {
		t.Fatalf("%s is not one PEM certificate:\n%s", what, data)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return c
}

// TestSchedulerTLSGenerated: by default the chart generates one CA, the extender's serving
// certificate for the Service's names and my-scheduler's client certificate, each key matching
// its certificate; every render without a cluster generates new ones, and my-scheduler's pod
// template carries their checksum, so that new certificates restart it.
func TestSchedulerTLSGenerated(t *testing.T) {
	t.Parallel()
	m, g := renderTLS(t, "neuron", "scheduler.enabled=true", "scheduler.namespace=neuron")
	if !bytes.Equal(g.server.Data["ca.crt"], g.client.Data["ca.crt"]) {
		t.Fatalf("the two Secrets' ca.crt differ: the chart's one CA signs both certificates")
	}
	ca := parseCert(t, "ca.crt", g.server.Data["ca.crt"])
	if !ca.IsCA || ca.Subject.CommonName != "k8s-neuron-scheduler-ca" {
		t.Errorf("ca.crt: IsCA %v CN %q", ca.IsCA, ca.Subject.CommonName)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	server := parseCert(t, "the extender's tls.crt", g.server.Data["tls.crt"])
	for _, name := range []string{"k8s-neuron-scheduler", "k8s-neuron-scheduler.neuron", "k8s-neuron-scheduler.neuron.svc", "k8s-neuron-scheduler.neuron.svc.cluster.local"} {
		if _, err := server.Verify(x509.VerifyOptions{Roots: roots, DNSName: name, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("the serving certificate does not verify for %s: %v", name, err)
		}
	}
	if _, err := server.Verify(x509.VerifyOptions{Roots: roots, DNSName: "k8s-neuron-scheduler.kube-system.svc"}); err == nil {
		t.Errorf("the serving certificate verifies for another namespace's Service")
	}
	client := parseCert(t, "my-scheduler's tls.crt", g.client.Data["tls.crt"])
	if _, err := client.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil || client.Subject.CommonName != "my-scheduler" {
		t.Errorf("the client certificate (CN %q) does not verify as a client: %v", client.Subject.CommonName, err)
	}
	for _, s := range []*corev1.Secret{g.server, g.client} {
		if _, err := tls.X509KeyPair(s.Data["tls.crt"], s.Data["tls.key"]); err != nil {
			t.Errorf("Secret %s: tls.key does not match tls.crt: %v", s.Name, err)
		}
	}

	_, again := renderTLS(t, "neuron", "scheduler.enabled=true", "scheduler.namespace=neuron")
	if bytes.Equal(again.server.Data["ca.crt"], g.server.Data["ca.crt"]) {
		t.Errorf("two renders without a cluster gave the same CA")
	}
	sum := func(m manifest) string {
		return get[appsv1.Deployment](t, m, "Deployment", "neuron", "my-scheduler").Spec.Template.Annotations["checksum/client-tls"]
	}
	if a, b := sum(m), sum(render(t, "scheduler.enabled=true", "scheduler.namespace=neuron")); a == "" || a == b {
		t.Errorf("my-scheduler's checksum/client-tls %q, then %q: want one that changes with the certificates", a, b)
	}
}

// TestSchedulerTLSSources: the chart generates the Secrets only when nobody else provides them.
func TestSchedulerTLSSources(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name            string
		sets            []string
		secrets, issued bool // the chart's Secrets; cert-manager's Certificates
		https           bool
	}{
		{"generated (the default)", nil, true, false, true},
		{"cert-manager", []string{"scheduler.tls.certManager.enabled=true"}, false, true, true},
		{"your Secrets", []string{"scheduler.tls.generate=false"}, false, false, true},
		{"plain HTTP", []string{"scheduler.tls.enabled=false"}, false, false, false},
		{"default scheduler, generated", []string{"scheduler.customScheduler.enabled=false", "scheduler.defaultScheduler.enabled=true"}, true, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := render(t, append([]string{"scheduler.enabled=true", "npd.enabled=false"}, tc.sets...)...)
			var secrets, issued bool
			for _, o := range m {
				secrets = secrets || o.Kind == "Secret"
				issued = issued || o.Kind == "Certificate"
			}
			if secrets != tc.secrets || issued != tc.issued {
				t.Errorf("Secrets rendered %v, Certificates %v; want %v, %v", secrets, issued, tc.secrets, tc.issued)
			}
			c := get[appsv1.Deployment](t, m, "Deployment", "kube-system", "k8s-neuron-scheduler").Spec.Template.Spec.Containers[0]
			if https := c.Ports[0].Name == "https"; https != tc.https {
				t.Errorf("extender port %q, want HTTPS %v", c.Ports[0].Name, tc.https)
			}
		})
	}
}

// TestGeneratedCertificatesRefuseOtherClients runs the extender's real HTTPS server with the
// certificates the chart generates, mounted as the Deployment mounts them: my-scheduler's
// client certificate gets filter answered, over a connection that checks the extender's
// certificate for the name in my-scheduler's tlsConfig; a client without a certificate and one
// with a certificate of another CA are refused.
func TestGeneratedCertificatesRefuseOtherClients(t *testing.T) {
	t.Parallel()
	m, g := renderTLS(t, "kube-system", "scheduler.enabled=true")
	_, _, tc := extenderTLS(t, m, "my-scheduler-config", "my-scheduler-config.yaml")

	// The files where the Deployment's env says, under a directory of the test's.
	d := get[appsv1.Deployment](t, m, "Deployment", "kube-system", "k8s-neuron-scheduler")
	env := map[string]string{}
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	dir := t.TempDir()
	files := map[string]string{}
	for _, name := range []string{"NEURON_TLS_CERT_FILE", "NEURON_TLS_PRIVATE_KEY_FILE", "NEURON_CLIENT_CA_FILE"} {
		key := filepath.Base(env[name])
		if _, ok := g.server.Data[key]; !ok {
			t.Fatalf("env %s = %q: no such key in Secret %s", name, env[name], g.server.Name)
		}
		files[name] = filepath.Join(dir, key)
		if err := os.WriteFile(files[name], g.server.Data[key], 0o600); err != nil {
			t.Fatal(err)
		}
	}

	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	client := fake.NewClientset(testkit.MakeNode().Name("trn-a").InstanceType("trn1.32xlarge").Obj())
	e, err := neuronextender.New(neuronextender.Options{Client: client, LeaseNamespace: "kube-system", Identity: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	served := make(chan error, 1)
	go func() {
		served <- e.Serve(ctx, neuronextender.ServeOptions{Address: addr, TLS: &neuronextender.TLSOptions{
			CertFile: files["NEURON_TLS_CERT_FILE"], KeyFile: files["NEURON_TLS_PRIVATE_KEY_FILE"], ClientCAFile: files["NEURON_CLIENT_CA_FILE"],
		}})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-served:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("Serve did not return after its context ended")
		}
	})
	waitForListener(t, addr, served)

	// my-scheduler's side: its Secret's ca.crt checks the extender's certificate for serverName.
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(g.client.Data["ca.crt"]) {
		t.Fatal("my-scheduler's ca.crt holds no certificate")
	}
	mine, err := tls.X509KeyPair(g.client.Data["tls.crt"], g.client.Data["tls.key"])
	if err != nil {
		t.Fatal(err)
	}
	stranger := otherCAClientCert(t)
	body, err := json.Marshal(extenderv1.ExtenderArgs{Pod: testkit.MakePod().Name("p").Neuron(4).Obj(), NodeNames: &[]string{"trn-a"}})
	if err != nil {
		t.Fatal(err)
	}
	const refused = "need a client certificate signed by a CA of the extender's --client-ca-file"
	for _, c := range []struct {
		name       string
		cert       *tls.Certificate
		wantStatus int    // 0: the TLS handshake fails
		want       string // in the body, or in the error
	}{
		{"my-scheduler's certificate", &mine, http.StatusOK, `"NodeNames":["trn-a"]`},
		{"no certificate", nil, http.StatusForbidden, refused},
		{"a certificate of another CA", &stranger, 0, "certificate"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := &tls.Config{RootCAs: roots, ServerName: tc.ServerName, MinVersion: tls.VersionTLS12}
			if c.cert != nil {
				// Offered whatever CAs the server names, as kube-scheduler does with its one pair.
				cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return c.cert, nil }
			}
			hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}}
			resp, err := hc.Post("https://"+addr+"/filter", "application/json", bytes.NewReader(body))
			if c.wantStatus == 0 {
				if err == nil {
					_ = resp.Body.Close()
					t.Fatalf("status %d, want the TLS handshake to fail", resp.StatusCode)
				}
				if !strings.Contains(err.Error(), c.want) {
					t.Errorf("error %v does not mention %q", err, c.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = resp.Body.Close() }()
			data, err := io.ReadAll(resp.Body)
			if err != nil || resp.StatusCode != c.wantStatus || !strings.Contains(string(data), c.want) {
				t.Errorf("status %d body %q (%v), want %d with %q", resp.StatusCode, data, err, c.wantStatus, c.want)
			}
		})
	}

	// The extender's certificate is good for the Service's name only: a client that expects
	// another name refuses it.
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, ServerName: "k8s-neuron-scheduler.default.svc", MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{mine}})
	if err == nil {
		_ = conn.Close()
		t.Errorf("the extender's certificate verified for k8s-neuron-scheduler.default.svc")
	} else if !errors.As(err, new(x509.HostnameError)) && !strings.Contains(err.Error(), "certificate is valid for") {
		t.Errorf("dialling as k8s-neuron-scheduler.default.svc: %v, want a hostname mismatch", err)
	}
}

// otherCAClientCert is a client certificate for CN my-scheduler from a CA of its own.
func otherCAClientCert(t *testing.T) tls.Certificate {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "k8s-neuron-scheduler-ca"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageCertSign, IsCA: true, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "my-scheduler"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// freeAddr returns a free 127.0.0.1 address.
func freeAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	return addr
}

// waitForListener polls addr until it accepts a connection, failing if Serve returns first or
// after 10 seconds.
func waitForListener(t *testing.T, addr string, served chan error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
			return
		}
		select {
		case err := <-served:
			served <- err // for the cleanup
			t.Fatalf("Serve returned before listening: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing listens on %s after 10s: %v", addr, err)
		}
	}
}
