package lab

import (
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
)

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b, rest := pem.Decode(data)
	if b == nil || b.Type != "CERTIFICATE" || len(rest) != 0 {
		t.Fatalf("%s: want exactly one CERTIFICATE PEM block", path)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return c
}

func checkValidity(t *testing.T, name string, c *x509.Certificate) {
	t.Helper()
	now := time.Now()
	if c.NotBefore.After(now) {
		t.Errorf("%s: NotBefore %v is in the future", name, c.NotBefore)
	}
	if c.NotAfter.Before(now.Add(300 * 24 * time.Hour)) {
		t.Errorf("%s: NotAfter %v is less than 300 days away", name, c.NotAfter)
	}
}

func TestPKIGenerate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	p, err := GeneratePKI(dir)
	if err != nil {
		t.Fatal(err)
	}

	for _, f := range []string{p.CACert, p.CAKey, p.ServingCert, p.ServingKey, p.AdminCert, p.AdminKey,
		p.ServiceAccountKey, p.ServiceAccountPubKey} {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", f, fi.Mode().Perm())
		}
		if filepath.Dir(f) != dir {
			t.Errorf("%s is not in %s", f, dir)
		}
	}
	// No temporary files are left behind.
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 8 {
		t.Errorf("%s holds %d files, want 8", dir, len(entries))
	}

	ca := readCert(t, p.CACert)
	checkValidity(t, "CA", ca)
	if !ca.IsCA || !ca.BasicConstraintsValid || ca.KeyUsage&x509.KeyUsageCertSign == 0 {
		t.Errorf("CA: IsCA=%v BasicConstraintsValid=%v KeyUsage=%v, want a CA that signs certificates",
			ca.IsCA, ca.BasicConstraintsValid, ca.KeyUsage)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)

	serving := readCert(t, p.ServingCert)
	checkValidity(t, "serving", serving)
	if serving.IsCA {
		t.Error("serving certificate must not be a CA")
	}
	if serving.KeyUsage&x509.KeyUsageDigitalSignature == 0 || !slices.Equal(serving.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}) {
		t.Errorf("serving: KeyUsage %v ExtKeyUsage %v, want digital signature and server auth", serving.KeyUsage, serving.ExtKeyUsage)
	}
	wantDNS := []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}
	if !slices.Equal(serving.DNSNames, wantDNS) {
		t.Errorf("serving DNS SANs %v, want %v", serving.DNSNames, wantDNS)
	}
	// The host's loopback, the kubernetes Service and the lab namespace's address (real nodes).
	if len(serving.IPAddresses) != 3 || !serving.IPAddresses[0].Equal(net.ParseIP("127.0.0.1")) ||
		!serving.IPAddresses[1].Equal(net.ParseIP("10.0.0.1")) || !serving.IPAddresses[2].Equal(net.ParseIP("10.200.0.1")) {
		t.Errorf("serving IP SANs %v, want [127.0.0.1 10.0.0.1 10.200.0.1]", serving.IPAddresses)
	}
	for _, host := range append(wantDNS, "127.0.0.1", "10.0.0.1", "10.200.0.1") {
		if _, err := serving.Verify(x509.VerifyOptions{DNSName: host, Roots: roots}); err != nil {
			t.Errorf("serving certificate does not verify for %s: %v", host, err)
		}
	}
	if _, err := serving.Verify(x509.VerifyOptions{DNSName: "example.com", Roots: roots}); err == nil {
		t.Error("serving certificate verifies for example.com")
	}

	admin := readCert(t, p.AdminCert)
	checkValidity(t, "admin", admin)
	if admin.Subject.CommonName != "kube-neuron-admin" || !slices.Equal(admin.Subject.Organization, []string{"system:masters"}) {
		t.Errorf("admin subject %v, want CN=kube-neuron-admin O=system:masters", admin.Subject)
	}
	if !slices.Equal(admin.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}) {
		t.Errorf("admin ExtKeyUsage %v, want client auth only", admin.ExtKeyUsage)
	}
	if _, err := admin.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("admin certificate does not verify as a client certificate: %v", err)
	}
	if _, err := admin.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Error("admin certificate verifies as a server certificate")
	}

	// Keys match their certificates.
	for _, pair := range [][2]string{{p.CACert, p.CAKey}, {p.ServingCert, p.ServingKey}, {p.AdminCert, p.AdminKey}} {
		if _, err := tls.LoadX509KeyPair(pair[0], pair[1]); err != nil {
			t.Errorf("key pair %s: %v", pair[0], err)
		}
	}

	// The service-account public key is the public half of the signing key.
	keyPEM, _ := os.ReadFile(p.ServiceAccountKey)
	kb, _ := pem.Decode(keyPEM)
	if kb == nil || kb.Type != "EC PRIVATE KEY" {
		t.Fatalf("service-account key: want an EC PRIVATE KEY PEM block")
	}
	priv, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	pubPEM, _ := os.ReadFile(p.ServiceAccountPubKey)
	pb, _ := pem.Decode(pubPEM)
	if pb == nil || pb.Type != "PUBLIC KEY" {
		t.Fatalf("service-account public key: want a PUBLIC KEY PEM block")
	}
	pub, err := x509.ParsePKIXPublicKey(pb.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if !priv.PublicKey.Equal(pub.(*ecdsa.PublicKey)) {
		t.Error("sa.pub is not the public key of sa.key")
	}

	// A second generation replaces everything with new keys.
	p2, err := GeneratePKI(dir)
	if err != nil {
		t.Fatal(err)
	}
	if readCert(t, p2.CACert).SerialNumber.Cmp(ca.SerialNumber) == 0 {
		t.Error("regenerating kept the old CA")
	}
}

