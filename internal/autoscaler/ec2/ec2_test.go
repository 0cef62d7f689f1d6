package ec2_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awsec2 "github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/kube-neuron/kube-neuron/internal/autoscaler"
	"github.com/kube-neuron/kube-neuron/internal/autoscaler/ec2"
	"github.com/kube-neuron/kube-neuron/internal/autoscaler/ec2/fakeec2"
	"github.com/kube-neuron/kube-neuron/internal/labels"
)

const (
	region   = "us-west-2"
	ltID     = "lt-0123456789abcdef0"
	ltName   = "neuron-nodes"
	cluster  = "lab"
	trn1     = "trn1.32xlarge"
	neuronTK = "aws.amazon.com/neuron"
)

var static = credentials.NewStaticCredentialsProvider("AKIDFAKEEC2", "fake-secret", "")

// env is a provider built by New (the production client: default config, static credentials,
// endpoint overridden) talking to a fake EC2 with subnets in two zones and one launch template.
type env struct {
	fake *fakeec2.Server
	p    *ec2.Provider
	ctx  context.Context
}

func setup(t *testing.T, edit ...func(*ec2.Options)) env {
	t.Helper()
	fake := fakeec2.NewServer()
	t.Cleanup(fake.Close)
	fake.AddSubnet("subnet-a", "us-west-2a")
	fake.AddSubnet("subnet-b", "us-west-2b")
	fake.AddLaunchTemplate(fakeec2.LaunchTemplate{ID: ltID, Name: ltName, Versions: 3})
	o := ec2.Options{
		Region:         region,
		Endpoint:       fake.URL(),
		LaunchTemplate: ltID,
		Subnets:        []string{"subnet-a", "subnet-b"},
		ClusterName:    cluster,
		Credentials:    static,
	}
	for _, e := range edit {
		e(&o)
	}
	_, ctx := ktesting.NewTestContext(t)
	p, err := ec2.New(ctx, o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return env{fake: fake, p: p, ctx: ctx}
}

// rawClient is the SDK's EC2 client on the fake, for instances the provider did not launch.
func (e env) rawClient() *awsec2.Client {
	return awsec2.New(awsec2.Options{Region: region, BaseEndpoint: aws.String(e.fake.URL()), Credentials: static})
}

// req builds a NodeRequest the way the controller does.
type req struct{ r autoscaler.NodeRequest }

func request(instanceType string, pods ...string) *req {
	return &req{r: autoscaler.NodeRequest{
		Name: autoscaler.NodeName(instanceType, pods),
		Type: instanceType,
		Mode: labels.AllocationModeDevicePlugin,
		Labels: map[string]string{
			labels.InstanceType:        instanceType,
			labels.InstanceFamily:      strings.Split(instanceType, ".")[0],
			"kubernetes.io/arch":       "amd64",
			"kubernetes.io/os":         "linux",
			labels.AllocationMode:      labels.AllocationModeDevicePlugin,
			autoscaler.LaunchedByLabel: autoscaler.LaunchedByValue,
		},
		Annotations: map[string]string{autoscaler.PlannedPodsAnnotation: strings.Join(pods, ",")},
		Taints:      []corev1.Taint{{Key: neuronTK, Value: "true", Effect: corev1.TaintEffectNoSchedule}},
	}}
}

func (b *req) mode(m string) *req          { b.r.Mode = m; b.r.Labels[labels.AllocationMode] = m; return b }
func (b *req) obj() autoscaler.NodeRequest { return b.r }

func (e env) launch(t *testing.T, r autoscaler.NodeRequest) autoscaler.Instance {
	t.Helper()
	in, err := e.p.Launch(e.ctx, r)
	if err != nil {
		t.Fatalf("Launch(%s): %v", r.Name, err)
	}
	return in
}

func (e env) instances(t *testing.T) []autoscaler.Instance {
	t.Helper()
	ins, err := e.p.Instances(e.ctx)
	if err != nil {
		t.Fatalf("Instances: %v", err)
	}
	return ins
}

func (e env) fakeInstance(t *testing.T, providerID string) fakeec2.Instance {
	t.Helper()
	for _, in := range e.fake.Instances() {
		if strings.HasSuffix(providerID, "/"+in.ID) {
			return in
		}
	}
	t.Fatalf("no fake instance for %s", providerID)
	return fakeec2.Instance{}
}

func providerIDs(ins []autoscaler.Instance) []string {
	var ids []string
	for _, in := range ins {
		ids = append(ids, in.ProviderID)
	}
	slices.Sort(ids)
	return ids
}

func TestLaunchTagsTheInstance(t *testing.T) {
	e := setup(t)
	r := request(trn1, "team-a/train-0", "team-a/train-1").obj()
	got := e.launch(t, r)

	all := e.fake.Instances()
	if len(all) != 1 {
		t.Fatalf("fake has %d instances, want 1", len(all))
	}
	fi := all[0]
	if fi.Type != trn1 || fi.SubnetID != "subnet-a" || fi.ClientToken != r.Name || fi.LaunchTemplateID != ltID || fi.LaunchTemplateVersion != "$Latest" {
		t.Errorf("launched %+v, want a %s in subnet-a from %s $Latest with client token %s", fi, trn1, ltID, r.Name)
	}
	wantTags := map[string]string{
		"Name":                                                   r.Name,
		"kube-neuron.io/node-name":                               r.Name,
		"kube-neuron.io/launched-by":                             "neuron-autoscaler",
		"kubernetes.io/cluster/lab":                              "owned",
		"kube-neuron.io/allocation-mode":                         "device-plugin",
		"kube-neuron.io/planned-pods":                            "team-a/train-0,team-a/train-1",
		ec2.NodeTemplateLabelPrefix + labels.InstanceType:        trn1,
		ec2.NodeTemplateLabelPrefix + labels.InstanceFamily:      "trn1",
		ec2.NodeTemplateLabelPrefix + "kubernetes.io/arch":       "amd64",
		ec2.NodeTemplateLabelPrefix + "kubernetes.io/os":         "linux",
		ec2.NodeTemplateLabelPrefix + labels.AllocationMode:      "device-plugin",
		ec2.NodeTemplateLabelPrefix + autoscaler.LaunchedByLabel: "neuron-autoscaler",
		ec2.NodeTemplateTaintPrefix + neuronTK:                   "true:NoSchedule",
		// An on-demand launch says so, in a tag and a node-template label tag.
		labels.CapacityType: labels.CapacityTypeOnDemand,
		ec2.NodeTemplateLabelPrefix + labels.CapacityType: labels.CapacityTypeOnDemand,
	}
	if !maps.Equal(fi.Tags, wantTags) {
		t.Errorf("instance tags\n got %v\nwant %v", fi.Tags, wantTags)
	}
	wantVolume := map[string]string{
		"Name":                       r.Name,
		"kube-neuron.io/node-name":   r.Name,
		"kube-neuron.io/launched-by": "neuron-autoscaler",
		"kubernetes.io/cluster/lab":  "owned",
	}
	if !maps.Equal(fi.VolumeTags, wantVolume) {
		t.Errorf("volume tags\n got %v\nwant %v", fi.VolumeTags, wantVolume)
	}

	if got.Name != fi.PrivateDNSName || !strings.HasSuffix(got.Name, ".us-west-2.compute.internal") || !strings.HasPrefix(got.Name, "ip-10-0-") {
		t.Errorf("Name = %q, want the private DNS name %q", got.Name, fi.PrivateDNSName)
	}
	if want := "aws:///us-west-2a/" + fi.ID; got.ProviderID != want {
		t.Errorf("ProviderID = %q, want %q", got.ProviderID, want)
	}
	if got.Type != trn1 || !got.Launching {
		t.Errorf("Type %q Launching %v, want %s and launching", got.Type, got.Launching, trn1)
	}
	wantLabels := maps.Clone(r.Labels)
	wantLabels[labels.CapacityType] = labels.CapacityTypeOnDemand
	if !maps.Equal(got.Labels, wantLabels) {
		t.Errorf("Labels\n got %v\nwant %v", got.Labels, wantLabels)
	}
	wantAnn := map[string]string{autoscaler.PlannedPodsAnnotation: "team-a/train-0,team-a/train-1", ec2.NodeNameTag: r.Name}
	if !maps.Equal(got.Annotations, wantAnn) {
		t.Errorf("Annotations = %v, want %v", got.Annotations, wantAnn)
	}

	// Once EC2 reports it running, it is no longer launching (whether the node registered is
	// the controller's business).
	e.instances(t) // the fake's first DescribeInstances still shows it pending
	ins := e.instances(t)
	if len(ins) != 1 || ins[0].Launching || ins[0].ProviderID != got.ProviderID || ins[0].Name != got.Name {
		t.Errorf("Instances = %+v, want the running instance %s", ins, got.ProviderID)
	}
}

func TestLaunchByTemplateNameAndVersion(t *testing.T) {
	e := setup(t, func(o *ec2.Options) { o.LaunchTemplate, o.LaunchTemplateVersion, o.ClusterName = ltName, "2", "" })
	r := request("inf2.48xlarge", "default/infer").mode(labels.AllocationModeDRA).obj()
	got := e.launch(t, r)
	fi := e.fakeInstance(t, got.ProviderID)
	if fi.LaunchTemplateID != ltID || fi.LaunchTemplateVersion != "2" {
		t.Errorf("launch template %s version %s, want %s version 2", fi.LaunchTemplateID, fi.LaunchTemplateVersion, ltID)
	}
	if _, ok := fi.Tags["kubernetes.io/cluster/"]; ok || fi.Tags[labels.AllocationMode] != "dra" {
		t.Errorf("tags %v: want no cluster tag without a cluster name, allocation mode dra", fi.Tags)
	}
}

func TestLaunchIsIdempotent(t *testing.T) {
	r := request(trn1, "team-a/train-0").obj()
	for _, tc := range []struct {
		name string
		// lag hides new instances from DescribeInstances, as EC2's eventual consistency may
		// right after RunInstances: only the client token then prevents a second instance.
		lag      bool
		wantRuns int
	}{
		{name: "found by its node-name tag", wantRuns: 1},
		{name: "client token while DescribeInstances lags", lag: true, wantRuns: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := setup(t)
			e.fake.SetEventualConsistency(tc.lag)
			first := e.launch(t, r)
			again := e.launch(t, r) // a retry, or a restarted autoscaler launching its plan again
			if again.ProviderID != first.ProviderID || again.Name != first.Name {
				t.Errorf("second Launch returned %s (%s), want the first one %s (%s)", again.ProviderID, again.Name, first.ProviderID, first.Name)
			}
			if n := len(e.fake.Instances()); n != 1 {
				t.Errorf("fake has %d instances, want 1", n)
			}
			if n := e.fake.Calls("RunInstances"); n != tc.wantRuns {
				t.Errorf("RunInstances calls = %d, want %d", n, tc.wantRuns)
			}
		})
	}
}

