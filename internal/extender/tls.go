package extender

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"

	"k8s.io/klog/v2"
)

// TLSOptions serve the scheduler API (filter, prioritize, bind) over HTTPS.
type TLSOptions struct {
	// CertFile and KeyFile are the PEM serving certificate (with its chain) and key.
	CertFile, KeyFile string
	// ClientCAFile is a PEM bundle of the CAs that sign the scheduler's client certificates.
	// When set, filter, prioritize and bind (every path but /healthz, /readyz and /metrics)
	// need a client certificate that verifies against it; without it any client may call them.
	ClientCAFile string
}

// publicPaths are served without a client certificate: the kubelet's probes cannot present
// one, and they and /metrics reveal nothing about pods or nodes (counts and durations only).
var publicPaths = map[string]bool{"/healthz": true, "/readyz": true, "/metrics": true}

// tlsFiles loads the certificate, key and client CA, and loads them again at a handshake after
// any of the files changed (cert-manager renews certificates; the kubelet swaps a Secret
// volume's files in place). A changed set that does not load (a half-written renewal) keeps
// the last good one and is tried again at the next handshake.
type tlsFiles struct {
	o      TLSOptions
	logger klog.Logger

	mu    sync.Mutex
	stamp string
	cfg   *tls.Config
}

// newTLSConfig loads the files once (failing fast on a bad set) and returns the server's
// tls.Config, which re-reads them on change.
func newTLSConfig(ctx context.Context, o TLSOptions) (*tls.Config, error) {
	if o.CertFile == "" || o.KeyFile == "" {
		return nil, errors.New("TLS needs both a certificate file and a private key file (--tls-cert-file, --tls-private-key-file)")
	}
	f := &tlsFiles{o: o, logger: klog.FromContext(ctx)}
	if _, err := f.config(); err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return f.config()
		},
	}, nil
}

func (f *tlsFiles) files() []string {
	files := []string{f.o.CertFile, f.o.KeyFile}
	if f.o.ClientCAFile != "" {
		files = append(files, f.o.ClientCAFile)
	}
	return files
}

// config returns the current configuration, loading the files again if they changed.
func (f *tlsFiles) config() (*tls.Config, error) {
	var stamp strings.Builder
	for _, name := range f.files() {
		fi, err := os.Stat(name)
		if err != nil {
			fmt.Fprintf(&stamp, "%s:missing;", name)
			continue
		}
		fmt.Fprintf(&stamp, "%s:%d:%d;", name, fi.ModTime().UnixNano(), fi.Size())
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cfg != nil && stamp.String() == f.stamp {
		return f.cfg, nil
	}
	cfg, err := f.load()
	if err != nil {
		if f.cfg == nil {
			return nil, err
		}
		f.logger.Error(err, "Reloading the TLS files failed; serving with the previous ones")
		return f.cfg, nil
	}
	if f.cfg != nil {
		f.logger.Info("Reloaded the TLS files", "certFile", f.o.CertFile, "clientCAFile", f.o.ClientCAFile)
	}
	f.cfg, f.stamp = cfg, stamp.String()
	return cfg, nil
}

func (f *tlsFiles) load() (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(f.o.CertFile, f.o.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("loading the serving certificate %s and key %s: %w", f.o.CertFile, f.o.KeyFile, err)
	}
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		NextProtos:   []string{"h2", "http/1.1"},
	}
	if f.o.ClientCAFile != "" {
		data, err := os.ReadFile(f.o.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("reading the client CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(data) {
			return nil, fmt.Errorf("the client CA file %s holds no PEM certificate", f.o.ClientCAFile)
		}
		// Verified when given; requireClientCert refuses the scheduler API without one, so
		// that the kubelet's probes and scrapers reach the public paths.
		cfg.ClientAuth, cfg.ClientCAs = tls.VerifyClientCertIfGiven, pool
	}
	return cfg, nil
}

// requireClientCert refuses every path but the public ones unless the client presented a
// certificate that verified against the client CA.
func requireClientCert(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !publicPaths[r.URL.Path] && (r.TLS == nil || len(r.TLS.VerifiedChains) == 0) {
			http.Error(w, "filter, prioritize and bind need a client certificate signed by a CA of the extender's --client-ca-file", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}
