package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// Options configure a lab: a control plane on 127.0.0.1 and a fleet of simulated Neuron nodes.
type Options struct {
	// BinDir holds the pinned etcd and Kubernetes binaries (hack/build-tools.sh prints it).
	BinDir string
	// Dir is the lab's state directory (the control plane's files, each node's sysfs tree).
	Dir string
	// Fleet is the simulated fleet; DefaultFleet when nil.
	Fleet *FleetFile
	// Catalog resolves instance types; the default catalog when nil.
	Catalog *topology.Catalog
}

// Lab is a running control plane with its simulated fleet.
type Lab struct {
	cp        *ControlPlane
	sim       *Simulator
	client    kubernetes.Interface
	socketDir string
	specs     []NodeSpec
}

// Start starts the control plane and every node of the fleet, and returns when the nodes are
// registered and their kubelets serve. On error it stops what it started.
func Start(ctx context.Context, o Options) (*Lab, error) {
	logger := klog.FromContext(ctx)
	begin := time.Now()
	cat := o.Catalog
	if cat == nil {
		cat = topology.DefaultCatalog()
	}
	fleet := DefaultFleet
	if o.Fleet != nil {
		fleet = *o.Fleet
	}
	specs, err := fleet.Expand(cat)
	if err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	cp, err := StartControlPlane(ctx, ControlPlaneOptions{BinDir: o.BinDir, Dir: o.Dir})
	if err != nil {
		return nil, err
	}
	l := &Lab{cp: cp, specs: specs}
	fail := func(err error) (*Lab, error) {
		return nil, errors.Join(err, l.Stop())
	}
	if l.client, err = kubernetes.NewForConfig(cp.RESTConfig()); err != nil {
		return fail(err)
	}
	// Unix sockets allow 108 bytes: keep them under a short directory of their own.
	if l.socketDir, err = os.MkdirTemp("/tmp", "kn-"); err != nil {
		return fail(err)
	}
	if err := os.WriteFile(filepath.Join(o.Dir, "socket-dir"), []byte(l.socketDir+"\n"), 0o644); err != nil {
		return fail(err)
	}
	l.sim, err = StartSimulator(ctx, SimulatorOptions{Client: l.client, Dir: o.Dir, SocketDir: l.socketDir})
	if err != nil {
		return fail(err)
	}
	for _, spec := range specs {
		if _, err := l.sim.AddNode(ctx, spec); err != nil {
			return fail(err)
		}
	}
	logger.V(1).Info("Lab ready", "nodes", len(specs), "duration", time.Since(begin).Round(time.Millisecond))
	return l, nil
}

// Stop stops the simulated nodes' kubelets, then the control plane, and removes the sockets.
func (l *Lab) Stop() error {
	if l.sim != nil {
		l.sim.Stop()
	}
	var err error
	if l.cp != nil {
		err = l.cp.Stop()
	}
	if l.socketDir != "" {
		err = errors.Join(err, os.RemoveAll(l.socketDir))
	}
	return err
}

// Client returns an admin client.
func (l *Lab) Client() kubernetes.Interface { return l.client }

// RESTConfig returns the admin REST config.
func (l *Lab) RESTConfig() *rest.Config { return l.cp.RESTConfig() }

// Kubeconfig returns the path of the admin kubeconfig.
func (l *Lab) Kubeconfig() string { return l.cp.Kubeconfig() }

// ControlPlane returns the lab's control plane.
func (l *Lab) ControlPlane() *ControlPlane { return l.cp }

// Simulator returns the lab's node simulator.
func (l *Lab) Simulator() *Simulator { return l.sim }

// Nodes returns the fleet's node specs.
func (l *Lab) Nodes() []NodeSpec { return l.specs }

// WaitForNodeResource waits until node advertises at least want allocatable units of resource.
func (l *Lab) WaitForNodeResource(ctx context.Context, node string, resource corev1.ResourceName, want int64, timeout time.Duration) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		n, err := l.client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		q := n.Status.Allocatable[resource]
		last = fmt.Sprintf("allocatable %s = %s", resource, q.String())
		return q.Value() >= want, nil
	})
	if err != nil {
		return fmt.Errorf("node %s never advertised %d %s (last seen: %s): %w", node, want, resource, last, err)
	}
	return nil
}
