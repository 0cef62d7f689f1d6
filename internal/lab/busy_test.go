package lab

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/neuron"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

func busyPod(name, node string, phase corev1.PodPhase, rec *allocation.Record) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: phase}}
	if rec != nil {
		data, _ := json.Marshal(rec)
		p.Annotations = map[string]string{allocation.Annotation: string(data)}
	}
	return p
}

func busyClaim(name string, reservedFor []string, results ...resourceapi.DeviceRequestAllocationResult) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}}
	for _, p := range reservedFor {
		c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: p, UID: types.UID("uid-" + p)})
	}
	if results != nil {
		c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: results}}
	}
	return c
}

func result(pool, device string) resourceapi.DeviceRequestAllocationResult {
	return resourceapi.DeviceRequestAllocationResult{Request: "r", Driver: "neuron.aws.com", Pool: pool, Device: device}
}

func cores(pairs ...int) map[physCore]bool {
	out := map[physCore]bool{}
	for i := 0; i+1 < len(pairs); i += 2 {
		out[physCore{pairs[i], pairs[i+1]}] = true
	}
	return out
}

func TestHeldCores(t *testing.T) {
	shapes := map[string]busyShape{
		"trn2":  {Devices: 16, PhysicalPerDevice: 8, LNC: 2}, // 4 NeuronCores per device
		"trn1":  {Devices: 16, PhysicalPerDevice: 2, LNC: 1},
		"trn2u": {Devices: 2, PhysicalPerDevice: 8, LNC: 2},
	}
	rec := func(node string, cs ...allocation.Container) *allocation.Record {
		return &allocation.Record{Node: node, Containers: cs}
	}
	for _, tc := range []struct {
		name   string
		pods   []*corev1.Pod
		claims []*resourceapi.ResourceClaim
		want   map[string]map[physCore]bool
	}{
		{name: "nothing", want: map[string]map[physCore]bool{}},
		{
			name: "core request at LNC 2: NeuronCore 5 is device 1, physical cores 2 and 3",
			pods: []*corev1.Pod{busyPod("a", "trn2", corev1.PodRunning, rec("trn2", allocation.Container{Name: "c", Resource: topology.ResourceNeuronCore, Cores: []int{5}}))},
			want: map[string]map[physCore]bool{"trn2": cores(1, 2, 1, 3)},
		},
		{
			name: "device request holds every core; two containers",
			pods: []*corev1.Pod{busyPod("a", "trn1", corev1.PodRunning, rec("trn1",
				allocation.Container{Name: "c1", Resource: topology.ResourceNeuron, Devices: []int{3}},
				allocation.Container{Name: "c2", Resource: topology.ResourceNeuronCore, Cores: []int{0}}))},
			want: map[string]map[physCore]bool{"trn1": cores(3, 0, 3, 1, 0, 0)},
		},
		{
			name: "pods not Running, records of another node, unknown nodes and bad records hold nothing",
			pods: []*corev1.Pod{
				busyPod("pending", "trn1", corev1.PodPending, rec("trn1", allocation.Container{Name: "c", Resource: topology.ResourceNeuron, Devices: []int{0}})),
				busyPod("done", "trn1", corev1.PodSucceeded, rec("trn1", allocation.Container{Name: "c", Resource: topology.ResourceNeuron, Devices: []int{1}})),
				busyPod("moved", "trn1", corev1.PodRunning, rec("trn2", allocation.Container{Name: "c", Resource: topology.ResourceNeuron, Devices: []int{2}})),
				busyPod("kwok", "other", corev1.PodRunning, rec("other", allocation.Container{Name: "c", Resource: topology.ResourceNeuron, Devices: []int{0}})),
				busyPod("range", "trn1", corev1.PodRunning, rec("trn1", allocation.Container{Name: "c", Resource: topology.ResourceNeuron, Devices: []int{16}})),
				busyPod("plain", "trn1", corev1.PodRunning, nil),
			},
			want: map[string]map[physCore]bool{},
		},
		{
			name: "DRA: claim devices of the pod's node, shared claim once, other drivers and pools ignored",
			pods: []*corev1.Pod{busyPod("a", "trn2", corev1.PodRunning, nil), busyPod("b", "trn2", corev1.PodRunning, nil), busyPod("p", "trn1", corev1.PodPending, nil)},
			claims: []*resourceapi.ResourceClaim{
				busyClaim("shared", []string{"a", "b"}, result("trn2", "neurondevice4")),
				busyClaim("mixed", []string{"a"}, result("trn1", "neurondevice0"), resourceapi.DeviceRequestAllocationResult{Driver: "gpu.example.com", Pool: "trn2", Device: "neurondevice9"}),
				busyClaim("pending-pod", []string{"p"}, result("trn1", "neurondevice1")),
				busyClaim("unreserved", nil, result("trn2", "neurondevice5")),
				busyClaim("unallocated", []string{"a"}),
			},
			want: map[string]map[physCore]bool{"trn2": cores(4, 0, 4, 1, 4, 2, 4, 3, 4, 4, 4, 5, 4, 6, 4, 7)},
		},
		{
			name:   "DRA: neuronnode holds every device",
			pods:   []*corev1.Pod{busyPod("a", "trn2u", corev1.PodRunning, nil)},
			claims: []*resourceapi.ResourceClaim{busyClaim("node", []string{"a"}, result("trn2u", "neuronnode"))},
			want: map[string]map[physCore]bool{"trn2u": cores(0, 0, 0, 1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6, 0, 7,
				1, 0, 1, 1, 1, 2, 1, 3, 1, 4, 1, 5, 1, 6, 1, 7)},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := heldCores(tc.pods, tc.claims, shapes)
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for node, want := range tc.want {
				if len(got[node]) != len(want) {
					t.Errorf("%s: got %v, want %v", node, got[node], want)
				}
				for c := range want {
					if !got[node][c] {
						t.Errorf("%s: %v not held; got %v", node, c, got[node])
					}
				}
			}
		})
	}
}

