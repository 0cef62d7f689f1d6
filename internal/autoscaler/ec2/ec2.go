package ec2

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	awsec2 "github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"k8s.io/klog/v2"

	"github.com/kube-neuron/kube-neuron/internal/autoscaler"
)

// ProviderName is the provider's name (the autoscaler's --provider value).
const ProviderName = "ec2"

// Options configures the provider.
type Options struct {
	// Region is the AWS region; "" takes it from AWS_REGION or the shared config.
	Region string
	// Endpoint overrides the EC2 endpoint (a VPC endpoint, or fakeec2 in tests); "" = AWS's.
	Endpoint string
	// LaunchTemplate is the launch template's id (lt-...) or name.
	LaunchTemplate string
	// LaunchTemplateVersion is a version number, $Latest or $Default; "" = $Latest.
	LaunchTemplateVersion string
	// Subnets are tried in order: a subnet without capacity for the type (or whose Availability
	// Zone does not offer it) moves the launch to the next one.
	Subnets []string
	// ClusterName, when set, tags every instance kubernetes.io/cluster/<name>=owned, and only
	// instances with that tag are listed and deleted.
	ClusterName string
	// Credentials overrides the SDK's default credential chain (IRSA or EKS Pod Identity in a
	// cluster); nil = the default chain. Tests use static credentials.
	Credentials aws.CredentialsProvider
	// NodeNameSource says which name an instance's node registers under, so that the controller
	// nominates the planned pods to that name and finds the Node: NodeNamePrivateDNSName (the
	// default, "") or NodeNameInstanceID.
	NodeNameSource string
	// CapacityReservations select the On-Demand Capacity Reservations and Capacity Blocks for
	// ML the autoscaler may launch into (Reservations lists them); none: it launches on demand
	// only. ParseReservationSelectors reads them from the command line.
	CapacityReservations []ReservationSelector
}

// Node name sources (Options.NodeNameSource), named as Bottlerocket's
// settings.kubernetes.hostname-override-source values.
const (
	// NodeNamePrivateDNSName: the node is named after the instance's PrivateDnsName, as EKS's
	// AMIs (AL2023 nodeadm, AL2 bootstrap.sh, Bottlerocket by default) register it:
	// ip-10-0-0-12.ec2.internal, ip-10-0-0-12.us-west-2.compute.internal, or, in a subnet with
	// resource-name hostnames, i-0123456789abcdef0.us-west-2.compute.internal.
	NodeNamePrivateDNSName = "private-dns-name"
	// NodeNameInstanceID: the node is named after the instance id, i-0123456789abcdef0
	// (Bottlerocket's hostname-override-source: instance-id, the AWS cloud controller manager's
	// resource-name nodes).
	NodeNameInstanceID = "instance-id"
)

func (o Options) validate() error {
	var problems []string
	if o.LaunchTemplate == "" {
		problems = append(problems, "a launch template (its id lt-... or its name) is required")
	}
	if len(o.Subnets) == 0 {
		problems = append(problems, "at least one subnet is required")
	}
	for _, s := range o.Subnets {
		if s == "" {
			problems = append(problems, "subnet ids must not be empty")
			break
		}
	}
	for i, t := range o.CapacityReservations {
		if err := t.validate(); err != nil {
			problems = append(problems, fmt.Sprintf("capacity reservation term %d %s", i+1, err))
		}
	}
	switch o.NodeNameSource {
	case "", NodeNamePrivateDNSName, NodeNameInstanceID:
	default:
		problems = append(problems, fmt.Sprintf("the node name source %q is neither %s (nodes named like ip-10-0-0-12.ec2.internal, the EKS default) nor %s (nodes named like i-0123456789abcdef0)",
			o.NodeNameSource, NodeNamePrivateDNSName, NodeNameInstanceID))
	}
	if len(problems) > 0 {
		return fmt.Errorf("ec2: %s", strings.Join(problems, "; "))
	}
	return nil
}

