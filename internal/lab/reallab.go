package lab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kube-neuron/kube-neuron/internal/lab/netns"
	"github.com/kube-neuron/kube-neuron/internal/lab/realnode"
	"github.com/kube-neuron/kube-neuron/internal/lab/registry"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// RegistryPort is where the lab's registry listens inside the lab namespace (at netns.Gateway).
const RegistryPort = 5000

// Images of a lab with real nodes: the archives `make images PLATFORMS=linux/amd64` writes for
// the components, and those `go run ./hack/images -lab` writes for the nodes.
var (
	// ComponentImages are the components' archives in Options.ImagesDir, served under their
	// names (the chart's default repositories); neuron-kube-scheduler's for my-scheduler in the
	// chart's plugin mode.
	ComponentImages = []string{ComponentDevicePlugin, ComponentExtender, ComponentDRADriver, ComponentAutoscaler, ComponentKubeScheduler}
	// LabImages are the archives in Options.LabImagesDir and the repositories they are served
	// under; StandInImage is served for every other repository.
	LabImages = map[string]string{
		"pause":          "kube-neuron-lab/pause",
		"kube-scheduler": "kube-scheduler",
		"coredns":        "coredns/coredns",
	}
	StandInImage = "stand-in"
)

// realLab is what a lab with real nodes adds: its network namespace, the registry, the nodes.
type realLab struct {
	tools        realNodeTools
	network      *netns.Network
	registry     *Process
	registryAddr string
	sandboxImage string

	mu    sync.Mutex
	nodes map[string]*RealNode
	used  map[int]bool // node indexes in use
}

// startRealLab checks what real nodes need, creates the lab namespace, removes the cgroups
// killed labs left, and returns; the control plane starts in the namespace next (startRegistry
// after it).
func startRealLab(ctx context.Context, o Options) (*realLab, error) {
	tools, err := findRealNodeTools(o)
	if err != nil {
		return nil, err
	}
	// Labs killed with SIGKILL leave their nodes' cgroups (their processes died with the nodes'
	// inits): remove those of every lab whose process is gone.
	if err := realnode.RemoveStaleCgroups(20 * time.Second); err != nil {
		return nil, err
	}
	n, err := netns.Start(ctx, tools.netTools)
	if err != nil {
		return nil, err
	}
	return &realLab{tools: tools, network: n, nodes: map[string]*RealNode{}, used: map[int]bool{}}, nil
}

// startRegistry runs `neuron-lab registry` in the lab namespace with the images of o and waits
// until it answers.
func (l *Lab) startRegistry(ctx context.Context, o Options) error {
	if o.ImagesDir == "" || o.LabImagesDir == "" {
		return errors.New("real lab nodes need the images: set Options.ImagesDir and LabImagesDir (hack/lab-images.sh builds them)")
	}
	args := []string{"registry", "--listen", net.JoinHostPort(netns.Gateway.String(), fmt.Sprint(RegistryPort)),
		"--fallback", filepath.Join(o.LabImagesDir, StandInImage+".tar")}
	for _, c := range ComponentImages {
		args = append(args, "--image", c+"="+filepath.Join(o.ImagesDir, c+".tar"))
	}
	names := make([]string, 0, len(LabImages))
	for name := range LabImages {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		args = append(args, "--image", LabImages[name]+"="+filepath.Join(o.LabImagesDir, name+".tar"))
	}
	pause := filepath.Join(o.LabImagesDir, "pause.tar")
	tag, err := registry.Tag(pause)
	if err != nil {
		return fmt.Errorf("the pause image: %w", err)
	}
	l.real.sandboxImage = "docker.io/" + LabImages["pause"] + ":" + tag
	p, err := StartProcess(ProcessOptions{Name: "registry", Path: l.real.tools.labBin, Args: args,
		LogPath: l.cp.LogPath("registry"), NetNS: l.real.network.Path()})
	if err != nil {
		return err
	}
	if err := AddToState(l.cp.Dir(), p, StopOrderComponent); err != nil {
		_ = p.Stop(time.Second)
		return err
	}
	l.real.registry = p
	l.real.registryAddr = net.JoinHostPort(netns.Gateway.String(), fmt.Sprint(RegistryPort))
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: l.real.network.Dial}}
	defer client.CloseIdleConnections()
	return waitReady(ctx, p, "/v2/", func(ctx context.Context) error {
		return httpGetOK(ctx, client, "http://"+l.real.registryAddr+"/v2/", "{}")
	})
}

