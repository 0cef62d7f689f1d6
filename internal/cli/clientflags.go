package cli

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// errNoKubeconfig: neither the flags, $KUBECONFIG, ~/.kube/config nor a pod's service account
// say which cluster to read.
var errNoKubeconfig = errors.New("no kubeconfig found: pass --kubeconfig (or --server and --token), set $KUBECONFIG or write ~/.kube/config (kubectl config view shows what kubectl uses)")

// defaultRequestTimeout bounds each API call when --request-timeout is not given.
const defaultRequestTimeout = time.Minute

// clientFlags are kubectl's client flags (--kubeconfig, --context, --cluster, --user, --server,
// --token, --as, --as-group, --as-uid, --certificate-authority, --client-certificate,
// --client-key, --insecure-skip-tls-verify, --tls-server-name, --request-timeout, ...), from
// k8s.io/cli-runtime as kubectl itself defines them.
type clientFlags struct {
	config *genericclioptions.ConfigFlags
	flags  *pflag.FlagSet
}

// addClientFlags adds the client flags to flags. Namespace is left out: the commands that take
// one define their own -n, with their own default.
func addClientFlags(flags *pflag.FlagSet) *clientFlags {
	cf := genericclioptions.NewConfigFlags(false)
	cf.Namespace = nil
	cf.CacheDir = nil // no discovery: nothing is cached
	cf.AddFlags(flags)
	return &clientFlags{config: cf, flags: flags}
}

// client builds a client the way kubectl loads its configuration: --kubeconfig, else
// $KUBECONFIG, else ~/.kube/config (in a pod without them, the pod's service account), with the
// flags' overrides.
func (c *clientFlags) client() (kubernetes.Interface, error) {
	cf := c.config
	if kc := *cf.KubeConfig; kc != "" {
		if _, err := os.Stat(kc); err != nil {
			return nil, usageErr("--kubeconfig: %w", err)
		}
	}
	timeout := *cf.Timeout
	if _, err := strconv.Atoi(timeout); err != nil {
		if _, err := time.ParseDuration(timeout); err != nil {
			return nil, usageErr("--request-timeout %q: write a duration such as 30s or 2m (0: no timeout)", timeout)
		}
	}
	loader := cf.ToRawKubeConfigLoader()
	raw, rawErr := loader.RawConfig()
	if ctx := *cf.Context; ctx != "" && rawErr == nil {
		if _, ok := raw.Contexts[ctx]; !ok {
			return nil, usageErr("--context %q: the kubeconfig has no such context (kubectl config get-contexts lists them)", ctx)
		}
	}
	if rawErr == nil && len(raw.Clusters) == 0 && *cf.APIServer == "" && os.Getenv("KUBERNETES_SERVICE_HOST") == "" {
		return nil, &exitError{code: ExitCluster, err: errNoKubeconfig}
	}
	cfg, err := loader.ClientConfig()
	switch {
	case err != nil && clientcmd.IsEmptyConfig(err):
		return nil, &exitError{code: ExitCluster, err: errNoKubeconfig}
	case err != nil && clientcmd.IsConfigurationInvalid(err):
		return nil, usageErr("the kubeconfig is not usable: %w (kubectl config get-contexts lists the contexts)", err)
	case err != nil:
		return nil, &exitError{code: ExitCluster, err: fmt.Errorf("loading the kubeconfig: %w", err)}
	}
	if !c.flags.Changed("request-timeout") {
		cfg.Timeout = defaultRequestTimeout
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, &exitError{code: ExitCluster, err: fmt.Errorf("the kubeconfig's cluster %s: %w", cfg.Host, err)}
	}
	return client, nil
}