func TestBusyFraction(t *testing.T) {
	for d := range 16 {
		for k := range 8 {
			if f := busyFraction(physCore{d, k}); f < 0.6 || f > 0.9 {
				t.Fatalf("busyFraction(%d, %d) = %v, outside 0.6-0.9", d, k, f)
			}
		}
	}
}

// TestBusyTick runs ticks of the loop against a lab directory with a simulated tree and reads
// the result through the production reader: held cores move, free ones do not, freed memory
// goes back to 0, and a removed device is skipped and written again once back.
func TestBusyTick(t *testing.T) {
	dir := t.TempDir()
	faultLab(t, dir) // trn2-a (trn2.48xlarge, LNC 2 by default), inf2-a
	b := &busyLoop{dir: dir, nodes: map[string]*busyNode{}}
	ctx := context.Background()
	pod := busyPod("a", "trn2-a", corev1.PodRunning, &allocation.Record{Node: "trn2-a", Containers: []allocation.Container{
		{Name: "c", Resource: topology.ResourceNeuronCore, Cores: []int{4}}}}) // device 1, physical cores 0 and 1
	read := func() *neuron.Stats {
		t.Helper()
		st, err := (&neuron.Sysfs{Root: nodeSysfsRoot(dir, "trn2-a")}).ReadStats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	b.tick(ctx, []*corev1.Pod{pod}, nil, time.Second)
	b.tick(ctx, []*corev1.Pod{pod}, nil, time.Second)
	d := read().Devices[1]
	for _, k := range []int{0, 1} {
		c := d.Cores[k]
		f := busyFraction(physCore{1, k})
		if want := time.Duration(2 * f * float64(time.Second)); c.TimeInUse < want-2*time.Microsecond || c.TimeInUse > want {
			t.Errorf("core %d time in use %v, want %v", k, c.TimeInUse, want)
		}
		if c.MemoryUsedBytes != busyMemory(physCore{1, k}) || c.Executions["success"] == 0 {
			t.Errorf("core %d: %+v, want memory and executions", k, c)
		}
	}
	if c := d.Cores[2]; c.TimeInUse != 0 || c.MemoryUsedBytes != 0 {
		t.Errorf("free core 2 moved: %+v", c)
	}
	if want := busyPower(2, 8); !d.Power.Valid || d.Power.Avg != want {
		t.Errorf("power %+v, want %v", d.Power, want)
	}
	if p := read().Devices[0].Power; p.Avg != 0 {
		t.Errorf("free device power %v, want 0", p.Avg)
	}

	// The device vanishes: the tick goes on without it, and writes it again once it is back.
	if _, err := faultTree(FaultOptions{Dir: dir, Node: "trn2-a", Device: 1, Action: FaultRemove}); err != nil {
		t.Fatal(err)
	}
	b.tick(ctx, []*corev1.Pod{pod}, nil, time.Second)
	if _, err := faultTree(FaultOptions{Dir: dir, Node: "trn2-a", Device: 1, Action: FaultClear}); err != nil {
		t.Fatal(err)
	}
	b.tick(ctx, []*corev1.Pod{pod}, nil, time.Second)
	if d := read().Devices[1]; d.Cores[0].MemoryUsedBytes == 0 || d.Power.Avg != busyPower(2, 8) {
		t.Errorf("after the device came back: memory %d power %v", d.Cores[0].MemoryUsedBytes, d.Power.Avg)
	}

	// The pod ends: memory back to 0, time still, power back to 0.
	before := read().Devices[1].Cores[0].TimeInUse
	b.tick(ctx, nil, nil, time.Second)
	d = read().Devices[1]
	if c := d.Cores[0]; c.MemoryUsedBytes != 0 || c.TimeInUse != before || d.Power.Avg != 0 {
		t.Errorf("after the pod ended: %+v, power %v; want memory 0, time %v, power 0", c, d.Power.Avg, before)
	}
}

// TestStartBusy runs the loop on a fake API with a Running pod that holds a device and waits
// until the device's cores are in use in the tree; stopping it returns.
func TestStartBusy(t *testing.T) {
	dir := t.TempDir()
	faultLab(t, dir)
	pod := busyPod("a", "inf2-a", corev1.PodRunning, &allocation.Record{Node: "inf2-a", Containers: []allocation.Container{
		{Name: "c", Resource: topology.ResourceNeuron, Devices: []int{0}}}})
	stop := startBusy(context.Background(), fake.NewClientset(pod), dir)
	defer stop()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		st, err := (&neuron.Sysfs{Root: nodeSysfsRoot(dir, "inf2-a")}).ReadStats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if c := st.Devices[0].Cores; c[0].TimeInUse > 0 && c[1].TimeInUse > 0 && st.Devices[0].Power.Avg > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the held device did not get busy within 20 s: %+v", st.Devices[0])
		}
	}
}
