package dra

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/kube-neuron/kube-neuron/internal/dra/devices"
	"github.com/kube-neuron/kube-neuron/internal/neuron"
)

func attr(d resourceapi.Device, name resourceapi.QualifiedName) any {
	a, ok := d.Attributes[name]
	switch {
	case !ok:
		return nil
	case a.IntValue != nil:
		return int(*a.IntValue)
	case a.StringValue != nil:
		return *a.StringValue
	case a.VersionValue != nil:
		return "version:" + *a.VersionValue
	}
	return "?"
}

func TestResourcesTorus(t *testing.T) {
	info := testNode(t, "trn2-a", "trn2.48xlarge", 0, nil)
	info.NetworkNodes = [3]string{"nn-1", "nn-2", ""}
	res := Resources(info, nil)
	pool, ok := res.Pools["trn2-a"]
	if !ok || len(pool.Slices) != 1 {
		t.Fatalf("want one pool named after the node with one slice, got %+v", res.Pools)
	}
	devs := pool.Slices[0].Devices
	if len(devs) != 16 {
		t.Fatalf("%d devices, want 16", len(devs))
	}
	efa := make([]string, 16)
	for i, d := range info.Hardware.Devices {
		efa[i] = d.EFAAddress
	}
	hash := func(addrs []string) string {
		s := slices.Clone(addrs)
		slices.Sort(s)
		sum := sha256.Sum256([]byte(strings.Join(slices.Compact(s), ",")))
		return hex.EncodeToString(sum[:])[:16]
	}
	d6 := devs[6]
	want := map[resourceapi.QualifiedName]any{
		"deviceId": 6, "instanceType": "trn2.48xlarge", "neuronDriverVersion": neuron.DefaultDriverVersion,
		"draDriverVersion": "version:" + Version, "resourceType": "neuron_device",
		"networkNodeLayer1": "nn-1", "networkNodeLayer2": "nn-2", "networkNodeLayer3": nil,
		"topology_x": 1, "topology_y": 2, "topology4_id": 1, "topology8_id": 0,
		"resource.aws.com/devicegroup1_id":  efa[6],
		"resource.aws.com/devicegroup4_id":  hash(efa[4:8]),
		"resource.aws.com/devicegroup8_id":  hash(efa[0:8]),
		"resource.aws.com/devicegroup16_id": hash(efa),
		"ultraserverId":                     nil,
	}
	if d6.Name != "neurondevice6" {
		t.Errorf("name %s, want neurondevice6", d6.Name)
	}
	for k, v := range want {
		if got := attr(d6, k); got != v {
			t.Errorf("attribute %s = %v, want %v", k, got, v)
		}
	}
	if len(efa[6]) == 0 || len(hash(efa)) != 16 {
		t.Fatalf("the simulated node has no EFA addresses: %v", efa)
	}
	// Groups: devices of one aligned block share the id, the next block differs.
	for _, size := range []int{4, 8} {
		key := resourceapi.QualifiedName("resource.aws.com/devicegroup" + map[int]string{4: "4", 8: "8"}[size] + "_id")
		for i := range 16 {
			same := attr(devs[i], key) == attr(devs[(i/size)*size], key)
			if !same {
				t.Errorf("device %d: %s differs from its block's first device", i, key)
			}
		}
		if attr(devs[0], key) == attr(devs[size], key) {
			t.Errorf("%s: blocks 0 and 1 share an id", key)
		}
	}
	// trn2.48xlarge defaults to LNC 2: 4 logical cores of 8 physical; 96 GiB.
	if c := devs[0].Capacity["cores"].Value; c.Value() != 4 {
		t.Errorf("cores capacity %s, want 4", c.String())
	}
	if m := devs[0].Capacity["memory"].Value; m.Value() != 96<<30 {
		t.Errorf("memory capacity %s, want 96Gi", m.String())
	}
	for _, d := range devs {
		if d.ConsumesCounters != nil {
			t.Errorf("%s consumes counters on a node outside an UltraServer", d.Name)
		}
	}
}

func TestResourcesLNC1(t *testing.T) {
	info := testNode(t, "trn2-b", "trn2.48xlarge", 1, nil)
	devs := Resources(info, nil).Pools["trn2-b"].Slices[0].Devices
	if c := devs[0].Capacity["cores"].Value; c.Value() != 8 {
		t.Errorf("cores at LNC 1: %s, want 8", c.String())
	}
}