// API is the part of the EC2 client the provider calls; *ec2.Client implements it.
type API interface {
	RunInstances(ctx context.Context, in *awsec2.RunInstancesInput, optFns ...func(*awsec2.Options)) (*awsec2.RunInstancesOutput, error)
	DescribeInstances(ctx context.Context, in *awsec2.DescribeInstancesInput, optFns ...func(*awsec2.Options)) (*awsec2.DescribeInstancesOutput, error)
	TerminateInstances(ctx context.Context, in *awsec2.TerminateInstancesInput, optFns ...func(*awsec2.Options)) (*awsec2.TerminateInstancesOutput, error)
	CreateTags(ctx context.Context, in *awsec2.CreateTagsInput, optFns ...func(*awsec2.Options)) (*awsec2.CreateTagsOutput, error)
	DeleteTags(ctx context.Context, in *awsec2.DeleteTagsInput, optFns ...func(*awsec2.Options)) (*awsec2.DeleteTagsOutput, error)
	DescribeCapacityReservations(ctx context.Context, in *awsec2.DescribeCapacityReservationsInput, optFns ...func(*awsec2.Options)) (*awsec2.DescribeCapacityReservationsOutput, error)
	DescribeCapacityBlocks(ctx context.Context, in *awsec2.DescribeCapacityBlocksInput, optFns ...func(*awsec2.Options)) (*awsec2.DescribeCapacityBlocksOutput, error)
	DescribeSubnets(ctx context.Context, in *awsec2.DescribeSubnetsInput, optFns ...func(*awsec2.Options)) (*awsec2.DescribeSubnetsOutput, error)
}

var _ API = (*awsec2.Client)(nil)

// Provider launches Neuron nodes as EC2 instances.
type Provider struct {
	c        API
	o        Options
	pageSize int32
	now      func() time.Time

	mu       sync.Mutex
	subnetAZ map[string]string                 // subnet -> Availability Zone; nil until described
	known    map[string]autoscaler.Reservation // by id, as last described
}

var _ autoscaler.Provider = (*Provider)(nil)

// New builds the EC2 client from the SDK's default configuration (credentials, retries) with
// the options' region, credentials and endpoint.
func New(ctx context.Context, o Options) (*Provider, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	var load []func(*config.LoadOptions) error
	if o.Region != "" {
		load = append(load, config.WithRegion(o.Region))
	}
	if o.Credentials != nil {
		load = append(load, config.WithCredentialsProvider(o.Credentials))
	}
	cfg, err := config.LoadDefaultConfig(ctx, load...)
	if err != nil {
		return nil, fmt.Errorf("ec2: loading the AWS configuration: %w", err)
	}
	if cfg.Region == "" {
		return nil, errors.New("ec2: no AWS region: set the autoscaler's region or AWS_REGION")
	}
	client := awsec2.NewFromConfig(cfg, func(eo *awsec2.Options) {
		if o.Endpoint != "" {
			eo.BaseEndpoint = aws.String(o.Endpoint)
		}
		if r, ok := eo.Retryer.(aws.RetryerV2); ok {
			eo.Retryer = capacityNotRetried{r}
		}
		eo.HTTPClient = plainRequestBody{eo.HTTPClient}
	})
	return NewWithClient(client, o), nil
}

// NewWithClient uses a client the caller built. New's client does not retry a launch that
// failed for capacity in the same subnet (a caller's client should not either) and works around
// a request body race (plainRequestBody).
func NewWithClient(client API, o Options) *Provider {
	return &Provider{c: client, o: o, pageSize: 1000, now: time.Now, known: map[string]autoscaler.Reservation{}}
}

// capacityNotRetried keeps the SDK from retrying InsufficientInstanceCapacity (an HTTP 500,
// which the standard retryer retries with backoff) in the same subnet: the provider moves on to
// the next subnet instead.
type capacityNotRetried struct{ aws.RetryerV2 }

func (r capacityNotRetried) IsErrorRetryable(err error) bool {
	if code, _ := apiCode(err); code == codeInsufficientCapacity {
		return false
	}
	return r.RetryerV2.IsErrorRetryable(err)
}

// plainRequestBody hides the request body's io.WriterTo from net/http, working around a race
// between smithy-go and net/http: smithy closes the request body as soon as the response
// headers arrive, while net/http, having sent Content-Length bytes, may still be reading the
// body once more to check that it ended; the closed body's WriteTo answers io.EOF, which io.Copy
// passes on as an error, so net/http closes the connection under the response being read
// ("use of closed network connection", the symptom of aws/aws-sdk-go-v2#2737). The SDK retries
// that after a backoff. It takes an endpoint that answers before the client has finished its
// write: rare over a network, frequent with fakeec2 in process for requests over net/http's
// 4 KiB write buffer (a RunInstances with its tags). A plain Read of a closed body returns
// io.EOF, which io.Copy takes as the end.
type plainRequestBody struct{ awsec2.HTTPClient }

