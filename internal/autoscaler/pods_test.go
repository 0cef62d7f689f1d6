package autoscaler

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// podBuilder builds test pods: testPod("p").devices(4).selector(labels.InstanceType, "trn1.32xlarge").obj().
// A test pod tolerates the Neuron taint unless told otherwise.
type podBuilder struct{ p *corev1.Pod }

func testPod(name string) *podBuilder {
	return &podBuilder{p: &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{Tolerations: []corev1.Toleration{
			{Key: labels.NeuronTaintKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		}},
	}}
}

func qty(n int) resource.Quantity { return *resource.NewQuantity(int64(n), resource.DecimalSI) }

// container adds a container asking for count of res in limits and requests.
func (b *podBuilder) container(name, res string, count int) *podBuilder {
	l := corev1.ResourceList{corev1.ResourceName(res): qty(count)}
	b.p.Spec.Containers = append(b.p.Spec.Containers, corev1.Container{Name: name, Resources: corev1.ResourceRequirements{Limits: l, Requests: l.DeepCopy()}})
	return b
}

func (b *podBuilder) devices(n int) *podBuilder {
	return b.container("c"+strconv.Itoa(len(b.p.Spec.Containers)), topology.ResourceNeuron, n)
}

func (b *podBuilder) cores(n int) *podBuilder {
	return b.container("c"+strconv.Itoa(len(b.p.Spec.Containers)), topology.ResourceNeuronCore, n)
}

func (b *podBuilder) selector(k, v string) *podBuilder {
	if b.p.Spec.NodeSelector == nil {
		b.p.Spec.NodeSelector = map[string]string{}
	}
	b.p.Spec.NodeSelector[k] = v
	return b
}

func (b *podBuilder) tolerations(t ...corev1.Toleration) *podBuilder {
	b.p.Spec.Tolerations = t
	return b
}

func (b *podBuilder) obj() *corev1.Pod { return b.p }

// msgToleration is Check's message for a pod without the Neuron toleration.
const msgToleration = "the pod does not tolerate the taint aws.amazon.com/neuron=true:NoSchedule that every Neuron node carries. " +
	"Add a toleration for aws.amazon.com/neuron to the pod: tolerations: [{key: aws.amazon.com/neuron, operator: Exists, effect: NoSchedule}]"