func TestResourcesRingAndSmall(t *testing.T) {
	for _, tc := range []struct {
		typ     string
		devices int
		group4  bool
	}{
		{"inf2.48xlarge", 12, false}, // no EFA: no devicegroups; ring: no grid attributes
		{"trn1.2xlarge", 1, false},   // one device: devicegroup1 only
		{"inf1.6xlarge", 4, false},
		{"trn1.32xlarge", 16, true},
	} {
		t.Run(tc.typ, func(t *testing.T) {
			info := testNode(t, "n", tc.typ, 0, nil)
			devs := Resources(info, nil).Pools["n"].Slices[0].Devices
			if len(devs) != tc.devices {
				t.Fatalf("%d devices, want %d", len(devs), tc.devices)
			}
			torus := tc.typ == "trn1.32xlarge"
			if (attr(devs[0], "topology_x") != nil) != torus {
				t.Errorf("topology_x present = %v, want %v", attr(devs[0], "topology_x") != nil, torus)
			}
			if (attr(devs[0], "resource.aws.com/devicegroup4_id") != nil) != tc.group4 {
				t.Errorf("devicegroup4_id present = %v, want %v", attr(devs[0], "resource.aws.com/devicegroup4_id") != nil, tc.group4)
			}
			hasEFA := info.Hardware.Devices[0].EFAAddress != ""
			if (attr(devs[0], "resource.aws.com/devicegroup1_id") != nil) != hasEFA {
				t.Errorf("devicegroup1_id present = %v, node has EFA = %v", attr(devs[0], "resource.aws.com/devicegroup1_id") != nil, hasEFA)
			}
		})
	}
}

func TestResourcesUltraServer(t *testing.T) {
	us := &neuron.UltraServer{ServerID4: "00000000000000a4", ServerID2: "00000000000000b2", NodeID4: 2, NodeID2: 0, Mode: "X4,X2H"}
	info := testNode(t, "us-2", "trn2u.48xlarge", 0, us)
	pool := Resources(info, nil).Pools["us-2"]
	if len(pool.Slices) != 2 || len(pool.Slices[1].SharedCounters) != 1 || pool.Slices[1].Devices != nil {
		t.Fatalf("want a device slice and a counter slice, got %+v", pool.Slices)
	}
	if v := pool.Slices[1].SharedCounters[0].Counters[devices.CounterName].Value; v.Value() != 16 {
		t.Errorf("shared counter %s, want 16", v.String())
	}
	devs := pool.Slices[0].Devices
	if len(devs) != 17 {
		t.Fatalf("%d devices, want 16 and the node device", len(devs))
	}
	node := devs[16]
	if node.Name != NodeDeviceName || attr(node, "resourceType") != "neuron_node" || attr(node, "ultraserverId") != us.ServerID4 || attr(node, "ultraserverNodeId") != 2 {
		t.Errorf("node device %+v", node)
	}
	if attr(node, "deviceId") != nil {
		t.Errorf("the node device has a deviceId")
	}
	total := func(d resourceapi.Device) int64 {
		v := d.ConsumesCounters[0].Counters[devices.CounterName].Value
		return v.Value()
	}
	if total(node) != 16 || total(devs[0]) != 1 {
		t.Errorf("node consumes %d and a device %d of the counter; want 16 and 1, so that they exclude each other", total(node), total(devs[0]))
	}
	if attr(devs[3], "ultraserverId") != us.ServerID4 {
		t.Errorf("devices carry ultraserverId %v", attr(devs[3], "ultraserverId"))
	}

	unhealthy := make([]bool, 16)
	unhealthy[5] = true
	devs = Resources(info, unhealthy).Pools["us-2"].Slices[0].Devices
	for _, d := range devs {
		if d.Name == "neurondevice5" || d.Name == NodeDeviceName {
			t.Errorf("%s published while device 5 is unhealthy", d.Name)
		}
	}
	if len(devs) != 15 {
		t.Errorf("%d devices with one unhealthy, want 15", len(devs))
	}
}

func TestParseDeviceName(t *testing.T) {
	for _, tc := range []struct {
		in string
		i  int
		ok bool
	}{
		{"neurondevice0", 0, true}, {"neurondevice15", 15, true}, {"neurondevice", 0, false},
		{"neurondevice01", 0, false}, {"neurondevice-1", 0, false}, {"neuronnode", 0, false}, {"gpu0", 0, false},
	} {
		i, ok := ParseDeviceName(tc.in)
		if i != tc.i || ok != tc.ok {
			t.Errorf("ParseDeviceName(%q) = %d, %v; want %d, %v", tc.in, i, ok, tc.i, tc.ok)
		}
		if ok && DeviceName(i) != tc.in {
			t.Errorf("DeviceName(%d) = %s", i, DeviceName(i))
		}
	}
}
