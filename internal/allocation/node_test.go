package allocation

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

func TestShapeOfNode(t *testing.T) {
	node := func(typ string, devices, cores int64) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{}}}
		if typ != "" {
			n.Labels[labels.InstanceType] = typ
		}
		n.Status.Capacity = corev1.ResourceList{}
		if devices != 0 {
			n.Status.Capacity[corev1.ResourceName(topology.ResourceNeuron)] = qty(devices)
		}
		if cores != 0 {
			n.Status.Capacity[corev1.ResourceName(topology.ResourceNeuronCore)] = qty(cores)
		}
		return n
	}
	for _, tc := range []struct {
		name    string
		node    *corev1.Node
		lnc     int
		cpd     int
		wantErr string
	}{
		{name: "trn2 at its default LNC", node: node("trn2.48xlarge", 16, 64), lnc: 2, cpd: 4},
		{name: "trn2 advertising LNC 1", node: node("trn2.48xlarge", 16, 128), lnc: 1, cpd: 8},
		{name: "nothing advertised: the default", node: node("trn2.48xlarge", 0, 0), lnc: 2, cpd: 4},
		{name: "a ratio that does not divide: the default", node: node("trn2.48xlarge", 16, 40), lnc: 2, cpd: 4},
		{name: "SageMaker name", node: node("ml.trn1.32xlarge", 16, 32), lnc: 1, cpd: 2},
		{name: "LNC the type refuses", node: node("trn1.32xlarge", 16, 16), wantErr: "node n1: LNC value is not configurable for instance type trn1.32xlarge"},
		{name: "no label", node: node("", 16, 32), wantErr: "node n1 has no " + labels.InstanceType + " label"},
		{name: "unknown type", node: node("m5.large", 0, 0), wantErr: "node n1: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := ShapeOfNode(topology.DefaultCatalog(), tc.node)
			if tc.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one starting %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.LNC != tc.lnc || s.CoresPerDevice != tc.cpd {
				t.Errorf("LNC %d, %d cores a device; want %d, %d", s.LNC, s.CoresPerDevice, tc.lnc, tc.cpd)
			}
		})
	}
}