func TestLaunchIsIdempotentAcrossSubnets(t *testing.T) {
	// The first launch found no capacity in subnet-a and launched into subnet-b. A restarted
	// autoscaler that does not see it yet tries subnet-a first again, which has capacity now:
	// EC2 refuses the token there (other parameters), and subnet-b returns the instance.
	e := setup(t)
	e.fake.SetEventualConsistency(true)
	e.fake.FailCapacity("subnet-a")
	r := request(trn1, "team-a/train-0").obj()
	first := e.launch(t, r)
	e.fake.RestoreCapacity("subnet-a")
	again := e.launch(t, r)
	if again.ProviderID != first.ProviderID || !strings.HasPrefix(first.ProviderID, "aws:///us-west-2b/") {
		t.Errorf("launches returned %s then %s, want one instance in us-west-2b", first.ProviderID, again.ProviderID)
	}
	if n := len(e.fake.Instances()); n != 1 {
		t.Errorf("fake has %d instances, want 1", n)
	}
}

func TestLaunchAfterAnEarlierNodeOfTheSameNameTerminated(t *testing.T) {
	// The same pods planned again (their node failed and was deleted): EC2 still answers the
	// client token with the terminated instance, so Launch moves on to a token derived from it.
	e := setup(t)
	e.fake.FailCapacity("subnet-a") // the first node lands in subnet-b
	r := request(trn1, "team-a/train-0").obj()
	old := e.launch(t, r)
	if err := e.p.Delete(e.ctx, r.Name); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	e.instances(t) // shutting-down -> terminated
	e.instances(t)
	e.fake.RestoreCapacity("subnet-a")

	fresh := e.launch(t, r)
	oldFake := e.fakeInstance(t, old.ProviderID)
	freshFake := e.fakeInstance(t, fresh.ProviderID)
	if oldFake.State != fakeec2.StateTerminated || freshFake.ID == oldFake.ID {
		t.Fatalf("old %s is %s, fresh %s: want a new instance after the terminated one", oldFake.ID, oldFake.State, freshFake.ID)
	}
	if want := r.Name + "-" + oldFake.ID; freshFake.ClientToken != want {
		t.Errorf("fresh client token %q, want %q", freshFake.ClientToken, want)
	}
	// A restart that does not see the fresh instance yet walks the same chain.
	e.fake.SetEventualConsistency(true)
	again := e.launch(t, r)
	if again.ProviderID != fresh.ProviderID {
		t.Errorf("relaunch returned %s, want %s", again.ProviderID, fresh.ProviderID)
	}
	if n := len(e.fake.Instances()); n != 2 {
		t.Errorf("fake has %d instances, want 2 (the terminated and the fresh one)", n)
	}
}

