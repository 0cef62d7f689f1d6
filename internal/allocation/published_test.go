package allocation

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// publishedPod builds pods as the published Neuron stack leaves them:
// publishedPod("p").node("n").container("app", neuron, 2).ids("0,1").obj().
type podBuilder struct{ p *corev1.Pod }

func publishedPod(name string) *podBuilder {
	return &podBuilder{p: &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name), Annotations: map[string]string{
			AllocTime: "1700000000000000000", Allocated: "false",
		}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}}
}

func (b *podBuilder) node(n string) *podBuilder { b.p.Spec.NodeName = n; return b }

func (b *podBuilder) container(name, res string, n int64) *podBuilder {
	c := corev1.Container{Name: name}
	if res != "" {
		c.Resources.Limits = corev1.ResourceList{corev1.ResourceName(res): qty(n)}
	}
	b.p.Spec.Containers = append(b.p.Spec.Containers, c)
	return b
}

func (b *podBuilder) ids(v string) *podBuilder { b.p.Annotations[AWSNeuronIDs] = v; return b }

func (b *podBuilder) annotate(k, v string) *podBuilder { b.p.Annotations[k] = v; return b }

func (b *podBuilder) phase(p corev1.PodPhase) *podBuilder { b.p.Status.Phase = p; return b }

func (b *podBuilder) obj() *corev1.Pod { return b.p }

