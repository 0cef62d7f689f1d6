package ledger

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// world answers a call's questions from fixed data: the API server's pods, the pods it no
// longer has, and what the kubelet holds.
type world struct {
	api     []Pod
	gone    map[types.UID]bool
	kubelet []Admitted
}

func (w world) ListPods() ([]Pod, error)          { return w.api, nil }
func (w world) Gone(_ PodKey, uid types.UID) bool { return w.gone[uid] }
func (w world) KubeletHolder(resource string, ids []string) PodKey {
	for _, a := range w.kubelet {
		if KeyOf(a.Resource, a.IDs) == KeyOf(resource, ids) {
			return a.Pod
		}
	}
	return PodKey{}
}

func running(p Pod) Pod {
	p.Pending, p.Running = false, true
	return p
}

// TestAllocate: what a container gets for the kubelet's ids, and when it is refused.
func TestAllocate(t *testing.T) {
	s := trn1(t)
	now := time.Now()
	dev := topology.ResourceNeuron
	tests := []struct {
		name     string
		pods     []Pod     // the informer's
		world    world     // the API server and the kubelet
		holdings []Holding // the last refresh's
		answers  map[AnswerKey]Answer
		ids      []string
		want     string // devices, source and who; or the error's start
		fix      bool   // a record write marks the matched container served
	}{{
		name: "the matching record",
		pods: []Pod{waiting("a", 1, false, 4)},
		ids:  []string{"9"},
		want: "[4] extender ns/a container app", fix: true,
	}, {
		name: "the oldest of two records of the size",
		pods: []Pod{waiting("b", 2, false, 5), waiting("a", 1, false, 4)},
		ids:  []string{"9"},
		want: "[4] extender ns/a container app", fix: true,
	}, {
		name:  "a record the informer does not show yet",
		world: world{api: []Pod{waiting("a", 1, false, 4)}},
		ids:   []string{"9"},
		want:  "[4] extender ns/a container app", fix: true,
	}, {
		name: "no record: the kubelet's ids",
		ids:  []string{"9"},
		want: "[9] kubelet (unknown: no pending pod on this node asks for that)",
	}, {
		name: "the kubelet asks again for a running container",
		pods: []Pod{running(waiting("a", 1, true, 4)), waiting("b", 2, false, 5)},
		holdings: []Holding{{Pod: PodKey{"ns", "a"}, PodUID: "uid-a", Container: "app", Resource: dev, KubeletIDs: []string{"9"},
			Hardware: hw(t, s, dev, "4"), Admitted: true}},
		ids:  []string{"9"},
		want: "[4] again ns/a container app",
	}, {
		name: "the kubelet's ids are another container's hardware",
		holdings: []Holding{{Pod: PodKey{"ns", "a"}, PodUID: "uid-a", Container: "app", Resource: dev, KubeletIDs: []string{"3"},
			Hardware: hw(t, s, dev, "9"), Admitted: true}},
		ids:  []string{"9"},
		want: "pod (unknown: no pending pod on this node asks for that): devices 9 (cores 18,19) are already in use by pod ns/a (container app, aws.amazon.com/neuron)",
	}, {
		name:  "an answer whose pod is gone holds nothing",
		pods:  []Pod{waiting("b", 2, false, 0)},
		world: world{gone: map[types.UID]bool{"uid-x": true}},
		answers: map[AnswerKey]Answer{KeyOf(dev, []string{"3"}): {Hardware: hw(t, s, dev, "0"), Resource: dev, Kubelet: []string{"3"},
			PodUID: "uid-x", Pod: PodKey{"ns", "x"}, Container: "app", At: now}},
		ids:  []string{"5"},
		want: "[0] extender ns/b container app", fix: true,
	}, {
		name:  "an answer whose pod is gone, its ids held by another pod",
		pods:  []Pod{waiting("b", 2, false, 0)},
		world: world{gone: map[types.UID]bool{"uid-x": true}, kubelet: []Admitted{admitted("y", "3")}},
		answers: map[AnswerKey]Answer{KeyOf(dev, []string{"3"}): {Hardware: hw(t, s, dev, "0"), Resource: dev, Kubelet: []string{"3"},
			PodUID: "uid-x", Pod: PodKey{"ns", "x"}, Container: "app", At: now}},
		ids:  []string{"5"},
		want: "pod ns/b container app: devices 0 (cores 0,1) are already in use by pod ns/y",
	}, {
		name: "a record whose container runs is not the call's",
		pods: []Pod{waiting("a", 1, false, 0)},
		holdings: []Holding{{Pod: PodKey{"ns", "a"}, PodUID: "uid-a", Container: "app", Resource: dev, KubeletIDs: []string{"3"},
			Hardware: hw(t, s, dev, "0"), Admitted: true}},
		ids:  []string{"5"},
		want: "the kubelet asked for 1 aws.amazon.com/neuron (ids 5) and the only waiting record of that size is pod ns/a container app's",
	}, {
		name: "a size the node does not have",
		ids:  []string{"1", "2", "3"},
		want: "does not support requests for device: 3",
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := New(s, node)
			l.SetHoldings(tc.holdings)
			l.Restore(tc.answers, now)
			q := Query{Pods: tc.pods, Lookup: tc.world, Records: true, Now: now, Log: logr.Discard()}
			g, err := l.Allocate(q, dev, tc.ids)
			if err != nil {
				if !strings.Contains(err.Error(), tc.want) {
					t.Errorf("error %q, want %q", err, tc.want)
				}
				if len(l.Answers()) != len(tc.answers) {
					t.Errorf("a refused call left an answer: %v", l.Answers())
				}
				return
			}
			if got := topology.FormatList(g.Hardware.Devices); "["+got+"] "+g.Source+" "+g.Who != tc.want {
				t.Errorf("got [%s] %s %s, want %s", got, g.Source, g.Who, tc.want)
			}
			if (g.Fix != nil) != tc.fix {
				t.Errorf("fix %+v, want one: %v", g.Fix, tc.fix)
			}
			a, ok := l.Answers()[KeyOf(dev, tc.ids)]
			if !ok || !slices.Equal(a.Hardware.Devices, g.Hardware.Devices) {
				t.Errorf("answers %v: want the call's", l.Answers())
			}
			l.Undo(g)
			if len(l.Answers()) != len(tc.answers) || len(l.InFlight()) != 0 || len(l.Holdings()) != len(tc.holdings) {
				t.Errorf("after Undo: answers %v, in flight %v, holdings %v", l.Answers(), l.InFlight(), l.Holdings())
			}
		})
	}
}

