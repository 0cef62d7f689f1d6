package plan

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/kube-neuron/kube-neuron/internal/testkit"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

var ctxBG = context.Background()

// seedTemplate is the ResourceClaimTemplate spec of an example in examples/dra (the seeds'
// templates).
func seedTemplate(t testing.TB, file string) resourcev1.ResourceClaimSpec {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "examples", "dra", file))
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range bytes.Split(data, []byte("\n---")) {
		var tmpl resourcev1.ResourceClaimTemplate
		if err := yaml.Unmarshal(doc, &tmpl); err == nil && tmpl.Kind == "ResourceClaimTemplate" {
			return tmpl.Spec.Spec
		}
	}
	t.Fatalf("%s has no ResourceClaimTemplate", file)
	return resourcev1.ResourceClaimSpec{}
}

// claimPod is a pending pod whose one claim comes from a template with spec, as the controller
// gives it to the planner; claims already allocated replace the template's.
func claimPod(name string, spec resourcev1.ResourceClaimSpec, allocated ...*resourcev1.ResourceClaim) PodDemand {
	pod := testkit.MakePod().Name(name).TolerateNeuron().Obj()
	d := NewPodDemand(pod, NewDeviceTemplates(nil, nil, nil).Resolve(ctxBG, DRARequestsOf(spec)))
	d.Claims = []*resourcev1.ResourceClaim{ClaimFromTemplate(pod.Namespace, pod.Name, "neurons", spec)}
	if len(allocated) > 0 {
		d.Claims = allocated
	}
	return d
}

func claimPods(prefix string, n int, spec resourcev1.ResourceClaimSpec) []PodDemand {
	var out []PodDemand
	for i := range n {
		out = append(out, claimPod(fmt.Sprintf("%s-%d", prefix, i), spec))
	}
	return out
}

// nodeSummary is "type:pods,type:pods" of a plan's new nodes, sorted.
func nodeSummary(s ScaleUp) string {
	var out []string
	for _, n := range newNodes(s) {
		out = append(out, fmt.Sprintf("%s:%d", n.typ, len(n.pods)))
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}

// TestPlanSeedTemplates: the seeds' ResourceClaimTemplates, several pods each, on an empty fleet:
// the kube-scheduler's allocator over a new node's ResourceSlices decides what a node takes.
// Connected-device constraints (matchAttribute on the device groups) pack four 4-device pods
// and two 8-device pods on one trn2.48xlarge, and no more.
func TestPlanSeedTemplates(t *testing.T) {
	for _, tc := range []struct {
		file string
		pods int
		want string
	}{
		{"1x4-connected-neurons.yaml", 4, "trn2.48xlarge:4"},
		{"1x4-connected-neurons.yaml", 5, "trn2.48xlarge:1,trn2.48xlarge:4"},
		{"l-trn2.yaml", 3, "trn2.48xlarge:1,trn2.48xlarge:2"},
		{"xl-trn2.yaml", 2, "trn2.48xlarge:1,trn2.48xlarge:1"},
		{"single-neuron-device.yaml", 2, "trn1.2xlarge:1,trn1.2xlarge:1"},
		// No Neuron node has published its driver version: the selector may match.
		{"driver-version-trn1.yaml", 1, "trn1.2xlarge:1"},
	} {
		t.Run(fmt.Sprintf("%s x%d", tc.file, tc.pods), func(t *testing.T) {
			pending := claimPods("p", tc.pods, seedTemplate(t, tc.file))
			up, decisions := Plan(pending, nil, Options{})
			for _, d := range decisions {
				if d.Warning() {
					t.Errorf("%s: %s", d.Pod, d.Message)
				}
			}
			if got := nodeSummary(up); got != tc.want {
				t.Errorf("new nodes %s, want %s", got, tc.want)
			}
		})
	}
}

// TestPlanAllocatedDevices: claims already allocated on a launching node hold the devices the
// scheduler gave them, and a pending pod goes there only if the allocator finds its devices among
// the rest. The whole-device count says 8 of 16 are free on both nodes and would put the pods
// there; the allocator knows that no 8 connected devices are left on the first and that the
// UltraServer node device needs every device of the second.
func TestPlanAllocatedDevices(t *testing.T) {
	held := func(name, node string, devs ...string) PodDemand {
		c := testkit.MakeClaim().Name(name+"-neurons").Request("neurons", int64(len(devs))).Device("neurons", node, devs...).Obj()
		d := claimPod(name, c.Spec, c)
		return d
	}
	var devs [16]string
	for i := range devs {
		devs[i] = fmt.Sprintf("neurondevice%d", i)
	}
	trn2 := NodeOption{Name: "trn2-a", InstanceType: "trn2.48xlarge", Mode: "dra", Bound: []PodDemand{
		held("b1", "trn2-a", devs[0:4]...), held("b2", "trn2-a", devs[8:12]...),
	}}
	trn2u := NodeOption{Name: "trn2u-a", InstanceType: "trn2u.48xlarge", Mode: "dra", Bound: []PodDemand{held("b3", "trn2u-a", devs[0])}}
	for _, tc := range []struct {
		name, file string
		launching  NodeOption
		onLaunch   bool
	}{
		{"8 connected devices: none left", "l-trn2.yaml", trn2, false},
		{"4 connected devices: two groups left", "1x4-connected-neurons.yaml", trn2, true},
		{"the UltraServer node device: a device is taken", "us-4-node-config.yaml", trn2u, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pending := []PodDemand{claimPod("p", seedTemplate(t, tc.file))}
			up, decisions := Plan(pending, []NodeOption{tc.launching}, Options{})
			if decisions[0].Warning() {
				t.Fatalf("refused: %s", decisions[0].Message)
			}
			onLaunch := up.Nodes[decisions[0].Node].Launching
			if onLaunch != tc.onLaunch {
				t.Errorf("planned onto the launching node: %v, want %v (plan %+v)", onLaunch, tc.onLaunch, up.Nodes)
			}
		})
	}
}