func TestCapacityMovesToTheNextSubnet(t *testing.T) {
	e := setup(t)
	e.fake.FailCapacity("subnet-a")
	got := e.launch(t, request(trn1, "team-a/train-0").obj())
	if fi := e.fakeInstance(t, got.ProviderID); fi.SubnetID != "subnet-b" || !strings.HasPrefix(got.ProviderID, "aws:///us-west-2b/") {
		t.Errorf("launched into %s (%s), want subnet-b in us-west-2b", fi.SubnetID, got.ProviderID)
	}
	// EC2 answers InsufficientInstanceCapacity with HTTP 500, which the SDK retries by default;
	// New's client moves on instead.
	if n := e.fake.Calls("RunInstances"); n != 2 {
		t.Errorf("RunInstances calls = %d, want 2 (one per subnet, no retry in subnet-a)", n)
	}
}

func TestNoSubnetHasCapacity(t *testing.T) {
	e := setup(t)
	e.fake.FailCapacity("subnet-a")
	e.fake.SetUnsupported("us-west-2b", trn1)
	_, err := e.p.Launch(e.ctx, request(trn1, "team-a/train-0").obj())
	var ce *ec2.CapacityError
	if !errors.As(err, &ce) {
		t.Fatalf("Launch error %v, want a *CapacityError", err)
	}
	if ce.InstanceType != trn1 || len(ce.Failures) != 2 || ce.Failures[0].Code != "InsufficientInstanceCapacity" || ce.Failures[1].Code != "Unsupported" {
		t.Errorf("CapacityError %+v", ce)
	}
	for _, want := range []string{
		"no subnet could launch a trn1.32xlarge (tried subnet-a, subnet-b)",
		"subnet-a: InsufficientInstanceCapacity: We currently do not have sufficient trn1.32xlarge capacity in the Availability Zone you requested (us-west-2a)",
		"subnet-b: Unsupported: Your requested instance type (trn1.32xlarge) is not supported in your requested Availability Zone (us-west-2b)",
		"Add subnets in other Availability Zones",
		"Capacity Block",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q\nlacks %q", err, want)
		}
	}
	if n := len(e.fake.Instances()); n != 0 {
		t.Errorf("fake has %d instances, want none", n)
	}
}

func TestLaunchConfigurationErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*ec2.Options)
		want []string
	}{
		{"unknown template", func(o *ec2.Options) { o.LaunchTemplate = "nope" }, []string{"launch template nope (version $Latest)", "InvalidLaunchTemplateName.NotFoundException", "Set the autoscaler's launch template"}},
		{"unknown template id", func(o *ec2.Options) { o.LaunchTemplate = "lt-0000000000000dead" }, []string{"InvalidLaunchTemplateId.NotFound"}},
		{"unknown subnet", func(o *ec2.Options) { o.Subnets = []string{"subnet-gone", "subnet-a"} }, []string{"subnet subnet-gone: InvalidSubnetID.NotFound", "subnets of the cluster's VPC"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := setup(t, tc.edit)
			_, err := e.p.Launch(e.ctx, request(trn1, "team-a/train-0").obj())
			if err == nil {
				t.Fatal("Launch succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nlacks %q", err, w)
				}
			}
		})
	}
}

func TestInstancesListsOnlyOurs(t *testing.T) {
	e := setup(t)
	a := e.launch(t, request(trn1, "team-a/train-0").obj())
	b := e.launch(t, request("trn2.48xlarge", "team-b/train-0").obj())

	// Not ours: an untagged instance, and one of another cluster's autoscaler.
	raw := e.rawClient()
	for _, tags := range [][]types.Tag{
		nil,
		{{Key: aws.String(autoscaler.LaunchedByLabel), Value: aws.String(autoscaler.LaunchedByValue)}, {Key: aws.String("kubernetes.io/cluster/other"), Value: aws.String("owned")}},
	} {
		in := &awsec2.RunInstancesInput{MinCount: aws.Int32(1), MaxCount: aws.Int32(1), ImageId: aws.String("ami-0abc"), InstanceType: "m5.large", SubnetId: aws.String("subnet-a")}
		if tags != nil {
			in.TagSpecifications = []types.TagSpecification{{ResourceType: types.ResourceTypeInstance, Tags: tags}}
		}
		if _, err := raw.RunInstances(e.ctx, in); err != nil {
			t.Fatalf("RunInstances: %v", err)
		}
	}
	got := providerIDs(e.instances(t))
	want := providerIDs([]autoscaler.Instance{a, b})
	if !slices.Equal(got, want) {
		t.Errorf("Instances = %v, want %v", got, want)
	}
}

