package plan

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/testkit"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// withScheduler sets the pod's schedulerName.
func withScheduler(w *testkit.PodWrapper, name string) *testkit.PodWrapper {
	w.Obj().Spec.SchedulerName = name
	return w
}

// TestKarpenterCoreCounts pins the catalog numbers the Karpenter warning rests on: Karpenter
// advertises devices x physical cores, the device plugin devices x logical cores at the default
// LNC.
func TestKarpenterCoreCounts(t *testing.T) {
	cat := topology.DefaultCatalog()
	for _, tc := range []struct {
		name              string
		physical, logical int
	}{
		{"trn2.3xlarge", 8, 4},
		{"trn2.48xlarge", 128, 64},
		{"trn2u.48xlarge", 128, 64},
		{"trn3.48xlarge", 128, 64},
		{"trn1.32xlarge", 32, 32},
		{"inf2.48xlarge", 24, 24},
	} {
		it, err := cat.Get(tc.name)
		if err != nil {
			t.Fatal(err)
		}
		if p, l := it.Devices*it.PhysicalCoresPerDevice, it.Devices*it.LogicalCoresPerDevice(it.DefaultLNC); p != tc.physical || l != tc.logical {
			t.Errorf("%s: physical %d logical %d, want %d and %d", tc.name, p, l, tc.physical, tc.logical)
		}
	}
}

