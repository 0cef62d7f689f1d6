package dra

import (
	"maps"
	"reflect"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kube-neuron/kube-neuron/internal/nodemetrics"
)

// claimPod builds a pod of namespace ml: claimPod("p").Claim("gpus", "c1").Template("t", "gen").Uses("main", "gpus").
type claimPodBuilder struct{ p *corev1.Pod }

func claimPod(name string) *claimPodBuilder {
	return &claimPodBuilder{p: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}}
}

// Claim adds a pod claim naming a ResourceClaim.
func (b *claimPodBuilder) Claim(podClaim, claim string) *claimPodBuilder {
	b.p.Spec.ResourceClaims = append(b.p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: podClaim, ResourceClaimName: ptr.To(claim)})
	return b
}

// Template adds a pod claim from a template that the controller turned into claim generated.
func (b *claimPodBuilder) Template(podClaim, generated string) *claimPodBuilder {
	b.p.Spec.ResourceClaims = append(b.p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: podClaim, ResourceClaimTemplateName: ptr.To("tmpl")})
	if generated != "" {
		b.p.Status.ResourceClaimStatuses = append(b.p.Status.ResourceClaimStatuses, corev1.PodResourceClaimStatus{Name: podClaim, ResourceClaimName: ptr.To(generated)})
	}
	return b
}

// Uses adds a container using the pod claims.
func (b *claimPodBuilder) Uses(container string, podClaims ...string) *claimPodBuilder {
	c := corev1.Container{Name: container}
	for _, pc := range podClaims {
		c.Resources.Claims = append(c.Resources.Claims, corev1.ResourceClaim{Name: pc})
	}
	b.p.Spec.Containers = append(b.p.Spec.Containers, c)
	return b
}

// Sidecar adds a restartable init container using the pod claims.
func (b *claimPodBuilder) Sidecar(container string, podClaims ...string) *claimPodBuilder {
	c := corev1.Container{Name: container, RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)}
	for _, pc := range podClaims {
		c.Resources.Claims = append(c.Resources.Claims, corev1.ResourceClaim{Name: pc})
	}
	b.p.Spec.InitContainers = append(b.p.Spec.InitContainers, c)
	return b
}

func (b *claimPodBuilder) Phase(p corev1.PodPhase) *claimPodBuilder { b.p.Status.Phase = p; return b }

func (b *claimPodBuilder) Obj() *corev1.Pod { return b.p }

// checkpointOf is a checkpoint with the claims of namespace ml on the devices given.
func checkpointOf(claims map[string][]int) *Checkpoint {
	cp := NewCheckpoint()
	for name, devs := range claims {
		p := Plan{Namespace: "ml", Name: name}
		for _, d := range devs {
			p.Devices = append(p.Devices, PlannedDevice{Request: "r", Pool: "n", Device: DeviceName(d), Indexes: []int{d}})
		}
		cp.Claims["uid-"+name] = &PreparedClaim{Plan: p}
	}
	return cp
}

