package ledger

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

const node = "trn1-a"

// waiting is a pod bound to the node, not started, with a record of one container "app" on
// devices of aws.amazon.com/neuron, served or not.
func waiting(name string, allocTime int64, served bool, devices ...int) Pod {
	return Pod{Key: PodKey{"ns", name}, UID: types.UID("uid-" + name), Pending: true, AllocTime: allocTime, Record: &allocation.Record{
		Node: node, Containers: []allocation.Container{{Name: "app", Resource: topology.ResourceNeuron, Devices: devices, Served: served}},
	}}
}

// admitted is the kubelet holding ids of aws.amazon.com/neuron for a pod's container "app".
func admitted(name string, ids ...string) Admitted {
	return Admitted{Pod: PodKey{"ns", name}, Container: "app", Resource: topology.ResourceNeuron, IDs: ids}
}

// answer is the plugin's answer to a call with ids of aws.amazon.com/neuron, matched to pod's
// record and served devices.
func answer(t *testing.T, s *topology.Shape, ids []string, pod string, at time.Time, devices ...int) map[AnswerKey]Answer {
	hw, err := s.DeviceAllocation(devices)
	if err != nil {
		t.Fatal(err)
	}
	return map[AnswerKey]Answer{KeyOf(topology.ResourceNeuron, ids): {
		Hardware: hw, Resource: topology.ResourceNeuron, Kubelet: ids, PodUID: types.UID("uid-" + pod), Pod: PodKey{"ns", pod}, Container: "app", At: at,
	}}
}

// noLister fails a test that reads the API server.
type noLister struct{ t *testing.T }

func (l noLister) ListPods() ([]Pod, error) {
	l.t.Error("the refresh read the API server")
	return nil, fmt.Errorf("no API server")
}

// TestSwaps: the kubelet admits pods in another order than Allocate matched their records; a
// refresh gives each admitted container's record what it got, and each record displaced by that
// hardware nobody got.
func TestSwaps(t *testing.T) {
	s := trn1(t)
	now := time.Now()
	tests := []struct {
		name    string
		pods    []Pod
		answers []map[AnswerKey]Answer
		kubelet []Admitted
		want    map[string]string // pod -> its fixed record: devices, served or waiting
	}{{
		// The kubelet admitted b first, but its call was matched to a's record (the oldest):
		// b gets device 0, a b's old device 1.
		name:    "two pods",
		pods:    []Pod{waiting("a", 1, true, 0), waiting("b", 2, false, 1)},
		answers: []map[AnswerKey]Answer{answer(t, s, []string{"0"}, "a", now, 0)},
		kubelet: []Admitted{admitted("b", "0")},
		want:    map[string]string{"ns/b": "[0] served", "ns/a": "[1] waiting"},
	}, {
		// p13's call was matched to p08's record (device 1; p08's own was swapped there
		// before), then p08's call to p12's (device 2), both before a refresh. p13 runs on 1,
		// p08 on 2: p12 must get p13's old device 3, not p08's old device 1.
		name: "a chain",
		pods: []Pod{waiting("p08", 8, true, 1), waiting("p12", 12, true, 2), waiting("p13", 13, false, 3)},
		answers: []map[AnswerKey]Answer{
			answer(t, s, []string{"1"}, "p08", now, 1),
			answer(t, s, []string{"2"}, "p12", now, 2),
		},
		kubelet: []Admitted{admitted("p13", "1"), admitted("p08", "2")},
		want:    map[string]string{"ns/p13": "[1] served", "ns/p08": "[2] served", "ns/p12": "[3] waiting"},
	}, {
		// b has no record (scheduled without the extender) and was served a's record: the chain
		// breaks at once, and a gets a free device the engine chooses, away from every record.
		name:    "a broken chain",
		pods:    []Pod{waiting("a", 1, true, 0), {Key: PodKey{"ns", "b"}, UID: "uid-b", Running: true}, waiting("c", 3, false, 1)},
		answers: []map[AnswerKey]Answer{answer(t, s, []string{"5"}, "a", now, 0)},
		kubelet: []Admitted{admitted("b", "5")},
		want:    map[string]string{"ns/b": "[0] served", "ns/a": "[2] waiting"},
	}, {
		name:    "admitted in order: nothing to fix",
		pods:    []Pod{waiting("a", 1, true, 0), waiting("b", 2, false, 1)},
		answers: []map[AnswerKey]Answer{answer(t, s, []string{"0"}, "a", now, 0)},
		kubelet: []Admitted{admitted("a", "0")},
		want:    map[string]string{},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := New(s, node)
			for _, a := range tc.answers {
				l.Restore(a, now)
			}
			fixes, err := l.Refresh(Snapshot{Pods: tc.pods, Cached: true, Kubelet: tc.kubelet, KubeletOK: true, Now: now}, noLister{t})
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, f := range fixes {
				state := "waiting"
				if f.Served {
					state = "served"
				}
				got[f.Pod.String()] = fmt.Sprintf("%v %s", f.Hardware.Devices, state)
			}
			if !maps.Equal(got, tc.want) {
				t.Errorf("record fixes %v, want %v", got, tc.want)
			}
		})
	}
}

