package ec2_test

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/kube-neuron/kube-neuron/internal/autoscaler"
	"github.com/kube-neuron/kube-neuron/internal/autoscaler/ec2"
	"github.com/kube-neuron/kube-neuron/internal/testkit"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// TestNodeNameSources: Instance.Name, the name the controller nominates pods to and finds the
// Node by, is the name the node registers under. By default that is the private DNS name, IP
// based or, in a subnet with resource-name hostnames, instance-id based; with the instance-id
// source, the instance id. Launch again (a restart), Instances, Delete and SetPlannedPods all
// know the instance by that name.
func TestNodeNameSources(t *testing.T) {
	for _, tc := range []struct {
		name, source  string
		resourceNames bool
		want          string // a pattern; %s is the instance id
	}{
		{"private DNS name, IP based", "", false, `^ip-10-0-\d+-\d+\.us-west-2\.compute\.internal$`},
		{"private DNS name, given explicitly", ec2.NodeNamePrivateDNSName, false, `^ip-10-0-\d+-\d+\.us-west-2\.compute\.internal$`},
		{"private DNS name, resource-name hostnames", "", true, `^%s\.us-west-2\.compute\.internal$`},
		{"instance id", ec2.NodeNameInstanceID, false, `^%s$`},
		{"instance id, resource-name hostnames", ec2.NodeNameInstanceID, true, `^%s$`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := setup(t, func(o *ec2.Options) { o.NodeNameSource = tc.source })
			if tc.resourceNames {
				e.fake.SetResourceNameHostnames("subnet-a")
			}
			r := request(trn1, "team-a/train-0").obj()
			got := e.launch(t, r)
			fi := e.fakeInstance(t, got.ProviderID)
			want := strings.ReplaceAll(tc.want, "%s", regexp.QuoteMeta(fi.ID))
			if !regexp.MustCompile(want).MatchString(got.Name) {
				t.Fatalf("Name = %q, want %s (private DNS name %s)", got.Name, want, fi.PrivateDNSName)
			}
			if got.Annotations[autoscaler.RequestNameAnnotation] != r.Name {
				t.Errorf("annotations %v lack the request name %s", got.Annotations, r.Name)
			}
			if again := e.launch(t, r); again.Name != got.Name || again.ProviderID != got.ProviderID {
				t.Errorf("Launch again returned %s (%s), want %s (%s)", again.Name, again.ProviderID, got.Name, got.ProviderID)
			}
			if ins := e.instances(t); len(ins) != 1 || ins[0].Name != got.Name {
				t.Errorf("Instances = %+v, want one named %s", ins, got.Name)
			}
			if err := e.p.SetPlannedPods(e.ctx, got.Name, []string{"team-a/train-0", "team-a/train-1"}); err != nil {
				t.Errorf("SetPlannedPods(%s): %v", got.Name, err)
			}
			if err := e.p.Delete(e.ctx, got.Name); err != nil {
				t.Fatalf("Delete(%s): %v", got.Name, err)
			}
			if fi := e.fakeInstance(t, got.ProviderID); fi.State != "shutting-down" {
				t.Errorf("after Delete(%s) the instance is %s, want shutting-down", got.Name, fi.State)
			}
		})
	}
}

func TestNodeNameSourceValidation(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	_, err := ec2.New(ctx, ec2.Options{Region: region, Credentials: static, LaunchTemplate: ltID, Subnets: []string{"subnet-a"}, NodeNameSource: "hostname"})
	if err == nil || !strings.Contains(err.Error(), `the node name source "hostname" is neither private-dns-name`) || !strings.Contains(err.Error(), "instance-id") {
		t.Errorf("New with node name source hostname: %v", err)
	}
}

// TestControllerNominatesToThePrivateDNSName runs the controller with this provider against the
// fake EC2 in us-east-1: the pending pod is nominated to the node name the instance will
// register under, ip-10-0-x-y.ec2.internal, not to the planned name (the instance's Name tag).
func TestControllerNominatesToThePrivateDNSName(t *testing.T) {
	e := setup(t, func(o *ec2.Options) { o.Region = "us-east-1" })
	e.fake.AddSubnet("subnet-a", "us-east-1a")
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "neuron-device-plugin"}}
	pod := testkit.MakePod().Name("train").TolerateNeuron().DefaultedContainer("c", topology.ResourceNeuron, 1).Pending().Obj()
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable}}
	client := fake.NewClientset(ds, pod)
	// run runs a controller until stop is called; rounds receives once per round the
	// controller starts.
	run := func() (rounds <-chan struct{}, stop func()) {
		p := &roundCounter{Provider: e.p, rounds: make(chan struct{}, 1000)}
		c, err := autoscaler.NewController(autoscaler.ControllerOptions{Client: client, Provider: p, BatchWindow: 10 * time.Millisecond, ResyncInterval: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(e.ctx)
		done := make(chan error)
		go func() { done <- c.Run(ctx) }()
		return p.rounds, func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		}
	}
	_, stop := run()
	var nominated string
	err := wait.PollUntilContextTimeout(e.ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods("default").Get(ctx, "train", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		nominated = p.Status.NominatedNodeName
		return nominated != "", nil
	})
	stop()
	if err != nil {
		t.Fatalf("waiting for the pod's nomination: %v", err)
	}
	all := e.fake.Instances()
	if len(all) != 1 {
		t.Fatalf("fake has %d instances, want 1 (nominated %q)", len(all), nominated)
	}
	if nominated != all[0].PrivateDNSName || !regexp.MustCompile(`^ip-10-0-\d+-\d+\.ec2\.internal$`).MatchString(nominated) {
		t.Errorf("pod nominated to %q, want the instance's private DNS name %s (its Name tag is %s)", nominated, all[0].PrivateDNSName, all[0].Tags[ec2.NameTag])
	}

	// A restarted controller finds the pod planned onto the instance (its tags) under that
	// name: it launches nothing, and the nomination stays.
	// Three rounds started: the first two ran to their end, where a launch would have been.
	rounds, stop := run()
	for i := range 3 {
		select {
		case <-rounds:
		case <-time.After(10 * time.Second):
			t.Fatalf("the restarted controller started %d rounds in 10s, want 3", i)
		}
	}
	stop()
	if n := len(e.fake.Instances()); n != 1 {
		t.Errorf("after a restart the fake has %d instances, want 1", n)
	}
	p, err := client.CoreV1().Pods("default").Get(e.ctx, "train", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Status.NominatedNodeName != nominated {
		t.Errorf("after a restart the pod is nominated to %q, want %s", p.Status.NominatedNodeName, nominated)
	}
}

// roundCounter is the provider as the controller sees it, telling rounds when one starts: a
// round lists the provider's instances before it plans, launches or removes anything.
type roundCounter struct {
	autoscaler.Provider
	rounds chan struct{}
}

func (r *roundCounter) Instances(ctx context.Context) ([]autoscaler.Instance, error) {
	select {
	case r.rounds <- struct{}{}:
	default:
	}
	return r.Provider.Instances(ctx)
}