// TestPlanFirstAvailable: a request whose first alternative no node can serve gets a node for a
// later one, as the scheduler's allocator chooses it.
func TestPlanFirstAvailable(t *testing.T) {
	trn1 := []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: "device.attributes['neuron.aws.com'].instanceType == 'trn1.2xlarge'"}}}
	spec := resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "neurons", FirstAvailable: []resourcev1.DeviceSubRequest{
		{Name: "many", DeviceClassName: DeviceClass, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 32, Selectors: trn1},
		{Name: "one", DeviceClassName: DeviceClass, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1, Selectors: trn1},
	}}}}}
	d := claimPod("p", spec)
	if problems := Check(d, Environment{DRADriver: true}); len(problems) > 0 {
		t.Fatalf("Check: %v", messages(problems))
	}
	up, decisions := Plan([]PodDemand{d}, nil, Options{})
	if decisions[0].Warning() {
		t.Fatalf("refused: %s", decisions[0].Message)
	}
	if got := nodeSummary(up); got != "trn1.2xlarge:1" {
		t.Errorf("new nodes %s, want trn1.2xlarge:1", got)
	}
}

// TestPlanDeviceClass: the DeviceClass's own selectors count, and a class that does not exist
// launches nothing, as the scheduler refuses such a claim.
func TestPlanDeviceClass(t *testing.T) {
	spec := seedTemplate(t, "single-neuron-device.yaml")
	spec.Devices.Requests[0].Exactly.Selectors = nil // any type the class allows
	inf2Only := DefaultDeviceClass()
	inf2Only.Spec.Selectors = append(inf2Only.Spec.Selectors, resourcev1.DeviceSelector{CEL: &resourcev1.CELDeviceSelector{
		Expression: "device.attributes['neuron.aws.com'].instanceType.startsWith('inf2.')"}})
	for _, tc := range []struct {
		name    string
		classes []*resourcev1.DeviceClass
		want    string
	}{
		{"the chart's class: the cheapest type", nil, "inf1.xlarge:1"},
		{"a class for inf2 only", []*resourcev1.DeviceClass{inf2Only}, "inf2.xlarge:1"},
		{"no class", []*resourcev1.DeviceClass{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			devs := NewDeviceTemplates(nil, nil, tc.classes)
			up, decisions := Plan([]PodDemand{claimPod("p", spec)}, nil, Options{Devices: devs})
			if got := nodeSummary(up); got != tc.want {
				t.Errorf("new nodes %q, want %q (%s)", got, tc.want, decisions[0].Message)
			}
		})
	}
}

