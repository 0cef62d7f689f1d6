package allocation_test

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/testkit"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// runningPod is a running pod in namespace ns; Published gives it the annotations the published
// Neuron stack leaves.
func runningPod(name string) *testkit.PodWrapper {
	return testkit.MakePod().Namespace("ns").Name(name).Running()
}

// withoutIDs gives the pod the published stack's annotations but AWS_NEURON_IDS.
func withoutIDs(b *testkit.PodWrapper) *testkit.PodWrapper {
	return b.AllocTime(testkit.PublishedAllocTime).Annotation(allocation.Allocated, "false")
}

func TestPublishedRecord(t *testing.T) {
	const (
		dev  = topology.ResourceNeuron
		alt  = topology.ResourceNeuronDevice
		core = topology.ResourceNeuronCore
	)
	for _, tc := range []struct {
		name    string
		pod     *corev1.Pod
		want    *allocation.Record // nil: no record
		warning string             // substring of the only warning; "" for none
		err     string             // substring of the error
	}{
		{
			name: "devices of a running pod",
			pod:  runningPod("p").Node("inf2-a").Container("app", dev, 2).Published("1,0").Obj(),
			want: &allocation.Record{Node: "inf2-a", Containers: []allocation.Container{{Name: "app", Resource: dev, Devices: []int{0, 1}, Served: true}}},
		},
		{
			name: "global cores",
			pod:  runningPod("p").Node("trn1-a").Container("app", core, 4).Published("0,1,2,3").Obj(),
			want: &allocation.Record{Node: "trn1-a", Containers: []allocation.Container{{Name: "app", Resource: core, Cores: []int{0, 1, 2, 3}, Served: true}}},
		},
		{
			name: "neurondevice, spaces around the ids",
			pod:  runningPod("p").Node("n").Container("app", alt, 1).Published(" 5 ").Obj(),
			want: &allocation.Record{Node: "n", Containers: []allocation.Container{{Name: "app", Resource: alt, Devices: []int{5}, Served: true}}},
		},
		{
			name: "bound, not running yet, NEURON_ALLOCATED false: not served",
			pod:  runningPod("p").Node("n").Container("app", dev, 1).Published("3").Phase(corev1.PodPending).Obj(),
			want: &allocation.Record{Node: "n", Containers: []allocation.Container{{Name: "app", Resource: dev, Devices: []int{3}}}},
		},
		{
			name: "not running yet but NEURON_ALLOCATED true: served",
			pod:  runningPod("p").Node("n").Container("app", dev, 1).Published("3").Phase(corev1.PodPending).Annotation(allocation.Allocated, "true").Obj(),
			want: &allocation.Record{Node: "n", Containers: []allocation.Container{{Name: "app", Resource: dev, Devices: []int{3}, Served: true}}},
		},
		{
			name: "several containers: split in container order by their counts",
			pod: runningPod("p").Node("n").Container("a", dev, 2).Container("sidecar", "", 0).Container("b", core, 3).
				Published("4,5,0,1,2").Obj(),
			want: &allocation.Record{Node: "n", Containers: []allocation.Container{
				{Name: "a", Resource: dev, Devices: []int{4, 5}, Served: true},
				{Name: "b", Resource: core, Cores: []int{0, 1, 2}, Served: true},
			}},
		},
		{
			name: "HAMi's NEURON_RESOURCE_TYPE picks the request",
			pod: runningPod("p").Node("n").Container("a", core, 2).Container("b", dev, 1).
				Annotation(allocation.ResourceType, core).Published("6,7").Obj(),
			want: &allocation.Record{Node: "n", Containers: []allocation.Container{{Name: "a", Resource: core, Cores: []int{6, 7}, Served: true}}},
		},
		{
			name:    "more ids than requested: all held by the first container, with a warning",
			pod:     runningPod("p").Node("n").Container("a", dev, 1).Container("b", dev, 1).Published("0,1,2").Obj(),
			want:    &allocation.Record{Node: "n", Containers: []allocation.Container{{Name: "a", Resource: dev, Devices: []int{0, 1, 2}, Served: true}}},
			warning: `pod ns/p: AWS_NEURON_IDS "0,1,2" lists 3 ids but the pod requests 2 (a: 1 aws.amazon.com/neuron, b: 1 aws.amazon.com/neuron): all 3 are counted as devices of container a`,
		},
		{
			name:    "fewer ids than requested",
			pod:     runningPod("p").Node("n").Container("a", core, 4).Published("8,9").Obj(),
			want:    &allocation.Record{Node: "n", Containers: []allocation.Container{{Name: "a", Resource: core, Cores: []int{8, 9}, Served: true}}},
			warning: "lists 2 ids but the pod requests 4",
		},
		{
			name:    "a malformed NEURON_ALLOC_TIME is a warning",
			pod:     runningPod("p").Node("n").Container("a", dev, 1).Published("0").Annotation(allocation.AllocTime, "yesterday").Obj(),
			want:    &allocation.Record{Node: "n", Containers: []allocation.Container{{Name: "a", Resource: dev, Devices: []int{0}, Served: true}}},
			warning: `NEURON_ALLOC_TIME "yesterday" is not unix nanoseconds`,
		},
		{name: "not bound: nothing given yet", pod: runningPod("p").Container("a", dev, 1).Published("0").Phase(corev1.PodPending).Obj()},
		{name: "succeeded", pod: runningPod("p").Node("n").Container("a", dev, 1).Published("0").Phase(corev1.PodSucceeded).Obj()},
		{name: "failed", pod: runningPod("p").Node("n").Container("a", dev, 1).Published("0").Phase(corev1.PodFailed).Obj()},
		{name: "no AWS_NEURON_IDS", pod: withoutIDs(runningPod("p").Node("n").Container("a", dev, 1)).Obj()},
		{
			name: "our record wins",
			pod:  runningPod("p").Node("n").Container("a", dev, 1).Published("0").Annotation(allocation.Annotation, `{"node":"n","containers":[]}`).Obj(),
		},
		{name: "empty", pod: runningPod("p").Node("n").Container("a", dev, 1).Published("").Obj(), err: "is empty"},
		{name: "not a number", pod: runningPod("p").Node("n").Container("a", dev, 1).Published("neuron0").Obj(), err: `is not a comma list of device or core numbers ("neuron0")`},
		{name: "negative", pod: runningPod("p").Node("n").Container("a", dev, 1).Published("-1").Obj(), err: "not a comma list"},
		{name: "a range is not a published value", pod: runningPod("p").Node("n").Container("a", dev, 2).Published("0-1").Obj(), err: "not a comma list"},
		{name: "trailing comma", pod: runningPod("p").Node("n").Container("a", dev, 1).Published("0,").Obj(), err: `("")`},
		{name: "out of range", pod: runningPod("p").Node("n").Container("a", dev, 1).Published("99999999999999999999").Obj(), err: "which no Neuron instance has"},
		{name: "twice", pod: runningPod("p").Node("n").Container("a", dev, 2).Published("3,3").Obj(), err: "lists id 3 twice"},
		{name: "no Neuron request", pod: runningPod("p").Node("n").Container("a", "", 0).Published("0").Obj(), err: "requests no Neuron resource"},
		{
			name: "NEURON_RESOURCE_TYPE not requested",
			pod:  runningPod("p").Node("n").Container("a", dev, 1).Published("0").Annotation(allocation.ResourceType, core).Obj(),
			err:  `NEURON_RESOURCE_TYPE "aws.amazon.com/neuroncore", which no container of the pod requests`,
		},
		{
			name: "NEURON_RESOURCE_TYPE not a Neuron resource",
			pod:  runningPod("p").Node("n").Container("a", dev, 1).Published("0").Annotation(allocation.ResourceType, "nvidia.com/gpu").Obj(),
			err:  "is not a Neuron resource",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, warnings, err := allocation.PublishedRecord(tc.pod)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || got != nil {
					t.Fatalf("got %+v, %v; want the error %q", got, err, tc.err)
				}
				for _, must := range []string{"pod ns/p:", "delete the pod"} {
					if !strings.Contains(err.Error(), must) {
						t.Errorf("error %q does not say %q", err, must)
					}
				}
				if _, rerr := allocation.RecordOf(tc.pod); rerr == nil || rerr.Error() != err.Error() {
					t.Errorf("RecordOf error %v, want PublishedRecord's", rerr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("record %+v, want %+v", got, tc.want)
			}
			switch {
			case tc.warning == "" && len(warnings) > 0:
				t.Errorf("warnings %q, want none", warnings)
			case tc.warning != "" && (len(warnings) != 1 || !strings.Contains(warnings[0], tc.warning)):
				t.Errorf("warnings %q, want one with %q", warnings, tc.warning)
			}
			if _, ours := tc.pod.Annotations[allocation.Annotation]; ours {
				return
			}
			r, err := allocation.RecordOf(tc.pod)
			if err != nil || !reflect.DeepEqual(r, tc.want) {
				t.Errorf("RecordOf = %+v, %v; want the derived record", r, err)
			}
			if got != nil {
				if back, err := allocation.Parse(got.Encode()); err != nil || back.Node != got.Node {
					t.Errorf("the derived record does not survive Encode/Parse: %v", err)
				}
			}
		})
	}
}