func (c plainRequestBody) Do(r *http.Request) (*http.Response, error) {
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = struct{ io.ReadCloser }{r.Body}
	}
	return c.HTTPClient.Do(r)
}

// Name implements autoscaler.Provider.
func (p *Provider) Name() string { return ProviderName }

// EC2 error codes the provider acts on.
const (
	codeInsufficientCapacity = "InsufficientInstanceCapacity"
	codeUnsupported          = "Unsupported"
	codeMismatch             = "IdempotentParameterMismatch"
	codeUnauthorized         = "UnauthorizedOperation"
	codeInstanceNotFound     = "InvalidInstanceID.NotFound"
)

// Instance states.
var (
	liveStates     = []string{"pending", "running"}
	listedStates   = []string{"pending", "running", "stopping", "stopped"}
	launchingState = types.InstanceStateNamePending
)

// maxTokenGenerations bounds the chain of client tokens Launch follows past terminated
// instances of the same name.
const maxTokenGenerations = 8

// Launch implements autoscaler.Provider: it returns the live instance launched for r.Name, or
// launches one.
func (p *Provider) Launch(ctx context.Context, r autoscaler.NodeRequest) (autoscaler.Instance, error) {
	if err := p.o.validate(); err != nil {
		return autoscaler.Instance{}, err
	}
	if err := validateRequest(r); err != nil {
		return autoscaler.Instance{}, err
	}
	logger := klog.FromContext(ctx).WithValues("node", r.Name, "instanceType", r.Type)

	found, err := p.describe(ctx, p.ours(filter("tag:"+NodeNameTag, r.Name), filter("instance-state-name", liveStates...)))
	if err != nil {
		return autoscaler.Instance{}, err
	}
	if len(found) > 0 {
		logger.V(2).Info("Instance already launched", "instance", aws.ToString(found[0].InstanceId))
		return p.toInstance(found[0]), nil
	}

	var res *autoscaler.Reservation
	subnets := p.o.Subnets
	if r.Reservation != "" {
		got, err := p.reservation(ctx, r.Reservation)
		if err != nil {
			return autoscaler.Instance{}, err
		}
		if got.InstanceType != r.Type {
			return autoscaler.Instance{}, fmt.Errorf("ec2: node %s is a %s, but the capacity reservation %s holds %s instances", r.Name, r.Type, got.ID, got.InstanceType)
		}
		res = &got
		if subnets, err = p.subnetsIn(ctx, got.AvailabilityZone); err != nil {
			return autoscaler.Instance{}, fmt.Errorf("ec2: launching node %s into %s: %w", r.Name, got.ID, err)
		}
	}
	r = withCapacity(r, res)
	tags := p.tags(r)
	token := r.Name
	for range maxTokenGenerations {
		in, err := p.run(ctx, r, res, subnets, tags, token)
		if err != nil {
			return autoscaler.Instance{}, err
		}
		id := aws.ToString(in.InstanceId)
		if in.State == nil || in.State.Name == types.InstanceStateNamePending || in.State.Name == types.InstanceStateNameRunning {
			logger.V(2).Info("Launched instance", "instance", id, "subnet", aws.ToString(in.SubnetId), "clientToken", token, "privateDNSName", aws.ToString(in.PrivateDnsName))
			return p.toInstance(*in), nil
		}
		// EC2 keeps a client token for at least 24 hours after its instance terminated and
		// answers it with that instance: an earlier node of this name, whose pods are planned
		// again. The next token derives from that instance, so a restarted autoscaler walks
		// the same chain and still launches once.
		logger.V(2).Info("Client token belongs to an earlier instance", "clientToken", token, "instance", id, "state", in.State.Name)
		token = nextToken(r.Name, id)
	}
	return autoscaler.Instance{}, fmt.Errorf("ec2: the client tokens of node %s returned %d terminated instances in a row; launch it again after EC2 forgets them (24 hours) or plan the pods anew", r.Name, maxTokenGenerations)
}