// TestEnoughDevices: the check that keeps the allocator from searching every order of devices
// that cannot be enough agrees with the allocator wherever the allocator answers quickly.
func TestEnoughDevices(t *testing.T) {
	ts := NewDeviceTemplates(nil, nil, nil)
	trn2, _ := topology.DefaultCatalog().Lookup("trn2.48xlarge")
	claim := func(n int64) []*resourcev1.ResourceClaim {
		return []*resourcev1.ResourceClaim{testkit.MakeClaim().Name("c").Request("r", n).Obj()}
	}
	for _, tc := range []struct {
		used []int
		n    int64
		want bool
	}{
		{nil, 16, true}, {nil, 17, false}, {[]int{0, 5}, 14, true}, {[]int{0, 5}, 15, false},
	} {
		if got := ts.enoughDevices(ctxBG, trn2, tc.used, claim(tc.n)); got != tc.want {
			t.Errorf("enoughDevices(used %v, %d devices) = %v, want %v", tc.used, tc.n, got, tc.want)
		}
		_, err := ts.allocate(ctxBG, trn2, tc.used, claim(tc.n))
		if fits := err == nil; fits != tc.want {
			t.Errorf("allocate(used %v, %d devices) fits %v, want %v (%v)", tc.used, tc.n, fits, tc.want, err)
		}
	}
}

// TestPlanSharedClaim: pods that name one ResourceClaim share its devices and its node: the claim
// is planned once, and the pods that share it go where the first goes.
func TestPlanSharedClaim(t *testing.T) {
	spec := seedTemplate(t, "l-trn2.yaml")
	shared := testkit.MakeClaim().Name("shared").Obj()
	shared.Spec = spec
	var pending []PodDemand
	for i := range 3 {
		d := claimPod(fmt.Sprintf("p%d", i), spec)
		d.Claims = []*resourcev1.ResourceClaim{shared}
		pending = append(pending, d)
	}
	up, decisions := Plan(pending, nil, Options{})
	if got := nodeSummary(up); got != "trn2.48xlarge:3" {
		t.Errorf("new nodes %s, want one trn2.48xlarge for the three pods of the one claim", got)
	}
	for _, d := range decisions[1:] {
		if d.Warning() || d.Node != decisions[0].Node || !strings.Contains(d.Message, "shares ResourceClaim default/shared with pod default/p0") {
			t.Errorf("%s: node %d, %q; want p0's node and the shared claim named", d.Pod, d.Node, d.Message)
		}
	}
}

// TestHopelessAlternatives: leaving out the firstAvailable alternatives that cannot be enough
// changes nothing of what the allocator answers (compared where the allocator without the check
// answers quickly: few devices free), and answers at once where it would search for seconds.
func TestHopelessAlternatives(t *testing.T) {
	ts := NewDeviceTemplates(nil, nil, nil)
	trn1, _ := topology.DefaultCatalog().Lookup("trn1.32xlarge")
	trn2, _ := topology.DefaultCatalog().Lookup("trn2.48xlarge")
	fa := func(counts ...int64) []*resourcev1.ResourceClaim {
		var subs []resourcev1.DeviceSubRequest
		for k, n := range counts {
			subs = append(subs, resourcev1.DeviceSubRequest{Name: fmt.Sprintf("s%d", k), DeviceClassName: DeviceClass,
				AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: n})
		}
		return []*resourcev1.ResourceClaim{{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "r", FirstAvailable: subs}}}}}}
	}
	connected := func(counts ...int64) []*resourcev1.ResourceClaim {
		c := fa(counts...)
		c[0].Spec.Devices.Constraints = []resourcev1.DeviceConstraint{{Requests: []string{"r"}, MatchAttribute: ptr.To(resourcev1.FullyQualifiedName("resource.aws.com/devicegroup4_id"))}}
		return c
	}
	usedBut := func(t topology.InstanceType, free ...int) []int {
		var out []int
		for i := range t.Devices {
			if !slices.Contains(free, i) {
				out = append(out, i)
			}
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		t      topology.InstanceType
		used   []int
		claims []*resourcev1.ResourceClaim
		fits   bool
	}{
		{"16 or 4 of 4 free", trn1, usedBut(trn1, 3, 5, 9, 12), fa(16, 4), true},
		{"16 or 8 or 2 of 4 free", trn1, usedBut(trn1, 3, 5, 9, 12), fa(16, 8, 2), true},
		{"16 or 8 of 4 free", trn1, usedBut(trn1, 3, 5, 9, 12), fa(16, 8), false},
		{"16 or 1 of none free", trn1, usedBut(trn1), fa(16, 1), false},
		{"16 or 4 connected of 4 free, 2 in a group", trn2, usedBut(trn2, 0, 1, 4, 5), connected(16, 4), false},
		{"16 or 4 connected of 4 free in a group", trn2, usedBut(trn2, 4, 5, 6, 7), connected(16, 4), true},
		{"16 or 2 of all free", trn1, nil, fa(16, 2), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.claims[0].DeepCopy()
			got, err := ts.allocate(ctxBG, tc.t, tc.used, tc.claims)
			if fits := err == nil; fits != tc.fits {
				t.Fatalf("fits %v (%v), want %v", fits, err, tc.fits)
			}
			want, wantErr := ts.runAllocator(ctxBG, tc.t, ts.nodeTemplate(tc.t), tc.used, tc.claims)
			if (err == nil) != (wantErr == nil) || !reflect.DeepEqual(got, want) {
				t.Errorf("with the check %v (%v), the allocator alone %v (%v)", got, err, want, wantErr)
			}
			if !reflect.DeepEqual(tc.claims[0], before) {
				t.Errorf("the caller's claim changed: %+v", tc.claims[0].Spec)
			}
		})
	}
	// Where the allocator alone would try every order of 8 free devices for 16 first, it is
	// given the alternative that can be enough only.
	claims, ok := ts.withoutHopelessAlternatives(ctxBG, trn1, usedBut(trn1, 8, 9, 10, 11, 12, 13, 14, 15), fa(16, 4))
	if subs := claims[0].Spec.Devices.Requests[0].FirstAvailable; !ok || len(subs) != 1 || subs[0].Count != 4 {
		t.Errorf("16 or 4 of 8 free: the allocator gets %+v (%v), want the 4 only", claims[0].Spec.Devices.Requests, ok)
	}
	got, err := ts.allocate(ctxBG, trn1, usedBut(trn1, 8, 9, 10, 11, 12, 13, 14, 15), fa(16, 4))
	if err != nil || !reflect.DeepEqual(got, [][]int{{8, 9, 10, 11}}) {
		t.Errorf("16 or 4 of 8 free: %v (%v), want devices 8 to 11", got, err)
	}
}