func TestPublishedRecord(t *testing.T) {
	const (
		dev  = topology.ResourceNeuron
		alt  = topology.ResourceNeuronDevice
		core = topology.ResourceNeuronCore
	)
	for _, tc := range []struct {
		name    string
		pod     *corev1.Pod
		want    *Record // nil: no record
		warning string  // substring of the only warning; "" for none
		err     string  // substring of the error
	}{
		{
			name: "devices of a running pod",
			pod:  publishedPod("p").node("inf2-a").container("app", dev, 2).ids("1,0").obj(),
			want: &Record{Node: "inf2-a", Containers: []Container{{Name: "app", Resource: dev, Devices: []int{0, 1}, Served: true}}},
		},
		{
			name: "global cores",
			pod:  publishedPod("p").node("trn1-a").container("app", core, 4).ids("0,1,2,3").obj(),
			want: &Record{Node: "trn1-a", Containers: []Container{{Name: "app", Resource: core, Cores: []int{0, 1, 2, 3}, Served: true}}},
		},
		{
			name: "neurondevice, spaces around the ids",
			pod:  publishedPod("p").node("n").container("app", alt, 1).ids(" 5 ").obj(),
			want: &Record{Node: "n", Containers: []Container{{Name: "app", Resource: alt, Devices: []int{5}, Served: true}}},
		},
		{
			name: "bound, not running yet, NEURON_ALLOCATED false: not served",
			pod:  publishedPod("p").node("n").container("app", dev, 1).ids("3").phase(corev1.PodPending).obj(),
			want: &Record{Node: "n", Containers: []Container{{Name: "app", Resource: dev, Devices: []int{3}}}},
		},
		{
			name: "not running yet but NEURON_ALLOCATED true: served",
			pod:  publishedPod("p").node("n").container("app", dev, 1).ids("3").phase(corev1.PodPending).annotate(Allocated, "true").obj(),
			want: &Record{Node: "n", Containers: []Container{{Name: "app", Resource: dev, Devices: []int{3}, Served: true}}},
		},
		{
			name: "several containers: split in container order by their counts",
			pod: publishedPod("p").node("n").container("a", dev, 2).container("sidecar", "", 0).container("b", core, 3).
				ids("4,5,0,1,2").obj(),
			want: &Record{Node: "n", Containers: []Container{
				{Name: "a", Resource: dev, Devices: []int{4, 5}, Served: true},
				{Name: "b", Resource: core, Cores: []int{0, 1, 2}, Served: true},
			}},
		},
		{
			name: "HAMi's NEURON_RESOURCE_TYPE picks the request",
			pod: publishedPod("p").node("n").container("a", core, 2).container("b", dev, 1).
				annotate(ResourceType, core).ids("6,7").obj(),
			want: &Record{Node: "n", Containers: []Container{{Name: "a", Resource: core, Cores: []int{6, 7}, Served: true}}},
		},
		{
			name:    "more ids than requested: all held by the first container, with a warning",
			pod:     publishedPod("p").node("n").container("a", dev, 1).container("b", dev, 1).ids("0,1,2").obj(),
			want:    &Record{Node: "n", Containers: []Container{{Name: "a", Resource: dev, Devices: []int{0, 1, 2}, Served: true}}},
			warning: `pod ns/p: AWS_NEURON_IDS "0,1,2" lists 3 ids but the pod requests 2 (a: 1 aws.amazon.com/neuron, b: 1 aws.amazon.com/neuron): all 3 are counted as devices of container a`,
		},
		{
			name:    "fewer ids than requested",
			pod:     publishedPod("p").node("n").container("a", core, 4).ids("8,9").obj(),
			want:    &Record{Node: "n", Containers: []Container{{Name: "a", Resource: core, Cores: []int{8, 9}, Served: true}}},
			warning: "lists 2 ids but the pod requests 4",
		},
		{
			name:    "a malformed NEURON_ALLOC_TIME is a warning",
			pod:     publishedPod("p").node("n").container("a", dev, 1).ids("0").annotate(AllocTime, "yesterday").obj(),
			want:    &Record{Node: "n", Containers: []Container{{Name: "a", Resource: dev, Devices: []int{0}, Served: true}}},
			warning: `NEURON_ALLOC_TIME "yesterday" is not unix nanoseconds`,
		},
		{name: "not bound: nothing given yet", pod: publishedPod("p").container("a", dev, 1).ids("0").phase(corev1.PodPending).obj()},
		{name: "succeeded", pod: publishedPod("p").node("n").container("a", dev, 1).ids("0").phase(corev1.PodSucceeded).obj()},
		{name: "failed", pod: publishedPod("p").node("n").container("a", dev, 1).ids("0").phase(corev1.PodFailed).obj()},
		{name: "no AWS_NEURON_IDS", pod: publishedPod("p").node("n").container("a", dev, 1).obj()},
		{
			name: "our record wins",
			pod:  publishedPod("p").node("n").container("a", dev, 1).ids("0").annotate(Annotation, `{"node":"n","containers":[]}`).obj(),
		},
		{name: "empty", pod: publishedPod("p").node("n").container("a", dev, 1).ids("").obj(), err: "is empty"},
		{name: "not a number", pod: publishedPod("p").node("n").container("a", dev, 1).ids("neuron0").obj(), err: `is not a comma list of device or core numbers ("neuron0")`},
		{name: "negative", pod: publishedPod("p").node("n").container("a", dev, 1).ids("-1").obj(), err: "not a comma list"},
		{name: "a range is not a published value", pod: publishedPod("p").node("n").container("a", dev, 2).ids("0-1").obj(), err: "not a comma list"},
		{name: "trailing comma", pod: publishedPod("p").node("n").container("a", dev, 1).ids("0,").obj(), err: `("")`},
		{name: "out of range", pod: publishedPod("p").node("n").container("a", dev, 1).ids("99999999999999999999").obj(), err: "which no Neuron instance has"},
		{name: "twice", pod: publishedPod("p").node("n").container("a", dev, 2).ids("3,3").obj(), err: "lists id 3 twice"},
		{name: "no Neuron request", pod: publishedPod("p").node("n").container("a", "", 0).ids("0").obj(), err: "requests no Neuron resource"},
		{
			name: "NEURON_RESOURCE_TYPE not requested",
			pod:  publishedPod("p").node("n").container("a", dev, 1).ids("0").annotate(ResourceType, core).obj(),
			err:  `NEURON_RESOURCE_TYPE "aws.amazon.com/neuroncore", which no container of the pod requests`,
		},
		{
			name: "NEURON_RESOURCE_TYPE not a Neuron resource",
			pod:  publishedPod("p").node("n").container("a", dev, 1).ids("0").annotate(ResourceType, "nvidia.com/gpu").obj(),
			err:  "is not a Neuron resource",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, warnings, err := PublishedRecord(tc.pod)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || got != nil {
					t.Fatalf("got %+v, %v; want the error %q", got, err, tc.err)
				}
				for _, must := range []string{"pod ns/p:", "delete the pod"} {
					if !strings.Contains(err.Error(), must) {
						t.Errorf("error %q does not say %q", err, must)
					}
				}
				if _, rerr := RecordOf(tc.pod); rerr == nil || rerr.Error() != err.Error() {
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
			if _, ours := tc.pod.Annotations[Annotation]; ours {
				return
			}
			r, err := RecordOf(tc.pod)
			if err != nil || !reflect.DeepEqual(r, tc.want) {
				t.Errorf("RecordOf = %+v, %v; want the derived record", r, err)
			}
			if got != nil {
				if back, err := Parse(got.Encode()); err != nil || back.Node != got.Node {
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
	s := testShape(t, trn1)
	ours := &Record{Node: "trn1-a", Containers: []Container{{Name: "app", Resource: topology.ResourceNeuron, Devices: []int{4, 5, 6, 7}, Cores: seqInts(8, 8), Served: true}}}
	withRecord := publishedPod("ours").node("trn1-a").container("app", topology.ResourceNeuron, 4).obj()
	for k, v := range ours.Annotations() {
		withRecord.Annotations[k] = v
	}
	pods := []*corev1.Pod{
		publishedPod("devices").node("trn1-a").container("app", topology.ResourceNeuron, 2).ids("0,1").obj(),
		publishedPod("cores").node("trn1-a").container("app", topology.ResourceNeuronCore, 4).ids("4,5,6,7").obj(),
		withRecord,
		publishedPod("elsewhere").node("trn1-b").container("app", topology.ResourceNeuron, 1).ids("15").obj(),
		publishedPod("finished").node("trn1-a").container("app", topology.ResourceNeuron, 1).ids("14").phase(corev1.PodSucceeded).obj(),
		publishedPod("too-big").node("trn1-a").container("app", topology.ResourceNeuron, 1).ids("16").obj(),
		publishedPod("overlap").node("trn1-a").container("app", topology.ResourceNeuron, 1).ids("1").annotate(AllocTime, "1800000000000000000").obj(),
	}
	u, holders, problems := NodeUsage(s, "trn1-a", pods)
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
		b := publishedPod("p").node("n").ids(ids).annotate(Allocated, allocated).phase(corev1.PodPhase(phase))
		if devs != 0 {
			b.container("a", topology.ResourceNeuron, devs)
		}
		if cores != 0 {
			b.container("b", topology.ResourceNeuronCore, cores)
		}
		if resourceType != "" {
			b.annotate(ResourceType, resourceType)
		}
		pod := b.obj()
		r, _, err := PublishedRecord(pod)
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
				if id < 0 || id >= maxPublishedID || seen[id] {
					t.Fatalf("id %d out of bounds or twice in %+v", id, r)
				}
				seen[id] = true
			}
		}
		if len(seen) != len(strings.Split(ids, ",")) {
			t.Fatalf("%d ids in the record for %q", len(seen), ids)
		}
		back, err := Parse(r.Encode())
		if err != nil || back.Encode() != r.Encode() {
			t.Fatalf("round trip of %+v: %v", r, err)
		}
	})
}