// addRealNode starts a real node on the next free index of the lab network.
func (l *Lab) addRealNode(ctx context.Context, spec NodeSpec, system bool) (*RealNode, error) {
	l.real.mu.Lock()
	if _, dup := l.real.nodes[spec.Name]; dup {
		l.real.mu.Unlock()
		return nil, fmt.Errorf("real node %s already runs", spec.Name)
	}
	index := 1
	for l.real.used[index] {
		index++
	}
	if index > netns.MaxNodes {
		l.real.mu.Unlock()
		return nil, fmt.Errorf("the lab network holds %d real nodes", netns.MaxNodes)
	}
	l.real.used[index] = true
	l.real.mu.Unlock()
	n, err := l.startRealNode(ctx, spec, index, system)
	l.real.mu.Lock()
	defer l.real.mu.Unlock()
	if err != nil {
		delete(l.real.used, index)
		return nil, err
	}
	l.real.nodes[spec.Name] = n
	return n, nil
}

// startRealNodes starts the system node and the fleet's real nodes, two at a time.
func (l *Lab) startRealNodes(ctx context.Context, specs []NodeSpec) error {
	if _, err := l.addRealNode(ctx, NodeSpec{Name: SystemNodeName, InstanceType: topology.InstanceType{Name: "lab-system"}}, true); err != nil {
		return err
	}
	sem := make(chan struct{}, 2)
	errs := make([]error, len(specs))
	var wg sync.WaitGroup
	for i, spec := range specs {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			_, errs[i] = l.addRealNode(ctx, spec, false)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// AddRealNode starts one more real node in a lab that has real nodes, and returns once the
// node is Ready; the chart's DaemonSets then start their pods on it.
func (l *Lab) AddRealNode(ctx context.Context, spec NodeSpec) (*RealNode, error) {
	if l.real == nil {
		return nil, errors.New("the lab has no real nodes, so no lab network: start it with a fleet that has one (kubelet: real)")
	}
	if spec.Name == SystemNodeName {
		return nil, fmt.Errorf("node name %s is the lab's own", spec.Name)
	}
	if l.sim.Node(spec.Name) != nil {
		return nil, fmt.Errorf("node %s is simulated", spec.Name)
	}
	spec.Kubelet = KubeletReal
	return l.addRealNode(ctx, spec, false)
}

// RemoveRealNode stops a real node and deletes its Node object (the pod garbage collector then
// deletes its pods).
func (l *Lab) RemoveRealNode(ctx context.Context, name string) error {
	n := l.RealNode(name)
	if n == nil {
		return fmt.Errorf("no real node %s", name)
	}
	l.real.mu.Lock()
	delete(l.real.nodes, name)
	l.real.mu.Unlock()
	err := n.stop(ctx)
	l.real.network.DetachNode(ctx, n.Index)
	l.real.mu.Lock()
	delete(l.real.used, n.Index)
	l.real.mu.Unlock()
	if derr := l.client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); derr != nil && !apierrors.IsNotFound(derr) {
		err = errors.Join(err, derr)
	}
	return err
}

// WaitForRealNodesServing waits until every real Neuron node's component serves all its devices:
// the device plugin's resources in the Node's allocatable, or the DRA driver's ResourceSlices.
func (l *Lab) WaitForRealNodesServing(ctx context.Context, timeout time.Duration) error {
	for _, n := range l.RealNodes() {
		if n.hw == nil {
			continue
		}
		var err error
		if n.Spec.Mode == ModeDRA {
			err = l.WaitForResourceSliceDevices(ctx, n.Spec.Name, "neuron.aws.com", n.Spec.InstanceType.Devices, timeout)
		} else {
			err = l.WaitForNodeResource(ctx, n.Spec.Name, "aws.amazon.com/neuron", int64(n.Spec.InstanceType.Devices), timeout)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// WaitForNodeStatus waits until every node's posted capacity and allocatable is what its
// kubelet holds now: the simulated kubelets have posted their last change, and each real
// kubelet's healthy devices (RealNode.KubeletDevices) are the Node's allocatable. A kubelet
// posts its status every 10 s; until then the scheduler places pods on what it posted before.
func (l *Lab) WaitForNodeStatus(ctx context.Context, timeout time.Duration) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		for _, n := range l.sim.Nodes() {
			if n.StatusPending() {
				last = "node " + n.Spec.Name + " has a change to post"
				return false, nil
			}
		}
		for _, n := range l.RealNodes() {
			if n.hw == nil || n.Spec.Mode == ModeDRA {
				continue
			}
			held, err := n.KubeletDevices(ctx)
			if err != nil {
				last = err.Error()
				return false, nil
			}
			node, err := l.client.CoreV1().Nodes().Get(ctx, n.Spec.Name, metav1.GetOptions{})
			if err != nil {
				last = err.Error()
				return false, nil
			}
			for res, count := range held {
				q := node.Status.Allocatable[corev1.ResourceName(res)]
				if q.Value() != int64(count) {
					last = fmt.Sprintf("node %s: allocatable %s %d, its kubelet holds %d", n.Spec.Name, res, q.Value(), count)
					return false, nil
				}
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("the nodes' status did not catch up after %v (%s): %w", timeout, last, err)
	}
	return nil
}

// RealNode returns a real node of the lab by name, nil if there is none.
func (l *Lab) RealNode(name string) *RealNode {
	if l.real == nil {
		return nil
	}
	l.real.mu.Lock()
	defer l.real.mu.Unlock()
	return l.real.nodes[name]
}

// RealNodes returns the lab's real nodes by name (the system node too).
func (l *Lab) RealNodes() []*RealNode {
	if l.real == nil {
		return nil
	}
	l.real.mu.Lock()
	defer l.real.mu.Unlock()
	out := make([]*RealNode, 0, len(l.real.nodes))
	for _, n := range l.real.nodes {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Spec.Name < out[j].Spec.Name })
	return out
}

// stop ends the real nodes, the registry and the lab namespace.
func (r *realLab) stop(ctx context.Context, labDir string) error {
	r.mu.Lock()
	nodes := make([]*RealNode, 0, len(r.nodes))
	for _, n := range r.nodes {
		nodes = append(nodes, n)
	}
	r.nodes = map[string]*RealNode{}
	r.mu.Unlock()
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() { errs[i] = n.stop(ctx) })
	}
	wg.Wait()
	if r.registry != nil {
		errs = append(errs, r.registry.Stop(StopGrace(StopOrderComponent)))
		_ = RemoveFromState(labDir, r.registry.PID())
	}
	errs = append(errs, realnode.RemoveCgroups(labCgroupRoot(labDir), 20*time.Second))
	realnode.RemoveEmptyPrefix()
	return errors.Join(errs...)
}

// stopNetwork ends the lab namespace (after the control plane, whose processes are in it).
func (r *realLab) stopNetwork() {
	if r.network != nil {
		r.network.Stop()
	}
}

// HasRealNodes reports whether a fleet asks for a real node.
func HasRealNodes(specs []NodeSpec) bool {
	for _, s := range specs {
		if s.Kubelet == KubeletReal {
			return true
		}
	}
	return false
}

// realOnly keeps the specs of real nodes (real) or simulated ones.
func realOnly(specs []NodeSpec, real bool) []NodeSpec {
	var out []NodeSpec
	for _, s := range specs {
		if (s.Kubelet == KubeletReal) == real {
			out = append(out, s)
		}
	}
	return out
}