func TestDelete(t *testing.T) {
	e := setup(t)
	ra, rb := request(trn1, "team-a/train-0").obj(), request(trn1, "team-b/train-0").obj()
	a, b := e.launch(t, ra), e.launch(t, rb)

	// By the request's name.
	if err := e.p.Delete(e.ctx, ra.Name); err != nil {
		t.Fatalf("Delete(%s): %v", ra.Name, err)
	}
	if st := e.fakeInstance(t, a.ProviderID).State; st != fakeec2.StateShuttingDown {
		t.Errorf("deleted instance is %s, want shutting-down", st)
	}
	if got := providerIDs(e.instances(t)); !slices.Equal(got, []string{b.ProviderID}) {
		t.Errorf("Instances after Delete = %v, want only %s", got, b.ProviderID)
	}
	// By the Kubernetes node name (the private DNS name).
	if err := e.p.Delete(e.ctx, b.Name); err != nil {
		t.Fatalf("Delete(%s): %v", b.Name, err)
	}
	if got := e.instances(t); len(got) != 0 {
		t.Errorf("Instances after deleting both = %+v", got)
	}
	// Gone already, never ours, or unknown: not an error, and nothing foreign is terminated.
	out, err := e.rawClient().RunInstances(e.ctx, &awsec2.RunInstancesInput{MinCount: aws.Int32(1), MaxCount: aws.Int32(1), ImageId: aws.String("ami-0abc"), SubnetId: aws.String("subnet-b")})
	if err != nil {
		t.Fatalf("RunInstances: %v", err)
	}
	foreign := out.Instances[0]
	for _, name := range []string{ra.Name, b.Name, "neuron-unknown", aws.ToString(foreign.PrivateDnsName), "ip-10-0-*"} {
		if err := e.p.Delete(e.ctx, name); err != nil {
			t.Errorf("Delete(%s): %v", name, err)
		}
	}
	for _, in := range e.fake.Instances() {
		if in.ID == aws.ToString(foreign.InstanceId) && in.State != fakeec2.StatePending && in.State != fakeec2.StateRunning {
			t.Errorf("the foreign instance is %s", in.State)
		}
	}
	if n := e.fake.Calls("TerminateInstances"); n != 2 {
		t.Errorf("TerminateInstances calls = %d, want 2", n)
	}
}

func TestInstancesPaginates(t *testing.T) {
	e := setup(t)
	ec2.SetPageSize(e.p, 5)
	var want []autoscaler.Instance
	for i := range 12 {
		want = append(want, e.launch(t, request(trn1, fmt.Sprintf("team-a/train-%d", i)).obj()))
	}
	before := e.fake.Calls("DescribeInstances")
	if got := providerIDs(e.instances(t)); !slices.Equal(got, providerIDs(want)) {
		t.Errorf("Instances = %v\nwant %v", got, providerIDs(want))
	}
	if n := e.fake.Calls("DescribeInstances") - before; n != 3 {
		t.Errorf("Instances made %d DescribeInstances calls, want 3 pages of 5", n)
	}
}