// TestNodeUsageCountsPublishedPods: pods of the published stack hold their ids next to pods
// with records of ours; node annotations play no part; ids that do not fit come back as a
// problem that names the annotation.
func TestNodeUsageCountsPublishedPods(t *testing.T) {
	s := testkit.Shape(t, "trn1.32xlarge")
	ours := &allocation.Record{Node: "trn1-a", Containers: []allocation.Container{{Name: "app", Resource: topology.ResourceNeuron, Devices: []int{4, 5, 6, 7}, Cores: []int{8, 9, 10, 11, 12, 13, 14, 15}, Served: true}}}
	withRecord := withoutIDs(runningPod("ours").Container("app", topology.ResourceNeuron, 4)).Record(ours).Obj()
	pods := []*corev1.Pod{
		runningPod("devices").Node("trn1-a").Container("app", topology.ResourceNeuron, 2).Published("0,1").Obj(),
		runningPod("cores").Node("trn1-a").Container("app", topology.ResourceNeuronCore, 4).Published("4,5,6,7").Obj(),
		withRecord,
		runningPod("elsewhere").Node("trn1-b").Container("app", topology.ResourceNeuron, 1).Published("15").Obj(),
		runningPod("finished").Node("trn1-a").Container("app", topology.ResourceNeuron, 1).Published("14").Phase(corev1.PodSucceeded).Obj(),
		runningPod("too-big").Node("trn1-a").Container("app", topology.ResourceNeuron, 1).Published("16").Obj(),
		runningPod("overlap").Node("trn1-a").Container("app", topology.ResourceNeuron, 1).Published("1").Annotation(allocation.AllocTime, "1800000000000000000").Obj(),
	}
	u, holders, problems := allocation.NodeUsage(s, "trn1-a", pods)
	if got, want := u.UsedDevices(), []int{0, 1, 2, 3, 4, 5, 6, 7}; !reflect.DeepEqual(got, want) {
		t.Errorf("used devices %v, want %v", got, want)
	}
	if len(holders) != 3 {
		t.Errorf("holders %+v, want devices, cores and ours", holders)
	}
	if len(problems) != 2 {
		t.Fatalf("problems %v, want too-big and overlap", problems)
	}
	for _, p := range problems {
		if !strings.Contains(p.Error(), "AWS_NEURON_IDS") || !strings.Contains(p.Error(), "delete the pod") {
			t.Errorf("problem %q does not name the annotation and what to do", p)
		}
	}
	// The published extension's usage maps on the node are not an input: NodeUsage takes pods only.
}

