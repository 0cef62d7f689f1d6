//go:build e2e

package benchutil

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kube-neuron/kube-neuron/internal/labels"
)

// Node is a fake node of a benchmark's fleet: a Node object without a kubelet.
type Node struct {
	Name, InstanceType, Family string
	// Mode is the node's allocation mode label (labels.AllocationModeDevicePlugin or
	// labels.AllocationModeDRA).
	Mode string
	// Capacity is also the node's allocatable.
	Capacity corev1.ResourceList
	// Why is the message of the node's Ready condition: which benchmark made it.
	Why string
}

// CreateNodes creates n fake nodes, node(i) for i in 0..n-1, 16 at a time: labelled and tainted
// like the lab's Neuron nodes, then Ready with their capacity.
func CreateNodes(ctx context.Context, client kubernetes.Interface, n int, node func(i int) (Node, error)) error {
	return Parallel(n, 16, func(i int) error {
		spec, err := node(i)
		if err != nil {
			return err
		}
		return createNode(ctx, client, spec)
	})
}

func createNode(ctx context.Context, client kubernetes.Interface, n Node) error {
	obj := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: map[string]string{
			labels.InstanceType:   n.InstanceType,
			labels.InstanceFamily: n.Family,
			labels.Hostname:       n.Name,
			labels.AllocationMode: n.Mode,
			"kubernetes.io/os":    "linux",
			"kubernetes.io/arch":  "amd64",
		}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: labels.NeuronTaintKey, Value: labels.NeuronTaintValue, Effect: corev1.TaintEffectNoSchedule}}},
	}
	created, err := client.CoreV1().Nodes().Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating node %s: %w", n.Name, err)
	}
	now := metav1.Now()
	created.Status = corev1.NodeStatus{
		Capacity:    n.Capacity.DeepCopy(),
		Allocatable: n.Capacity.DeepCopy(),
		Conditions: []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			Message: n.Why, LastHeartbeatTime: now, LastTransitionTime: now,
		}},
	}
	if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("setting the status of node %s: %w", n.Name, err)
	}
	return nil
}

// CreateNamespace creates ns and waits for its default ServiceAccount (pods need it).
func CreateNamespace(ctx context.Context, client kubernetes.Interface, ns string) error {
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the default ServiceAccount of namespace %s never appeared: %w", ns, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
