package extender

import (
	"fmt"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// nodeShapes answers, for every node the node informer delivered, the node's shape or why the
// extender cannot serve the node. Filter asks for every node the scheduler sends, for every pod:
// the answer is worked out once per node object, when the informer delivers it.
type nodeShapes struct {
	catalog *topology.Catalog
	built   *allocation.Shapes

	mu     sync.RWMutex
	byName map[string]nodeShapeEntry
}

// nodeShapeEntry is a node's shape, or why the extender cannot serve the node.
type nodeShapeEntry struct {
	name  string // the node's name (intern hands it out)
	shape *topology.Shape
	err   error
}

func newNodeShapes(catalog *topology.Catalog) *nodeShapes {
	return &nodeShapes{catalog: catalog, built: allocation.NewShapes(catalog), byName: map[string]nodeShapeEntry{}}
}

// get returns the node's shape, or why the node cannot take Neuron pods from the extender.
func (n *nodeShapes) get(name string) (*topology.Shape, error) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.getLocked(name)
}

// getLocked is get for a caller that holds n.mu.
func (n *nodeShapes) getLocked(name string) (*topology.Shape, error) {
	ns, ok := n.byName[name]
	if !ok {
		return nil, fmt.Errorf("node %s is not known to the extender yet", name)
	}
	return ns.shape, ns.err
}

// all returns get for each of the names, under one read lock.
func (n *nodeShapes) all(names []string) ([]*topology.Shape, []error) {
	shapes, errs := make([]*topology.Shape, len(names)), make([]error, len(names))
	n.mu.RLock()
	defer n.mu.RUnlock()
	for i, name := range names {
		shapes[i], errs[i] = n.getLocked(name)
	}
	return shapes, errs
}

// distinct returns the shapes of the named nodes, each once (the nodes of one type share one).
func (n *nodeShapes) distinct(names []string) []*topology.Shape {
	var shapes []*topology.Shape
	var last *topology.Shape
	n.mu.RLock()
	defer n.mu.RUnlock()
	for _, name := range names {
		if s := n.byName[name].shape; s != nil && s != last {
			last = s
			if !slices.Contains(shapes, s) {
				shapes = append(shapes, s)
			}
		}
	}
	return shapes
}

// intern is decodeArgs's intern: the string of a node the node informer delivered.
func (n *nodeShapes) intern(b []byte) (string, bool) {
	n.mu.RLock()
	ns, ok := n.byName[string(b)]
	n.mu.RUnlock()
	return ns.name, ok
}

// handler keeps the answers current from the node informer's events.
func (n *nodeShapes) handler() cache.ResourceEventHandler {
	set := func(obj any) {
		node, ok := obj.(*corev1.Node)
		if !ok {
			return
		}
		shape, err := n.shapeOf(node)
		n.mu.Lock()
		n.byName[node.Name] = nodeShapeEntry{name: node.Name, shape: shape, err: err}
		n.mu.Unlock()
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    set,
		UpdateFunc: func(_, obj any) { set(obj) },
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if node, ok := obj.(*corev1.Node); ok {
				n.mu.Lock()
				delete(n.byName, node.Name)
				n.mu.Unlock()
			}
		},
	}
}

// shapeOf returns the node's shape, or why the node cannot take Neuron pods from the extender.
func (n *nodeShapes) shapeOf(node *corev1.Node) (*topology.Shape, error) {
	return n.built.Of(node)
}
