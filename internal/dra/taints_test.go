package dra

import (
	"fmt"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/kube-neuron/kube-neuron/internal/neuron"
)

// taintsOf maps every device of the pool to its taints.
func taintsOf(t *testing.T, res resourceslice.DriverResources, pool string) map[string][]resourceapi.DeviceTaint {
	t.Helper()
	out := map[string][]resourceapi.DeviceTaint{}
	for _, s := range res.Pools[pool].Slices {
		for _, d := range s.Devices {
			out[d.Name] = d.Taints
		}
	}
	return out
}

func TestHealthResourcesTaints(t *testing.T) {
	info := testNode(t, "trn2-a", "trn2.48xlarge", 0, nil)
	since := make([]time.Time, 16)
	at := time.Date(2026, 1, 2, 3, 4, 5, 600_000_000, time.UTC)
	reasons := make([]string, 16)
	reasons[3], since[3] = neuron.ReasonECCUncorrected, at
	reasons[9], since[9] = neuron.ReasonGone, at.Add(time.Minute)

	for _, effect := range []resourceapi.DeviceTaintEffect{resourceapi.DeviceTaintEffectNoSchedule, resourceapi.DeviceTaintEffectNoExecute} {
		t.Run(string(effect), func(t *testing.T) {
			got := taintsOf(t, HealthResources(info, DeviceHealth{Reasons: reasons, Since: since, UncorrectableEffect: effect}), "trn2-a")
			if len(got) != 16 {
				t.Fatalf("%d devices, want all 16 (unhealthy ones stay, tainted)", len(got))
			}
			for i := range 16 {
				ts := got[DeviceName(i)]
				switch i {
				case 3:
					want := resourceapi.DeviceTaint{Key: UnhealthyTaintKey, Value: "ecc-uncorrected", Effect: effect}
					if len(ts) != 1 || ts[0].Key != want.Key || ts[0].Value != want.Value || ts[0].Effect != want.Effect ||
						ts[0].TimeAdded == nil || !ts[0].TimeAdded.Time.Equal(at.Truncate(time.Second)) {
						t.Errorf("device 3: taints %+v, want %+v added %v", ts, want, at.Truncate(time.Second))
					}
				case 9:
					if len(ts) != 1 || ts[0].Value != "gone" || ts[0].Effect != resourceapi.DeviceTaintEffectNoSchedule {
						t.Errorf("device 9 (gone): taints %+v, want gone:NoSchedule whatever the uncorrectable effect", ts)
					}
				default:
					if len(ts) != 0 {
						t.Errorf("healthy device %d has taints %+v", i, ts)
					}
				}
			}
		})
	}
}

func TestHealthResourcesRemove(t *testing.T) {
	info := testNode(t, "trn2-a", "trn2.48xlarge", 0, nil)
	reasons := make([]string, 16)
	reasons[5] = neuron.ReasonGone
	got := taintsOf(t, HealthResources(info, DeviceHealth{Reasons: reasons, Remove: true}), "trn2-a")
	if len(got) != 15 {
		t.Fatalf("%d devices, want 15: the fallback leaves the unhealthy one out", len(got))
	}
	if _, ok := got[DeviceName(5)]; ok {
		t.Errorf("%s is still published", DeviceName(5))
	}
	for name, ts := range got {
		if len(ts) != 0 {
			t.Errorf("%s has taints %+v in the fallback", name, ts)
		}
	}
}

func TestHealthResourcesUltraServerNodeDevice(t *testing.T) {
	us := &neuron.UltraServer{ServerID4: "00000000000000a4", ServerID2: "00000000000000b2", NodeID4: 2, NodeID2: 0, Mode: "X4,X2H"}
	info := testNode(t, "us-2", "trn2u.48xlarge", 0, us)
	reasons := make([]string, 16)
	if got := taintsOf(t, HealthResources(info, DeviceHealth{Reasons: reasons}), "us-2"); len(got[NodeDeviceName]) != 0 {
		t.Errorf("healthy node: %s has taints %+v", NodeDeviceName, got[NodeDeviceName])
	}
	reasons[12], reasons[4] = neuron.ReasonGone, neuron.ReasonECCUncorrected
	got := taintsOf(t, HealthResources(info, DeviceHealth{Reasons: reasons, UncorrectableEffect: resourceapi.DeviceTaintEffectNoExecute}), "us-2")
	ts, ok := got[NodeDeviceName]
	if !ok {
		t.Fatalf("%s left the slice; it stays, tainted", NodeDeviceName)
	}
	if len(ts) != 1 || ts[0].Key != UnhealthyTaintKey || ts[0].Value != "ecc-uncorrected" || ts[0].Effect != resourceapi.DeviceTaintEffectNoExecute {
		t.Errorf("%s taints %+v, want the first unhealthy device's (4: ecc-uncorrected:NoExecute)", NodeDeviceName, ts)
	}
	if len(got) != 17 {
		t.Errorf("%d devices, want 16 and the node device", len(got))
	}
}

func TestParseTaintEffect(t *testing.T) {
	for in, want := range map[string]resourceapi.DeviceTaintEffect{"": "NoSchedule", "NoSchedule": "NoSchedule", "NoExecute": "NoExecute"} {
		if got, err := ParseTaintEffect(in); err != nil || got != want {
			t.Errorf("ParseTaintEffect(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"None", "noexecute", "PreferNoSchedule"} {
		if _, err := ParseTaintEffect(in); err == nil {
			t.Errorf("ParseTaintEffect(%q) accepted", in)
		}
	}
}

func TestTaintsDropped(t *testing.T) {
	desired := &resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Devices: []resourceapi.Device{
		{Name: "neuron0"}, {Name: "neuron1", Taints: []resourceapi.DeviceTaint{{Key: UnhealthyTaintKey, Value: "gone", Effect: "NoSchedule"}}},
	}}}
	stored := desired.DeepCopy()
	stored.Spec.Devices[1].Taints = nil
	dropped := &resourceslice.DroppedFieldsError{PoolName: "n", DesiredSlice: desired, ActualSlice: stored}
	if !TaintsDropped(fmt.Errorf("sync: %w", dropped)) {
		t.Errorf("taints dropped by the API server not detected: %v", dropped)
	}
	if TaintsDropped(&resourceslice.DroppedFieldsError{PoolName: "n", DesiredSlice: desired, ActualSlice: desired.DeepCopy()}) {
		t.Error("taints kept by the API server detected as dropped")
	}
	if TaintsDropped(fmt.Errorf("conflict")) {
		t.Error("an unrelated error detected as dropped taints")
	}
}

func TestUpdateSince(t *testing.T) {
	t0, t1 := time.Unix(100, 0), time.Unix(200, 0)
	since := make([]time.Time, 3)
	UpdateSince(since, []neuron.HealthChange{{Device: 1, Code: neuron.ReasonGone}}, t0)
	UpdateSince(since, []neuron.HealthChange{{Device: 2, Code: neuron.ReasonGone}, {Device: 7}}, t1)
	if !since[1].Equal(t0) || !since[2].Equal(t1) || !since[0].IsZero() {
		t.Fatalf("since %v: device 1 keeps %v across later changes, device 2 gets %v", since, t0, t1)
	}
	UpdateSince(since, []neuron.HealthChange{{Device: 1, Healthy: true}}, t1)
	if !since[1].IsZero() || !since[2].Equal(t1) {
		t.Errorf("since %v after device 1 recovered", since)
	}
}
