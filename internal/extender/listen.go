package extender

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// readBody reads the request body into a buffer of bufs; the caller returns it with putBuf.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	buf := bytes.NewBuffer(getBuf())
	if n := r.ContentLength; n > 0 && n <= MaxBodyBytes {
		buf.Grow(int(n) + 1) // one allocation of the announced size at most, instead of doublings
	}
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		putBuf(buf.Bytes())
		return nil, fmt.Errorf("request body larger than %d bytes", MaxBodyBytes)
	}
	// Any other read error leaves a truncated body, which the verb's JSON decoding rejects.
	return buf.Bytes(), nil
}

// bufs recycles request bodies: the scheduler sends two bodies of a few kilobytes for every
// pod. Nothing keeps a reference into a body past its request (decoding
// copies strings).
var bufs = sync.Pool{New: func() any { return new([]byte) }}

// maxPooledBuf keeps the buffers of unusually large requests out of the pool.
const maxPooledBuf = 1 << 20

func getBuf() []byte { return (*bufs.Get().(*[]byte))[:0] }

func putBuf(b []byte) {
	if cap(b) > maxPooledBuf {
		return
	}
	bufs.Put(&b)
}

// ServeOptions configure Serve.
type ServeOptions struct {
	// Address serves filter, prioritize and bind, and /healthz, /readyz and /metrics.
	Address string
	// MetricsAddress, when set, also serves /healthz, /readyz and /metrics on a plain HTTP
	// listener of their own, so that probes and scrapers need no client certificate and a
	// NetworkPolicy can admit them to that port only.
	MetricsAddress string
	// TLS, when set, serves Address over HTTPS (with client authentication when it names a
	// client CA).
	TLS *TLSOptions
}

// Serve listens until ctx ends; it returns the first listener's error.
func (e *Extender) Serve(ctx context.Context, o ServeOptions) error {
	handler := e.api.handler(ctx)
	var tlsConfig *tls.Config
	if o.TLS != nil {
		var err error
		if tlsConfig, err = newTLSConfig(ctx, *o.TLS); err != nil {
			return err
		}
		if o.TLS.ClientCAFile != "" {
			handler = requireClientCert(handler)
		}
	}
	lis, err := net.Listen("tcp", o.Address)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", o.Address, err)
	}
	if o.MetricsAddress == "" {
		return serveHTTP(ctx, lis, handler, tlsConfig, "scheduler extender")
	}
	mlis, err := net.Listen("tcp", o.MetricsAddress)
	if err != nil {
		_ = lis.Close()
		return fmt.Errorf("listening on %s: %w", o.MetricsAddress, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 2)
	go func() { errc <- serveHTTP(ctx, lis, handler, tlsConfig, "scheduler extender") }()
	go func() { errc <- serveHTTP(ctx, mlis, e.api.metricsHandler(), nil, "metrics and health") }()
	err = <-errc
	cancel()
	return errors.Join(err, <-errc)
}

// ServeListener serves Handler over plain HTTP on lis until ctx ends.
func (e *Extender) ServeListener(ctx context.Context, lis net.Listener) error {
	return serveHTTP(ctx, lis, e.api.handler(ctx), nil, "scheduler extender")
}

// serveHTTP serves h on lis (over TLS when tlsConfig is set) until ctx ends.
func serveHTTP(ctx context.Context, lis net.Listener, h http.Handler, tlsConfig *tls.Config, what string) error {
	srv := &http.Server{
		Handler:           h,
		TLSConfig:         tlsConfig,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    1 << 16,
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
		case <-done:
		}
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	}()
	klog.FromContext(ctx).Info("Serving", "what", what, "address", lis.Addr().String(), "tls", tlsConfig != nil)
	var err error
	if tlsConfig != nil {
		err = srv.ServeTLS(lis, "", "")
	} else {
		err = srv.Serve(lis)
	}
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
