package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/autoscaler/plan"
	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// pendingPod is a Pending pod in namespace ml asking for n of res in one container, tolerating
// the Neuron taint, with a nodeSelector on instanceType ("" for none).
func pendingPod(name, instanceType, res string, n int64) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name, UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{
			Tolerations: []corev1.Toleration{{Key: labels.NeuronTaintKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{corev1.ResourceName(res): *resource.NewQuantity(n, resource.DecimalSI)}}}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
	if instanceType != "" {
		p.Spec.NodeSelector = map[string]string{labels.InstanceType: instanceType}
	}
	return p
}

// holding is a running pod whose record holds devices on node.
func holding(name, node string, devices ...int) *corev1.Pod {
	t, _ := topology.DefaultCatalog().Lookup("trn1.32xlarge")
	shape, _ := topology.NewShape(t, 0)
	hw, _ := shape.DeviceAllocation(devices)
	return recordPod("ml", name, corev1.PodRunning, "1", allocation.Record{Node: node, Containers: []allocation.Container{
		{Name: "main", Resource: topology.ResourceNeuron, Devices: hw.Devices, Cores: hw.Cores, Served: true}}})
}

// coreHolder is a running pod whose record holds one core on node.
func coreHolder(name, node string, core int) *corev1.Pod {
	return recordPod("ml", name, corev1.PodRunning, "1", allocation.Record{Node: node, Containers: []allocation.Container{
		{Name: "main", Resource: topology.ResourceNeuronCore, Devices: []int{core / 2}, Cores: []int{core}, Served: true}}})
}

func event(typ, reason, source, msg string) corev1.Event {
	return corev1.Event{Type: typ, Reason: reason, Source: corev1.EventSource{Component: source}, Message: msg, Count: 1}
}

