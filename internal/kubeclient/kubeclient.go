// Package kubeclient builds the components' Kubernetes client the way kubectl finds its
// configuration: a kubeconfig file when one is given, the in-cluster configuration otherwise.
package kubeclient

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
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
	return kubernetes.NewForConfig(Protobuf(cfg))
}

// Protobuf returns a copy of cfg that talks protobuf to the API server, as the kube-scheduler and
// the kube-controller-manager do: decoding a pod from protobuf costs a fraction of decoding it
// from JSON, on both sides of every watch event. The clientset covers built-in types only, which
// all have protobuf; JSON stays accepted for anything that answers only JSON.
func Protobuf(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	return cfg
}