// TestFirstAvailableNeed: the cores the planner counts for a claim with alternatives are no more
// than the allocator's choice takes, on an empty node and beside pods already there, so the
// merges and placements it rules out by cores could not have been made.
func TestFirstAvailableNeed(t *testing.T) {
	sub := func(name string, n int64, typ string) resourcev1.DeviceSubRequest {
		return resourcev1.DeviceSubRequest{Name: name, DeviceClassName: DeviceClass, AllocationMode: resourcev1.DeviceAllocationModeExactCount,
			Count: n, Selectors: instanceTypeIs(typ)}
	}
	spec := func(subs ...resourcev1.DeviceSubRequest) resourcev1.ResourceClaimSpec {
		return resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "r", FirstAvailable: subs}}}}
	}
	s := newSim(topology.DefaultCatalog(), topology.BestFit, nil)
	trn1, _ := topology.DefaultCatalog().Lookup("trn1.32xlarge")
	sh := s.shape(trn1)
	for _, tc := range []struct {
		name string
		spec resourcev1.ResourceClaimSpec
		want int // cores counted
	}{
		{"16 or 4", spec(sub("a", 16, "trn1.32xlarge"), sub("b", 4, "trn1.32xlarge")), 4 * sh.CoresPerDevice},
		{"2 or 8", spec(sub("a", 2, "trn1.32xlarge"), sub("b", 8, "trn1.32xlarge")), 2 * sh.CoresPerDevice},
		{"another class", spec(sub("a", 4, "trn1.32xlarge"), resourcev1.DeviceSubRequest{Name: "b", DeviceClassName: "gpu.example.com", AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1}), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := claimPod("p", tc.spec)
			if got := coresNeeded(d, sh); got != tc.want {
				t.Errorf("coresNeeded %d, want %d", got, tc.want)
			}
			u := topology.NewUsage(sh)
			for range 4 { // the same pod again and again, until the node is full
				before := u.FreeCoreCount()
				if _, _, ok := s.place(u, d); !ok {
					break
				}
				if took := before - u.FreeCoreCount(); took < coresNeeded(d, sh) {
					t.Errorf("the allocator's choice takes %d cores, fewer than the %d counted", took, coresNeeded(d, sh))
				}
			}
		})
	}
}

