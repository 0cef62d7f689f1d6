// Command neuron-autoscaler launches Neuron nodes for pending pods that ask for Neuron devices or
// cores, and removes the nodes it launched once they stay empty.
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
	// The image carries no CA file (docs/images.md): the EC2 and STS endpoints are verified
	// against these roots when the system has none.
	_ "golang.org/x/crypto/x509roots/fallback"
	"k8s.io/klog/v2"

	"github.com/kube-neuron/kube-neuron/internal/autoscaler"
	"github.com/kube-neuron/kube-neuron/internal/autoscaler/ec2"
	"github.com/kube-neuron/kube-neuron/internal/autoscaler/local"
	"github.com/kube-neuron/kube-neuron/internal/flagenv"
	"github.com/kube-neuron/kube-neuron/internal/kubeclient"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

func main() {
	var o autoscaler.ControllerOptions
	var kubeconfig, provider, catalog, ec2Reservations, localReservations string
	onDemandFallback := true
	var e ec2.Options
	var subnets []string
	fs := pflag.NewFlagSet("neuron-autoscaler", pflag.ExitOnError)
	fs.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file; in-cluster configuration when empty")
	fs.StringVar(&provider, "provider", "", "where nodes are launched: local (Node objects in the lab) or ec2 (required)")
	fs.DurationVar(&o.BatchWindow, "batch-window", 10*time.Second, "wait after the first new pending pod, so that pods created together are planned together")
	fs.DurationVar(&o.ScaleDownAfter, "scale-down-after", 10*time.Minute, "remove a node the autoscaler launched once it has been empty (no pod but DaemonSet and mirror pods) this long; 0 disables scale-down")
	fs.DurationVar(&o.ResyncInterval, "resync-interval", 30*time.Second, "how often a round runs without a new pending pod (scale-down, launch timeouts)")
	fs.IntVar(&o.MaxNodes, "max-nodes", 0, "most Neuron nodes in the cluster (launching ones included); 0 means no limit")
	fs.IntVar(&o.MaxDevices, "max-devices", 0, "most Neuron devices in the cluster; 0 means no limit")
	fs.StringSliceVar(&o.Families, "families", nil, "instance families the autoscaler may launch, comma-separated (e.g. trn1,inf2); empty allows all")
	fs.BoolVar(&o.DryRun, "dry-run", false, "only log and emit events: launch, cordon and remove nothing")
	fs.BoolVar(&o.LeaderElect, "leader-elect", true, "run the loop only while holding the Lease neuron-autoscaler")
	fs.StringVar(&o.LeaseNamespace, "namespace", "kube-system", "namespace of the leader election Lease")
	fs.StringVar(&o.MetricsAddress, "metrics-address", ":9466", "address of /metrics, /healthz and /readyz; empty disables them")
	fs.StringVar(&catalog, "catalog", "", "instance catalog file applied over the built-in one")
	fs.BoolVar(&onDemandFallback, "on-demand-fallback", true, "launch on-demand nodes where no capacity reservation can take the pods; false launches only into reservations")
	fs.DurationVar(&o.CapacityBlockDrainLead, "capacity-block-drain-lead", autoscaler.DefaultCapacityBlockDrainLead, "cordon and drain the nodes of a Capacity Block this long before it ends (EC2 terminates its instances 30m before)")
	fs.DurationVar(&o.UltraServerCapacityBlockDrainLead, "ultraserver-capacity-block-drain-lead", autoscaler.DefaultUltraServerCapacityBlockDrainLead, "the same for UltraServer Capacity Blocks (EC2 terminates their instances 60m before the end)")
	fs.DurationVar(&o.NodeStartupEstimate, "node-startup-estimate", autoscaler.DefaultNodeStartupEstimate, "how long a new node takes to take pods: no pod is planned onto a reservation that ends within this and its drain lead")
	fs.StringVar(&ec2Reservations, "ec2-capacity-reservations", "", `ec2: the capacity reservations to launch into, a JSON list of selectors: [{"id":"cr-..."},{"tags":{"k":"v"}}]`)
	fs.StringVar(&localReservations, "local-reservations", "", "local: a JSON file of the lab's reservations [{id, instanceType, count, endTime}]")
	fs.StringVar(&e.Region, "ec2-region", "", "ec2: AWS region; empty takes it from the shared config")
	fs.StringVar(&e.Endpoint, "ec2-endpoint", "", "ec2: EC2 endpoint URL; empty uses AWS's")
	fs.StringVar(&e.LaunchTemplate, "ec2-launch-template", "", "ec2: launch template id (lt-...) or name")
	fs.StringVar(&e.LaunchTemplateVersion, "ec2-launch-template-version", "", "ec2: launch template version, $Latest or $Default; empty means $Latest")
	fs.StringSliceVar(&subnets, "ec2-subnets", nil, "ec2: subnet ids, comma-separated, tried in order")
	fs.StringVar(&e.ClusterName, "ec2-cluster-name", "", "ec2: cluster name the instances are tagged with")
	fs.StringVar(&e.NodeNameSource, "ec2-node-name-source", ec2.NodeNamePrivateDNSName, "ec2: the name a launched instance's node registers under, which the planned pods are nominated to: "+
		ec2.NodeNamePrivateDNSName+" (ip-10-0-0-12.ec2.internal, or i-0123456789abcdef0.ec2.internal with resource-name hostnames: EKS's AMIs) or "+
		ec2.NodeNameInstanceID+" (i-0123456789abcdef0: Bottlerocket's hostname-override-source instance-id)")
	env := map[string]string{
		"kubeconfig": "KUBECONFIG", "provider": "NEURON_AUTOSCALER_PROVIDER", "batch-window": "NEURON_AUTOSCALER_BATCH_WINDOW",
		"scale-down-after": "NEURON_AUTOSCALER_SCALE_DOWN_AFTER", "max-nodes": "NEURON_AUTOSCALER_MAX_NODES",
		"max-devices": "NEURON_AUTOSCALER_MAX_DEVICES", "families": "NEURON_AUTOSCALER_FAMILIES", "dry-run": "NEURON_AUTOSCALER_DRY_RUN",
		"leader-elect": "NEURON_AUTOSCALER_LEADER_ELECT", "namespace": "POD_NAMESPACE", "metrics-address": "NEURON_METRICS_ADDRESS",
		"catalog": "NEURON_CATALOG", "resync-interval": "NEURON_AUTOSCALER_RESYNC_INTERVAL", "ec2-region": "AWS_REGION", "ec2-endpoint": "NEURON_EC2_ENDPOINT",
		"ec2-launch-template": "NEURON_EC2_LAUNCH_TEMPLATE", "ec2-launch-template-version": "NEURON_EC2_LAUNCH_TEMPLATE_VERSION",
		"ec2-subnets": "NEURON_EC2_SUBNETS", "ec2-cluster-name": "NEURON_EC2_CLUSTER_NAME", "ec2-node-name-source": "NEURON_EC2_NODE_NAME_SOURCE",
		"on-demand-fallback": "NEURON_AUTOSCALER_ON_DEMAND_FALLBACK", "capacity-block-drain-lead": "NEURON_AUTOSCALER_CAPACITY_BLOCK_DRAIN_LEAD",
		"ultraserver-capacity-block-drain-lead": "NEURON_AUTOSCALER_ULTRASERVER_CAPACITY_BLOCK_DRAIN_LEAD", "node-startup-estimate": "NEURON_AUTOSCALER_NODE_STARTUP_ESTIMATE",
		"ec2-capacity-reservations": "NEURON_EC2_CAPACITY_RESERVATIONS", "local-reservations": "NEURON_LOCAL_RESERVATIONS",
	}
	flagenv.Annotate(fs, env)
	klog.InitFlags(nil)
	fs.AddGoFlagSet(flag.CommandLine)
	_ = fs.Parse(os.Args[1:])
	err := flagenv.Bind(fs, env)
	if err == nil && provider != "local" && provider != "ec2" {
		err = fmt.Errorf("--provider must be local or ec2, not %q", provider)
	}
	o.ReservedOnly = !onDemandFallback
	if err == nil && catalog != "" {
		o.Catalog, err = topology.LoadCatalog(catalog)
	}
	if err == nil {
		// client-go's default (5 requests per second) spreads a round's nominations over
		// seconds, while the scheduler acts on each change at once: the kube-scheduler's own
		// default, 50 (burst 100).
		o.Client, err = kubeclient.New(kubeconfig, 50, 100)
	}
	if err == nil {
		// The release of the launched nodes that go together: a burst of a few patches that
		// must not wait behind the round's other calls (see ControllerOptions.ReleaseClient).
		o.ReleaseClient, err = kubeclient.New(kubeconfig, 50, 100)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx = klog.NewContext(ctx, klog.Background())
	var c *autoscaler.Controller
	if err == nil {
		o.Provider, err = newProvider(ctx, provider, o, e, subnets, ec2Reservations, localReservations)
	}
	if err == nil {
		c, err = autoscaler.NewController(o)
	}
	if err == nil {
		err = c.Run(ctx)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "neuron-autoscaler:", err)
		os.Exit(1)
	}
}

// newProvider returns the local or the ec2 provider, with the reservations its flag names.
func newProvider(ctx context.Context, provider string, o autoscaler.ControllerOptions, e ec2.Options, subnets []string, ec2Reservations, localReservations string) (autoscaler.Provider, error) {
	var err error
	if provider == "local" {
		l := local.Options{Client: o.Client, Catalog: o.Catalog}
		if localReservations != "" {
			if l.Reservations, err = local.LoadReservations(localReservations); err != nil {
				return nil, fmt.Errorf("--local-reservations: %w", err)
			}
		}
		return local.New(l), nil
	}
	if e.ClusterName == "" {
		return nil, fmt.Errorf("--ec2-cluster-name (NEURON_EC2_CLUSTER_NAME) is required with --provider=ec2: it scopes the instances the autoscaler lists and terminates to this cluster")
	}
	e.Subnets = subnets
	if e.CapacityReservations, err = ec2.ParseReservationSelectors(ec2Reservations); err != nil {
		return nil, fmt.Errorf("--ec2-capacity-reservations (NEURON_EC2_CAPACITY_RESERVATIONS): %w", err)
	}
	return ec2.New(ctx, e)
}