func TestExplainPod(t *testing.T) {
	trn1 := neuronNode("trn1-a", "trn1.32xlarge", labels.AllocationModeDevicePlugin, 16, 32)
	trn1.Spec.Taints = []corev1.Taint{plan.NeuronTaint()}
	trn2 := neuronNode("trn2-a", "trn2.48xlarge", labels.AllocationModeDRA, 16, 64)
	seven := "Instance type trn1.32xlarge does not support requests for device: 7. Please request a different number of devices."

	draPod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "trainer", UID: "uid-trainer"},
		Spec: corev1.PodSpec{
			Tolerations:    []corev1.Toleration{{Key: labels.NeuronTaintKey, Operator: corev1.TolerationOpExists}},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "neurons", ResourceClaimName: ptr.To("four")}},
			Containers:     []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "neurons"}}}}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
	unallocated := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "four"},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "neurons",
			Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: DRADriver, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 4}}}}}}
	fullTrn2 := deviceClaim("ml", "other", "trn2-a", "other", "neurondevice0", "neurondevice1", "neurondevice2", "neurondevice3",
		"neurondevice4", "neurondevice5", "neurondevice6", "neurondevice7", "neurondevice8", "neurondevice9", "neurondevice10", "neurondevice11", "neurondevice12", "neurondevice13")

	running := pendingPod("running", "trn1.32xlarge", topology.ResourceNeuron, 4)
	held := holding("running", "trn1-a", 0, 1, 2, 3)
	running.Annotations, running.Spec.NodeName, running.Status.Phase = held.Annotations, "trn1-a", corev1.PodRunning

	tests := []struct {
		name string
		in   explainInput
		// want: every string appears in the table output.
		want []string
		// check looks at the explanation itself.
		check func(t *testing.T, e Explanation)
	}{{
		name: "7 devices on trn1.32xlarge: the valid counts",
		in: explainInput{Pod: pendingPod("seven", "trn1.32xlarge", topology.ResourceNeuron, 7), Nodes: []*corev1.Node{trn1, trn2},
			Events: []corev1.Event{event("Warning", eventFailedScheduling, "my-scheduler", "0/2 nodes are available: 1 "+seven),
				event("Warning", eventFailedScheduling, "my-scheduler", "0/2 nodes are available: 1 "+seven)}},
		want: []string{"Pod ml/seven: the pod is Pending: 7 devices is not a count trn1.32xlarge accepts; the autoscaler will launch nothing for it",
			seven, "trn1.32xlarge: 1, 4, 8 or 16 devices", "UnsupportedCount", "What to do:",
			"Request a count the instance type accepts (trn1.32xlarge: 1, 4, 8 or 16 devices",
			"accepts aws.amazon.com/neuron requests of 1, 4, 8 or 16 devices, not 7"},
		check: func(t *testing.T, e Explanation) {
			if len(e.Nodes) != 1 || e.Nodes[0].Verdict != VerdictUnsupportedCount || e.OtherNodes != 1 {
				t.Errorf("nodes %+v other %d: want trn1-a UnsupportedCount, 1 other", e.Nodes, e.OtherNodes)
			}
			if len(e.ValidCounts) != 1 || !slices.Equal(e.ValidCounts[0].Devices, []int{1, 4, 8, 16}) || e.ValidCounts[0].Accepts {
				t.Errorf("valid counts %+v", e.ValidCounts)
			}
			if len(e.Events) != 1 || e.Events[0].Count != 2 {
				t.Errorf("events %+v: want the two copies shown once, count 2", e.Events)
			}
			if e.Total != "7 devices" {
				t.Errorf("total %q", e.Total)
			}
		},
	}, {
		name: "fragmentation names the fewest pods to move",
		// Free: 0-3, 5, 7, 8-11 (10 devices) but no aligned 8. Moving s1 and s2 frees 0-7 (two
		// pods), moving big frees 8-15 (one pod): big is the answer.
		in: explainInput{Pod: pendingPod("eight", "trn1.32xlarge", topology.ResourceNeuron, 8), Nodes: []*corev1.Node{trn1},
			Pods: []*corev1.Pod{holding("big", "trn1-a", 12, 13, 14, 15), holding("s1", "trn1-a", 4), holding("s2", "trn1-a", 6)}},
		want: []string{"Pod ml/eight: the pod is Pending: trn1-a is fragmented (10 devices free but no 8 connected)",
			"trn1-a (trn1.32xlarge, device-plugin): Fragmented: 10 devices free but no 8 connected; freeing pod ml/big (devices 12-15) would make 8 connected devices 8-15 free",
			"free connected sets 0-3 | 8-11 | 5 | 7", "Fragmentation on trn1-a: moving ml/big"},
		check: func(t *testing.T, e Explanation) {
			m := e.Nodes[0].Move
			if m == nil || len(m.Pods) != 1 || m.Pods[0].Name != "big" || !slices.Equal(m.Frees, ids(8, 15)) {
				t.Errorf("move %+v: want big, frees 8-15", m)
			}
			if e.Autoscaler.Launch != "trn1.32xlarge" {
				t.Errorf("the planner would launch %q, want trn1.32xlarge", e.Autoscaler.Launch)
			}
		},
	}, {
		name: "fits nowhere, the autoscaler says NotTriggerScaleUp",
		in: explainInput{Pod: pendingPod("sixteen", "trn1.32xlarge", topology.ResourceNeuron, 16), Nodes: []*corev1.Node{trn1},
			Pods: []*corev1.Pod{holding("a", "trn1-a", 0, 1, 2, 3)},
			Events: []corev1.Event{
				event("Warning", eventFailedScheduling, "my-scheduler", "0/1 nodes are available: 1 no free valid set of 16 devices."),
				event("Warning", plan.ReasonNotTriggerScaleUp, "neuron-autoscaler", "the limit of 1 Neuron nodes (--max-nodes) is reached"),
			}},
		want: []string{"Insufficient: 12 devices free, 16 needed", "NotTriggerScaleUp", "Autoscaler: the limit of 1 Neuron nodes (--max-nodes) is reached",
			"event NotTriggerScaleUp: the limit", "Wait for pods on the candidate nodes to end"},
		check: func(t *testing.T, e Explanation) {
			if !strings.Contains(e.Summary, "neuron-autoscaler launches nothing") {
				t.Errorf("summary %q", e.Summary)
			}
		},
	}, {
		name: "a pod that does not tolerate the Neuron taint",
		in: explainInput{Pod: func() *corev1.Pod {
			p := pendingPod("intolerant", "trn1.32xlarge", topology.ResourceNeuron, 4)
			p.Spec.Tolerations = nil
			return p
		}(), Nodes: []*corev1.Node{trn1}},
		want: []string{"Tainted: taint aws.amazon.com/neuron", "its planner launches nothing: the pod does not tolerate the taint"},
	}, {
		name: "DRA pod with an unallocated claim",
		in: explainInput{Pod: draPod, Nodes: []*corev1.Node{trn1, trn2}, Claims: []*resourcev1.ResourceClaim{unallocated, fullTrn2},
			PodClaims: []podClaim{{Name: "neurons", Claim: unallocated}},
			Events:    []corev1.Event{event("Warning", eventFailedScheduling, "default-scheduler", "0/2 nodes are available: 1 cannot allocate all claims.")}},
		want: []string{"neurons (ResourceClaim four): not allocated", "trn2-a (trn2.48xlarge, dra): Insufficient: 2 devices free, the claims ask for 4",
			"trn1-a (trn1.32xlarge, device-plugin): WrongMode", "Claim neurons (ResourceClaim four) is not allocated", "Request: 4 devices through ResourceClaims"},
		check: func(t *testing.T, e Explanation) {
			if len(e.Claims) != 1 || e.Claims[0].Allocated {
				t.Errorf("claims %+v", e.Claims)
			}
		},
	}, {
		name: "fragmented cores: one core held in each block",
		in: explainInput{Pod: pendingPod("cores", "trn1.32xlarge", topology.ResourceNeuronCore, 8), Nodes: []*corev1.Node{trn1},
			Pods: []*corev1.Pod{coreHolder("c1", "trn1-a", 2), coreHolder("c2", "trn1-a", 10), coreHolder("c3", "trn1-a", 18), coreHolder("c4", "trn1-a", 26)}},
		want: []string{"Fragmented: 28 cores free but no 8 connected; freeing pod ml/c1 (cores 2) would make 8 connected cores 0-7 free"},
	}, {
		name: "unhealthy devices on a node where the request fits by the records",
		in: explainInput{Pod: pendingPod("four", "trn1.32xlarge", topology.ResourceNeuron, 4), Nodes: []*corev1.Node{func() *corev1.Node {
			n := trn1.DeepCopy()
			n.Status.Allocatable = corev1.ResourceList{topology.ResourceNeuron: *resource.NewQuantity(13, resource.DecimalSI)}
			return n
		}()}},
		want: []string{"Unhealthy: the request fits the free devices by the allocation records, but 3 devices are unhealthy"},
	}, {
		name: "a failed pod: the kubelet's admission error",
		in: explainInput{Pod: func() *corev1.Pod {
			p := pendingPod("failed", "trn1.32xlarge", topology.ResourceNeuron, 4)
			p.Spec.NodeName, p.Status.Phase = "trn1-a", corev1.PodFailed
			p.Status.Reason, p.Status.Message = "UnexpectedAdmissionError", "Allocate failed due to device 3 is unhealthy"
			return p
		}(), Nodes: []*corev1.Node{trn1}},
		want: []string{"the pod failed on node trn1-a: UnexpectedAdmissionError: Allocate failed due to device 3 is unhealthy", "delete the pod so that it is scheduled again"},
	}, {
		name: "a running pod says what it got",
		in:   explainInput{Pod: running, Nodes: []*corev1.Node{trn1}},
		want: []string{"Pod ml/running: the pod is running on node trn1-a with container main: devices 0-3 (cores 0-7)"},
		check: func(t *testing.T, e Explanation) {
			if len(e.WhatToDo) != 0 || len(e.Holds) != 1 {
				t.Errorf("what to do %v holds %v", e.WhatToDo, e.Holds)
			}
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := explainPod(context.Background(), tc.in)
			var out bytes.Buffer
			if err := writeExplanation(&out, outputFormat{name: outTable}, e); err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("the answer lacks %q:\n%s", w, out.String())
				}
			}
			for _, line := range strings.Split(out.String(), "\n") {
				if strings.TrimRight(line, " ") != line {
					t.Errorf("trailing spaces: %q", line)
				}
			}
			if tc.check != nil {
				tc.check(t, e)
			}
			var js bytes.Buffer
			if err := writeExplanation(&js, outputFormat{name: outJSON}, e); err != nil {
				t.Fatal(err)
			}
			if strings.Contains(js.String(), "null") {
				t.Errorf("-o json has a null:\n%s", js.String())
			}
			var back Explanation
			if err := json.Unmarshal(js.Bytes(), &back); err != nil || back.Summary != e.Summary {
				t.Errorf("-o json does not read back: %v", err)
			}
		})
	}
}

