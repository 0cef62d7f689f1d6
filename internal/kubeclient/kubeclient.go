// Package kubeclient builds the components' Kubernetes client the way kubectl finds its
// configuration: a kubeconfig file when one is given, the in-cluster configuration otherwise.
package kubeclient

import (
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// New returns a clientset for the kubeconfig file (in-cluster when empty). A qps above zero
// replaces client-go's default client-side rate limit (qps, burst).
func New(kubeconfig string, qps float32, burst int) (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("loading the Kubernetes client configuration: %w", err)
	}
	if qps > 0 {
		cfg.QPS, cfg.Burst = qps, burst
	}
	return kubernetes.NewForConfig(cfg)
}