func TestAdvise(t *testing.T) {
	trn2 := func(b *testkit.PodWrapper) *testkit.PodWrapper {
		return b.Selector(labels.InstanceType, "trn2.48xlarge")
	}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		o    AdviceOptions
		want []string // reason: substring of the message, in order
	}{{
		name: "128 cores on trn2.48xlarge: Karpenter's count, twice the node's",
		pod:  withScheduler(trn2(testPod("p").NeuronCores(128)), "my-scheduler").Obj(),
		want: []string{ReasonKarpenterNeuronCoreMismatch + ": container main requests aws.amazon.com/neuroncore: 128. Karpenter advertises 128 neuroncores on trn2.48xlarge (16 devices x 8 physical NeuronCores) and may launch one for this pod, " +
			"but at the default LNC=2 the device plugin advertises 64 (16 devices x 4 logical NeuronCores), so the pod would stay Pending on a node it cannot use. " +
			"Request at most 64 neuroncores (at LNC=2 one logical NeuronCore is 2 physical ones: 128 physical cores are 64), or run the nodes at LNC=1"},
	}, {
		name: "96 cores through the Karpenter family label",
		pod:  withScheduler(testPod("p").NeuronCores(96).Selector(labels.InstanceFamily, "trn2"), "my-scheduler").Obj(),
		want: []string{ReasonKarpenterNeuronCoreMismatch + ": container main requests aws.amazon.com/neuroncore: 96. Karpenter advertises 128 neuroncores on trn2.48xlarge"},
	}, {
		name: "8 cores allowed on trn2.3xlarge: Karpenter counts 8 there, the node 4",
		pod:  withScheduler(testPod("p").NeuronCores(8).Selector(labels.InstanceType, "trn2.3xlarge"), "my-scheduler").Obj(),
		want: []string{ReasonKarpenterNeuronCoreMismatch + ": container main requests aws.amazon.com/neuroncore: 8. Karpenter advertises 8 neuroncores on trn2.3xlarge (1 device x 8 physical NeuronCores)"},
	}, {
		name: "64 cores on trn2.48xlarge fit the node",
		pod:  withScheduler(trn2(testPod("p").NeuronCores(64)), "my-scheduler").Obj(),
	}, {
		name: "129 cores: more than Karpenter counts too (Check reports that it fits no type)",
		pod:  withScheduler(trn2(testPod("p").NeuronCores(129)), "my-scheduler").Obj(),
	}, {
		name: "32 cores on trn1.32xlarge: no LNC there",
		pod:  withScheduler(testPod("p").NeuronCores(32).Selector(labels.InstanceType, "trn1.32xlarge"), "my-scheduler").Obj(),
	}, {
		name: "devices are counted alike by Karpenter and the node",
		pod:  withScheduler(trn2(testPod("p").Neuron(16)), "my-scheduler").Obj(),
	}, {
		name: "4 devices without schedulerName",
		pod:  testPod("p").Neuron(4).Obj(),
		want: []string{ReasonTopologyChecksSkipped + ": container main requests aws.amazon.com/neuron: 4 (4 devices) but the pod's schedulerName is default-scheduler, not my-scheduler: " +
			"the scheduler extender's topology checks are skipped. default-scheduler counts free devices and cores only, so it can place the pod on a node whose free devices are not connected " +
			"(torus types accept only aligned blocks of 1, 4, 8 or 16 devices), and the kubelet then hands out what is free. " +
			"Set spec.schedulerName: my-scheduler in the pod (template), or install the chart with scheduler.admissionPolicy.enabled=true to set it on every Neuron pod"},
	}, {
		name: "neurondevice 2 with another scheduler",
		pod:  withScheduler(testPod("p").DefaultedContainer("main", topology.ResourceNeuronDevice, 2), "volcano").Obj(),
		want: []string{ReasonTopologyChecksSkipped + ": container main requests aws.amazon.com/neurondevice: 2 (2 devices) but the pod's schedulerName is volcano, not my-scheduler"},
	}, {
		name: "one device without schedulerName: nothing to connect",
		pod:  testPod("p").Neuron(1).Obj(),
	}, {
		name: "two containers of one device each: each is one device",
		pod:  testPod("p").Neuron(1).Container("c1", topology.ResourceNeuron, 1).Obj(),
	}, {
		name: "3 cores on inf2: two devices of 2 cores",
		pod:  testPod("p").NeuronCores(3).Selector(labels.InstanceType, "inf2.48xlarge").Obj(),
		want: []string{ReasonTopologyChecksSkipped + ": container main requests aws.amazon.com/neuroncore: 3 (3 cores, more than one device of inf2.48xlarge holds (2))"},
	}, {
		name: "4 cores on trn2.48xlarge: one device at LNC 2",
		pod:  trn2(testPod("p").NeuronCores(4)).Obj(),
	}, {
		name: "4 cores anywhere: two devices on inf2 (inf2.xlarge and inf2.8xlarge cannot serve 4)",
		pod:  testPod("p").NeuronCores(4).Obj(),
		want: []string{ReasonTopologyChecksSkipped + ": container main requests aws.amazon.com/neuroncore: 4 (4 cores, more than one device of inf2.24xlarge holds (2))"},
	}, {
		name: "the extender on the default scheduler",
		pod:  testPod("p").Neuron(4).Obj(),
		o:    AdviceOptions{SchedulerName: "default-scheduler"},
	}, {
		name: "my-scheduler when the extender is on the default scheduler",
		pod:  withScheduler(testPod("p").Neuron(4), "my-scheduler").Obj(),
		o:    AdviceOptions{SchedulerName: "default-scheduler"},
		want: []string{ReasonTopologyChecksSkipped + ": container main requests aws.amazon.com/neuron: 4 (4 devices) but the pod's schedulerName is my-scheduler, not default-scheduler"},
	}, {
		name: "128 cores without schedulerName: no trn2 type serves them, so only Karpenter's warning",
		pod:  trn2(testPod("p").NeuronCores(128)).Obj(),
		want: []string{ReasonKarpenterNeuronCoreMismatch + ": container main requests aws.amazon.com/neuroncore: 128."},
	}, {
		name: "both warnings",
		pod:  trn2(testPod("p").NeuronCores(128).Container("c1", topology.ResourceNeuronCore, 16)).Obj(),
		want: []string{
			ReasonKarpenterNeuronCoreMismatch + ": container main requests aws.amazon.com/neuroncore: 128.",
			ReasonTopologyChecksSkipped + ": container c1 requests aws.amazon.com/neuroncore: 16 (16 cores, more than one device of trn2.48xlarge holds (4))",
		},
	}, {
		name: "no Neuron request",
		pod:  testPod("p").Obj(),
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := Advise(tc.pod, tc.o)
			if len(got) != len(tc.want) {
				t.Fatalf("got %d warnings %+v, want %d %q", len(got), got, len(tc.want), tc.want)
			}
			for i, w := range got {
				if s := w.Reason + ": " + w.Message; !strings.HasPrefix(s, tc.want[i]) {
					t.Errorf("warning %d:\n  got  %s\n  want %s...", i, s, tc.want[i])
				}
			}
		})
	}
}