// TestAnswers: how long an answer the kubelet's PodResources do not show holds its hardware.
func TestAnswers(t *testing.T) {
	s := trn1(t)
	now := time.Now()
	eight := []string{"0", "1", "2", "3", "4", "5", "6", "7"}
	tests := []struct {
		name      string
		age       time.Duration
		seen      bool
		pods      []Pod
		kubelet   []Admitted
		kubeletOK bool
		holds     bool
	}{
		// An answer the kubelet's PodResources never showed (the pod was admitted and torn
		// down between two refreshes) holds nothing once its pod is gone from the pods, after a
		// short grace; until then it holds, naming the pod so that a conflict with it can be
		// confirmed with the API server.
		{name: "its pod is not shown yet, within the grace", kubeletOK: true, holds: true},
		{name: "its pod is gone", age: answerGrace + time.Second, kubeletOK: true},
		{name: "its pod waits", age: answerGrace + time.Second, pods: []Pod{waiting("eight", 1, true, 0)}, kubeletOK: true, holds: true},
		{name: "its pod finished", age: answerGrace + time.Second, pods: []Pod{{Key: PodKey{"ns", "eight"}, UID: "uid-eight", Finished: true}}, kubeletOK: true},
		{name: "unseen for too long", age: answerUnseenTTL + time.Second, pods: []Pod{waiting("eight", 1, true, 0)}, kubeletOK: true},
		{name: "unseen for long, no PodResources", age: answerUnseenTTL + time.Second, pods: []Pod{waiting("eight", 1, true, 0)}, holds: true},
		{name: "older than its TTL, no PodResources", age: answerTTL + time.Second, pods: []Pod{waiting("eight", 1, true, 0)}},
		{name: "seen, then gone from the PodResources", seen: true, pods: []Pod{waiting("eight", 1, true, 0)}, kubeletOK: true},
		{name: "seen, no PodResources", seen: true, pods: []Pod{waiting("eight", 1, true, 0)}, holds: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := New(s, node)
			a := answer(t, s, eight, "eight", now.Add(-tc.age), 0, 1, 2, 3, 4, 5, 6, 7)
			for k, v := range a {
				v.Seen = tc.seen
				a[k] = v
			}
			l.Restore(a, now)
			if _, err := l.Refresh(Snapshot{Pods: tc.pods, Cached: true, Kubelet: tc.kubelet, KubeletOK: tc.kubeletOK, Now: now}, noLister{t}); err != nil {
				t.Fatal(err)
			}
			h := slices.DeleteFunc(l.Holdings(), func(h Holding) bool { return len(h.KubeletIDs) == 0 }) // the records'
			if tc.holds {
				if len(h) != 1 || h[0].Holder() != "ns/eight" || len(l.Answers()) != 1 {
					t.Errorf("holdings %+v, want the answer's, naming its pod", h)
				}
				return
			}
			if len(l.Answers()) != 0 || len(h) != 0 {
				t.Errorf("answers %v, holdings %+v: want the answer forgotten", l.Answers(), h)
			}
		})
	}
}

// TestAnAnswerBelongsToTheContainerTheKubeletShows: the kubelet admitted y with the ids of an
// answer matched to x's record: the answer is y's from then on.
func TestAnAnswerBelongsToTheContainerTheKubeletShows(t *testing.T) {
	s := trn1(t)
	now := time.Now()
	l := New(s, node)
	l.Restore(answer(t, s, []string{"0"}, "x", now, 0), now)
	pods := []Pod{waiting("x", 1, true, 0), waiting("y", 2, false, 1)}
	if _, err := l.Refresh(Snapshot{Pods: pods, Cached: true, Kubelet: []Admitted{admitted("y", "0")}, KubeletOK: true, Now: now}, noLister{t}); err != nil {
		t.Fatal(err)
	}
	a := l.Answers()[KeyOf(topology.ResourceNeuron, []string{"0"})]
	if a.Pod.String() != "ns/y" || a.PodUID != "uid-y" || !a.Seen {
		t.Errorf("answer %+v, want y's, seen", a)
	}
}

// TestAnAnswerOfAPodTheInformerDoesNotShowReadsTheAPIServer: the kubelet shows a pod holding
// answered ids that the informer's pods lack: the refresh reads the pods again rather than fix
// one record of a swap without the other.
func TestAnAnswerOfAPodTheInformerDoesNotShowReadsTheAPIServer(t *testing.T) {
	s := trn1(t)
	now := time.Now()
	l := New(s, node)
	l.Restore(answer(t, s, []string{"0"}, "a", now, 0), now)
	listed := []Pod{waiting("a", 1, true, 0), waiting("b", 2, false, 1)}
	fixes, err := l.Refresh(Snapshot{Pods: listed[:1], Cached: true, Kubelet: []Admitted{admitted("b", "0")}, KubeletOK: true, Now: now}, listerOf(listed))
	if err != nil {
		t.Fatal(err)
	}
	if len(fixes) != 2 {
		t.Errorf("fixes %+v, want b's and a's", fixes)
	}
}

type listerOf []Pod

func (l listerOf) ListPods() ([]Pod, error) { return l, nil }