func TestUnauthorizedNamesTheIAMAction(t *testing.T) {
	for _, tc := range []struct {
		action string
		call   func(env) error
		want   string
	}{
		{"RunInstances", func(e env) error { _, err := e.p.Launch(e.ctx, request(trn1, "a/b").obj()); return err },
			"needs ec2:RunInstances, ec2:CreateTags with the condition ec2:CreateAction=RunInstances (the launch tags), and iam:PassRole"},
		{"DescribeInstances", func(e env) error { _, err := e.p.Instances(e.ctx); return err }, "needs ec2:DescribeInstances"},
		{"TerminateInstances", func(e env) error {
			r := request(trn1, "a/b").obj()
			if _, err := e.p.Launch(e.ctx, r); err != nil {
				return err
			}
			return e.p.Delete(e.ctx, r.Name)
		}, "needs ec2:TerminateInstances on instances tagged kube-neuron.io/launched-by=neuron-autoscaler"},
		{"CreateTags", func(e env) error {
			r := request(trn1, "a/b").obj()
			if _, err := e.p.Launch(e.ctx, r); err != nil {
				return err
			}
			return e.p.SetPlannedPods(e.ctx, r.Name, []string{"a/b", "a/c"})
		}, "needs ec2:CreateTags and ec2:DeleteTags on instances tagged kube-neuron.io/launched-by=neuron-autoscaler for the tag keys kube-neuron.io/planned-pods*"},
		{"DeleteTags", func(e env) error {
			var pods []string
			for i := range 10 {
				pods = append(pods, fmt.Sprintf("research-team/llama-finetune-worker-%03d", i))
			}
			r := request(trn1, pods...).obj() // two planned-pods tags, one after SetPlannedPods
			if _, err := e.p.Launch(e.ctx, r); err != nil {
				return err
			}
			return e.p.SetPlannedPods(e.ctx, r.Name, []string{"a/b"})
		}, "needs ec2:CreateTags and ec2:DeleteTags on instances tagged kube-neuron.io/launched-by=neuron-autoscaler"},
	} {
		t.Run(tc.action, func(t *testing.T) {
			e := setup(t)
			e.fake.Deny(tc.action)
			err := tc.call(e)
			var pe *ec2.PermissionError
			if !errors.As(err, &pe) || pe.Operation != tc.action {
				t.Fatalf("error %v, want a *PermissionError for %s", err, tc.action)
			}
			for _, w := range []string{tc.action + " was denied (UnauthorizedOperation)", tc.want, "docs/autoscaler.md", "is not authorized to perform: ec2:" + tc.action, "aws sts decode-authorization-message"} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nlacks %q", err, w)
				}
			}
		})
	}
}

func TestPlannedPodsSpanTags(t *testing.T) {
	pods := func(n int) []string {
		var ps []string
		for i := range n {
			ps = append(ps, fmt.Sprintf("research-team/llama-finetune-worker-%03d", i))
		}
		return ps
	}
	for _, tc := range []struct {
		name     string
		pods     int
		wantTags int
		complete bool
	}{
		{"fits one tag", 3, 1, true},
		{"spans tags", 20, 4, true},
		{"cut after the last whole pod", 100, 8, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := setup(t)
			ps := pods(tc.pods)
			r := request(trn1, ps...).obj()
			e.launch(t, r)
			fi := e.fake.Instances()[0]
			n := 0
			for k, v := range fi.Tags {
				if strings.HasPrefix(k, autoscaler.PlannedPodsAnnotation) {
					n++
					if len(v) > 256 {
						t.Errorf("tag %s has %d characters", k, len(v))
					}
				}
			}
			if n != tc.wantTags {
				t.Errorf("%d planned-pods tags, want %d", n, tc.wantTags)
			}
			ins := e.instances(t)
			got := ins[0].Annotations[autoscaler.PlannedPodsAnnotation]
			full := strings.Join(ps, ",")
			switch {
			case tc.complete && got != full:
				t.Errorf("planned pods = %q, want %q", got, full)
			case !tc.complete && (len(got) > 2048 || !strings.HasPrefix(full, got+",") || len(got) < 2048-len(ps[0])):
				t.Errorf("planned pods (%d characters) is not the longest prefix of whole pods within 2048", len(got))
			}
		})
	}
}

