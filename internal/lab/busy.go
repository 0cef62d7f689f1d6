package lab

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	apiv1 "github.com/kube-neuron/kube-neuron/api/neuron.aws.com/v1"
	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/neuron"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// busyEvery is how often the lab moves the counters of held cores.
const busyEvery = time.Second

// busyShape is what mapping NeuronCore ids to physical cores needs of a node.
type busyShape struct {
	Devices, PhysicalPerDevice, LNC int
}

// logicalPerDevice is the number of NeuronCores per device at the node's LNC.
func (s busyShape) logicalPerDevice() int { return s.PhysicalPerDevice / max(s.LNC, 1) }

// physCore is a physical core of a device.
type physCore struct{ Device, Core int }

// heldCores returns, per node of shapes, the physical cores held by pods Running on it: the
// containers of their kube-neuron.io/allocation record (device-plugin mode: the extender writes
// it at bind, the device plugin for the pods it serves from the kubelet's ids) and the Neuron
// devices of the ResourceClaims reserved for them (DRA mode; neuronnode holds every device).
// It reads nothing but its arguments.
func heldCores(pods []*corev1.Pod, claims []*resourceapi.ResourceClaim, shapes map[string]busyShape) map[string]map[physCore]bool {
	out := map[string]map[physCore]bool{}
	hold := func(node string, device int, logical []int) {
		s, ok := shapes[node]
		if !ok || device < 0 || device >= s.Devices {
			return
		}
		if out[node] == nil {
			out[node] = map[physCore]bool{}
		}
		lnc := max(s.LNC, 1)
		for _, c := range logical {
			for k := c * lnc; k < (c+1)*lnc && k < s.PhysicalPerDevice; k++ {
				out[node][physCore{device, k}] = true
			}
		}
	}
	allOf := func(node string) []int {
		n := shapes[node].logicalPerDevice()
		l := make([]int, n)
		for i := range l {
			l[i] = i
		}
		return l
	}
	running := map[types.UID]string{} // Running pod -> its node
	for _, p := range pods {
		if p.Status.Phase != corev1.PodRunning || p.Spec.NodeName == "" {
			continue
		}
		node := p.Spec.NodeName
		running[p.UID] = node
		rec, err := allocation.RecordOf(p) // the device plugin writes one for every pod it serves
		if err != nil || rec == nil || rec.Node != node {
			continue
		}
		lpd := shapes[node].logicalPerDevice()
		for _, c := range rec.Containers {
			if c.Resource == topology.ResourceNeuronCore {
				for _, id := range c.Cores {
					if lpd > 0 && id >= 0 {
						hold(node, id/lpd, []int{id % lpd})
					}
				}
				continue
			}
			for _, d := range c.Devices {
				hold(node, d, allOf(node))
			}
		}
	}
	for _, claim := range claims {
		if claim.Status.Allocation == nil {
			continue
		}
		nodes := map[string]bool{}
		for _, r := range claim.Status.ReservedFor {
			if node, ok := running[r.UID]; ok && r.Resource == "pods" {
				nodes[node] = true
			}
		}
		for _, r := range claim.Status.Allocation.Devices.Results {
			if r.Driver != apiv1.DriverName || !nodes[r.Pool] {
				continue
			}
			if r.Device == apiv1.NodeDeviceName {
				for d := range shapes[r.Pool].Devices {
					hold(r.Pool, d, allOf(r.Pool))
				}
				continue
			}
			if d, ok := apiv1.ParseDeviceName(r.Device); ok {
				hold(r.Pool, d, allOf(r.Pool))
			}
		}
	}
	return out
}

// busyFraction is the share of wall time a held physical core spends in use: 0.6 to 0.9, fixed
// per core so that utilisation differs between cores and stays the same between runs.
func busyFraction(c physCore) float64 { return 0.6 + 0.3*float64((c.Device*7+c.Core*3)%10)/9 }

// busyMemory is the device memory a held physical core has in use: 2 to 3.5 GiB.
func busyMemory(c physCore) uint64 { return 2<<30 + uint64((c.Device+c.Core)%4)*(512<<20) }

// busyPower is a device's power in percent of its maximum with busy of its cores held.
func busyPower(busy, cores int) float64 {
	if busy == 0 || cores == 0 {
		return 0
	}
	return 20 + 70*float64(busy)/float64(cores)
}

// busyNode is what the loop wrote to one node's tree.
type busyNode struct {
	sim    *neuron.Simulator
	shape  busyShape
	memory map[physCore]uint64 // non-zero memory written
	power  map[int]float64     // non-zero power written
}