func validateRequest(r autoscaler.NodeRequest) error {
	switch {
	case r.Name == "":
		return errors.New("ec2: the node request has no name")
	case len(r.Name) > 64:
		return fmt.Errorf("ec2: node name %q is longer than 64 characters, EC2's limit for the client token that makes the launch idempotent", r.Name)
	case r.Type == "":
		return fmt.Errorf("ec2: node %s has no instance type", r.Name)
	}
	for _, c := range r.Name {
		if c > 127 {
			return fmt.Errorf("ec2: node name %q is not ASCII, which the client token must be", r.Name)
		}
	}
	return nil
}

// nextToken is the client token after the one that returned the terminated instance id.
func nextToken(name, id string) string {
	if len(name)+1+len(id) > 64 {
		name = name[:64-1-len(id)]
	}
	return name + "-" + id
}

// run launches one instance with the client token, trying the subnets in order.
func (p *Provider) run(ctx context.Context, r autoscaler.NodeRequest, res *autoscaler.Reservation, subnets []string, tags launchTags, token string) (*types.Instance, error) {
	logger := klog.FromContext(ctx)
	var failures []SubnetFailure
	mismatch := false
	for _, subnet := range subnets {
		out, err := p.c.RunInstances(ctx, p.runInput(r, res, tags, subnet, token))
		if err == nil {
			if len(out.Instances) == 0 {
				return nil, fmt.Errorf("ec2: RunInstances of a %s in %s returned no instance", r.Type, subnet)
			}
			in := out.Instances[0]
			if len(in.Tags) == 0 {
				in.Tags = tags.instance
			}
			return &in, nil
		}
		code, msg := apiCode(err)
		switch code {
		case codeInsufficientCapacity, codeUnsupported:
			logger.V(2).Info("No capacity in subnet, trying the next", "node", r.Name, "instanceType", r.Type, "subnet", subnet, "code", code)
			failures = append(failures, SubnetFailure{Subnet: subnet, Code: code, Message: msg})
		case codeMismatch:
			// The token launched an instance with other parameters: in another subnet (this one
			// had no capacity then), or with another launch template version.
			found, derr := p.describe(ctx, []types.Filter{filter("client-token", token)})
			if derr != nil {
				return nil, derr
			}
			if len(found) > 0 {
				return &found[0], nil
			}
			mismatch = true
			failures = append(failures, SubnetFailure{Subnet: subnet, Code: code, Message: msg})
		case codeReservationFull:
			// No other subnet helps: the reservation is the same in each.
			return nil, &CapacityError{InstanceType: r.Type, Reservation: res.ID, Failures: append(failures, SubnetFailure{Subnet: subnet, Code: code, Message: msg})}
		case codeUnauthorized:
			return nil, &PermissionError{Operation: "RunInstances", Message: msg, Err: err}
		default:
			return nil, p.launchError(r, subnet, code, msg, err)
		}
	}
	if mismatch {
		return nil, fmt.Errorf("ec2: client token %s already launched an instance that DescribeInstances does not show yet (EC2 is eventually consistent); the next launch attempt finds it: %s", token, failureList(failures))
	}
	capErr := &CapacityError{InstanceType: r.Type, Failures: failures}
	if res != nil {
		capErr.Reservation = res.ID
	}
	return nil, capErr
}

func (p *Provider) runInput(r autoscaler.NodeRequest, res *autoscaler.Reservation, tags launchTags, subnet, token string) *awsec2.RunInstancesInput {
	lt := &types.LaunchTemplateSpecification{Version: aws.String(cmp.Or(p.o.LaunchTemplateVersion, "$Latest"))}
	if strings.HasPrefix(p.o.LaunchTemplate, "lt-") {
		lt.LaunchTemplateId = aws.String(p.o.LaunchTemplate)
	} else {
		lt.LaunchTemplateName = aws.String(p.o.LaunchTemplate)
	}
	in := &awsec2.RunInstancesInput{
		MinCount:       aws.Int32(1),
		MaxCount:       aws.Int32(1),
		InstanceType:   types.InstanceType(r.Type),
		LaunchTemplate: lt,
		SubnetId:       aws.String(subnet),
		ClientToken:    aws.String(token),
		TagSpecifications: []types.TagSpecification{
			{ResourceType: types.ResourceTypeInstance, Tags: tags.instance},
			{ResourceType: types.ResourceTypeVolume, Tags: tags.volume},
		},
	}
	if res != nil {
		// A targeted launch: into this reservation only, failing when it is full.
		in.CapacityReservationSpecification = &types.CapacityReservationSpecification{
			CapacityReservationPreference: types.CapacityReservationPreferenceCapacityReservationsOnly,
			CapacityReservationTarget:     &types.CapacityReservationTarget{CapacityReservationId: aws.String(res.ID)},
		}
		if res.CapacityBlock {
			in.InstanceMarketOptions = &types.InstanceMarketOptionsRequest{MarketType: types.MarketTypeCapacityBlock}
		}
	}
	return in
}

