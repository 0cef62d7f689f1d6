package lab

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-neuron/kube-neuron/internal/autoscaler/plan"
	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// TestAdoptedSpec: a node the local provider created becomes a simulated node of its type and
// mode, and a node of an UltraServer gets that UltraServer's identity (the sysfs and DRA
// attributes of its simulated hardware follow from it).
func TestAdoptedSpec(t *testing.T) {
	cat := topology.DefaultCatalog()
	us, _ := cat.Get("trn2u.48xlarge")
	node := func(l map[string]string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: l}}
	}
	member := plan.NodePlan{InstanceType: us, Mode: labels.AllocationModeDRA, UltraServer: "0123456789abcdef", UltraServerNode: 2}
	spec, err := adoptedSpec(cat, node(member.Labels()))
	if err != nil {
		t.Fatal(err)
	}
	if spec.UltraServer == nil || spec.UltraServer.ServerID4 != "0123456789abcdef" || spec.UltraServer.NodeID4 != 2 || spec.UltraServer.NodeID2 != 0 ||
		spec.UltraServerName != "0123456789abcdef" || spec.Mode != ModeDRA {
		t.Errorf("spec %+v, UltraServer %+v", spec, spec.UltraServer)
	}
	plain, err := adoptedSpec(cat, node(map[string]string{labels.InstanceType: "trn1.2xlarge"}))
	if err != nil || plain.UltraServer != nil || plain.Mode != ModeDevicePlugin {
		t.Errorf("a plain node: %+v, %v", plain, err)
	}
	for _, tc := range []struct {
		labels map[string]string
		want   string
	}{
		{map[string]string{labels.InstanceType: "trn2u.48xlarge", labels.UltraServerServerID4: "x", labels.UltraServerNodeID4: "7"}, "0 to 3"},
		{map[string]string{labels.InstanceType: "trn2.48xlarge", labels.UltraServerServerID4: "x", labels.UltraServerNodeID4: "1"}, "not an UltraServer type"},
		{map[string]string{labels.InstanceType: "trn2u.48xlarge", labels.UltraServerServerID4: "x", labels.UltraServerNodeID4: "1", labels.UltraServerNodeID2: "z"}, "0 or 1"},
	} {
		if _, err := adoptedSpec(cat, node(tc.labels)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("labels %v: %v, want an error saying %q", tc.labels, err, tc.want)
		}
	}
}
