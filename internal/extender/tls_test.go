package extender

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
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/kube-neuron/kube-neuron/internal/testkit"
)

// testCA signs certificates for the TLS tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newSerial() *big.Int {
	n, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		panic(err)
	}
	return n
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          newSerial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageCertSign,
		IsCA:                  true,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a PEM certificate and key for cn: a serving certificate for 127.0.0.1, or a
// client certificate.
func (ca *testCA) issue(t *testing.T, cn string, server bool) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: newSerial(),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
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

// tlsSetup is a running extender behind TLS with client authentication.
type tlsSetup struct {
	ca, otherCA               *testCA
	dir                       string
	addr, metricsAddr         string
	certFile, keyFile, caFile string
	clientCert, strangerCert  tls.Certificate
	pod                       *corev1.Pod
	serveErr                  chan error
}

func startTLS(t *testing.T) *tlsSetup {
	t.Helper()
	s := &tlsSetup{ca: newTestCA(t, "extender-ca"), otherCA: newTestCA(t, "other-ca"), dir: t.TempDir(), serveErr: make(chan error, 1)}
	s.certFile, s.keyFile, s.caFile = filepath.Join(s.dir, "tls.crt"), filepath.Join(s.dir, "tls.key"), filepath.Join(s.dir, "ca.crt")
	certPEM, keyPEM := s.ca.issue(t, "k8s-neuron-scheduler", true)
	writeFile(t, s.certFile, certPEM)
	writeFile(t, s.keyFile, keyPEM)
	writeFile(t, s.caFile, s.ca.pem)
	var err error
	if s.clientCert, err = tls.X509KeyPair(s.ca.issue(t, "my-scheduler", false)); err != nil {
		t.Fatal(err)
	}
	if s.strangerCert, err = tls.X509KeyPair(s.otherCA.issue(t, "my-scheduler", false)); err != nil {
		t.Fatal(err)
	}
	e, client, ctx := startExtender(t, cluster()...)
	s.pod = createPod(t, ctx, client, testkit.MakePod().Name("p").Neuron(4).Obj())
	s.addr, s.metricsAddr = freeAddr(t), freeAddr(t)
	go func() {
		s.serveErr <- e.Serve(ctx, ServeOptions{Address: s.addr, MetricsAddress: s.metricsAddr, TLS: &TLSOptions{CertFile: s.certFile, KeyFile: s.keyFile, ClientCAFile: s.caFile}})
	}()
	waitListening(t, s.addr)
	waitListening(t, s.metricsAddr)
	return s
}

func waitListening(t *testing.T, addr string) {
	t.Helper()
	waitEvery(t, 20*time.Millisecond, 10*time.Second, "a listener on "+addr, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			_ = c.Close()
		}
		return err == nil
	})
}

// client returns an HTTPS client that trusts the test CA and presents certs[0], if given, also
// when the server's list of acceptable CAs does not name its issuer.
func (s *tlsSetup) client(certs ...tls.Certificate) *http.Client {
	pool := x509.NewCertPool()
	pool.AddCert(s.ca.cert)
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if len(certs) > 0 {
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &certs[0], nil }
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}}
}

func post(c *http.Client, url string, body []byte) (int, string, error) {
	method := http.MethodPost
	if body == nil {
		method = http.MethodGet
	}
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data), err
}

