package testkit

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

func TestPodDefaults(t *testing.T) {
	got := MakePod().Name("p").Obj()
	want := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Namespace: "default", Name: "p", UID: "uid-p", Labels: map[string]string{}, Annotations: map[string]string{},
	}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("MakePod().Name(\"p\") = %+v, want %+v", got, want)
	}
	if uid := MakePod().Name("a").Name("b").Obj().UID; uid != "uid-b" {
		t.Errorf("renamed pod has UID %q, want uid-b", uid)
	}
	for _, p := range []*corev1.Pod{MakePod().UID("x").Name("p").Obj(), MakePod().Name("p").UID("x").Obj()} {
		if p.UID != "x" {
			t.Errorf("UID %q, want the explicit x", p.UID)
		}
	}
}

func TestPodContainers(t *testing.T) {
	p := MakePod().Neuron(2).NeuronCores(3).Container("side", "", 0).DefaultedContainer("c", topology.ResourceNeuron, 4).Obj()
	if len(p.Spec.Containers) != 4 {
		t.Fatalf("%d containers, want 4", len(p.Spec.Containers))
	}
	for i, want := range []struct {
		name, res     string
		limit         int64
		withRequests  bool
		withResources bool
	}{
		{DefaultContainer, topology.ResourceNeuron, 2, false, true},
		{DefaultContainer, topology.ResourceNeuronCore, 3, false, true},
		{"side", "", 0, false, false},
		{"c", topology.ResourceNeuron, 4, true, true},
	} {
		c := p.Spec.Containers[i]
		if c.Name != want.name {
			t.Errorf("container %d named %q, want %q", i, c.Name, want.name)
		}
		if !want.withResources {
			if c.Resources.Limits != nil || c.Resources.Requests != nil {
				t.Errorf("container %d has resources %+v, want none", i, c.Resources)
			}
			continue
		}
		if l := c.Resources.Limits[corev1.ResourceName(want.res)]; l.Value() != want.limit || len(c.Resources.Limits) != 1 {
			t.Errorf("container %d limits %v, want %d %s", i, c.Resources.Limits, want.limit, want.res)
		}
		if want.withRequests != (c.Resources.Requests != nil) || (want.withRequests && !reflect.DeepEqual(c.Resources.Requests, c.Resources.Limits)) {
			t.Errorf("container %d requests %v, limits %v; want requests equal to limits: %v", i, c.Resources.Requests, c.Resources.Limits, want.withRequests)
		}
	}
}

func TestPodScheduling(t *testing.T) {
	p := MakePod().Namespace("ns").Node("n").Running().Selector("k", "v").
		Affinity(Term(Expr("a", corev1.NodeSelectorOpIn, "x", "y"))).TolerateNeuron().ClaimTemplate("neurons", "four").
		Label("app", "x").Annotation("note", "y").Obj()
	if p.Namespace != "ns" || p.Spec.NodeName != "n" || p.Status.Phase != corev1.PodRunning || p.Spec.NodeSelector["k"] != "v" {
		t.Errorf("namespace, node, phase or selector not set: %+v", p)
	}
	terms := p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) != 1 || terms[0].MatchExpressions[0].Key != "a" || len(terms[0].MatchExpressions[0].Values) != 2 {
		t.Errorf("affinity %+v", terms)
	}
	if len(p.Spec.Tolerations) != 1 || p.Spec.Tolerations[0] != (corev1.Toleration{Key: labels.NeuronTaintKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}) {
		t.Errorf("tolerations %+v do not tolerate the Neuron taint", p.Spec.Tolerations)
	}
	if rc := p.Spec.ResourceClaims; len(rc) != 1 || rc[0].Name != "neurons" || *rc[0].ResourceClaimTemplateName != "four" {
		t.Errorf("resource claims %+v", rc)
	}
	if p.Labels["app"] != "x" || p.Annotations["note"] != "y" {
		t.Errorf("labels %v, annotations %v", p.Labels, p.Annotations)
	}
	if p := MakePod().TolerateNeuron().Tolerations().Pending().Obj(); p.Spec.Tolerations != nil || p.Status.Phase != corev1.PodPending {
		t.Errorf("Tolerations() left %+v, phase %q", p.Spec.Tolerations, p.Status.Phase)
	}
}

func TestPodRecordAndPublished(t *testing.T) {
	r := &allocation.Record{Node: "trn1-a", Containers: []allocation.Container{{Name: "main", Resource: topology.ResourceNeuron, Devices: []int{2, 3}}}}
	p := MakePod().Name("p").Neuron(2).Record(r).AllocTime(7).Obj()
	if p.Spec.NodeName != "trn1-a" || p.Annotations[allocation.AllocTime] != "7" {
		t.Errorf("node %q, alloc time %q", p.Spec.NodeName, p.Annotations[allocation.AllocTime])
	}
	if got, err := allocation.RecordOf(p); err != nil || !reflect.DeepEqual(got, r) {
		t.Errorf("RecordOf = %+v, %v; want %+v", got, err, r)
	}

	p = MakePod().Name("q").Node("n").Running().Neuron(2).Published("1,0").Obj()
	want := map[string]string{allocation.AWSNeuronIDs: "1,0", allocation.Allocated: "false", allocation.AllocTime: "1700000000000000000"}
	if !reflect.DeepEqual(p.Annotations, want) {
		t.Errorf("annotations %v, want %v", p.Annotations, want)
	}
	if got, _, err := allocation.PublishedRecord(p); err != nil || got == nil || !reflect.DeepEqual(got.Containers[0].Devices, []int{0, 1}) {
		t.Errorf("PublishedRecord = %+v, %v; want devices 0 and 1", got, err)
	}
}