// Instances implements autoscaler.Provider: the instances tagged launched-by (and with the
// cluster tag), pending, running, stopping or stopped.
func (p *Provider) Instances(ctx context.Context) ([]autoscaler.Instance, error) {
	found, err := p.describe(ctx, p.ours(filter("instance-state-name", listedStates...)))
	if err != nil {
		return nil, err
	}
	out := make([]autoscaler.Instance, 0, len(found))
	for _, in := range found {
		out = append(out, p.toInstance(in))
	}
	return out, nil
}

// Delete implements autoscaler.Provider: it terminates the instance of the node, named by the
// request's name (the node-name tag) or by the Kubernetes node name (Instance.Name).
func (p *Provider) Delete(ctx context.Context, name string) error {
	found, err := p.byName(ctx, name)
	if err != nil {
		return err
	}
	logger := klog.FromContext(ctx).WithValues("node", name)
	if len(found) == 0 {
		logger.V(2).Info("No instance to terminate")
		return nil
	}
	ids := make([]string, 0, len(found))
	for _, in := range found {
		ids = append(ids, aws.ToString(in.InstanceId))
	}
	if _, err := p.c.TerminateInstances(ctx, &awsec2.TerminateInstancesInput{InstanceIds: ids}); err != nil {
		code, msg := apiCode(err)
		switch code {
		case codeInstanceNotFound:
			logger.V(2).Info("Instance already gone", "instances", ids)
			return nil
		case codeUnauthorized:
			return &PermissionError{Operation: "TerminateInstances", Message: msg, Err: err}
		}
		return fmt.Errorf("ec2: terminating %s of node %s: %w", strings.Join(ids, ", "), name, err)
	}
	logger.V(2).Info("Terminated instance", "instances", ids)
	return nil
}

// SetPlannedPods implements autoscaler.Provider: it tags the node's instance (found as Delete
// finds it) with the pods, sorted, split over the planned-pods tags as at launch, and deletes the
// planned-pods-N tags that a shorter list no longer needs.
func (p *Provider) SetPlannedPods(ctx context.Context, name string, pods []string) error {
	found, err := p.byName(ctx, name)
	if err != nil {
		return err
	}
	if len(found) == 0 {
		return fmt.Errorf("ec2: no instance of node %s to record its planned pods on: it was terminated, or DescribeInstances does not list it yet (EC2 is eventually consistent)", name)
	}
	pods = slices.Compact(slices.Sorted(slices.Values(pods)))
	tags := plannedPodsTags(strings.Join(pods, ","))
	ids := make([]string, 0, len(found))
	var stale []types.Tag
	for _, in := range found {
		ids = append(ids, aws.ToString(in.InstanceId))
		for _, t := range in.Tags {
			k := aws.ToString(t.Key)
			if i := plannedPodsIndex(k); i > len(tags) && !slices.ContainsFunc(stale, func(s types.Tag) bool { return aws.ToString(s.Key) == k }) {
				stale = append(stale, types.Tag{Key: aws.String(k)}) // no value: whatever it is
			}
		}
	}
	if len(tags) > 0 {
		if _, err := p.c.CreateTags(ctx, &awsec2.CreateTagsInput{Resources: ids, Tags: tags}); err != nil {
			return p.tagError("CreateTags", name, ids, err)
		}
	}
	if len(stale) > 0 {
		if _, err := p.c.DeleteTags(ctx, &awsec2.DeleteTagsInput{Resources: ids, Tags: stale}); err != nil {
			return p.tagError("DeleteTags", name, ids, err)
		}
	}
	klog.FromContext(ctx).V(2).Info("Recorded the planned pods", "node", name, "instances", ids, "pods", len(pods), "tags", len(tags), "deletedTags", len(stale))
	return nil
}

