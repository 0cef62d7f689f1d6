package plan

import (
	"context"
	"slices"
	"strings"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// neuronSlice is the ResourceSlice of a running Neuron node: its devices publish the type and the
// versions (the other attributes do not matter here).
func neuronSlice(node, instanceType, driverVersion, draVersion string, devices int) *resourcev1.ResourceSlice {
	s := &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-neuron"},
		Spec:       resourcev1.ResourceSliceSpec{Driver: DeviceClass, NodeName: ptr.To(node), Pool: resourcev1.ResourcePool{Name: node, ResourceSliceCount: 1}},
	}
	for i := range devices {
		s.Spec.Devices = append(s.Spec.Devices, resourcev1.Device{Name: "neurondevice" + itoa(i), Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
			"instanceType":        {StringValue: ptr.To(instanceType)},
			"neuronDriverVersion": {StringValue: ptr.To(driverVersion)},
			"draDriverVersion":    {VersionValue: ptr.To(draVersion)},
		}})
	}
	return s
}

// typesWhere lists the catalog's types that satisfy f, in catalog order.
func typesWhere(f func(topology.InstanceType) bool) []string {
	out := []string{}
	for _, t := range topology.DefaultCatalog().Types() {
		if f(t) {
			out = append(out, t.Name)
		}
	}
	return out
}

// TestDeviceTemplatesResolve evaluates claims' CEL selectors, with the DRA library the scheduler
// uses, against the devices the driver's own code builds for a new node of each type.
func TestDeviceTemplatesResolve(t *testing.T) {
	const attr = "device.attributes['neuron.aws.com']."
	running := []*resourcev1.ResourceSlice{
		neuronSlice("trn1-a", "trn1.32xlarge", "2.26.5.0", "0.3.0", 16),
		neuronSlice("inf2-a", "inf2.xlarge", "2.26.5.0", "0.3.0", 1),
	}
	all := typesWhere(func(topology.InstanceType) bool { return true })
	for _, tc := range []struct {
		name      string
		slices    []*resourcev1.ResourceSlice
		req       DRARequest
		want      []string
		unmatched string // in Unmatched when want is empty
	}{
		{name: "seed 003: a driver version no node runs", slices: running,
			req:       DRARequest{Name: "neurons", Count: 1, Selectors: []string{attr + "instanceType == 'trn1.2xlarge' && " + attr + "neuronDriverVersion == '9.99.99.0'"}},
			want:      []string{},
			unmatched: "the cluster's Neuron nodes publish neuronDriverVersion 2.26.5.0 and draDriverVersion 0.3.0"},
		{name: "seed 003: the version the nodes run", slices: running,
			req:  DRARequest{Count: 1, Selectors: []string{attr + "instanceType == 'trn1.2xlarge' && " + attr + "neuronDriverVersion == '2.26.5.0'"}},
			want: []string{"trn1.2xlarge"}},
		{name: "no Neuron node yet: the version cannot be known, so it may match",
			req:  DRARequest{Count: 1, Selectors: []string{attr + "instanceType == 'trn1.2xlarge' && " + attr + "neuronDriverVersion == '9.99.99.0'"}},
			want: []string{"trn1.2xlarge"}},
		{name: "a semantic version comparison", slices: running,
			req:  DRARequest{Count: 1, Selectors: []string{attr + "draDriverVersion.isGreaterThan(semver('0.2.0')) && " + attr + "instanceType == 'inf2.xlarge'"}},
			want: []string{"inf2.xlarge"}},
		// The UltraServer node device of trn2u has no deviceId: the selector fails on it, and the
		// scheduler's allocator then refuses the whole node, as this does.
		{name: "device ids: 8 devices from id 8 on need 16 devices, not on trn2u, whose node device has no deviceId",
			req:  DRARequest{Count: 8, Selectors: []string{attr + "deviceId >= 8"}},
			want: typesWhere(func(t topology.InstanceType) bool { return t.Devices >= 16 && t.UltraServerNodes == 0 })},
		{name: "capacity: 32 GiB devices",
			req: DRARequest{Count: 1, Selectors: []string{"device.capacity['neuron.aws.com'].memory.compareTo(quantity('32Gi')) >= 0"}},
			want: typesWhere(func(t topology.InstanceType) bool {
				return t.DeviceMemoryGiB >= 32
			})},
		{name: "more devices than the type has: the selectors allow it, the simulation refuses it with the counts",
			req:  DRARequest{Count: 17, Selectors: []string{attr + "instanceType == 'trn1.32xlarge'"}},
			want: []string{"trn1.32xlarge"}},
		{name: "the UltraServer node device",
			req:  DRARequest{Count: 1, Selectors: []string{attr + "resourceType == 'neuron_node'"}},
			want: typesWhere(func(t topology.InstanceType) bool { return t.UltraServerNodes > 0 })},
		{name: "a node's own attribute cannot be known: any type may match",
			req:  DRARequest{Count: 1, Selectors: []string{attr + "networkNodeLayer1 == 'nn-1'"}},
			want: all},
		{name: "all devices of a type", slices: running,
			req:  DRARequest{All: true, Selectors: []string{attr + "instanceType == 'trn1.32xlarge'"}},
			want: []string{"trn1.32xlarge"}},
		{name: "an attribute the driver does not publish",
			req:       DRARequest{Name: "neurons", Count: 1, Selectors: []string{attr + "instancetype == 'trn1.2xlarge'"}},
			want:      []string{},
			unmatched: "no such key: instancetype"},
		{name: "a type outside the catalog",
			req:       DRARequest{Name: "neurons", Count: 1, Selectors: []string{attr + "instanceType == 'trn9.xlarge'"}},
			want:      []string{},
			unmatched: "no instance type's devices match the selectors of ResourceClaim request neurons"},
		{name: "a selector that does not compile",
			req:       DRARequest{Name: "neurons", Count: 1, Selectors: []string{attr + "instanceType =="}},
			want:      []string{},
			unmatched: "does not compile"},
		{name: "no selectors: not evaluated", req: DRARequest{Count: 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := NewDeviceTemplates(nil, tc.slices, nil).Resolve(context.Background(), []DRARequest{tc.req})[0]
			if !slices.Equal(got.Matching, tc.want) || (got.Matching == nil) != (tc.want == nil) {
				t.Fatalf("Matching = %#v, want %#v (unmatched: %q)", got.Matching, tc.want, got.Unmatched)
			}
			if len(tc.want) == 0 && tc.want != nil && !strings.Contains(got.Unmatched, tc.unmatched) {
				t.Errorf("Unmatched = %q, want it to contain %q", got.Unmatched, tc.unmatched)
			}
			if len(tc.want) > 0 && got.Unmatched != "" {
				t.Errorf("Unmatched = %q for a request some type serves", got.Unmatched)
			}
		})
	}
}