func TestExplainUnknownPod(t *testing.T) {
	_, err := readExplainInput(context.Background(), fake.NewClientset(cluster()...), "ml", "nope")
	if exitCode(err) != ExitNotFound || !strings.Contains(err.Error(), `pod "nope" not found in namespace ml`) {
		t.Errorf("err %v (exit %d), want not found, exit %d", err, exitCode(err), ExitNotFound)
	}
}

func TestExplainReadsTheCluster(t *testing.T) {
	objs := append(cluster(), pendingPod("seven", "trn1.32xlarge", topology.ResourceNeuron, 7))
	in, err := readExplainInput(context.Background(), fake.NewClientset(objs...), "ml", "seven")
	if err != nil {
		t.Fatal(err)
	}
	in.Catalog = topology.DefaultCatalog()
	e := explainPod(context.Background(), in)
	if len(e.Nodes) != 1 || e.Nodes[0].Name != "trn1-a" || e.Nodes[0].Verdict != VerdictUnsupportedCount {
		t.Errorf("nodes %+v", e.Nodes)
	}
	// The two pods of cluster() hold 0-3 and cores 8-9 of device 4.
	if got := e.Nodes[0].FreeDevices; !slices.Equal(got, ids(5, 15)) {
		t.Errorf("free devices %v, want 5-15", got)
	}
}

func TestExplainTarget(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
		ok   bool
	}{
		{[]string{"pod", "a"}, "a", true},
		{[]string{"pod/a"}, "a", true},
		{[]string{"pods", "a"}, "a", true},
		{[]string{"node", "a"}, "", false},
		{[]string{"pod"}, "", false},
		{[]string{"pod/a", "b"}, "", false},
	} {
		got, err := explainTarget(tc.args)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("%v: %q %v", tc.args, got, err)
		}
		if err != nil && exitCode(err) != ExitUsage {
			t.Errorf("%v: exit %d, want %d", tc.args, exitCode(err), ExitUsage)
		}
	}
}
