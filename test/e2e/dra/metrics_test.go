//go:build e2e

package dra

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kube-neuron/kube-neuron/internal/dra"
	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/topology"
	"github.com/kube-neuron/kube-neuron/test/e2e/framework"
)

// readHolders scrapes the node's agent: the holders of each core and each device.
func readHolders(ctx context.Context, node string) (cores, devices map[int][]string, err error) {
	m, err := framework.ScrapeNodeMetrics(ctx, node)
	if err != nil {
		return nil, nil, err
	}
	if cores, err = framework.HolderSets(m["neuron_core_memory_used_bytes"], node, "neuron_core"); err != nil {
		return nil, nil, err
	}
	devices, err = framework.HolderSets(m["neuron_device_ecc_errors_total"], node, "neuron_device")
	return cores, devices, err
}

// claimPodOn is a pod pinned to node whose container main uses the pod claim "neuron", from
// the claim (claim != "") or the template.
func claimPodOn(name, node, claim, template string) *corev1.Pod {
	pc := corev1.PodResourceClaim{Name: "neuron"}
	if claim != "" {
		pc.ResourceClaimName = ptr.To(claim)
	} else {
		pc.ResourceClaimTemplateName = ptr.To(template)
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			NodeSelector:   map[string]string{labels.Hostname: node},
			Tolerations:    []corev1.Toleration{{Key: labels.NeuronTaintKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			ResourceClaims: []corev1.PodResourceClaim{pc},
			Containers: []corev1.Container{{Name: "main", Image: "my-neuron-image",
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "neuron"}}}}},
		},
	}
}

func devicesRequest(count int64) resourcev1.DeviceClaim {
	return resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "neurons", Exactly: &resourcev1.ExactDeviceRequest{
		DeviceClassName: dra.DriverName, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: count,
	}}}}
}

// claimDevices returns the Neuron devices allocated to a claim.
func claimDevices(t *testing.T, ctx context.Context, ns, name string) []int {
	t.Helper()
	claim, err := framework.L.Client().ResourceV1().ResourceClaims(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, r := range claim.Status.Allocation.Devices.Results {
		d, ok := dra.ParseDeviceName(r.Device)
		if !ok {
			t.Fatalf("claim %s: device %s is not a Neuron device", name, r.Device)
		}
		out = append(out, d)
	}
	slices.Sort(out)
	return out
}

// TestMetricsHolders: the DRA driver's per-device and per-core series name the pods that use
// the claims it prepared: a pod with a claim of its own (from a template) on its device, and
// two pods sharing one claim on the claim's devices, once per pod; free devices and cores have
// empty holders.
func TestMetricsHolders(t *testing.T) {
	const node = "trn2-b"
	ctx, ns := setup(t)
	spec := framework.L.Simulator().Node(node).Spec
	shape, err := topology.NewShape(spec.InstanceType, spec.LNC)
	if err != nil {
		t.Fatal(err)
	}
	// The claims of tests before this one may still be leaving the node.
	framework.WaitFor(t, ctx, time.Minute, "every device of "+node+" to be free in its metrics", func(ctx context.Context) (bool, string, error) {
		cores, devices, err := readHolders(ctx, node)
		if err != nil {
			return false, err.Error(), nil
		}
		d := framework.DiffHolders("core", cores, framework.WantHolders(shape.Cores(), nil)) + framework.DiffHolders("; device", devices, framework.WantHolders(shape.Devices(), nil))
		return d == "", d, nil
	})

	c := framework.L.Client()
	t.Cleanup(func() { cleanup(t, ns) })
	if _, err := c.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "one"}, Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: devicesRequest(1)}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ResourceV1().ResourceClaims(ns).Create(ctx, &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "shared"}, Spec: resourcev1.ResourceClaimSpec{Devices: devicesRequest(2)},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // before cleanup, which waits for every claim of ns to go
		_ = c.ResourceV1().ResourceClaims(ns).Delete(context.Background(), "shared", metav1.DeleteOptions{})
	})
	for _, pod := range []*corev1.Pod{
		claimPodOn("solo", node, "", "one"),
		claimPodOn("share-a", node, "shared", ""),
		claimPodOn("share-b", node, "shared", ""),
	} {
		if _, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	heldDevices := map[string][]int{}
	for _, name := range []string{"solo", "share-a", "share-b"} {
		pod := framework.WaitForPod(t, ctx, ns, name, corev1.PodRunning, 90*time.Second)
		claim := pod.Spec.ResourceClaims[0].ResourceClaimName // a template's claim is in the status
		if claim == nil && len(pod.Status.ResourceClaimStatuses) == 1 {
			claim = pod.Status.ResourceClaimStatuses[0].ResourceClaimName
		}
		if claim == nil {
			t.Fatalf("pod %s: no claim; claim statuses %+v", name, pod.Status.ResourceClaimStatuses)
		}
		heldDevices[ns+"/"+name+"/main"] = claimDevices(t, ctx, ns, *claim)
	}
	if solo, shared := heldDevices[ns+"/solo/main"], heldDevices[ns+"/share-a/main"]; len(solo) != 1 || len(shared) != 2 {
		t.Fatalf("claims got devices %v (solo) and %v (shared), want 1 and 2", solo, shared)
	}
	heldCores := map[string][]int{}
	for h, devs := range heldDevices {
		for _, d := range devs {
			heldCores[h] = append(heldCores[h], shape.CoresOf(d)...)
		}
	}
	wantCores, wantDevices := framework.WantHolders(shape.Cores(), heldCores), framework.WantHolders(shape.Devices(), heldDevices)
	framework.WaitFor(t, ctx, 30*time.Second, "the metrics of "+node+" to name the pods on their claims' devices and cores", func(ctx context.Context) (bool, string, error) {
		cores, devices, err := readHolders(ctx, node)
		if err != nil {
			return false, err.Error(), nil
		}
		d := framework.DiffHolders("core", cores, wantCores) + framework.DiffHolders("; device", devices, wantDevices)
		return d == "", d, nil
	})
	// The lab's busy loop moves nc_time_in_use of held cores only: utilisation is above 0 on
	// exactly the held cores.
	held := map[int]bool{}
	for _, cs := range heldCores {
		for _, c := range cs {
			held[c] = true
		}
	}
	framework.WaitFor(t, ctx, 30*time.Second, "the held cores of "+node+" (and only they) to show utilization", func(ctx context.Context) (bool, string, error) {
		m, err := framework.ScrapeNodeMetrics(ctx, node)
		if err != nil {
			return false, err.Error(), nil
		}
		return framework.BusyOnlyWhereHeld(m["neuron_core_utilization_ratio"], held)
	})
}
