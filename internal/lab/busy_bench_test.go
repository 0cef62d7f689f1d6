package lab

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// BenchmarkBusyTickTrn2 is one tick of the busy loop on a trn2.48xlarge whose 16 devices a
// Running pod holds (128 physical cores moving).
func BenchmarkBusyTickTrn2(b *testing.B) {
	dir := b.TempDir()
	faultLab(b, dir)
	devices := make([]int, 16)
	for i := range devices {
		devices[i] = i
	}
	pods := []*corev1.Pod{busyPod("a", "trn2-a", corev1.PodRunning, &allocation.Record{Node: "trn2-a",
		Containers: []allocation.Container{{Name: "c", Resource: topology.ResourceNeuron, Devices: devices}}})}
	loop := &busyLoop{dir: dir, nodes: map[string]*busyNode{}}
	loop.tick(context.Background(), pods, nil, time.Second) // first tick writes memory and power too
	for b.Loop() {
		loop.tick(context.Background(), pods, nil, time.Second)
	}
}
