//go:build e2e

package dra

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kube-neuron/kube-neuron/internal/dra"
	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/neuron"
	"github.com/kube-neuron/kube-neuron/internal/topology"
	"github.com/kube-neuron/kube-neuron/test/bench/benchutil"
)

// instanceType is the type of every node of the fleet: 16 devices in a 4x4 torus, EFA paired
// with every device, so every device has devicegroup{1,4,8,16}_id.
const instanceType = "trn2.48xlarge"

// layout is the order of the devices in a node's ResourceSlice.
type layout string

const (
	// layoutOrdered is the driver's: neurondevice0..15 by deviceId.
	layoutOrdered layout = "ordered"
	// layoutShuffled is a diagnostic: the same devices and attributes in a random order per node
	// (seeded by the node's index, so every run shuffles alike).
	layoutShuffled layout = "shuffled"
)

// fleet is the nodes and the ResourceSlices published for them.
type fleet struct {
	nodes []string
	// pools are the devices of each node's pool in the driver's order, as dra.Resources builds them.
	pools map[string][]resourceapi.Device

	mu         sync.Mutex
	slices     map[string]*resourceapi.ResourceSlice // node -> its (only) slice as last written
	layout     layout
	fragmented bool // every node's neurondevice0 is held by a filler claim
	devices    int  // devices per node
}

// buildFleet simulates each node's sysfs tree under dir (EFA bus base varied per node, so the
// devicegroup hashes differ from node to node as on real nodes), discovers it with the
// production sysfs reader and builds the pool the driver publishes with dra.Resources.
func buildFleet(ctx context.Context, dir string, n int) (*fleet, error) {
	cat := topology.DefaultCatalog()
	it, err := cat.Get(instanceType)
	if err != nil {
		return nil, err
	}
	f := &fleet{pools: map[string][]resourceapi.Device{}, slices: map[string]*resourceapi.ResourceSlice{}, devices: it.Devices}
	for i := range n {
		name := fmt.Sprintf("trn2-48xlarge-%04d", i)
		root := filepath.Join(dir, "sysfs", name)
		if _, err := neuron.Simulate(neuron.SimOptions{
			Root: root, InstanceType: it, EFA: true, EFABusBase: neuron.DefaultEFABusBase + i*it.Devices,
		}); err != nil {
			return nil, err
		}
		hw, err := (&neuron.Sysfs{Root: root}).Discover(ctx)
		if err != nil {
			return nil, fmt.Errorf("discovering simulated node %s: %w", name, err)
		}
		shape, err := hw.Shape(cat)
		if err != nil {
			return nil, err
		}
		res := dra.Resources(dra.NodeInfo{Name: name, Shape: shape, Hardware: hw, DriverVersion: dra.Version}, nil)
		pool, ok := res.Pools[name]
		if !ok || len(pool.Slices) != 1 || len(pool.Slices[0].Devices) != it.Devices {
			return nil, fmt.Errorf("node %s: want one slice of %d devices, got %+v", name, it.Devices, pool)
		}
		f.nodes = append(f.nodes, name)
		f.pools[name] = pool.Slices[0].Devices
	}
	if err := os.RemoveAll(filepath.Join(dir, "sysfs")); err != nil {
		return nil, err
	}
	return f, nil
}

