package autoscaler

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestReleaseRule(t *testing.T) {
	pods := []string{"default/a", "default/b"}
	for _, tc := range []struct {
		name       string
		h          hold
		groupReady bool
		want       verdict
	}{
		{"not serving", hold{pods: pods}, true, keepNotServing},
		{"not serving, waited is never set so", hold{pods: pods, waited: true}, true, keepNotServing},
		{"serving, pods nominated, group ready", hold{pods: pods, serving: true}, true, releaseWithGroup},
		{"serving, pods nominated, group not ready", hold{pods: pods, serving: true}, false, keepForGroup},
		{"serving, a pod not nominated", hold{pods: pods, unnominated: pods[1:], serving: true}, true, keepForGroup},
		{"serving, no pods, group not ready", hold{serving: true}, false, releaseNoPods},
		{"served for releaseWait, a pod not nominated", hold{pods: pods, unnominated: pods[:1], serving: true, waited: true}, true, releaseAfterWait},
		{"served for releaseWait, group not ready", hold{pods: pods, serving: true, waited: true}, false, releaseAfterWait},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := releaseRule(tc.h, tc.groupReady); got != tc.want {
				t.Errorf("releaseRule = %v, want %v", got, tc.want)
			}
		})
	}
	for v, release := range map[verdict]bool{keepNotServing: false, keepForGroup: false, releaseNoPods: true, releaseWithGroup: true, releaseAfterWait: true} {
		if v.release() != release {
			t.Errorf("verdict %v releases: %v, want %v", v, v.release(), release)
		}
	}
}

func TestGroupReady(t *testing.T) {
	node := func(name string) *corev1.Node { return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}} }
	ready := &hold{node: node("ready"), pods: []string{"default/a"}, serving: true}
	booting := &hold{node: node("booting"), pods: []string{"default/b"}}
	unnominated := &hold{node: node("unnominated"), pods: []string{"default/c"}, unnominated: []string{"default/c"}, serving: true}
	held := map[string]*hold{"ready": ready, "booting": booting, "unnominated": unnominated}
	present := map[string]bool{"ready": true, "booting": true, "unnominated": true, "running": true}
	for _, tc := range []struct {
		name   string
		placed map[string]placement
		want   bool
	}{
		{"nothing placed", nil, true},
		{"on a ready held node", map[string]placement{"default/a": {node: "ready"}}, true},
		{"on a ready node and one that takes pods", map[string]placement{"default/a": {node: "ready"}, "default/x": {node: "running"}}, true},
		{"on a node not serving", map[string]placement{"default/a": {node: "ready"}, "default/b": {node: "booting"}}, false},
		{"on a node with a pod not nominated", map[string]placement{"default/a": {node: "ready"}, "default/c": {node: "unnominated"}}, false},
		{"on a node with no Node yet", map[string]placement{"default/a": {node: "ready"}, "default/y": {node: "launching"}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := groupReady(tc.placed, held, present); got != tc.want {
				t.Errorf("groupReady = %v, want %v", got, tc.want)
			}
		})
	}
}
