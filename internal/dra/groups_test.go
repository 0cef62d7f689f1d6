package dra

import (
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/kube-neuron/kube-neuron/internal/dra/devices"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// TestDeviceGroupsAreTheEngineSets checks the aligned device groups the driver publishes
// (resource.aws.com/devicegroup{4,8,16}_id and, on torus nodes, topology{4,8}_id: the attributes
// a claim's matchAttribute constraint uses to get connected devices) against the topology
// engine, for every instance type of the catalog: the devices sharing a group id are one of the
// engine's valid device sets of that size, every device is in one group, and the groups are all
// of the engine's sets of that size, so a claim of N devices matched on a group gets exactly what
// the device plugin path may give a request for N devices. The exception is the switched
// topology (trn3), where the engine accepts any N devices: there the groups are N-aligned blocks,
// valid sets among many. devicegroup1_id is not a topology group: it is the EFA device paired
// with the device, which trn1 shares between two devices.
func TestDeviceGroupsAreTheEngineSets(t *testing.T) {
	for _, it := range topology.DefaultCatalog().Types() {
		t.Run(it.Name, func(t *testing.T) {
			info := testNode(t, "n", it.Name, 0, nil)
			shape := info.Shape
			var devs []resourceapi.Device
			for _, d := range Resources(info, nil).Pools["n"].Slices[0].Devices {
				if attr(d, "resourceType") == devices.ResourceTypeDevice {
					devs = append(devs, d)
				}
			}
			if len(devs) != shape.Devices() {
				t.Fatalf("%d devices published, the shape has %d", len(devs), shape.Devices())
			}
			hasEFA := info.Hardware.Devices[0].EFAAddress != ""
			torus := shape.Kind() == topology.KindTorus
			for _, g := range []struct {
				key  resourceapi.QualifiedName
				size int
				// published says when the driver publishes the attribute.
				published bool
			}{
				{"resource.aws.com/devicegroup4_id", 4, hasEFA && shape.Devices() >= 4},
				{"resource.aws.com/devicegroup8_id", 8, hasEFA && shape.Devices() >= 8},
				{"resource.aws.com/devicegroup16_id", 16, hasEFA && shape.Devices() >= 16},
				{"topology4_id", 4, torus},
				{"topology8_id", 8, torus},
			} {
				groups := groupsOf(t, devs, g.key)
				if (groups != nil) != g.published {
					t.Errorf("%s published = %v, want %v", g.key, groups != nil, g.published)
				}
				if groups == nil {
					continue
				}
				engine := shape.DeviceSets(g.size)
				for _, set := range groups {
					if len(set) != g.size || !shape.IsValidDeviceSet(set) {
						t.Errorf("%s: devices %v share a group, which is not a valid set of %d devices (valid: %v)", g.key, set, g.size, engine)
					}
				}
				if shape.Kind() == topology.KindSwitched {
					continue // every subset is valid there: the groups are some of the sets
				}
				if !slices.EqualFunc(groups, engine, slices.Equal) {
					t.Errorf("%s: groups %v, the engine's sets of %d devices %v", g.key, groups, g.size, engine)
				}
			}
		})
	}
}

// groupsOf partitions the devices by the value of the attribute key: the sets of device ids
// sharing a value, each ascending, in ascending order. It is nil when no device has the
// attribute; some devices without it is an error.
func groupsOf(t *testing.T, devs []resourceapi.Device, key resourceapi.QualifiedName) [][]int {
	t.Helper()
	var groups [][]int
	index := map[any]int{}
	missing := 0
	for _, d := range devs {
		v := attr(d, key)
		if v == nil {
			missing++
			continue
		}
		i, seen := index[v]
		if !seen {
			i = len(groups)
			index[v] = i
			groups = append(groups, nil)
		}
		id, _ := attr(d, "deviceId").(int)
		groups[i] = append(groups[i], id)
	}
	if missing > 0 && groups != nil {
		t.Errorf("%s: %d of %d devices have none", key, missing, len(devs))
	}
	for _, g := range groups {
		slices.Sort(g)
	}
	slices.SortFunc(groups, slices.Compare)
	return groups
}
