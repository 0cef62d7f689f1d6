package lab

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kube-neuron/kube-neuron/internal/lab/netns"
)

// Names and addresses baked into the lab's certificates.
const (
	// AdminUser is the common name of the admin client certificate; its organization
	// system:masters gives it every permission.
	AdminUser = "kube-neuron-admin"
	// AdminGroup is the organization of the admin client certificate.
	AdminGroup = "system:masters"
	// ServiceAccountIssuer is kube-apiserver's --service-account-issuer.
	ServiceAccountIssuer = "https://kubernetes.default.svc.cluster.local"
	// ServiceClusterIPRange is kube-apiserver's --service-cluster-ip-range.
	ServiceClusterIPRange = "10.0.0.0/24"
	// FirstServiceIP is the cluster IP of the kubernetes service (first address of ServiceClusterIPRange).
	FirstServiceIP = "10.0.0.1"

	certValidity = 365 * 24 * time.Hour
	// certBackdate tolerates small clock differences between the processes.
	certBackdate = time.Hour
)

// APIServerDNSNames returns the DNS names of the apiserver serving certificate (it also
// carries 127.0.0.1 and FirstServiceIP as IP SANs).
func APIServerDNSNames() []string {
	return []string{
		"localhost",
		"kubernetes",
		"kubernetes.default",
		"kubernetes.default.svc",
		"kubernetes.default.svc.cluster.local",
	}
}

// PKI is the set of keys and certificates of a lab control plane, written as PEM files
// (mode 0600) into one directory. Every certificate and key is ECDSA P-256.
type PKI struct {
	Dir string

	CACert string // ca.crt: the cluster CA (--client-ca-file, --root-ca-file, kubeconfigs)
	CAKey  string // ca.key

	ServingCert string // apiserver.crt: kube-apiserver serving certificate
	ServingKey  string // apiserver.key

	AdminCert string // admin.crt: client certificate CN=AdminUser, O=AdminGroup
	AdminKey  string // admin.key

	ServiceAccountKey    string // sa.key: service-account signing key (private)
	ServiceAccountPubKey string // sa.pub: service-account verification key (public)

	caCert *x509.Certificate
	caKey  crypto.Signer
}

// GeneratePKI creates dir if needed and writes a fresh CA, apiserver serving certificate,
// admin client certificate and service-account key pair into it, replacing files of an
// earlier run.
func GeneratePKI(dir string) (*PKI, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create PKI directory %s (check that its parent is writable): %w", dir, err)
	}
	p := &PKI{
		Dir:                  dir,
		CACert:               filepath.Join(dir, "ca.crt"),
		CAKey:                filepath.Join(dir, "ca.key"),
		ServingCert:          filepath.Join(dir, "apiserver.crt"),
		ServingKey:           filepath.Join(dir, "apiserver.key"),
		AdminCert:            filepath.Join(dir, "admin.crt"),
		AdminKey:             filepath.Join(dir, "admin.key"),
		ServiceAccountKey:    filepath.Join(dir, "sa.key"),
		ServiceAccountPubKey: filepath.Join(dir, "sa.pub"),
	}

	caKey, err := newKey()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          mustSerial(),
		Subject:               pkix.Name{CommonName: "kube-neuron-lab-ca"},
		NotBefore:             now.Add(-certBackdate),
		NotAfter:              now.Add(certValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return nil, fmt.Errorf("create lab CA certificate: %w", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, fmt.Errorf("parse lab CA certificate: %w", err)
	}
	p.caCert, p.caKey = caCert, caKey
	if err := writeCertAndKey(p.CACert, p.CAKey, caDER, caKey); err != nil {
		return nil, err
	}

	serving := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		DNSNames:    APIServerDNSNames(),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(FirstServiceIP), net.IP(netns.Gateway.AsSlice())},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if err := p.issue(serving, p.ServingCert, p.ServingKey); err != nil {
		return nil, err
	}
	if _, _, err := p.IssueClientCert("admin", AdminUser, AdminGroup); err != nil {
		return nil, err
	}

	saKey, err := newKey()
	if err != nil {
		return nil, err
	}
	if err := writeKey(p.ServiceAccountKey, saKey); err != nil {
		return nil, err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(saKey.Public())
	if err != nil {
		return nil, fmt.Errorf("marshal service-account public key: %w", err)
	}
	if err := writePEM(p.ServiceAccountPubKey, "PUBLIC KEY", pubDER); err != nil {
		return nil, err
	}
	return p, nil
}