// TestSelectorsMatchingAll: a selector that matches every device of a new node is left out of
// what the allocator evaluates there, and kept where it does not.
func TestSelectorsMatchingAll(t *testing.T) {
	inf2Only := DefaultDeviceClass()
	inf2Only.Name = "inf2-only"
	inf2Only.Spec.Selectors = append(inf2Only.Spec.Selectors, resourcev1.DeviceSelector{CEL: &resourcev1.CELDeviceSelector{
		Expression: "device.attributes['neuron.aws.com'].instanceType.startsWith('inf2.')"}})
	ts := NewDeviceTemplates(nil, nil, []*resourcev1.DeviceClass{DefaultDeviceClass(), inf2Only})
	cat := topology.DefaultCatalog()
	trn2, _ := cat.Lookup("trn2.48xlarge")
	inf2, _ := cat.Lookup("inf2.xlarge")
	selectors := func(t topology.InstanceType) map[string]int {
		out := map[string]int{}
		for _, c := range ts.allocatorClasses(ctxBG, t) {
			out[c.Name] = len(c.Spec.Selectors)
		}
		return out
	}
	if got, want := selectors(trn2), map[string]int{DeviceClass: 0, "inf2-only": 1}; !reflect.DeepEqual(got, want) {
		t.Errorf("trn2.48xlarge: class selectors %v, want %v", got, want)
	}
	if got, want := selectors(inf2), map[string]int{DeviceClass: 0, "inf2-only": 0}; !reflect.DeepEqual(got, want) {
		t.Errorf("inf2.xlarge: class selectors %v, want %v", got, want)
	}
	if len(ts.classes[1].Spec.Selectors) != 2 {
		t.Errorf("the classes' own selectors changed: %v", ts.classes[1].Spec.Selectors)
	}
	sel := instanceTypeIs("trn2.48xlarge")
	if got := ts.forNewNode(ctxBG, trn2, sel); len(got) != 0 {
		t.Errorf("trn2.48xlarge: selectors %v, want none", got)
	}
	if got := ts.forNewNode(ctxBG, inf2, sel); !reflect.DeepEqual(got, sel) {
		t.Errorf("inf2.xlarge: selectors %v, want %v", got, sel)
	}
}

// TestPlanLaunchingAllocatedFirst: on a launching node the kube-scheduler has allocated the claim
// of one of its planned pods (pod-1x4-connected: neurondevice0-3, as the DRA driver names them)
// and not yet the other's (pod-l-trn2: 8 devices of one devicegroup8_id). The allocated claim
// holds its real devices before the planner simulates the others, so the 8-device pod gets
// neurondevice8-15 beside it, as the scheduler will give it, and neither pod is planned again:
// simulating the larger pod first put it on neurondevice0-7, the allocated claim then found its
// devices taken, and the pod got a new node of its own while the scheduler bound it here.
func TestPlanLaunchingAllocatedFirst(t *testing.T) {
	const node = "neuron-trn2-48xlarge-2590ab225f"
	connected := seedTemplate(t, "1x4-connected-neurons.yaml")
	allocated := ClaimFromTemplate("default", "pod-1x4-connected", "neurons", connected)
	allocated.Status.Allocation = testkit.MakeClaim().Name("x").Request("neurons", 4).
		Device("neurons", node, "neurondevice0", "neurondevice1", "neurondevice2", "neurondevice3").Obj().Status.Allocation
	p1x4 := claimPod("pod-1x4-connected", connected, allocated)
	large := claimPod("pod-l-trn2", seedTemplate(t, "l-trn2.yaml"))
	for _, tc := range []struct {
		name      string
		launching NodeOption
		pending   []PodDemand
	}{
		{"both pending", NodeOption{Pods: []PodDemand{p1x4, large}}, []PodDemand{p1x4, large}},
		{"both pending, the larger listed first", NodeOption{Pods: []PodDemand{large, p1x4}}, []PodDemand{large, p1x4}},
		// The pod informer has the large pod bound, the claim informer not its allocation yet.
		{"the larger bound, its claim not seen allocated", NodeOption{Pods: []PodDemand{p1x4}, Bound: []PodDemand{large}}, []PodDemand{p1x4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lo := tc.launching
			lo.Name, lo.InstanceType, lo.Mode = node, "trn2.48xlarge", "dra"
			up, decisions := Plan(tc.pending, []NodeOption{lo}, Options{})
			if got := nodeSummary(up); got != "" {
				t.Errorf("new nodes %s, want none", got)
			}
			for _, d := range decisions {
				if d.Warning() || !d.Launching || (d.Node >= 0 && up.Nodes[d.Node].Name != node) {
					t.Errorf("%s: node %d, %q; want the launching node", d.Pod, d.Node, d.Message)
				}
			}
		})
	}
}