// TestAContainerInFlightIsNotMatchedAgain: a second call of the same size, before the first
// call's record write lands, is for the next record.
func TestAContainerInFlightIsNotMatchedAgain(t *testing.T) {
	s := trn1(t)
	l := New(s, node)
	q := Query{Pods: []Pod{waiting("a", 1, false, 4), waiting("b", 2, false, 5)}, Lookup: world{}, Records: true, Now: time.Now(), Log: logr.Discard()}
	first, err := l.Allocate(q, topology.ResourceNeuron, []string{"9"})
	if err != nil {
		t.Fatal(err)
	}
	second, err := l.Allocate(q, topology.ResourceNeuron, []string{"10"})
	if err != nil {
		t.Fatal(err)
	}
	if first.Who != "ns/a container app" || second.Who != "ns/b container app" {
		t.Errorf("calls for %s and %s, want a's then b's", first.Who, second.Who)
	}
	l.Landed(*first.Fix)
	if refs := l.InFlight(); len(refs) != 1 || refs[0].UID != "uid-b" {
		t.Errorf("in flight %v, want b's container only", refs)
	}
}

// TestPreferred: the record's ids, else the engine's set away from all hardware held.
func TestPreferred(t *testing.T) {
	s := trn1(t)
	all := PoolIDs(s, topology.ResourceNeuron)
	q := Query{Pods: []Pod{waiting("a", 1, false, 6, 7)}, Lookup: world{}, Records: true, Now: time.Now(), Log: logr.Discard()}
	l := New(s, node)
	if got := l.Preferred(q, topology.ResourceNeuron, all, nil, 2); !slices.Equal(got, []string{"6", "7"}) {
		t.Errorf("preferred %v, want the record's 6,7", got)
	}
	// Without a record: not on device 0, which a container of the core pool holds.
	l.SetHoldings([]Holding{{Pod: PodKey{"ns", "c"}, Resource: topology.ResourceNeuronCore, KubeletIDs: []string{"0"}, Hardware: hw(t, s, topology.ResourceNeuronCore, "0"), Admitted: true}})
	q.Pods = nil
	got := l.Preferred(q, topology.ResourceNeuron, all, nil, 1)
	if len(got) != 1 || got[0] == "0" {
		t.Errorf("preferred %v, want one device other than 0", got)
	}
	// No valid set among the available ids: the ids that must be included, then the lowest.
	if got := l.Preferred(q, topology.ResourceNeuron, []string{"3", "9", "1"}, []string{"9"}, 2); !slices.Equal(got, []string{"9", "1"}) {
		t.Errorf("preferred %v, want 9 then 1", got)
	}
}