func TestNode(t *testing.T) {
	n := MakeNode().Name("trn1-a").InstanceType("trn1.32xlarge").DRA().NeuronTaint().Unschedulable().Ready().Obj()
	if n.Name != "trn1-a" || n.UID != "uid-trn1-a" || n.Labels[labels.InstanceType] != "trn1.32xlarge" || n.Labels[labels.AllocationMode] != labels.AllocationModeDRA {
		t.Errorf("name, UID or labels: %+v", n.ObjectMeta)
	}
	want := corev1.ResourceList{
		topology.ResourceNeuron:     resource.MustParse("16"),
		topology.ResourceNeuronCore: resource.MustParse("32"),
	}
	for res, q := range want {
		if got := n.Status.Capacity[res]; got.Cmp(q) != 0 {
			t.Errorf("capacity of %s %v, want %v", res, got.String(), q.String())
		}
	}
	if n.Status.Allocatable != nil {
		t.Errorf("allocatable %v, want none", n.Status.Allocatable)
	}
	if len(n.Spec.Taints) != 1 || n.Spec.Taints[0] != (corev1.Taint{Key: labels.NeuronTaintKey, Value: "true", Effect: corev1.TaintEffectNoSchedule}) || !n.Spec.Unschedulable || len(n.Status.Conditions) != 1 {
		t.Errorf("taints %+v, unschedulable %v, conditions %+v", n.Spec.Taints, n.Spec.Unschedulable, n.Status.Conditions)
	}
	if n := MakeNode().Name("x").InstanceType("m5.large").DevicePlugin().Capacity("cpu", 2).Allocatable("cpu", 1).Obj(); n.Status.Capacity.Cpu().Value() != 2 ||
		n.Status.Allocatable.Cpu().Value() != 1 || len(n.Status.Capacity) != 1 || n.Labels[labels.AllocationMode] != labels.AllocationModeDevicePlugin {
		t.Errorf("a type outside the catalog: capacity %v, allocatable %v, labels %v", n.Status.Capacity, n.Status.Allocatable, n.Labels)
	}
}

func TestClaim(t *testing.T) {
	if c := MakeClaim().Name("c").Request("neurons", 4).Obj(); c.Namespace != "default" || c.UID != "uid-c" || c.Status.Allocation != nil ||
		c.Spec.Devices.Requests[0].Exactly.Count != 4 || c.Spec.Devices.Requests[0].Exactly.DeviceClassName != NeuronDriver {
		t.Errorf("unallocated claim %+v", c)
	}
	if c := MakeClaim().Allocated().Obj(); c.Status.Allocation == nil || len(c.Status.Allocation.Devices.Results) != 0 {
		t.Errorf("Allocated() left %+v", c.Status.Allocation)
	}
	c := MakeClaim().Namespace("ml").Name("c").Device("neurons", "node-a", "neurondevice0", "neurondevice1").
		Config(`{"lnc":1}`, "neurons").ReservedFor("p").Obj()
	want := resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
		Results: []resourceapi.DeviceRequestAllocationResult{
			{Request: "neurons", Driver: NeuronDriver, Pool: "node-a", Device: "neurondevice0"},
			{Request: "neurons", Driver: NeuronDriver, Pool: "node-a", Device: "neurondevice1"},
		},
		Config: []resourceapi.DeviceAllocationConfiguration{{
			Source: resourceapi.AllocationConfigSourceClaim, Requests: []string{"neurons"},
			DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: NeuronDriver, Parameters: runtime.RawExtension{Raw: []byte(`{"lnc":1}`)}}},
		}},
	}}
	if c.Namespace != "ml" || !reflect.DeepEqual(*c.Status.Allocation, want) {
		t.Errorf("allocation %+v, want %+v", c.Status.Allocation, want)
	}
	if c := MakeClaim().ConfigFrom("other.example.com", resourceapi.AllocationConfigSourceClass, "{}").Obj(); c.Status.Allocation.Devices.Config[0].Source != resourceapi.AllocationConfigSourceClass ||
		c.Status.Allocation.Devices.Config[0].Opaque.Driver != "other.example.com" || c.Status.Allocation.Devices.Config[0].Requests != nil {
		t.Errorf("ConfigFrom: %+v", c.Status.Allocation.Devices.Config)
	}
	tmpl := MakeClaim().Name("four").Request("neurons", 4).Template()
	if tmpl.Namespace != "default" || tmpl.Name != "four" || len(tmpl.Spec.Spec.Devices.Requests) != 1 || tmpl.Spec.Spec.Devices.Requests[0].Exactly.Count != 4 {
		t.Errorf("Template() = %+v", tmpl)
	}
	if r := c.Status.ReservedFor; len(r) != 1 || r[0].Name != "p" || r[0].UID != "uid-p" || r[0].Resource != "pods" {
		t.Errorf("reserved for %+v", r)
	}
}