func TestTLSClientAuthentication(t *testing.T) {
	s := startTLS(t)
	base := "https://" + s.addr
	bind := mustJSON(t, extenderv1.ExtenderBindingArgs{PodName: "p", PodNamespace: "default", PodUID: s.pod.UID, Node: "trn-empty"})
	filter := mustJSON(t, filterArgs(testkit.MakePod().Name("p").Neuron(4).Obj(), "trn-empty"))
	const refused = "need a client certificate signed by a CA of the extender's --client-ca-file"
	for _, tc := range []struct {
		name       string
		client     *http.Client
		path       string
		body       []byte
		wantStatus int    // 0: the TLS handshake fails
		wantBody   string // in the body, or in the error
	}{
		{"bind without a client certificate", s.client(), "/bind", bind, http.StatusForbidden, refused},
		{"filter without a client certificate", s.client(), "/filter", filter, http.StatusForbidden, refused},
		{"prioritize without a client certificate", s.client(), "/prioritize", filter, http.StatusForbidden, refused},
		{"unknown path without a client certificate", s.client(), "/debug/pprof/", nil, http.StatusForbidden, refused},
		{"bind with a certificate of another CA", s.client(s.strangerCert), "/bind", bind, 0, "certificate"},
		{"healthz without a client certificate", s.client(), "/healthz", nil, http.StatusOK, "ok"},
		{"readyz without a client certificate", s.client(), "/readyz", nil, http.StatusOK, "ok"},
		{"metrics without a client certificate", s.client(), "/metrics", nil, http.StatusOK, "neuron_scheduler_extender_filter_duration_seconds"},
		{"filter with the scheduler's certificate", s.client(s.clientCert), "/filter", filter, http.StatusOK, `"NodeNames":["trn-empty"]`},
		{"bind with the scheduler's certificate", s.client(s.clientCert), "/bind", bind, http.StatusOK, `{"Error":""}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body, err := post(tc.client, base+tc.path, tc.body)
			if tc.wantStatus == 0 {
				if err == nil {
					t.Fatalf("status %d %q, want the TLS handshake to fail", status, body)
				}
				if !strings.Contains(err.Error(), tc.wantBody) {
					t.Errorf("error %v does not mention %q", err, tc.wantBody)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if status != tc.wantStatus || !strings.Contains(body, tc.wantBody) {
				t.Errorf("status %d body %q, want %d with %q", status, body, tc.wantStatus, tc.wantBody)
			}
		})
	}
	// Plain HTTP on the TLS port gets nothing but the server's TLS error.
	if status, body, err := post(&http.Client{Timeout: 5 * time.Second}, "http://"+s.addr+"/bind", bind); err == nil && status != http.StatusBadRequest {
		t.Errorf("plain HTTP to the TLS port: %d %q", status, body)
	}
	// The metrics address: health and metrics over plain HTTP, and nothing else.
	for path, want := range map[string]int{"/healthz": http.StatusOK, "/readyz": http.StatusOK, "/metrics": http.StatusOK, "/filter": http.StatusNotFound, "/bind": http.StatusNotFound} {
		status, body, err := post(&http.Client{Timeout: 5 * time.Second}, "http://"+s.metricsAddr+path, nil)
		if err != nil || status != want {
			t.Errorf("metrics address GET %s: %d %q %v, want %d", path, status, body, err, want)
		}
	}
}

// TestTLSReload: a renewed certificate is served from the next connection on, without a restart;
// a half-written renewal keeps the previous certificate.
func TestTLSReload(t *testing.T) {
	s := startTLS(t)
	serverCN := func() (string, error) {
		pool := x509.NewCertPool()
		pool.AddCert(s.ca.cert)
		conn, err := tls.Dial("tcp", s.addr, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
		if err != nil {
			return "", err
		}
		defer func() { _ = conn.Close() }()
		return conn.ConnectionState().PeerCertificates[0].Subject.CommonName, nil
	}
	if cn, err := serverCN(); err != nil || cn != "k8s-neuron-scheduler" {
		t.Fatalf("serving certificate %q %v", cn, err)
	}
	certPEM, keyPEM := s.ca.issue(t, "renewed", true)
	// Only the certificate changed so far: it does not match the key, so the old pair stays.
	writeFile(t, s.certFile, certPEM)
	if cn, err := serverCN(); err != nil || cn != "k8s-neuron-scheduler" {
		t.Fatalf("after a half-written renewal: serving certificate %q %v, want the previous one", cn, err)
	}
	writeFile(t, s.keyFile, keyPEM)
	if cn, err := serverCN(); err != nil || cn != "renewed" {
		t.Fatalf("after the renewal: serving certificate %q %v, want renewed", cn, err)
	}
	// A new client CA: the old client certificate is refused, one of the new CA accepted.
	newCA := newTestCA(t, "new-ca")
	writeFile(t, s.caFile, newCA.pem)
	filter := mustJSON(t, filterArgs(testkit.MakePod().Name("p").Neuron(4).Obj(), "trn-empty"))
	if status, body, err := post(s.client(s.clientCert), "https://"+s.addr+"/filter", filter); err == nil {
		t.Errorf("a certificate of the replaced client CA: %d %q, want the handshake to fail", status, body)
	}
	newClient, err := tls.X509KeyPair(newCA.issue(t, "my-scheduler", false))
	if err != nil {
		t.Fatal(err)
	}
	if status, body, err := post(s.client(newClient), "https://"+s.addr+"/filter", filter); err != nil || status != http.StatusOK {
		t.Errorf("a certificate of the new client CA: %d %q %v", status, body, err)
	}
}

func TestTLSBadFiles(t *testing.T) {
	e, _, ctx := startExtender(t, cluster()...)
	dir := t.TempDir()
	ca := newTestCA(t, "ca")
	certPEM, keyPEM := ca.issue(t, "server", true)
	cert, key, caFile, empty := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "ca.crt"), filepath.Join(dir, "empty")
	writeFile(t, cert, certPEM)
	writeFile(t, key, keyPEM)
	writeFile(t, caFile, ca.pem)
	writeFile(t, empty, nil)
	for _, tc := range []struct {
		name string
		o    TLSOptions
		want string
	}{
		{"no key", TLSOptions{CertFile: cert}, "TLS needs both a certificate file and a private key file"},
		{"missing certificate", TLSOptions{CertFile: filepath.Join(dir, "nope"), KeyFile: key}, "loading the serving certificate"},
		{"key of another certificate", TLSOptions{CertFile: cert, KeyFile: caFile}, "loading the serving certificate"},
		{"missing client CA", TLSOptions{CertFile: cert, KeyFile: key, ClientCAFile: filepath.Join(dir, "nope")}, "reading the client CA file"},
		{"empty client CA", TLSOptions{CertFile: cert, KeyFile: key, ClientCAFile: empty}, "holds no PEM certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.o
			err := e.Serve(ctx, ServeOptions{Address: "127.0.0.1:0", TLS: &o})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Serve: %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// TestServeStops: Serve returns nil once its context ends, with both listeners.
func TestServeStops(t *testing.T) {
	e, _, ctx := startExtender(t, cluster()...)
	ctx, cancel := context.WithCancel(ctx)
	addr, metrics := freeAddr(t), freeAddr(t)
	errc := make(chan error, 1)
	go func() { errc <- e.Serve(ctx, ServeOptions{Address: addr, MetricsAddress: metrics}) }()
	waitListening(t, addr)
	waitListening(t, metrics)
	status, body, err := post(&http.Client{Timeout: 5 * time.Second}, "http://"+addr+"/filter", mustJSON(t, filterArgs(testkit.MakePod().Name("p").Neuron(4).Obj(), "trn-empty")))
	var res extenderv1.ExtenderFilterResult
	if err != nil || status != http.StatusOK || json.Unmarshal([]byte(body), &res) != nil {
		t.Errorf("plain HTTP filter: %d %q %v", status, body, err)
	}
	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Errorf("Serve returned %v after its context ended, want nil", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Serve did not return after its context ended")
	}
	// The same address twice fails with a message naming it.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lis.Close() }()
	err = e.Serve(context.Background(), ServeOptions{Address: "127.0.0.1:0", MetricsAddress: lis.Addr().String()})
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("listening on %s", lis.Addr())) {
		t.Errorf("Serve on a taken metrics address: %v", err)
	}
}
