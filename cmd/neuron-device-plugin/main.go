// Command neuron-device-plugin advertises a node's AWS Neuron devices to the kubelet as
// aws.amazon.com/neuron, aws.amazon.com/neurondevice and aws.amazon.com/neuroncore.
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

	"github.com/kube-neuron/kube-neuron/internal/deviceplugin"
	"github.com/kube-neuron/kube-neuron/internal/flagenv"
	"github.com/kube-neuron/kube-neuron/internal/kubeclient"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

func main() {
	var o deviceplugin.Options
	var kubeconfig, source, catalog string
	fs := pflag.NewFlagSet("neuron-device-plugin", pflag.ExitOnError)
	fs.StringVar(&o.NodeName, "node-name", "", "name of this node")
	fs.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file; in-cluster configuration when empty")
	fs.StringVar(&o.SysfsRoot, "sysfs-root", "/", "root under which sys/devices/virtual/neuron_device and opt/aws/neuron are read")
	fs.StringVar(&o.DevicePluginDir, "device-plugin-dir", "/var/lib/kubelet/device-plugins", "the kubelet's device plugin directory (kubelet.sock)")
	fs.StringVar(&o.PodResourcesSocket, "pod-resources-socket", "/var/lib/kubelet/pod-resources/kubelet.sock", "the kubelet's PodResources API socket")
	fs.StringVar(&o.StateDir, "state-dir", "/var/lib/kube-neuron/device-plugin", "a host directory of the plugin's own where it keeps which devices it gave each container ("+deviceplugin.CheckpointFile+"), so that a restart does not lose it; not the kubelet's device-plugins directory, which the kubelet empties; empty keeps nothing")
	fs.DurationVar(&o.HealthInterval, "health-interval", 1e9, "how often device health and usage are checked")
	fs.StringVar(&source, "allocation-source", "auto", "where Allocate takes devices from: auto (the scheduler extender's record when one matches, else the kubelet's ids), extender, or kubelet")
	fs.StringVar(&o.MetricsAddress, "metrics-address", ":9464", "address of /metrics and /healthz; empty disables them")
	fs.DurationVar(&o.MetricsSampleInterval, "metrics-sample-interval", 10e9, "how often the Neuron driver's counters (power, ECC, core memory, time in use, executions) are read for /metrics; core utilization is the rate of time in use between the last two samples")
	fs.StringVar(&catalog, "catalog", "", "instance catalog file applied over the built-in one")
	env := map[string]string{
		"node-name": "NODE_NAME", "kubeconfig": "KUBECONFIG", "sysfs-root": "NEURON_SYSFS_ROOT",
		"device-plugin-dir": "KUBELET_DEVICE_PLUGIN_DIR", "pod-resources-socket": "KUBELET_POD_RESOURCES_SOCKET", "state-dir": "NEURON_STATE_DIR",
		"health-interval": "NEURON_HEALTH_INTERVAL", "allocation-source": "NEURON_ALLOCATION_SOURCE",
		"metrics-address": "NEURON_METRICS_ADDRESS", "metrics-sample-interval": "NEURON_METRICS_SAMPLE_INTERVAL", "catalog": "NEURON_CATALOG",
	}
	flagenv.Annotate(fs, env)
	klog.InitFlags(nil)
	fs.AddGoFlagSet(flag.CommandLine)
	_ = fs.Parse(os.Args[1:])
	err := flagenv.Bind(fs, env)
	if err == nil {
		o.Source, err = deviceplugin.ParseSource(source)
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
		err = deviceplugin.Run(klog.NewContext(ctx, klog.Background()), o)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "neuron-device-plugin:", err)
		os.Exit(1)
	}
}

func loadCatalog(path string) (*topology.Catalog, error) {
	if path == "" {
		return topology.DefaultCatalog(), nil
	}
	return topology.LoadCatalog(path)
}