func TestClaimHolders(t *testing.T) {
	for _, tc := range []struct {
		name   string
		claims map[string][]int
		pods   []*corev1.Pod
		want   []nodemetrics.Holder
	}{
		{
			name:   "one container, a template claim",
			claims: map[string][]int{"p-neuron-abc": {0, 1}},
			pods:   []*corev1.Pod{claimPod("p").Template("neuron", "p-neuron-abc").Uses("main", "neuron").Obj()},
			want:   []nodemetrics.Holder{{Namespace: "ml", Pod: "p", Container: "main", Devices: []int{0, 1}}},
		},
		{
			name:   "two containers of one pod share the claim: one holder each",
			claims: map[string][]int{"c": {3}},
			pods:   []*corev1.Pod{claimPod("p").Claim("n", "c").Uses("a", "n").Uses("b", "n").Uses("nothing").Obj()},
			want: []nodemetrics.Holder{
				{Namespace: "ml", Pod: "p", Container: "a", Devices: []int{3}},
				{Namespace: "ml", Pod: "p", Container: "b", Devices: []int{3}},
			},
		},
		{
			name:   "a claim shared by two pods repeats per pod",
			claims: map[string][]int{"shared": {4, 5}},
			pods: []*corev1.Pod{
				claimPod("q").Claim("n", "shared").Uses("main", "n").Obj(),
				claimPod("p").Claim("x", "shared").Uses("main", "x").Obj(),
			},
			want: []nodemetrics.Holder{
				{Namespace: "ml", Pod: "p", Container: "main", Devices: []int{4, 5}},
				{Namespace: "ml", Pod: "q", Container: "main", Devices: []int{4, 5}},
			},
		},
		{
			name:   "containers with different claims, a sidecar, and a container with two claims",
			claims: map[string][]int{"c1": {0}, "c2": {1}},
			pods: []*corev1.Pod{claimPod("p").Claim("one", "c1").Claim("two", "c2").
				Uses("a", "one").Uses("both", "one", "two").Sidecar("side", "two").Obj()},
			want: []nodemetrics.Holder{
				{Namespace: "ml", Pod: "p", Container: "a", Devices: []int{0}},
				{Namespace: "ml", Pod: "p", Container: "both", Devices: []int{0, 1}},
				{Namespace: "ml", Pod: "p", Container: "side", Devices: []int{1}},
			},
		},
		{
			name:   "a pod that gives its claim to no container holds it itself",
			claims: map[string][]int{"c": {2}},
			pods:   []*corev1.Pod{claimPod("p").Claim("n", "c").Uses("main").Obj()},
			want:   []nodemetrics.Holder{{Namespace: "ml", Pod: "p", Container: "", Devices: []int{2}}},
		},
		{
			name:   "prepared claims without a pod hold their devices unnamed, as one holder; finished pods and other namespaces hold nothing",
			claims: map[string][]int{"c": {6}, "d": {1}},
			pods: []*corev1.Pod{
				claimPod("done").Claim("n", "c").Uses("main", "n").Phase(corev1.PodSucceeded).Obj(),
				func() *corev1.Pod {
					p := claimPod("elsewhere").Claim("n", "c").Uses("main", "n").Obj()
					p.Namespace = "other"
					return p
				}(),
			},
			want: []nodemetrics.Holder{{Devices: []int{1, 6}}},
		},
		{
			name:   "a pod whose template claim is not made yet, or not prepared, holds nothing",
			claims: map[string][]int{},
			pods: []*corev1.Pod{
				claimPod("p").Template("n", "").Uses("main", "n").Obj(),
				claimPod("q").Claim("n", "not-prepared").Uses("main", "n").Obj(),
			},
			want: nil,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := claimHolders(checkpointOf(tc.claims), tc.pods)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("holders =\n  %+v\nwant\n  %+v", got, tc.want)
			}
		})
	}
}

// TestClaimHoldersNodeDevice: the UltraServer node device stands for every device of the node.
func TestClaimHoldersNodeDevice(t *testing.T) {
	all := []int{0, 1, 2, 3}
	cp := NewCheckpoint()
	cp.Claims["u"] = &PreparedClaim{Plan: Plan{Namespace: "ml", Name: "us", Devices: []PlannedDevice{{Device: NodeDeviceName, Indexes: all}}}}
	got := claimHolders(cp, []*corev1.Pod{claimPod("p").Claim("n", "us").Uses("main", "n").Obj()})
	want := []nodemetrics.Holder{{Namespace: "ml", Pod: "p", Container: "main", Devices: all}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("holders = %+v, want %+v", got, want)
	}
}

// TestNodeMetrics: the driver's registry serves the node metrics, read from the simulated sysfs
// tree, naming the pod (from the node's pods through the informer) that uses a prepared claim.
func TestNodeMetrics(t *testing.T) {
	d := newTestDriver(t, &driverEnv{})
	d.o.MetricsSampleInterval = time.Hour
	if r := prepareOne(t, d, testClaim("c").Device("neurons", "trn2-a", "neurondevice2").Obj()); r.Err != nil {
		t.Fatal(r.Err)
	}
	pod := claimPod("p").Claim("n", "c").Uses("main", "n").Obj()
	pod.Spec.NodeName = "trn2-a"
	if _, err := d.o.Client.CoreV1().Pods("ml").Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	stop := d.startNodeMetrics(t.Context())
	defer stop()
	want := map[string]string{} // neuron_device -> its holders
	for i := range d.info.Shape.Devices() {
		want[strconv.Itoa(i)] = "//"
	}
	want["2"] = "ml/p/main"
	var got map[string]string
	for deadline := time.Now().Add(10 * time.Second); ; {
		got = map[string]string{}
		mfs, err := d.metrics.registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != nodemetrics.DeviceECCErrors {
				continue
			}
			for _, m := range mf.GetMetric() {
				l := map[string]string{}
				for _, lp := range m.GetLabel() {
					l[lp.GetName()] = lp.GetValue()
				}
				if l["counter"] == nodemetrics.CounterMemECCUncorrected {
					got[l["neuron_device"]] += l["namespace"] + "/" + l["pod"] + "/" + l["container"]
				}
			}
		}
		if maps.Equal(got, want) || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !maps.Equal(got, want) {
		t.Errorf("holders by device %v, want %v", got, want)
	}
}