func TestValidation(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	if _, err := ec2.New(ctx, ec2.Options{Region: region, Credentials: static}); err == nil ||
		!strings.Contains(err.Error(), "a launch template (its id lt-... or its name) is required; at least one subnet is required") {
		t.Errorf("New without template and subnets: %v", err)
	}
	e := setup(t)
	long := request(trn1, "a/b").obj()
	long.Name = strings.Repeat("n", 65)
	if _, err := e.p.Launch(e.ctx, long); err == nil || !strings.Contains(err.Error(), "longer than 64 characters") {
		t.Errorf("Launch with a 65-character name: %v", err)
	}
	if e.fake.Calls("RunInstances")+e.fake.Calls("DescribeInstances") != 0 {
		t.Error("an invalid request reached EC2")
	}
	if e.p.Name() != "ec2" {
		t.Errorf("Name() = %q", e.p.Name())
	}
}

func TestSetPlannedPods(t *testing.T) {
	e := setup(t)
	pods := func(from, to int) []string {
		var ps []string
		for i := from; i < to; i++ {
			ps = append(ps, fmt.Sprintf("research-team/llama-finetune-worker-%03d", i))
		}
		return ps
	}
	r := request(trn1, pods(0, 2)...).obj()
	launched := e.launch(t, r)
	other := e.launch(t, request(trn1, "team-b/train-0").obj())
	plannedTags := func(id string) map[string]string {
		t.Helper()
		out := map[string]string{}
		for k, v := range e.fakeInstance(t, id).Tags {
			if strings.HasPrefix(k, autoscaler.PlannedPodsAnnotation) {
				out[k] = v
			}
		}
		return out
	}
	readBack := func() string {
		t.Helper()
		for _, in := range e.instances(t) {
			if in.ProviderID == launched.ProviderID {
				return in.Annotations[autoscaler.PlannedPodsAnnotation]
			}
		}
		t.Fatalf("Instances does not list %s", launched.ProviderID)
		return ""
	}

	for _, tc := range []struct {
		name     string
		node     string // the request's name or the Kubernetes node name (private DNS name)
		pods     []string
		wantTags int
	}{
		// Later rounds add pods: the list spans tags, as at launch.
		{"by request name, spanning tags", r.Name, append(pods(10, 20), pods(0, 10)...), 4},
		{"by node name, the same list again", launched.Name, pods(0, 20), 4},
		// A shorter list leaves no stale planned-pods-N tags behind.
		{"shorter", launched.Name, pods(0, 7), 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := e.p.SetPlannedPods(e.ctx, tc.node, tc.pods); err != nil {
				t.Fatalf("SetPlannedPods: %v", err)
			}
			want := slices.Sorted(slices.Values(tc.pods))
			got := plannedTags(launched.ProviderID)
			if len(got) != tc.wantTags {
				t.Errorf("planned-pods tags %v, want %d", slices.Sorted(maps.Keys(got)), tc.wantTags)
			}
			for k, v := range got {
				if len(v) > 256 {
					t.Errorf("tag %s has %d characters", k, len(v))
				}
			}
			if got := readBack(); got != strings.Join(want, ",") {
				t.Errorf("Instances reads back %q, want %q", got, strings.Join(want, ","))
			}
		})
	}
	if got := plannedTags(other.ProviderID); !maps.Equal(got, map[string]string{autoscaler.PlannedPodsAnnotation: "team-b/train-0"}) {
		t.Errorf("the other instance's planned pods changed: %v", got)
	}
	if tags := e.fakeInstance(t, launched.ProviderID).Tags; tags[ec2.NameTag] != r.Name || tags[autoscaler.LaunchedByLabel] != autoscaler.LaunchedByValue {
		t.Errorf("tags %v: the launch tags must stay", tags)
	}
	if n := e.fake.Calls("CreateTags"); n != 3 {
		t.Errorf("CreateTags calls = %d, want 3", n)
	}
	if n := e.fake.Calls("DeleteTags"); n != 1 {
		t.Errorf("DeleteTags calls = %d, want 1 (the stale tags of the shorter list)", n)
	}

	// A node without an instance, and a terminated one.
	if err := e.p.SetPlannedPods(e.ctx, "neuron-unknown", []string{"a/b"}); err == nil || !strings.Contains(err.Error(), "ec2: no instance of node neuron-unknown") {
		t.Errorf("SetPlannedPods of an unknown node: %v", err)
	}
	if err := e.p.Delete(e.ctx, other.Name); err != nil {
		t.Fatal(err)
	}
	e.instances(t) // shutting-down -> terminated
	if err := e.p.SetPlannedPods(e.ctx, other.Name, []string{"a/b"}); err == nil {
		t.Error("SetPlannedPods of a terminated node succeeded")
	}
}
