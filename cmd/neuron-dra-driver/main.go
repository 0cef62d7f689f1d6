// Command neuron-dra-driver is the Dynamic Resource Allocation kubelet plugin of driver
// neuron.aws.com: it publishes a node's AWS Neuron devices in ResourceSlices and prepares the
// claims allocated from them (CDI specs with the devices and the Neuron runtime's environment).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/kube-neuron/kube-neuron/internal/dra"
	"github.com/kube-neuron/kube-neuron/internal/flagenv"
	"github.com/kube-neuron/kube-neuron/internal/kubeclient"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

func main() {
	var o dra.Options
	var kubeconfig, catalog string
	fs := pflag.NewFlagSet("neuron-dra-driver", pflag.ExitOnError)
	fs.StringVar(&o.NodeName, "node-name", "", "name of this node")
	fs.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file; in-cluster configuration when empty")
	fs.StringVar(&o.SysfsRoot, "sysfs-root", "/", "root under which sys/devices/virtual/neuron_device and opt/aws/neuron are read")
	fs.StringVar(&o.CDIRoot, "cdi-root", "/var/run/cdi", "directory of the CDI specs the container runtime reads")
	fs.StringVar(&o.RegistrarDir, "kubelet-registrar-directory-path", "/var/lib/kubelet/plugins_registry", "the kubelet's plugin registration directory")
	fs.StringVar(&o.PluginsDir, "kubelet-plugins-directory-path", "/var/lib/kubelet/plugins", "the kubelet's plugins directory; the driver's socket and checkpoint go to its neuron.aws.com subdirectory")
	fs.StringVar(&o.PodUID, "pod-uid", "", "UID of the driver's pod: lets a new pod start before the old one stops (rolling update)")
	fs.IntVar(&o.HealthcheckPort, "healthcheck-port", 51515, "port of the gRPC health service \"liveness\"; 0 disables it")
	fs.DurationVar(&o.HealthInterval, "health-interval", 1e9, "how often device health is checked")
	fs.StringVar(&o.MetricsAddress, "metrics-address", ":9465", "address of /metrics, /healthz and /readyz; empty disables them")
	fs.DurationVar(&o.MetricsSampleInterval, "metrics-sample-interval", 10e9, "how often the Neuron driver's counters (power, ECC, core memory, time in use, executions) are read for /metrics; core utilization is the rate of time in use between the last two samples")
	fs.StringVar(&o.UncorrectableErrorTaintEffect, "uncorrectable-error-taint-effect", "NoSchedule", "effect of the DRA device taint neuron.aws.com/unhealthy=ecc-uncorrected: NoSchedule or NoExecute (evicts the pods of claims that hold the device); other unhealthy devices taint NoSchedule")
	fs.StringVar(&catalog, "catalog", "", "instance catalog file applied over the built-in one")
	env := map[string]string{
		"node-name": "NODE_NAME", "kubeconfig": "KUBECONFIG", "sysfs-root": "NEURON_SYSFS_ROOT", "cdi-root": "CDI_ROOT",
		"kubelet-registrar-directory-path": "KUBELET_REGISTRAR_DIRECTORY_PATH", "kubelet-plugins-directory-path": "KUBELET_PLUGINS_DIRECTORY_PATH",
		"pod-uid": "POD_UID", "healthcheck-port": "HEALTHCHECK_PORT", "health-interval": "NEURON_HEALTH_INTERVAL",
		"metrics-address": "NEURON_METRICS_ADDRESS", "metrics-sample-interval": "NEURON_METRICS_SAMPLE_INTERVAL", "catalog": "NEURON_CATALOG",
		"uncorrectable-error-taint-effect": "NEURON_UNCORRECTABLE_ERROR_TAINT_EFFECT",
	}
	flagenv.Annotate(fs, env)
	klog.InitFlags(nil)
	fs.AddGoFlagSet(flag.CommandLine)
	_ = fs.Parse(os.Args[1:])
	err := flagenv.Bind(fs, env)
	if err == nil {
		_, err = dra.ParseTaintEffect(o.UncorrectableErrorTaintEffect)
	}
	if err == nil {
		o.Catalog, err = loadCatalog(catalog)
	}
	if err == nil {
		o.Client, err = kubeclient.New(kubeconfig, 0, 0)
	}
	if err == nil {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
		defer stop()
		err = dra.Run(klog.NewContext(ctx, klog.Background()), o)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "neuron-dra-driver:", err)
		os.Exit(1)
	}
}

func loadCatalog(path string) (*topology.Catalog, error) {
	if path == "" {
		return topology.DefaultCatalog(), nil
	}
	return topology.LoadCatalog(path)
}