// FuzzLegacyRecord feeds arbitrary published-stack annotations and requests to the derivation:
// it never panics, an error names the pod, and a record has ids within bounds, each once, ascending
// per entry, in entries of requested containers, and survives Encode/Parse.
func FuzzLegacyRecord(f *testing.F) {
	f.Add("0,1", int64(2), int64(0), "", "false", "Running")
	f.Add("0,1,2,3", int64(0), int64(4), "aws.amazon.com/neuroncore", "true", "Pending")
	f.Add("4,5,0,1,2", int64(2), int64(3), "", "", "Running")
	f.Add("0,,1", int64(1), int64(1), "x", "maybe", "")
	f.Add("99999999999999999999", int64(1), int64(0), "", "", "Running")
	f.Add(" 7 ,3", int64(-1), int64(1<<40), "aws.amazon.com/neuron", "", "Running")
	f.Fuzz(func(t *testing.T, ids string, devs, cores int64, resourceType, allocated, phase string) {
		b := runningPod("p").Node("n").Published(ids).Annotation(allocation.Allocated, allocated).Phase(corev1.PodPhase(phase))
		if devs != 0 {
			b.Container("a", topology.ResourceNeuron, devs)
		}
		if cores != 0 {
			b.Container("b", topology.ResourceNeuronCore, cores)
		}
		if resourceType != "" {
			b.Annotation(allocation.ResourceType, resourceType)
		}
		pod := b.Obj()
		r, _, err := allocation.PublishedRecord(pod)
		if err != nil {
			if !strings.Contains(err.Error(), "pod ns/p") {
				t.Fatalf("error %q does not name the pod", err)
			}
			return
		}
		if r == nil {
			return
		}
		seen := map[int]bool{}
		for _, c := range r.Containers {
			if c.Name != "a" && c.Name != "b" {
				t.Fatalf("entry for container %q", c.Name)
			}
			for _, id := range c.IDs() {
				if id < 0 || id >= allocation.MaxPublishedID || seen[id] {
					t.Fatalf("id %d out of bounds or twice in %+v", id, r)
				}
				seen[id] = true
			}
		}
		if len(seen) != len(strings.Split(ids, ",")) {
			t.Fatalf("%d ids in the record for %q", len(seen), ids)
		}
		back, err := allocation.Parse(r.Encode())
		if err != nil || back.Encode() != r.Encode() {
			t.Fatalf("round trip of %+v: %v", r, err)
		}
	})
}