func TestPKIIssueClientCert(t *testing.T) {
	p, err := GeneratePKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	certPath, keyPath, err := p.IssueClientCert("node-n1", "system:node:n1", "system:nodes")
	if err != nil {
		t.Fatal(err)
	}
	c := readCert(t, certPath)
	if c.Subject.CommonName != "system:node:n1" || !slices.Equal(c.Subject.Organization, []string{"system:nodes"}) {
		t.Errorf("subject %v", c.Subject)
	}
	if c.Issuer.CommonName != readCert(t, p.CACert).Subject.CommonName {
		t.Errorf("issuer %v is not the lab CA", c.Issuer)
	}
	if _, err := tls.LoadX509KeyPair(certPath, keyPath); err != nil {
		t.Error(err)
	}
	for _, bad := range []string{"", "a/b", "../x"} {
		if _, _, err := p.IssueClientCert(bad, "x"); err == nil {
			t.Errorf("IssueClientCert(%q) succeeded, want an error", bad)
		}
	}
	if _, _, err := (&PKI{Dir: t.TempDir()}).IssueClientCert("x", "x"); err == nil {
		t.Error("IssueClientCert without a CA succeeded")
	}
}

func TestPKIWriteKubeconfig(t *testing.T) {
	dir := t.TempDir()
	p, err := GeneratePKI(filepath.Join(dir, "pki"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "kubeconfig")
	if err := WriteKubeconfig(path, "https://127.0.0.1:6443", p.CACert, p.AdminCert, p.AdminKey, AdminUser); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("kubeconfig mode %v, want 0600", fi.Mode().Perm())
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://127.0.0.1:6443" {
		t.Errorf("host %q", cfg.Host)
	}
	caPEM, _ := os.ReadFile(p.CACert)
	certPEM, _ := os.ReadFile(p.AdminCert)
	if string(cfg.CAData) != string(caPEM) || string(cfg.CertData) != string(certPEM) || len(cfg.KeyData) == 0 {
		t.Error("kubeconfig does not embed the CA, admin certificate and key")
	}
	if err := WriteKubeconfig(path, "https://x", filepath.Join(dir, "missing"), p.AdminCert, p.AdminKey, "u"); err == nil {
		t.Error("WriteKubeconfig with a missing CA file succeeded")
	}
}
