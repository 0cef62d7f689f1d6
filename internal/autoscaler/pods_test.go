package autoscaler

import (
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/kube-neuron/kube-neuron/internal/testkit"
)

// testPod is a pod in the default namespace that tolerates the Neuron taint, as the
// autoscaler's pending pods do unless a test says otherwise.
func testPod(name string) *testkit.PodWrapper {
	return testkit.MakePod().Name(name).TolerateNeuron()
}

func qty(n int) resource.Quantity { return *resource.NewQuantity(int64(n), resource.DecimalSI) }

// msgToleration is Check's message for a pod without the Neuron toleration.
const msgToleration = "the pod does not tolerate the taint aws.amazon.com/neuron=true:NoSchedule that every Neuron node carries. " +
	"Add a toleration for aws.amazon.com/neuron to the pod: tolerations: [{key: aws.amazon.com/neuron, operator: Exists, effect: NoSchedule}]"
