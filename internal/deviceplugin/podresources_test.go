package deviceplugin

import (
	"slices"
	"testing"

	podresv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// TestPodResourcesAsTheKubeletListsThem: the kubelet's PodResources API lists a container's ids
// of one resource as one entry per id, in any order (Kubernetes 1.36,
// containerDevicesFromResourceDeviceInstances); the plugin sees one entry per resource with every
// id. Found on the lab's real nodes: a two-core container was recorded with one core.
func TestPodResourcesAsTheKubeletListsThem(t *testing.T) {
	kubelet := []*podresv1.PodResources{{Name: "p", Namespace: "ns", Containers: []*podresv1.ContainerResources{
		{Name: "a", Devices: []*podresv1.ContainerDevices{
			{ResourceName: "aws.amazon.com/neuroncore", DeviceIds: []string{"7"}},
			{ResourceName: "aws.amazon.com/neuron", DeviceIds: []string{"10"}},
			{ResourceName: "aws.amazon.com/neuroncore", DeviceIds: []string{"6"}, Topology: &podresv1.TopologyInfo{Nodes: []*podresv1.NUMANode{{ID: 0}}}},
			{ResourceName: "aws.amazon.com/neuron", DeviceIds: []string{"9"}},
			{ResourceName: "aws.amazon.com/neuroncore", DeviceIds: []string{"6"}},
		}},
		{Name: "b"},
	}}, nil}
	got := mergeContainerDevices(kubelet)
	if len(got) != 1 || len(got[0].Containers) != 2 {
		t.Fatalf("merged %v", got)
	}
	want := map[string][]string{"aws.amazon.com/neuroncore": {"6", "7"}, "aws.amazon.com/neuron": {"9", "10"}}
	devs := got[0].Containers[0].Devices
	if len(devs) != len(want) {
		t.Fatalf("container a: %v, want one entry per resource", devs)
	}
	for _, d := range devs {
		if !slices.Equal(d.DeviceIds, want[d.ResourceName]) {
			t.Errorf("%s: ids %v, want %v", d.ResourceName, d.DeviceIds, want[d.ResourceName])
		}
	}
	if len(got[0].Containers[1].Devices) != 0 {
		t.Errorf("container b: %v, want none", got[0].Containers[1].Devices)
	}
	if len(kubelet[0].Containers[0].Devices) != 5 {
		t.Error("merging changed the kubelet's answer in place")
	}
}
