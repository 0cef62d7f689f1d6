package lab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// SimulatorOptions configure the node simulator.
type SimulatorOptions struct {
	Client kubernetes.Interface
	// Dir holds each node's state (sysfs tree, CDI specs) under Dir/nodes/<name>.
	Dir string
	// SocketDir holds each node's sockets under SocketDir/<name>; it must be short, Unix sockets
	// allow 108 bytes (for example a directory made with os.MkdirTemp("/tmp", "kn-")).
	SocketDir string
	// StatusUpdateFrequency is how often a node posts changes of its device plugins' capacity
	// and allocatable, as the kubelet's nodeStatusUpdateFrequency; 0 means DefaultStatusUpdateFrequency,
	// a negative value posts every change at once.
	StatusUpdateFrequency time.Duration
}

// DefaultStatusUpdateFrequency is the kubelet's default nodeStatusUpdateFrequency.
const DefaultStatusUpdateFrequency = 10 * time.Second

// Simulator runs simulated Neuron nodes against a real API server.
type Simulator struct {
	opts    SimulatorOptions
	ctx     context.Context
	cancel  context.CancelFunc
	pods    *podWorker
	factory informers.SharedInformerFactory
	bcast   record.EventBroadcaster

	mu    sync.Mutex
	nodes map[string]*SimNode
}

// StartSimulator starts the pod informer; add nodes with AddNode.
func StartSimulator(ctx context.Context, o SimulatorOptions) (*Simulator, error) {
	if o.Client == nil || o.Dir == "" || o.SocketDir == "" {
		return nil, fmt.Errorf("the node simulator needs a client, a state directory and a socket directory")
	}
	ctx, cancel := context.WithCancel(ctx)
	factory := informers.NewSharedInformerFactory(o.Client, 0)
	podInformer := factory.Core().V1().Pods()
	bcast := record.NewBroadcaster(record.WithContext(ctx))
	bcast.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: o.Client.CoreV1().Events("")})
	s := &Simulator{
		opts: o, ctx: ctx, cancel: cancel, factory: factory, bcast: bcast, nodes: map[string]*SimNode{},
		pods: &podWorker{
			client: o.Client, lister: podInformer.Lister(),
			recorder: bcast.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "kubelet"}),
			nodes:    map[string]*SimNode{}, queues: map[string]workqueue.TypedRateLimitingInterface[string]{}, admitted: map[types.UID]*admittedPod{},
		},
	}
	if _, err := podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    s.pods.enqueue,
		UpdateFunc: func(_, obj any) { s.pods.enqueue(obj) },
		DeleteFunc: s.pods.enqueue,
	}); err != nil {
		cancel()
		return nil, err
	}
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			cancel()
			return nil, fmt.Errorf("the node simulator's %v cache did not sync", typ)
		}
	}
	return s, nil
}

// AddNode creates one simulated node and starts its kubelet.
func (s *Simulator) AddNode(ctx context.Context, spec NodeSpec) (*SimNode, error) {
	s.mu.Lock()
	if _, ok := s.nodes[spec.Name]; ok {
		s.mu.Unlock()
		return nil, fmt.Errorf("node %s is already simulated", spec.Name)
	}
	s.mu.Unlock()
	every := s.opts.StatusUpdateFrequency
	if every == 0 {
		every = DefaultStatusUpdateFrequency
	}
	n, err := newSimNode(spec, s.opts.Client, filepath.Join(s.opts.Dir, "nodes", spec.Name), filepath.Join(s.opts.SocketDir, spec.Name), every)
	if err != nil {
		return nil, err
	}
	if err := n.start(klog.NewContext(s.ctx, klog.FromContext(ctx)), s.pods); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.nodes[spec.Name] = n
	s.mu.Unlock()
	s.pods.addNode(s.ctx, n)
	// Pods may already be bound to the node (a restarted simulator): look at them.
	pods, _ := s.pods.lister.List(k8slabels.Everything())
	for _, p := range pods {
		if p.Spec.NodeName == spec.Name {
			s.pods.enqueue(p)
		}
	}
	return n, nil
}

// RemoveNode stops a node's kubelet and deletes its Node object and Lease.
func (s *Simulator) RemoveNode(ctx context.Context, name string) error {
	s.mu.Lock()
	n := s.nodes[name]
	delete(s.nodes, name)
	s.mu.Unlock()
	if n == nil {
		return fmt.Errorf("node %s is not simulated", name)
	}
	n.stop()
	_ = s.opts.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(ctx, name, metav1.DeleteOptions{})
	if err := s.opts.Client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return os.RemoveAll(filepath.Join(s.opts.SocketDir, name))
}

// Node returns a simulated node by name, nil if there is none.
func (s *Simulator) Node(name string) *SimNode {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nodes[name]
}

// Nodes returns the simulated nodes by name.
func (s *Simulator) Nodes() []*SimNode {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*SimNode, 0, len(s.nodes))
	for _, n := range s.nodes {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Spec.Name < out[j].Spec.Name })
	return out
}

// Stop stops every node's kubelet (the Node objects stay).
func (s *Simulator) Stop() {
	for _, n := range s.Nodes() {
		n.stop()
	}
	s.cancel()
	s.factory.Shutdown()
	s.bcast.Shutdown()
}