// busyLoop makes held devices look busy: every busyEvery it works out from the pods and
// ResourceClaims of the API which cores pods Running on each node with a simulated tree hold,
// and moves those cores' counters (time in use, success executions, memory) and their devices'
// power; freed cores get their memory back to 0 and their device's power falls. It writes only
// what changes and talks to no one but the lab's API server.
type busyLoop struct {
	dir   string
	nodes map[string]*busyNode
}

// startBusy starts the loop for the lab in dir; the returned function stops it and waits.
func startBusy(ctx context.Context, client kubernetes.Interface, dir string) func() {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	factory := informers.NewSharedInformerFactory(client, 0)
	pods := factory.Core().V1().Pods().Lister()
	claims := factory.Resource().V1().ResourceClaims().Lister()
	factory.Start(ctx.Done())
	go func() {
		defer close(done)
		defer factory.Shutdown()
		factory.WaitForCacheSync(ctx.Done())
		b := &busyLoop{dir: dir, nodes: map[string]*busyNode{}}
		last := time.Now()
		t := time.NewTicker(busyEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				ps, _ := pods.List(k8slabels.Everything())
				cs, _ := claims.List(k8slabels.Everything())
				b.tick(ctx, ps, cs, now.Sub(last))
				last = now
			}
		}
	}()
	return func() { cancel(); <-done }
}

// tick applies one interval of elapsed time to every node's tree.
func (b *busyLoop) tick(ctx context.Context, pods []*corev1.Pod, claims []*resourceapi.ResourceClaim, elapsed time.Duration) {
	logger := klog.FromContext(ctx)
	entries, err := os.ReadDir(filepath.Join(b.dir, "nodes"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		logger.V(2).Info("Busy loop: listing the nodes", "err", err)
		return
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	shapes := map[string]busyShape{}
	for _, name := range names {
		n := b.nodes[name]
		if n == nil {
			sim, err := neuron.OpenSimulator(nodeSysfsRoot(b.dir, name))
			if err != nil {
				continue // no tree (the system node), or not written yet
			}
			it := sim.InstanceType()
			n = &busyNode{sim: sim, shape: busyShape{Devices: it.Devices, PhysicalPerDevice: it.PhysicalCoresPerDevice, LNC: sim.LNC()},
				memory: map[physCore]uint64{}, power: map[int]float64{}}
			b.nodes[name] = n
		}
		shapes[name] = n.shape
	}
	for name := range b.nodes {
		if !slices.Contains(names, name) {
			delete(b.nodes, name)
		}
	}
	held := heldCores(pods, claims, shapes)
	for name, n := range b.nodes {
		if err := n.apply(held[name], elapsed); err != nil {
			logger.V(2).Info("Busy loop: writing a node's counters", "node", name, "err", err)
			delete(b.nodes, name) // opened again next time
		}
	}
}

// apply moves the node's counters for one interval with the cores in held.
func (n *busyNode) apply(held map[physCore]bool, elapsed time.Duration) error {
	gone := map[int]bool{} // devices removed now: skipped, and rewritten once back
	skip := func(device int, err error) error {
		if errors.Is(err, neuron.ErrDeviceRemoved) {
			gone[device] = true
			return nil
		}
		return err
	}
	busy := map[int]int{}
	for c := range held {
		if gone[c.Device] {
			continue
		}
		busy[c.Device]++
		f := busyFraction(c)
		err := n.sim.AddCoreTime(c.Device, c.Core, time.Duration(float64(elapsed)*f))
		if err == nil {
			err = n.sim.AddExecutions(c.Device, c.Core, "success", uint64(max(1, 10*f*elapsed.Seconds())))
		}
		if err == nil && n.memory[c] != busyMemory(c) {
			if err = n.sim.SetCoreMemory(c.Device, c.Core, busyMemory(c)); err == nil {
				n.memory[c] = busyMemory(c)
			}
		}
		if err := skip(c.Device, err); err != nil {
			return err
		}
	}
	for c := range n.memory {
		if held[c] || gone[c.Device] {
			continue
		}
		err := n.sim.SetCoreMemory(c.Device, c.Core, 0)
		if err == nil {
			delete(n.memory, c)
		}
		if err := skip(c.Device, err); err != nil {
			return err
		}
	}
	for d := range n.shape.Devices {
		p := busyPower(busy[d], n.shape.PhysicalPerDevice)
		if gone[d] || n.power[d] == p {
			continue
		}
		err := n.sim.SetPower(d, p)
		if err == nil {
			n.power[d] = p
		}
		if err := skip(d, err); err != nil {
			return err
		}
	}
	for d := range gone { // a removed device comes back fresh: write it all again then
		delete(n.power, d)
		for c := range n.memory {
			if c.Device == d {
				delete(n.memory, c)
			}
		}
	}
	return nil
}