// TestUnmatchedSelectorsTriggerNoScaleUp: the demo's pod-driver-version-missing (seed 003) got a
// trn1.2xlarge that could never serve it; now Check says why and no type is allowed.
func TestUnmatchedSelectorsTriggerNoScaleUp(t *testing.T) {
	reqs := DRARequestsOf(resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
		Name: "neurons", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: DeviceClass, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1,
			Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: "device.attributes['neuron.aws.com'].instanceType == 'trn1.2xlarge' && " +
				"device.attributes['neuron.aws.com'].neuronDriverVersion == '9.99.99.0'"}}}},
	}}}})
	reqs = NewDeviceTemplates(nil, []*resourcev1.ResourceSlice{neuronSlice("trn1-a", "trn1.32xlarge", "2.26.5.0", "0.3.0", 16)}, nil).Resolve(context.Background(), reqs)
	d := demand(testPod("pod-driver-version-missing"), reqs...)
	problems := Check(d, allDaemonSets)
	if len(problems) != 1 || !strings.Contains(problems[0].Message, "neuronDriverVersion 2.26.5.0") || !strings.Contains(problems[0].Message, "Change the claim's selectors") {
		t.Fatalf("problems %+v, want one naming the version the nodes publish and the fix", problems)
	}
	for _, it := range topology.DefaultCatalog().Types() {
		if d.Allows(it) {
			t.Errorf("the pod allows %s", it.Name)
		}
	}
}

// FuzzDeviceTemplatesResolve: a claim's selector is user input. Whatever it says, Resolve does
// not panic, evaluates it (Matching set), and says why when no type matches.
func FuzzDeviceTemplatesResolve(f *testing.F) {
	f.Add("device.attributes['neuron.aws.com'].instanceType == 'trn1.2xlarge'", int64(1), false)
	f.Add("device.attributes['neuron.aws.com'].neuronDriverVersion == '9.99.99.0'", int64(1), false)
	f.Add("device.attributes['neuron.aws.com'].deviceId >= 8", int64(8), false)
	f.Add("device.capacity['neuron.aws.com'].memory.compareTo(quantity('32Gi')) >= 0", int64(0), true)
	f.Add("device.attributes['neuron.aws.com'].draDriverVersion.isGreaterThan(semver('0.2.0'))", int64(2), false)
	f.Add("device.attributes[", int64(1), false)
	f.Add("1 / 0 == 1", int64(1), false)
	f.Add("'x'", int64(1), false)
	templates := NewDeviceTemplates(nil, []*resourcev1.ResourceSlice{neuronSlice("trn1-a", "trn1.32xlarge", "2.26.5.0", "0.3.0", 16)}, nil)
	f.Fuzz(func(t *testing.T, expr string, count int64, all bool) {
		if len(expr) > 1024 {
			return
		}
		req := DRARequest{Name: "r", Count: int(count % 64), All: all, Selectors: []string{expr}}
		got := templates.Resolve(context.Background(), []DRARequest{req})
		if len(got) != 1 || got[0].Matching == nil {
			t.Fatalf("Resolve(%q) = %+v: the selector was not evaluated", expr, got)
		}
		if len(got[0].Matching) == 0 && got[0].Unmatched == "" {
			t.Errorf("Resolve(%q): no type matches and no reason", expr)
		}
		if len(got[0].Matching) > 0 && got[0].Unmatched != "" {
			t.Errorf("Resolve(%q): types %v match, yet %q", expr, got[0].Matching, got[0].Unmatched)
		}
	})
}
