package autoscaler

import (
	"context"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func (e *env) nominated(pod string) string {
	e.t.Helper()
	p, err := e.client.CoreV1().Pods("default").Get(context.Background(), pod, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return p.Status.NominatedNodeName
}

// TestControllerNominatesToTheRegisteredName: a provider that names the node otherwise than the
// request (EC2: the instance's private DNS name) gets the pods nominated to that name, the one
// the node registers under, and the event names both.
func TestControllerNominatesToTheRegisteredName(t *testing.T) {
	const node = "ip-10-0-0-12.ec2.internal"
	e := newEnv(t, devicePlugin, pendingPod(testPod("a").devices(1)))
	e.provider.nodeName = func(NodeRequest) string { return node }
	c, rec := e.controller()
	round(t, c)
	launched := e.provider.launched()
	if len(launched) != 1 {
		t.Fatalf("launches %+v, want one", launched)
	}
	requested := launched[0].Name
	if got := e.nominated("a"); got != node {
		t.Errorf("pod a nominated to %q, want %s, the name its node registers under", got, node)
	}
	want := "Normal TriggeredScaleUp pod triggered scale-up: a new inf1.xlarge node ($0.228/h): node " + node + " (launched as " + requested + ")"
	if ev := events(rec); !slices.Equal(ev, []string{want}) {
		t.Errorf("events %q, want %q", ev, want)
	}

	// The next round finds it launching under that name: no second node.
	round(t, c)
	if got := e.provider.launched(); len(got) != 1 {
		t.Errorf("launches %+v, want the first only", got)
	}
	if ev := events(rec); !hasEvent(ev, "Normal TriggeredScaleUp node "+node+" (inf1.xlarge), already launching") {
		t.Errorf("events %q, want the pod told its node is launching", ev)
	}

	// The node registers under that name and settles, and the scheduler still refuses the pod:
	// it is planned again onto a new node. The first node's request name is taken: requesting it
	// again would return the first instance, not a new one.
	e.provider.setLaunching(node, false)
	if _, err := e.client.CoreV1().Nodes().Create(context.Background(), launchedNode(node, "inf1.xlarge", t0), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { _, err := c.nodes.Get(node); return err == nil })
	e.clock.Add(settleAfterReady)
	round(t, c)
	got := e.provider.launched()
	if len(got) != 2 || got[1].Name == requested {
		t.Fatalf("launches %+v: want a second node, requested under another name than %s", got, requested)
	}
}

// TestControllerFollowsARenamedNode: a provider that reports a launching node under a new name
// (EC2, once it has the private DNS name RunInstances did not return) still has one launching
// node, not two, and the pods are nominated to the new name.
func TestControllerFollowsARenamedNode(t *testing.T) {
	const node = "ip-10-0-0-7.ec2.internal"
	e := newEnv(t, devicePlugin, pendingPod(testPod("a").devices(1)))
	c, _ := e.controller()
	round(t, c)
	requested := NodeName("inf1.xlarge", []string{"default/a"})
	if got := e.nominated("a"); got != requested {
		t.Fatalf("pod a nominated to %q, want %s", got, requested)
	}
	e.provider.rename(requested, node)
	round(t, c)
	if got := e.provider.launched(); len(got) != 1 {
		t.Errorf("launches %+v, want the first only", got)
	}
	insts, err := c.instances(context.Background(), e.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(insts) != 1 || insts[0].Name != node {
		t.Errorf("instances %+v, want the one node, named %s", insts, node)
	}
	if got := c.fleet.in(phaseLaunching); !slices.Equal(got, []string{node}) {
		t.Errorf("launching %v, want %s only", got, node)
	}
	if got := e.nominated("a"); got != node {
		t.Errorf("pod a nominated to %q, want %s", got, node)
	}
	// It is still launching when the register timeout runs from its launch, not from the rename.
	e.clock.Add(DefaultRegisterTimeout - time.Second)
	round(t, c)
	if len(e.provider.deleted) != 0 {
		t.Errorf("deleted %v before the register timeout", e.provider.deleted)
	}
}