// createNodes creates the fleet's Node objects: Ready, tainted and labelled like the lab's DRA
// nodes (no kubelet, no Neuron extended resources: the devices are in the ResourceSlices).
func (f *fleet) createNodes(ctx context.Context, client kubernetes.Interface) error {
	it, err := topology.DefaultCatalog().Get(instanceType)
	if err != nil {
		return err
	}
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("192"),
		corev1.ResourceMemory: resource.MustParse("2Ti"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	return benchutil.CreateNodes(ctx, client, len(f.nodes), func(i int) (benchutil.Node, error) {
		return benchutil.Node{
			Name: f.nodes[i], InstanceType: instanceType, Family: it.Family, Mode: labels.AllocationModeDRA,
			Capacity: capacity, Why: "fake node of the DRA scheduling benchmark",
		}, nil
	})
}

// publish writes every node's ResourceSlice with the devices in the given order: created the
// first time, then updated in place with the pool's generation bumped. A no-op when the slices
// already have that layout.
func (f *fleet) publish(ctx context.Context, client kubernetes.Interface, l layout) error {
	f.mu.Lock()
	same := f.layout == l
	f.mu.Unlock()
	if same {
		return nil
	}
	err := benchutil.Parallel(len(f.nodes), 16, func(i int) error {
		name := f.nodes[i]
		devices := f.devicesInOrder(i, l)
		f.mu.Lock()
		old := f.slices[name]
		f.mu.Unlock()
		var (
			s   *resourceapi.ResourceSlice
			err error
		)
		if old == nil {
			s, err = client.ResourceV1().ResourceSlices().Create(ctx, &resourceapi.ResourceSlice{
				ObjectMeta: metav1.ObjectMeta{Name: name + "-" + dra.DriverName},
				Spec: resourceapi.ResourceSliceSpec{
					Driver:   dra.DriverName,
					Pool:     resourceapi.ResourcePool{Name: name, Generation: 1, ResourceSliceCount: 1},
					NodeName: &name,
					Devices:  devices,
				},
			}, metav1.CreateOptions{})
		} else {
			upd := old.DeepCopy()
			upd.Spec.Devices = devices
			upd.Spec.Pool.Generation++
			s, err = client.ResourceV1().ResourceSlices().Update(ctx, upd, metav1.UpdateOptions{})
		}
		if err != nil {
			return fmt.Errorf("publishing the ResourceSlice of %s: %w", name, err)
		}
		f.mu.Lock()
		f.slices[name] = s
		f.mu.Unlock()
		return nil
	})
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.layout = l
	f.mu.Unlock()
	return nil
}

// fillNamespace holds the filler claims of fragmented runs.
const fillNamespace = "bench-fill"

// fragment gives (on) or takes back (off) every node's neurondevice0 to a filler claim: an
// allocated, unreserved one-device claim of our class, as a single-device pod placed first-fit
// would leave it. The resourceclaim controller leaves such claims allocated. A no-op when the
// fleet is already in that state.
func (f *fleet) fragment(ctx context.Context, client kubernetes.Interface, on bool) error {
	f.mu.Lock()
	same := f.fragmented == on
	f.mu.Unlock()
	if same {
		return nil
	}
	if !on {
		if err := client.ResourceV1().ResourceClaims(fillNamespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
			return fmt.Errorf("deleting the filler claims: %w", err)
		}
		deadline := time.Now().Add(time.Minute)
		for {
			l, err := client.ResourceV1().ResourceClaims(fillNamespace).List(ctx, metav1.ListOptions{})
			if err == nil && len(l.Items) == 0 {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("the filler claims are not gone after a minute (%v)", err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	} else {
		if err := benchutil.CreateNamespace(ctx, client, fillNamespace); err != nil {
			return err
		}
		spec := claimSpec(config{count: 1})
		err := benchutil.Parallel(len(f.nodes), 16, func(i int) error {
			node := f.nodes[i]
			cl, err := client.ResourceV1().ResourceClaims(fillNamespace).Create(ctx, &resourceapi.ResourceClaim{
				ObjectMeta: metav1.ObjectMeta{Name: "fill-" + node},
				Spec:       spec,
			}, metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("creating the filler claim of %s: %w", node, err)
			}
			cl.Status.Allocation = &resourceapi.AllocationResult{
				Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
					Request: requestName, Driver: dra.DriverName, Pool: node, Device: dra.DeviceName(0),
				}}},
				NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
					MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
				}}},
			}
			if _, err := client.ResourceV1().ResourceClaims(fillNamespace).UpdateStatus(ctx, cl, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("allocating the filler claim of %s: %w", node, err)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	f.mu.Lock()
	f.fragmented = on
	f.mu.Unlock()
	return nil
}

// devicesInOrder are the devices of node i in the layout's order.
func (f *fleet) devicesInOrder(i int, l layout) []resourceapi.Device {
	devices := slices.Clone(f.pools[f.nodes[i]])
	if l == layoutShuffled {
		r := rand.New(rand.NewPCG(uint64(i), 0x5eed))
		r.Shuffle(len(devices), func(a, b int) { devices[a], devices[b] = devices[b], devices[a] })
	}
	return devices
}

// deviceClass is the driver's DeviceClass (the chart's).
func deviceClass() *resourceapi.DeviceClass {
	return &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: dra.DriverName},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
			CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "` + dra.DriverName + `"`},
		}}},
	}
}

// createDeviceClass creates the driver's DeviceClass.
func createDeviceClass(ctx context.Context, client kubernetes.Interface) error {
	_, err := client.ResourceV1().DeviceClasses().Create(ctx, deviceClass(), metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// stringAttr is the string attribute of device id of node as published ("" when the device or
// the attribute is missing).
func (f *fleet) stringAttr(node string, id int, attr resourceapi.QualifiedName) string {
	devices := f.pools[node]
	if id < 0 || id >= len(devices) {
		return ""
	}
	if v := devices[id].Attributes[attr].StringValue; v != nil {
		return *v
	}
	return ""
}