func (p *Provider) tagError(op, name string, ids []string, err error) error {
	code, msg := apiCode(err)
	switch code {
	case codeUnauthorized:
		return &PermissionError{Operation: op, Message: msg, Err: err}
	case codeInstanceNotFound:
		return fmt.Errorf("ec2: %s of %s (node %s): the instance is gone, or EC2 does not know it yet (it is eventually consistent): %w", op, strings.Join(ids, ", "), name, err)
	}
	return fmt.Errorf("ec2: %s of %s (node %s): %w", op, strings.Join(ids, ", "), name, err)
}

// byName finds the instances of a node, named by the request's name (the node-name tag) or by
// the Kubernetes node name (Instance.Name: the private DNS name or the instance id), in the
// listed states.
func (p *Provider) byName(ctx context.Context, name string) ([]types.Instance, error) {
	// A request name (autoscaler.NodeName) starts with neuron- and has no dots; a private DNS
	// name has dots, an instance id starts with i-: look it up the likelier way first.
	nodeFilter, isNodeName := filter("private-dns-name", name), strings.Contains(name, ".")
	if p.o.NodeNameSource == NodeNameInstanceID {
		nodeFilter, isNodeName = filter("instance-id", name), strings.HasPrefix(name, "i-")
	}
	byName := []types.Filter{filter("tag:"+NodeNameTag, name), nodeFilter}
	if isNodeName {
		byName[0], byName[1] = byName[1], byName[0]
	}
	for _, f := range byName {
		found, err := p.describe(ctx, p.ours(f, filter("instance-state-name", listedStates...)))
		if err != nil || len(found) > 0 {
			return found, err
		}
	}
	return nil, nil
}

// describe lists the instances matching the filters, every page.
func (p *Provider) describe(ctx context.Context, filters []types.Filter) ([]types.Instance, error) {
	pages := awsec2.NewDescribeInstancesPaginator(p.c, &awsec2.DescribeInstancesInput{
		Filters:    filters,
		MaxResults: aws.Int32(p.pageSize),
	})
	var out []types.Instance
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			if code, msg := apiCode(err); code == codeUnauthorized {
				return nil, &PermissionError{Operation: "DescribeInstances", Message: msg, Err: err}
			}
			return nil, fmt.Errorf("ec2: describing instances: %w", err)
		}
		for _, r := range page.Reservations {
			out = append(out, r.Instances...)
		}
	}
	return out, nil
}

// ours adds the filters that select the instances this autoscaler launched.
func (p *Provider) ours(more ...types.Filter) []types.Filter {
	fs := []types.Filter{filter("tag:"+autoscaler.LaunchedByLabel, autoscaler.LaunchedByValue)}
	if p.o.ClusterName != "" {
		fs = append(fs, filter("tag:"+clusterTagPrefix+p.o.ClusterName, clusterTagValue))
	}
	return append(fs, more...)
}

// filter matches any of the values literally (EC2 filter values are patterns where *, ? and \
// are special).
func filter(name string, values ...string) types.Filter {
	esc := strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`)
	f := types.Filter{Name: aws.String(name)}
	for _, v := range values {
		f.Values = append(f.Values, esc.Replace(v))
	}
	return f
}

// toInstance describes an EC2 instance for the controller. Its Name is the node name the
// instance registers under (Options.NodeNameSource), which the controller nominates the planned
// pods to and matches Nodes by. EC2 may answer without a PrivateDnsName before the instance is
// running; until it does, the Name is the request's (the node-name tag), and the controller
// follows the instance to its new name by its ProviderID.
func (p *Provider) toInstance(in types.Instance) autoscaler.Instance {
	tags := map[string]string{}
	for _, t := range in.Tags {
		tags[aws.ToString(t.Key)] = aws.ToString(t.Value)
	}
	id := aws.ToString(in.InstanceId)
	name := aws.ToString(in.PrivateDnsName)
	if p.o.NodeNameSource == NodeNameInstanceID {
		name = id
	}
	if name == "" {
		name = tags[NodeNameTag]
	}
	if name == "" {
		name = id
	}
	az := ""
	if in.Placement != nil {
		az = aws.ToString(in.Placement.AvailabilityZone)
	}
	return autoscaler.Instance{
		Name:        name,
		ProviderID:  "aws:///" + az + "/" + id,
		Type:        string(in.InstanceType),
		Launching:   in.State != nil && in.State.Name == launchingState,
		Labels:      labelsOf(tags),
		Annotations: annotationsOf(tags, aws.ToString(in.CapacityBlockId)),
	}
}
