package allocation

import (
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
)

func recordPod(uid, raw string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: k8stypes.UID("uid-" + uid), Annotations: map[string]string{Annotation: raw}}}
}

func TestRecordCache(t *testing.T) {
	var c RecordCache
	a := (&Record{Node: "n1", Containers: []Container{{Name: "main", Resource: "aws.amazon.com/neuron", Devices: []int{0, 1}}}}).Encode()
	b := (&Record{Node: "n2", Containers: []Container{{Name: "main", Resource: "aws.amazon.com/neuron", Devices: []int{2}}}}).Encode()

	r1, err := c.RecordOf(recordPod("1", a))
	if err != nil || r1.Node != "n1" {
		t.Fatalf("first read: %+v, %v", r1, err)
	}
	if r2, _ := c.RecordOf(recordPod("1", a)); r2 != r1 {
		t.Error("the same annotation was parsed again instead of answered from the cache")
	}
	// The pod's record changed (the device plugin corrected it): parsed again.
	if r3, err := c.RecordOf(recordPod("1", b)); err != nil || r3.Node != "n2" {
		t.Errorf("after the annotation changed: %+v, %v (a stale record)", r3, err)
	}
	// A malformed record keeps its error.
	if _, err := c.RecordOf(recordPod("2", "{")); err == nil {
		t.Error("a malformed record must fail")
	}
	if _, err := c.RecordOf(recordPod("2", "{")); err == nil {
		t.Error("a malformed record must fail from the cache too")
	}
	// No annotation: whatever RecordOf says (no record here).
	if r, err := c.RecordOf(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "uid-3"}}); r != nil || err != nil {
		t.Errorf("a pod without a record: %+v, %v", r, err)
	}
	c.Forget("uid-1")
	if r4, _ := c.RecordOf(recordPod("1", a)); r4 == r1 || r4.Node != "n1" {
		t.Error("a forgotten pod must be parsed again")
	}
}

func TestRecordCacheConcurrent(t *testing.T) {
	var c RecordCache
	raws := []string{
		(&Record{Node: "n1", Containers: []Container{{Name: "c", Resource: "aws.amazon.com/neuron", Devices: []int{0}}}}).Encode(),
		(&Record{Node: "n2", Containers: []Container{{Name: "c", Resource: "aws.amazon.com/neuron", Devices: []int{1}}}}).Encode(),
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				raw := raws[(g+i)%2]
				r, err := c.RecordOf(recordPod("x", raw))
				if err != nil || r.Encode() != raw {
					t.Errorf("got %+v, %v for %s", r, err, raw)
					return
				}
				if i%50 == 0 {
					c.Forget("uid-x")
				}
			}
		})
	}
	wg.Wait()
}
