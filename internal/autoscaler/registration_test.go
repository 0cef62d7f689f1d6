package autoscaler

import (
	"testing"

	resourcev1 "k8s.io/api/resource/v1"

	"github.com/kube-neuron/kube-neuron/internal/autoscaler/plan"
	"github.com/kube-neuron/kube-neuron/internal/testkit"
)

// TestControllerOffersAnAllocatedPodWhereItsClaimIs: the scheduler allocated a pending pod's claim
// on launching node y (the DRA driver names its pool after the node) while a plan put the pod on
// x. It binds the pod to y: y offers it, x does not, whatever the plans said; a pod whose claim
// is not allocated yet stays where the plans put it.
func TestControllerOffersAnAllocatedPodWhereItsClaimIs(t *testing.T) {
	e := newEnv(t)
	c, _ := e.controller()
	demand := func(name, pool string) plan.PodDemand {
		d := plan.NewPodDemand(pendingPod(testPod(name)), nil)
		w := testkit.MakeClaim().Name(name+"-neurons").Request("neurons", 4)
		if pool != "" {
			w = w.Device("neurons", pool, "neurondevice0", "neurondevice1", "neurondevice2", "neurondevice3")
		}
		d.Claims = []*resourcev1.ResourceClaim{w.Obj()}
		return d
	}
	pending := map[string]plan.PodDemand{
		"default/a": demand("a", "y"), // planned on x, allocated on y
		"default/b": demand("b", "y"), // planned on x, moved to x by the last plan, allocated on y
		"default/c": demand("c", ""),  // planned on x, not allocated
	}
	c.placedLast["default/b"] = "x"
	listed := map[string]bool{"x": true, "y": true}
	keys := func(ds []plan.PodDemand) []string {
		var out []string
		for _, d := range ds {
			out = append(out, d.Key())
		}
		return out
	}
	onX := keys(c.offered("x", []string{"default/a", "default/b", "default/c"}, pending, listed))
	onY := keys(c.offered("y", nil, pending, listed))
	if len(onX) != 1 || onX[0] != "default/c" {
		t.Errorf("x offers %v, want default/c only", onX)
	}
	if len(onY) != 2 || onY[0] != "default/a" || onY[1] != "default/b" {
		t.Errorf("y offers %v, want default/a and default/b", onY)
	}
}