// IssueClientCert writes Dir/<name>.crt and Dir/<name>.key: a client certificate signed by
// the lab CA for user cn in groups orgs (for example "system:node:n1", "system:nodes").
func (p *PKI) IssueClientCert(name, cn string, orgs ...string) (certPath, keyPath string, err error) {
	if name == "" || filepath.Base(name) != name {
		return "", "", fmt.Errorf("client certificate name %q must be a plain file name", name)
	}
	certPath = filepath.Join(p.Dir, name+".crt")
	keyPath = filepath.Join(p.Dir, name+".key")
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn, Organization: orgs},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if err := p.issue(tmpl, certPath, keyPath); err != nil {
		return "", "", err
	}
	return certPath, keyPath, nil
}

// IssueServingCert writes Dir/<name>.crt and Dir/<name>.key: a serving certificate signed by the
// lab CA for the DNS names and IP addresses (tests serve HTTPS with it, e.g. the extender).
func (p *PKI) IssueServingCert(name string, dnsNames []string, ips []net.IP) (certPath, keyPath string, err error) {
	if name == "" || filepath.Base(name) != name {
		return "", "", fmt.Errorf("serving certificate name %q must be a plain file name", name)
	}
	certPath = filepath.Join(p.Dir, name+".crt")
	keyPath = filepath.Join(p.Dir, name+".key")
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: name},
		DNSNames:    dnsNames,
		IPAddresses: ips,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if err := p.issue(tmpl, certPath, keyPath); err != nil {
		return "", "", err
	}
	return certPath, keyPath, nil
}

func (p *PKI) issue(tmpl *x509.Certificate, certPath, keyPath string) error {
	if p.caCert == nil || p.caKey == nil {
		return errors.New("the PKI has no CA key loaded: create it with GeneratePKI")
	}
	key, err := newKey()
	if err != nil {
		return err
	}
	now := time.Now()
	tmpl.SerialNumber = mustSerial()
	tmpl.NotBefore = now.Add(-certBackdate)
	tmpl.NotAfter = now.Add(certValidity)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.BasicConstraintsValid = true
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, key.Public(), p.caKey)
	if err != nil {
		return fmt.Errorf("sign certificate %s: %w", tmpl.Subject.CommonName, err)
	}
	return writeCertAndKey(certPath, keyPath, der, key)
}

// WriteKubeconfig writes (mode 0600) a kubeconfig for server that embeds the CA and the
// client certificate and key read from the given files; its one context is named "lab".
func WriteKubeconfig(path, server, caFile, certFile, keyFile, user string) error {
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return fmt.Errorf("read CA for kubeconfig %s: %w", path, err)
	}
	cert, err := os.ReadFile(certFile)
	if err != nil {
		return fmt.Errorf("read client certificate for kubeconfig %s: %w", path, err)
	}
	key, err := os.ReadFile(keyFile)
	if err != nil {
		return fmt.Errorf("read client key for kubeconfig %s: %w", path, err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["lab"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: cert, ClientKeyData: key}
	cfg.Contexts["lab"] = &clientcmdapi.Context{Cluster: "lab", AuthInfo: user}
	cfg.CurrentContext = "lab"
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return fmt.Errorf("encode kubeconfig %s: %w", path, err)
	}
	if err := writeFile0600(path, data); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	return nil
}

func newKey() (*ecdsa.PrivateKey, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate ECDSA P-256 key: %w", err)
	}
	return k, nil
}

func mustSerial() *big.Int {
	// 128 random bits; crypto/rand.Int never fails on Linux.
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		panic(fmt.Sprintf("crypto/rand failed: %v", err))
	}
	return n.Add(n, big.NewInt(1))
}

func writeCertAndKey(certPath, keyPath string, der []byte, key *ecdsa.PrivateKey) error {
	if err := writePEM(certPath, "CERTIFICATE", der); err != nil {
		return err
	}
	return writeKey(keyPath, key)
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("marshal private key for %s: %w", path, err)
	}
	return writePEM(path, "EC PRIVATE KEY", der)
}

func writePEM(path, typ string, der []byte) error {
	if err := writeFile0600(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})); err != nil {
		return fmt.Errorf("write %s: %w", typ, err)
	}
	return nil
}

// writeFile0600 replaces path atomically with a file of mode 0600.
func writeFile0600(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("create %s (check that %s is writable): %w", path, filepath.Dir(path), err)
	}
	tmp := f.Name()
	_, werr := f.Write(data)
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	// CreateTemp already uses 0600; Chmod makes it explicit whatever the umask.
	if err := os.Chmod(tmp, 0o600); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("chmod %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("rename %s into place: %w", path, err)
	}
	return nil
}
