// Command neuron-scheduler-extender is the kube-scheduler HTTP extender for AWS Neuron:
// topology-aware filter, prioritize and bind.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/kube-neuron/kube-neuron/internal/extender"
	"github.com/kube-neuron/kube-neuron/internal/flagenv"
	"github.com/kube-neuron/kube-neuron/internal/kubeclient"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

func main() {
	var o extender.Options
	var kubeconfig, policy, catalog, bind, metricsAddress string
	var tlsOpts extender.TLSOptions
	var port int
	var mirror bool
	fs := pflag.NewFlagSet("neuron-scheduler-extender", pflag.ExitOnError)
	fs.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file; in-cluster configuration when empty")
	fs.IntVar(&port, "port", 12345, "port of the extender's HTTP server (filter, prioritize, bind, /healthz, /readyz, /metrics)")
	fs.StringVar(&bind, "bind-address", "", "address to listen on; all addresses when empty")
	fs.StringVar(&metricsAddress, "metrics-address", "", "also serve /healthz, /readyz and /metrics over plain HTTP on this address (host:port), e.g. :9467; none when empty")
	fs.StringVar(&tlsOpts.CertFile, "tls-cert-file", "", "PEM serving certificate: serve --port over HTTPS (re-read when the file changes)")
	fs.StringVar(&tlsOpts.KeyFile, "tls-private-key-file", "", "PEM private key of --tls-cert-file")
	fs.StringVar(&tlsOpts.ClientCAFile, "client-ca-file", "", "PEM CA bundle: filter, prioritize and bind then need a client certificate it verifies (/healthz, /readyz and /metrics do not); needs --tls-cert-file")
	fs.StringVar(&policy, "policy", string(topology.BestFit), "placement policy: best-fit or first-fit")
	fs.StringVar(&o.LeaseNamespace, "lease-namespace", "kube-system", "namespace of the per-node bind Leases (kube-neuron-bind-<node>)")
	fs.StringVar(&catalog, "catalog", "", "instance catalog file applied over the built-in one")
	fs.BoolVar(&mirror, "mirror-usage-annotations", false, "also write NEURON_DEV_USAGE_MAP and NEURON_CORE_USAGE_MAP on Neuron nodes, computed from pods, for tools that read them (needs nodes patch)")
	env := map[string]string{"kubeconfig": "KUBECONFIG", "port": "PORT", "policy": "NEURON_PLACEMENT_POLICY", "lease-namespace": "POD_NAMESPACE", "catalog": "NEURON_CATALOG", "mirror-usage-annotations": "NEURON_MIRROR_USAGE_ANNOTATIONS",
		"metrics-address": "NEURON_METRICS_ADDRESS", "tls-cert-file": "NEURON_TLS_CERT_FILE", "tls-private-key-file": "NEURON_TLS_PRIVATE_KEY_FILE", "client-ca-file": "NEURON_CLIENT_CA_FILE"}
	flagenv.Annotate(fs, env)
	klog.InitFlags(nil)
	fs.AddGoFlagSet(flag.CommandLine)
	_ = fs.Parse(os.Args[1:])
	err := flagenv.Bind(fs, env)
	if err == nil {
		o.Policy, err = topology.ParsePolicy(policy)
	}
	serve := extender.ServeOptions{Address: fmt.Sprintf("%s:%d", bind, port), MetricsAddress: metricsAddress}
	switch {
	case err != nil:
	case tlsOpts.CertFile != "" || tlsOpts.KeyFile != "":
		serve.TLS = &tlsOpts
	case tlsOpts.ClientCAFile != "":
		err = fmt.Errorf("--client-ca-file needs --tls-cert-file and --tls-private-key-file: client certificates are verified over HTTPS only")
	}
	if err == nil && catalog != "" {
		o.Catalog, err = topology.LoadCatalog(catalog)
	}
	if err == nil {
		o.Client, err = kubeclient.New(kubeconfig, 1000, 2000)
	}

	var e *extender.Extender
	if err == nil {
		e, err = extender.New(o)
	}
	if err == nil {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
		defer stop()
		ctx = klog.NewContext(ctx, klog.Background())
		errc := make(chan error, 1)
		go func() { errc <- e.Serve(ctx, serve) }() // /readyz says 503 until synced
		if err = e.Start(ctx); err == nil {
			if mirror {
				go e.MirrorUsage(ctx, 5*time.Second)
			}
			err = <-errc
			// Hand the nodes this replica holds over at once instead of letting their Leases
			// expire (binds to them would wait up to 15 s).
			sctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), klog.Background()), 10*time.Second)
			e.Shutdown(sctx)
			cancel()
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "neuron-scheduler-extender:", err)
		os.Exit(1)
	}
}
