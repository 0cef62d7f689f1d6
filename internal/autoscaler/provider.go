package autoscaler

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"time"

	"github.com/kube-neuron/kube-neuron/internal/labels"

	corev1 "k8s.io/api/core/v1"
)

// Labels and annotations the autoscaler puts on the nodes it launches (on EC2 also as instance
// tags), so that a restarted autoscaler recognises them and knows what it planned onto them.
const (
	// LaunchedByLabel marks a node the autoscaler launched; only such nodes are scaled down.
	LaunchedByLabel = "kube-neuron.io/launched-by"
	LaunchedByValue = "neuron-autoscaler"
	// PlannedPodsAnnotation lists, comma-separated, the namespace/name of the pending pods the
	// node was launched for and of those later rounds planned onto it (Provider.SetPlannedPods);
	// they count on it while it is launching, so a restart launches nothing twice.
	PlannedPodsAnnotation = "kube-neuron.io/planned-pods"
	// RequestNameAnnotation, on an Instance whose Name is not the name it was requested under
	// (EC2: the node registers under the instance's private DNS name or id), is the
	// NodeRequest.Name it was launched for, so that a later plan does not request that name
	// again while the instance lives.
	RequestNameAnnotation = "kube-neuron.io/node-name"
	// LaunchingTaintKey is the startup taint of the nodes the autoscaler launches
	// (LaunchingTaint). The node registers with it (the local provider creates the Node with
	// it; on EC2 the launch template's kubelet flag --register-with-taints adds it), and the
	// controller removes it once the node serves Neuron hardware and every pending pod planned
	// onto it is nominated to it. Until then no pod can land there: without it, the first node
	// to come up takes pods planned onto nodes still booting, before they are even nominated,
	// and the scheduler clears each nomination whose node it cannot use yet.
	LaunchingTaintKey = labels.LaunchingTaintKey
	// PlannedNodeAnnotation, set on a pending pod with its nomination, names the launching node
	// planned for it (see labels.PlannedNodeAnnotation).
	PlannedNodeAnnotation = labels.PlannedNodeAnnotation
)

// LaunchingTaint is LaunchingTaintKey=true:NoSchedule. Only the Neuron DaemonSets (device
// plugin, DRA driver) tolerate it, so that the node can come to serve Neuron hardware while it
// holds pods off.
func LaunchingTaint() corev1.Taint {
	return corev1.Taint{Key: LaunchingTaintKey, Value: "true", Effect: corev1.TaintEffectNoSchedule}
}

// NodeRequest is a node to launch.
type NodeRequest struct {
	// Name is deterministic for a plan (NodeName), so that a launch retried after a restart or
	// an error finds the node it already launched instead of launching another.
	Name        string
	Type        string // EC2 instance type
	Mode        string // allocation mode: device-plugin or dra
	Labels      map[string]string
	Annotations map[string]string
	Taints      []corev1.Taint
	// Reservation is the id of the capacity reservation (Provider.Reservations) to launch
	// into; "" launches on demand.
	Reservation string
}

// Reservation is reserved capacity the user bought and named in the autoscaler's configuration:
// an On-Demand Capacity Reservation, or a Capacity Block for ML (an instance block, or on trn2u
// an UltraServer block). The autoscaler never buys capacity; it launches into these.
type Reservation struct {
	ID               string // cr-...
	InstanceType     string
	AvailabilityZone string
	// Total is the instances the reservation holds; Available those that may still launch
	// into it.
	Total, Available int
	// CapacityBlock: a Capacity Block for ML (launched with the capacity-block market type);
	// else an On-Demand Capacity Reservation.
	CapacityBlock bool
	// UltraServerType is set on an UltraServer Capacity Block (e.g. u-trn2x64): only whole
	// UltraServers launch into it.
	UltraServerType string
	// Start is when its instances may launch (zero: now); End when it ends (zero: never).
	// Instances of a Capacity Block are terminated by EC2 before End.
	Start, End time.Time
}

// Instance is a node a provider launched.
type Instance struct {
	// Name is the Kubernetes node name it registers (or will register) as: the pods planned
	// onto it are nominated to this name, and its Node is found by it. A provider may report a
	// new Name for the same ProviderID once it knows it (EC2, before the instance has its
	// private DNS name).
	Name       string
	ProviderID string // e.g. aws:///us-west-2a/i-0123456789abcdef0, or kube-neuron-local:///<name>
	Type       string
	// Launching is true until the node has registered with the cluster and is Ready.
	Launching   bool
	Labels      map[string]string
	Annotations map[string]string
}

// Provider launches and removes Neuron nodes. Implementations: local (Node objects in the lab)
// and ec2 (instances through the EC2 API).
type Provider interface {
	// Name is the provider's name: local or ec2.
	Name() string
	// Launch starts a node; launching a name that already exists returns the existing one.
	Launch(ctx context.Context, r NodeRequest) (Instance, error)
	// LaunchUltraServer starts the nodes of one UltraServer together (UltraServer capacity
	// comes as whole UltraServers), all of them or none: the requests carry the UltraServer's
	// identity in their labels (labels.UltraServerLabels). Names that exist return the existing
	// nodes, as Launch does.
	LaunchUltraServer(ctx context.Context, id string, nodes []NodeRequest) ([]Instance, error)
	// Reservations lists the reserved capacity the user configured, with what each has left,
	// active or not yet started; none when the user configured none.
	Reservations(ctx context.Context) ([]Reservation, error)
	// Instances lists the nodes this provider launched that are not terminated.
	Instances(ctx context.Context) ([]Instance, error)
	// Delete removes a node the provider launched; deleting one that is gone is not an error.
	Delete(ctx context.Context, name string) error
	// SetPlannedPods records the pods planned onto a launching node (name as Instances names
	// it): the list, sorted, replaces the node's PlannedPodsAnnotation, which Instances reports
	// from then on, so that a restarted autoscaler counts the pods that later rounds added to the
	// node. Recording the same list again is not an error.
	SetPlannedPods(ctx context.Context, name string, pods []string) error
}

// UltraServerNodeName is the name of node k of the UltraServer with this id:
// neuron-<type>-us-<id>-<k>, the same for the same UltraServer.
func UltraServerNodeName(instanceType, id string, k int) string {
	return "neuron-" + strings.NewReplacer(".", "-").Replace(instanceType) + "-us-" + id + "-" + strconv.Itoa(k)
}

// NodeName is the name of the node launched for a set of planned pods: neuron-<type>-<hash of
// the pods>, a valid DNS label, the same for the same pods.
func NodeName(instanceType string, pods []string) string {
	h := sha256.Sum256([]byte(instanceType + "\n" + strings.Join(pods, "\n")))
	t := strings.NewReplacer(".", "-").Replace(instanceType)
	return "neuron-" + t + "-" + hex.EncodeToString(h[:5])
}
