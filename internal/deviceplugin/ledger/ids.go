package ledger

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// PoolIDs returns the ids a pool advertises: devices for device pools, cores for the core pool.
func PoolIDs(shape *topology.Shape, resource string) []string {
	n := shape.Devices()
	if resource == topology.ResourceNeuronCore {
		n = shape.Cores()
	}
	out := make([]string, n)
	for i := range out {
		out[i] = strconv.Itoa(i)
	}
	return out
}

// HardwareOf turns pool ids into hardware.
func HardwareOf(shape *topology.Shape, resource string, ids []string) (topology.Allocation, error) {
	nums := make([]int, 0, len(ids))
	for _, id := range ids {
		n, err := strconv.Atoi(id)
		if err != nil {
			return topology.Allocation{}, fmt.Errorf("device id %q of %s is not a number: this plugin names its ids 0, 1, 2 and so on", id, resource)
		}
		nums = append(nums, n)
	}
	if resource == topology.ResourceNeuronCore {
		return shape.CoreAllocation(nums)
	}
	return shape.DeviceAllocation(nums)
}

// IDsOf returns the pool ids of hardware.
func IDsOf(resource string, hw topology.Allocation) []string {
	src := hw.Devices
	if resource == topology.ResourceNeuronCore {
		src = hw.Cores
	}
	out := make([]string, len(src))
	for i, v := range src {
		out[i] = strconv.Itoa(v)
	}
	return out
}

// coresOfID returns the cores behind one pool id.
func coresOfID(shape *topology.Shape, resource, id string) []int {
	n, _ := strconv.Atoi(id)
	if resource == topology.ResourceNeuronCore {
		return []int{n}
	}
	return shape.CoresOf(n)
}

// deviceOfID returns the device behind one pool id.
func deviceOfID(shape *topology.Shape, resource, id string) int {
	n, _ := strconv.Atoi(id)
	if resource == topology.ResourceNeuronCore {
		return shape.DeviceOf(n)
	}
	return n
}

// SameHardware reports whether a record entry names hw.
func SameHardware(shape *topology.Shape, c allocation.Container, hw topology.Allocation) bool {
	rhw, err := c.Hardware(shape)
	return err == nil && slices.Equal(rhw.Cores, hw.Cores) && slices.Equal(rhw.Devices, hw.Devices)
}

// placeAvoiding asks the topology engine for count units of resource on hardware none of whose
// cores are busy.
func placeAvoiding(shape *topology.Shape, resource string, count int, busy map[int]bool) (topology.Allocation, error) {
	u := topology.NewUsage(shape)
	cores := make([]int, 0, len(busy))
	for c := range busy {
		cores = append(cores, c)
	}
	if err := u.MarkCores(cores); err != nil {
		return topology.Allocation{}, err
	}
	unit, err := topology.UnitOf(resource)
	if err != nil {
		return topology.Allocation{}, err
	}
	fit, err := topology.BestFit.Place(u, topology.Request{Unit: unit, Count: count})
	if err != nil {
		return topology.Allocation{}, err
	}
	return fit.Allocation, nil
}
