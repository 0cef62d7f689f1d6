package autoscaler

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kube-neuron/kube-neuron/internal/autoscaler/plan"
	"github.com/kube-neuron/kube-neuron/internal/labels"
)

// us4Template is the seed's us-4-node-config: the neuron_node device of a trn2u.48xlarge in
// UltraServer mode 4.
func us4Template() *resourcev1.ResourceClaimTemplate {
	return &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "us-4-node-config"},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "neurons", Exactly: &resourcev1.ExactDeviceRequest{
				DeviceClassName: plan.DeviceClass, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1,
				Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: "device.attributes['neuron.aws.com'].resourceType == 'neuron_node'"}}},
			}}},
			Config: []resourcev1.DeviceClaimConfiguration{{Requests: []string{"neurons"}, DeviceConfiguration: resourcev1.DeviceConfiguration{Opaque: &resourcev1.OpaqueDeviceConfiguration{
				Driver: plan.DeviceClass, Parameters: runtime.RawExtension{Raw: []byte(`{"apiVersion":"neuron.aws.com/v1alphav1","kind":"UltraServerConfig","ultraserverMode":4}`)},
			}}}},
		}}},
	}
}

// us4Replica is replica i of the seed's StatefulSet: the claim, affinity to the others on the
// UltraServer's id, anti-affinity on the hostname.
func us4Replica(i int) *corev1.Pod {
	p := draPod(pendingPod(testPod("vllm-"+string(rune('0'+i)))), "us-4-node-config")
	p.Labels["app"] = "vllm"
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "vllm"}}
	p.Spec.Affinity = &corev1.Affinity{
		PodAffinity:     &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{TopologyKey: labels.UltraServerServerID4, LabelSelector: sel}}},
		PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{TopologyKey: corev1.LabelHostname, LabelSelector: sel}}},
	}
	return p
}

// TestControllerUltraServer: the seed's four replicas get one UltraServer, launched as one unit
// of four nodes that carry one identity (node ids 0 to 3), each replica nominated to its own.
func TestControllerUltraServer(t *testing.T) {
	objs := []runtime.Object{daemonSet("dra", map[string]string{"app": plan.DRADriverName}), plan.DefaultDeviceClass(), us4Template()}
	for i := range 4 {
		objs = append(objs, us4Replica(i))
	}
	e := newEnv(t, objs...)
	c, _ := e.controller()
	round(t, c)
	got := e.provider.launched()
	if len(got) != 4 {
		t.Fatalf("launched %d nodes, want the 4 of one UltraServer", len(got))
	}
	id := got[0].Labels[labels.UltraServerServerID4]
	var nodeIDs []string
	for _, r := range got {
		if r.Type != "trn2u.48xlarge" || r.Labels[labels.UltraServerServerID4] != id || id == "" {
			t.Errorf("node %s: type %s, UltraServer %q; want trn2u.48xlarge of UltraServer %q", r.Name, r.Type, r.Labels[labels.UltraServerServerID4], id)
		}
		nodeIDs = append(nodeIDs, r.Labels[labels.UltraServerNodeID4])
	}
	if slices.Sort(nodeIDs); !slices.Equal(nodeIDs, []string{"0", "1", "2", "3"}) {
		t.Errorf("UltraServer node ids %v, want 0 to 3", nodeIDs)
	}
	nominated := map[string]bool{}
	for i := range 4 {
		p, err := e.client.CoreV1().Pods("default").Get(t.Context(), "vllm-"+string(rune('0'+i)), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		nominated[p.Status.NominatedNodeName] = true
	}
	if len(nominated) != 4 {
		t.Errorf("replicas nominated to %v, want one node each", nominated)
	}
}

// TestControllerUltraServerScaleDown: an UltraServer's nodes are removed together, and only once
// every one of them is empty.
func TestControllerUltraServerScaleDown(t *testing.T) {
	var objs []runtime.Object
	for k := range 4 {
		n := launchedNode(UltraServerNodeName("trn2u.48xlarge", "0123456789abcdef", k), "trn2u.48xlarge", t0.Add(-time.Hour))
		for key, v := range labels.UltraServerLabels(plan.UltraServerMember("0123456789abcdef", k)) {
			n.Labels[key] = v
		}
		objs = append(objs, n)
	}
	busy := boundPod(testPod("work").Neuron(1), UltraServerNodeName("trn2u.48xlarge", "0123456789abcdef", 2))
	objs = append(objs, busy)
	e := newEnv(t, objs...)
	for k := range 4 {
		name := UltraServerNodeName("trn2u.48xlarge", "0123456789abcdef", k)
		e.provider.instances[name] = Instance{Name: name, Type: "trn2u.48xlarge"}
	}
	c, _ := e.controller()
	round(t, c)
	e.clock.Add(time.Hour)
	round(t, c)
	if len(e.provider.deleted) != 0 {
		t.Fatalf("removed %v while a node of the UltraServer holds a pod", e.provider.deleted)
	}
	busy.Status.Phase = corev1.PodSucceeded
	if _, err := e.client.CoreV1().Pods("default").UpdateStatus(t.Context(), busy, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		p, err := c.pods.Pods("default").Get("work")
		return err == nil && p.Status.Phase == corev1.PodSucceeded
	})
	round(t, c)
	e.clock.Add(time.Hour)
	round(t, c)
	if len(e.provider.deleted) != 4 {
		t.Errorf("removed %v, want the UltraServer's 4 nodes together", e.provider.deleted)
	}
}
