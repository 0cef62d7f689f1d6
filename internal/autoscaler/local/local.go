// Package local is neuron-autoscaler's provider for the local lab: it launches a node by creating
// its Node object through the API, with the request's taints (the Neuron taint and the launching
// taint, which the controller removes once the node serves and its pods are nominated), the
// labels of DESIGN section 4 and its capacity. The lab's node simulator adopts every node whose provider ID starts with
// ProviderIDPrefix: it simulates the node's devices and kubelet, and runs the device plugin or the
// DRA driver on it, so the whole loop can be watched locally. Removing a node deletes the object;
// the pods planned onto a node are its kube-neuron.io/planned-pods annotation.
package local

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/kube-neuron/kube-neuron/internal/autoscaler"
	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// ProviderIDPrefix starts the provider ID of the nodes this provider creates (the lab's
// LocalProviderIDPrefix).
const ProviderIDPrefix = "kube-neuron-local:///"

// notReadyTaint keeps the scheduler off a node until its kubelet (the lab's simulator) registers
// it, as the TaintNodesByCondition admission plugin does on a real cluster.
var notReadyTaint = corev1.Taint{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule}

// Options configure the provider.
type Options struct {
	Client  kubernetes.Interface
	Catalog *topology.Catalog // the default catalog when nil
	// Reservations are the lab's reservations (stub of the shared API).
	Reservations []Reservation
}

// Provider creates and deletes Node objects.
type Provider struct {
	o Options
}

var _ autoscaler.Provider = (*Provider)(nil)

// New returns the provider.
func New(o Options) *Provider {
	if o.Catalog == nil {
		o.Catalog = topology.DefaultCatalog()
	}
	return &Provider{o: o}
}

// Name is "local".
func (p *Provider) Name() string { return "local" }

// Launch creates the node, NotReady and tainted not-ready until the simulator adopts it; a node
// of that name that exists already is returned as it is.
func (p *Provider) Launch(ctx context.Context, r autoscaler.NodeRequest) (autoscaler.Instance, error) {
	nodes := p.o.Client.CoreV1().Nodes()
	if n, err := nodes.Get(ctx, r.Name, metav1.GetOptions{}); err == nil {
		return instance(n), nil
	} else if !apierrors.IsNotFound(err) {
		return autoscaler.Instance{}, fmt.Errorf("looking for node %s: %w", r.Name, err)
	}
	it, err := p.o.Catalog.Get(r.Type)
	if err != nil {
		return autoscaler.Instance{}, err
	}
	l := map[string]string{labels.Hostname: r.Name}
	maps.Copy(l, r.Labels)
	l[autoscaler.LaunchedByLabel] = autoscaler.LaunchedByValue
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: r.Name, Labels: l, Annotations: maps.Clone(r.Annotations)},
		Spec: corev1.NodeSpec{
			ProviderID: ProviderIDPrefix + r.Name,
			Taints:     append([]corev1.Taint{notReadyTaint}, r.Taints...),
		},
	}
	created, err := nodes.Create(ctx, node, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		created, err = nodes.Get(ctx, r.Name, metav1.GetOptions{})
	}
	if err != nil {
		return autoscaler.Instance{}, fmt.Errorf("creating node %s: %w", r.Name, err)
	}
	created.Status.Capacity = capacity(it, r.Mode)
	created.Status.Allocatable = created.Status.Capacity.DeepCopy()
	created.Status.Conditions = []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "Launching",
		Message: "launched by neuron-autoscaler's local provider; waiting for the lab to simulate it", LastTransitionTime: metav1.Now(),
	}}
	if updated, err := nodes.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err == nil {
		created = updated
	}
	return instance(created), nil
}

// LaunchUltraServer implements autoscaler.Provider: it creates the Nodes of one UltraServer, or,
// when one cannot be created, deletes those it created and returns the error.
func (p *Provider) LaunchUltraServer(ctx context.Context, id string, nodes []autoscaler.NodeRequest) ([]autoscaler.Instance, error) {
	var out []autoscaler.Instance
	for _, r := range nodes {
		in, err := p.Launch(ctx, r)
		if err != nil {
			for _, created := range out {
				_ = p.Delete(ctx, created.Name)
			}
			return nil, fmt.Errorf("UltraServer %s: %w", id, err)
		}
		out = append(out, in)
	}
	return out, nil
}

// capacity is what the node will offer: CPU, memory, pods, and for the device plugin the three
// Neuron resources at the type's default LNC.
// Reservations implements autoscaler.Provider.
func (p *Provider) Reservations(context.Context) ([]autoscaler.Reservation, error) {
	return nil, nil
}

func capacity(it topology.InstanceType, mode string) corev1.ResourceList {
	c := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewQuantity(int64(max(it.VCPU, 1)), resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(int64(max(it.MemoryGiB, 1))<<30, resource.BinarySI),
		corev1.ResourcePods:   *resource.NewQuantity(110, resource.DecimalSI),
	}
	if mode != labels.AllocationModeDRA {
		devices := int64(it.Devices)
		c[topology.ResourceNeuron] = *resource.NewQuantity(devices, resource.DecimalSI)
		c[topology.ResourceNeuronDevice] = *resource.NewQuantity(devices, resource.DecimalSI)
		c[topology.ResourceNeuronCore] = *resource.NewQuantity(int64(it.LogicalCores(0)), resource.DecimalSI)
	}
	return c
}

// Instances lists the nodes this provider created.
func (p *Provider) Instances(ctx context.Context) ([]autoscaler.Instance, error) {
	list, err := p.o.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{
		LabelSelector: autoscaler.LaunchedByLabel + "=" + autoscaler.LaunchedByValue,
	})
	if err != nil {
		return nil, fmt.Errorf("listing launched nodes: %w", err)
	}
	var out []autoscaler.Instance
	for i := range list.Items {
		n := &list.Items[i]
		if strings.HasPrefix(n.Spec.ProviderID, ProviderIDPrefix) && n.DeletionTimestamp == nil {
			out = append(out, instance(n))
		}
	}
	return out, nil
}

// Delete deletes the Node object.
func (p *Provider) Delete(ctx context.Context, name string) error {
	err := p.o.Client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting node %s: %w", name, err)
	}
	return nil
}

// SetPlannedPods sets the node's planned-pods annotation to the pods, sorted, with a merge patch
// of that annotation alone (an empty list removes it).
func (p *Provider) SetPlannedPods(ctx context.Context, name string, pods []string) error {
	var value any // null removes the annotation
	if pods = slices.Compact(slices.Sorted(slices.Values(pods))); len(pods) > 0 {
		value = strings.Join(pods, ",")
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{autoscaler.PlannedPodsAnnotation: value}}})
	if err != nil {
		return fmt.Errorf("recording the planned pods of node %s: %w", name, err)
	}
	_, err = p.o.Client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("recording the planned pods of node %s: the node does not exist (it was deleted, or the local provider did not launch it): %w", name, err)
	case err != nil:
		return fmt.Errorf("recording the planned pods of node %s in its annotation %s: %w", name, autoscaler.PlannedPodsAnnotation, err)
	}
	return nil
}

func instance(n *corev1.Node) autoscaler.Instance {
	ready := false
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			ready = true
		}
	}
	return autoscaler.Instance{
		Name: n.Name, ProviderID: n.Spec.ProviderID, Type: n.Labels[labels.InstanceType],
		Launching: !ready, Labels: maps.Clone(n.Labels), Annotations: maps.Clone(n.Annotations),
	}
}
