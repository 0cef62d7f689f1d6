package fakeec2

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awsec2 "github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"
)

const auth = "AWS4-HMAC-SHA256 Credential=AKIDFAKE/20260101/us-west-2/ec2/aws4_request, SignedHeaders=host;x-amz-date, Signature=0123abcd"

func start(t *testing.T) *Server {
	t.Helper()
	s := NewServer()
	t.Cleanup(s.Close)
	s.AddSubnet("subnet-a", "us-west-2a")
	s.AddSubnet("subnet-b", "us-west-2b")
	s.AddLaunchTemplate(LaunchTemplate{ID: "lt-0abc", Name: "nodes"})
	return s
}

// client is the real SDK client on the fake.
func client(s *Server, region string) *awsec2.Client {
	return awsec2.New(awsec2.Options{
		Region:       region,
		BaseEndpoint: aws.String(s.URL()),
		Credentials:  credentials.NewStaticCredentialsProvider("AKIDFAKE", "secret", ""),
	})
}

func code(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

func run(itype, subnet, token string, tags ...string) *awsec2.RunInstancesInput {
	in := &awsec2.RunInstancesInput{
		MinCount: aws.Int32(1), MaxCount: aws.Int32(1),
		InstanceType:   types.InstanceType(itype),
		SubnetId:       aws.String(subnet),
		LaunchTemplate: &types.LaunchTemplateSpecification{LaunchTemplateId: aws.String("lt-0abc"), Version: aws.String("$Latest")},
	}
	if token != "" {
		in.ClientToken = aws.String(token)
	}
	if len(tags) > 0 {
		spec := types.TagSpecification{ResourceType: types.ResourceTypeInstance}
		for i := 0; i+1 < len(tags); i += 2 {
			spec.Tags = append(spec.Tags, types.Tag{Key: aws.String(tags[i]), Value: aws.String(tags[i+1])})
		}
		in.TagSpecifications = []types.TagSpecification{spec}
	}
	return in
}

func TestRunInstancesThroughTheSDK(t *testing.T) {
	s := start(t)
	c := client(s, "us-west-2")
	ctx := context.Background()

	out, err := c.RunInstances(ctx, run("trn1.32xlarge", "subnet-b", "tok-1", "Name", "n1", "team", "a"))
	if err != nil {
		t.Fatalf("RunInstances: %v", err)
	}
	if len(out.Instances) != 1 || aws.ToString(out.OwnerId) != OwnerID || !strings.HasPrefix(aws.ToString(out.ReservationId), "r-") {
		t.Fatalf("RunInstances = %+v", out)
	}
	in := out.Instances[0]
	if in.State.Name != types.InstanceStateNamePending || aws.ToInt32(in.State.Code) != 0 ||
		in.InstanceType != "trn1.32xlarge" || aws.ToString(in.SubnetId) != "subnet-b" ||
		aws.ToString(in.Placement.AvailabilityZone) != "us-west-2b" || aws.ToString(in.ClientToken) != "tok-1" ||
		!strings.HasSuffix(aws.ToString(in.PrivateDnsName), ".us-west-2.compute.internal") || in.LaunchTime == nil || len(in.Tags) != 2 {
		t.Errorf("instance %+v", in)
	}

	// The same token and parameters: the same reservation. Other parameters: a mismatch.
	again, err := c.RunInstances(ctx, run("trn1.32xlarge", "subnet-b", "tok-1", "Name", "n1", "team", "a"))
	if err != nil || aws.ToString(again.Instances[0].InstanceId) != aws.ToString(in.InstanceId) || aws.ToString(again.ReservationId) != aws.ToString(out.ReservationId) {
		t.Errorf("retry with the same token = %+v, %v; want the same reservation", again, err)
	}
	if _, err := c.RunInstances(ctx, run("trn1.32xlarge", "subnet-a", "tok-1", "Name", "n1", "team", "a")); code(err) != "IdempotentParameterMismatch" {
		t.Errorf("same token, other subnet: %v", err)
	}
	if n := len(s.Instances()); n != 1 {
		t.Errorf("%d instances, want 1", n)
	}

	// Capacity and offerings.
	s.FailCapacity("subnet-a")
	_, err = c.RunInstances(ctx, run("trn1.32xlarge", "subnet-a", ""), func(o *awsec2.Options) { o.RetryMaxAttempts = 1 })
	var re interface{ HTTPStatusCode() int }
	if code(err) != "InsufficientInstanceCapacity" || !errors.As(err, &re) || re.HTTPStatusCode() != 500 {
		t.Errorf("no capacity: %v", err)
	}
	s.SetUnsupported("us-west-2b", "trn2.48xlarge")
	if _, err := c.RunInstances(ctx, run("trn2.48xlarge", "subnet-b", "")); code(err) != "Unsupported" {
		t.Errorf("unsupported: %v", err)
	}
	// A failed launch records no token.
	s.RestoreCapacity("subnet-a")
	if _, err := c.RunInstances(ctx, run("trn1.32xlarge", "subnet-a", "tok-2")); err != nil {
		t.Errorf("after capacity came back: %v", err)
	}

	for name, tc := range map[string]struct {
		in   *awsec2.RunInstancesInput
		want string
	}{
		"unknown template":      {&awsec2.RunInstancesInput{MinCount: aws.Int32(1), MaxCount: aws.Int32(1), LaunchTemplate: &types.LaunchTemplateSpecification{LaunchTemplateName: aws.String("x")}}, "InvalidLaunchTemplateName.NotFoundException"},
		"unknown template id":   {&awsec2.RunInstancesInput{MinCount: aws.Int32(1), MaxCount: aws.Int32(1), LaunchTemplate: &types.LaunchTemplateSpecification{LaunchTemplateId: aws.String("lt-1")}}, "InvalidLaunchTemplateId.NotFound"},
		"unknown version":       {&awsec2.RunInstancesInput{MinCount: aws.Int32(1), MaxCount: aws.Int32(1), LaunchTemplate: &types.LaunchTemplateSpecification{LaunchTemplateId: aws.String("lt-0abc"), Version: aws.String("7")}}, "InvalidLaunchTemplateId.VersionNotFound"},
		"no image":              {&awsec2.RunInstancesInput{MinCount: aws.Int32(1), MaxCount: aws.Int32(1)}, "MissingParameter"},
		"unknown subnet":        {&awsec2.RunInstancesInput{MinCount: aws.Int32(1), MaxCount: aws.Int32(1), ImageId: aws.String("ami-1"), SubnetId: aws.String("subnet-x")}, "InvalidSubnetID.NotFound"},
		"reserved tag":          {run("m5.large", "subnet-a", "", "aws:x", "y"), "InvalidParameterValue"},
		"long tag value":        {run("m5.large", "subnet-a", "", "k", strings.Repeat("v", 257)), "InvalidParameterValue"},
		"long client token":     {run("m5.large", "subnet-a", strings.Repeat("t", 65)), "InvalidParameterValue"},
		"parameter not modeled": {&awsec2.RunInstancesInput{MinCount: aws.Int32(1), MaxCount: aws.Int32(1), ImageId: aws.String("ami-1"), KeyName: aws.String("k")}, "UnknownParameter"},
		"dry run":               {&awsec2.RunInstancesInput{MinCount: aws.Int32(1), MaxCount: aws.Int32(1), ImageId: aws.String("ami-1"), DryRun: aws.Bool(true)}, "DryRunOperation"},
	} {
		if _, err := c.RunInstances(ctx, tc.in); code(err) != tc.want {
			t.Errorf("%s: %v, want %s", name, err, tc.want)
		}
	}
}

func TestDescribeAndTerminateThroughTheSDK(t *testing.T) {
	s := start(t)
	ctx := context.Background()
	c := client(s, "us-east-1")
	var ids []string
	for i, team := range []string{"a", "a", "b", "a", "b", "a", "a"} {
		out, err := c.RunInstances(ctx, run("trn1.32xlarge", []string{"subnet-a", "subnet-b"}[i%2], "", "team", team, "owner*", "x"))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, aws.ToString(out.Instances[0].InstanceId))
		if dns := aws.ToString(out.Instances[0].PrivateDnsName); !strings.HasSuffix(dns, ".ec2.internal") {
			t.Errorf("us-east-1 private DNS name %s", dns)
		}
	}
	describe := func(in *awsec2.DescribeInstancesInput) ([]types.Instance, int) {
		t.Helper()
		var out []types.Instance
		pages := 0
		p := awsec2.NewDescribeInstancesPaginator(c, in)
		for p.HasMorePages() {
			page, err := p.NextPage(ctx)
			if err != nil {
				t.Fatalf("DescribeInstances: %v", err)
			}
			pages++
			for _, r := range page.Reservations {
				out = append(out, r.Instances...)
			}
		}
		return out, pages
	}
	filter := func(name string, values ...string) types.Filter {
		return types.Filter{Name: aws.String(name), Values: values}
	}

	got, pages := describe(&awsec2.DescribeInstancesInput{Filters: []types.Filter{filter("tag:team", "a")}, MaxResults: aws.Int32(5)})
	if len(got) != 5 || pages != 1 {
		t.Errorf("team a: %d instances in %d pages, want 5 in 1", len(got), pages)
	}
	for _, in := range got {
		if in.State.Name != types.InstanceStateNamePending {
			t.Errorf("first describe: %s is %s, want pending", aws.ToString(in.InstanceId), in.State.Name)
		}
	}
	got, pages = describe(&awsec2.DescribeInstancesInput{MaxResults: aws.Int32(5)})
	if len(got) != 7 || pages != 2 {
		t.Errorf("all: %d instances in %d pages, want 7 in 2", len(got), pages)
	}
	if got, _ := describe(&awsec2.DescribeInstancesInput{Filters: []types.Filter{filter("instance-state-name", "running"), filter("tag:team", "a")}}); len(got) != 5 {
		t.Errorf("running team a: %d, want 5", len(got))
	}
	for name, f := range map[string]types.Filter{
		"wildcard":      filter("private-dns-name", "ip-10-0-*.ec2.internal"),
		"escaped":       filter("tag-key", `owner\*`),
		"one of values": filter("availability-zone", "us-west-2a", "us-west-2b"),
	} {
		if got, _ := describe(&awsec2.DescribeInstancesInput{Filters: []types.Filter{f}}); len(got) != 7 {
			t.Errorf("%s: %d, want 7", name, len(got))
		}
	}
	if got, _ := describe(&awsec2.DescribeInstancesInput{Filters: []types.Filter{filter("tag-key", `owner\?`)}}); len(got) != 0 {
		t.Errorf("escaped ? matched %d", len(got))
	}

	// Terminate: shutting-down, then terminated, still listed.
	tout, err := c.TerminateInstances(ctx, &awsec2.TerminateInstancesInput{InstanceIds: ids[:2]})
	if err != nil || len(tout.TerminatingInstances) != 2 || tout.TerminatingInstances[0].CurrentState.Name != types.InstanceStateNameShuttingDown ||
		tout.TerminatingInstances[0].PreviousState.Name != types.InstanceStateNameRunning {
		t.Fatalf("TerminateInstances = %+v, %v", tout, err)
	}
	got, _ = describe(&awsec2.DescribeInstancesInput{InstanceIds: ids[:2]})
	if len(got) != 2 || got[0].State.Name != types.InstanceStateNameShuttingDown || got[0].StateReason == nil {
		t.Errorf("after terminate: %+v", got)
	}
	got, _ = describe(&awsec2.DescribeInstancesInput{InstanceIds: ids[:1]})
	if got[0].State.Name != types.InstanceStateNameTerminated || aws.ToInt32(got[0].State.Code) != 48 {
		t.Errorf("then: %s", got[0].State.Name)
	}

	for _, tc := range []struct {
		name string
		call func() error
		want string
	}{
		{"unknown id", func() error {
			_, err := c.DescribeInstances(ctx, &awsec2.DescribeInstancesInput{InstanceIds: []string{"i-0000000000000dead"}})
			return err
		}, "InvalidInstanceID.NotFound"},
		{"terminate unknown id", func() error {
			_, err := c.TerminateInstances(ctx, &awsec2.TerminateInstancesInput{InstanceIds: []string{"i-0000000000000dead"}})
			return err
		}, "InvalidInstanceID.NotFound"},
		{"max results too small", func() error {
			_, err := c.DescribeInstances(ctx, &awsec2.DescribeInstancesInput{MaxResults: aws.Int32(4)})
			return err
		}, "InvalidParameterValue"},
		{"max results with ids", func() error {
			_, err := c.DescribeInstances(ctx, &awsec2.DescribeInstancesInput{MaxResults: aws.Int32(5), InstanceIds: ids[:1]})
			return err
		}, "InvalidParameterCombination"},
		{"unknown filter", func() error {
			_, err := c.DescribeInstances(ctx, &awsec2.DescribeInstancesInput{Filters: []types.Filter{filter("color", "red")}})
			return err
		}, "InvalidParameterValue"},
		{"bad token", func() error {
			_, err := c.DescribeInstances(ctx, &awsec2.DescribeInstancesInput{NextToken: aws.String("nope")})
			return err
		}, "InvalidParameterValue"},
		{"denied", func() error {
			s.Deny("TerminateInstances")
			_, err := c.TerminateInstances(ctx, &awsec2.TerminateInstancesInput{InstanceIds: ids[2:3]})
			return err
		}, "UnauthorizedOperation"},
	} {
		if err := tc.call(); code(err) != tc.want {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.want)
		}
	}
}

func TestEventualConsistency(t *testing.T) {
	s := start(t)
	ctx := context.Background()
	c := client(s, "us-west-2")
	s.SetEventualConsistency(true)
	out, err := c.RunInstances(ctx, run("trn1.2xlarge", "subnet-a", ""))
	if err != nil {
		t.Fatal(err)
	}
	id := aws.ToString(out.Instances[0].InstanceId)
	if _, err := c.DescribeInstances(ctx, &awsec2.DescribeInstancesInput{InstanceIds: []string{id}}); code(err) != "InvalidInstanceID.NotFound" {
		t.Errorf("lagging describe by id: %v", err)
	}
	s.SetEventualConsistency(false)
	d, err := c.DescribeInstances(ctx, &awsec2.DescribeInstancesInput{InstanceIds: []string{id}})
	if err != nil || len(d.Reservations) != 1 {
		t.Errorf("consistent describe: %+v, %v", d, err)
	}
}

func TestTagsThroughTheSDK(t *testing.T) {
	s := start(t)
	ctx := context.Background()
	c := client(s, "us-west-2")
	out, err := c.RunInstances(ctx, run("trn1.32xlarge", "subnet-a", "", "Name", "n1", "team", "a", "stage", "dev"))
	if err != nil {
		t.Fatal(err)
	}
	id := aws.ToString(out.Instances[0].InstanceId)
	tag := func(kv ...string) []types.Tag {
		var ts []types.Tag
		for i := 0; i+1 < len(kv); i += 2 {
			ts = append(ts, types.Tag{Key: aws.String(kv[i]), Value: aws.String(kv[i+1])})
		}
		return ts
	}
	tags := func() map[string]string {
		t.Helper()
		d, err := c.DescribeInstances(ctx, &awsec2.DescribeInstancesInput{InstanceIds: []string{id}})
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]string{}
		for _, tg := range d.Reservations[0].Instances[0].Tags {
			m[aws.ToString(tg.Key)] = aws.ToString(tg.Value)
		}
		return m
	}

	// CreateTags adds and overwrites; DeleteTags removes a key whatever its value without a
	// value, only on a match with one.
	if _, err := c.CreateTags(ctx, &awsec2.CreateTagsInput{Resources: []string{id}, Tags: tag("team", "b", "pods", "x/y", "empty", "")}); err != nil {
		t.Fatalf("CreateTags: %v", err)
	}
	if got, want := tags(), map[string]string{"Name": "n1", "team": "b", "stage": "dev", "pods": "x/y", "empty": ""}; !maps.Equal(got, want) {
		t.Errorf("after CreateTags %v, want %v", got, want)
	}
	if _, err := c.DeleteTags(ctx, &awsec2.DeleteTagsInput{Resources: []string{id}, Tags: []types.Tag{{Key: aws.String("pods")}, {Key: aws.String("team"), Value: aws.String("a")}, {Key: aws.String("absent")}}}); err != nil {
		t.Fatalf("DeleteTags: %v", err)
	}
	if got, want := tags(), map[string]string{"Name": "n1", "team": "b", "stage": "dev", "empty": ""}; !maps.Equal(got, want) {
		t.Errorf("after DeleteTags %v, want %v", got, want)
	}
	if _, err := c.DeleteTags(ctx, &awsec2.DeleteTagsInput{Resources: []string{id}}); err != nil {
		t.Fatalf("DeleteTags of every tag: %v", err)
	}
	if got := tags(); len(got) != 0 {
		t.Errorf("after deleting every tag %v", got)
	}

	var many []string
	for i := range 51 {
		many = append(many, fmt.Sprintf("k%d", i), "v")
	}
	s.SetEventualConsistency(true)
	lagging, err := c.RunInstances(ctx, run("trn1.32xlarge", "subnet-a", ""))
	if err != nil {
		t.Fatal(err)
	}
	s.SetEventualConsistency(false)
	for _, tc := range []struct {
		name string
		call func() error
		want string
	}{
		{"unknown instance", func() error {
			_, err := c.CreateTags(ctx, &awsec2.CreateTagsInput{Resources: []string{"i-0000000000000dead"}, Tags: tag("a", "b")})
			return err
		}, "InvalidInstanceID.NotFound"},
		{"delete on an unknown instance", func() error {
			_, err := c.DeleteTags(ctx, &awsec2.DeleteTagsInput{Resources: []string{id, "i-0000000000000dead"}, Tags: tag("a", "b")})
			return err
		}, "InvalidInstanceID.NotFound"},
		{"not an instance", func() error {
			_, err := c.CreateTags(ctx, &awsec2.CreateTagsInput{Resources: []string{"bogus"}, Tags: tag("a", "b")})
			return err
		}, "InvalidID"},
		{"reserved key", func() error {
			_, err := c.CreateTags(ctx, &awsec2.CreateTagsInput{Resources: []string{id}, Tags: tag("aws:x", "b")})
			return err
		}, "InvalidParameterValue"},
		{"long value", func() error {
			_, err := c.CreateTags(ctx, &awsec2.CreateTagsInput{Resources: []string{id}, Tags: tag("a", strings.Repeat("v", 257))})
			return err
		}, "InvalidParameterValue"},
		{"more than 50 tags", func() error {
			_, err := c.CreateTags(ctx, &awsec2.CreateTagsInput{Resources: []string{id}, Tags: tag(many...)})
			return err
		}, "TagLimitExceeded"},
		{"dry run", func() error {
			_, err := c.CreateTags(ctx, &awsec2.CreateTagsInput{Resources: []string{id}, Tags: tag("a", "b"), DryRun: aws.Bool(true)})
			return err
		}, "DryRunOperation"},
		{"denied", func() error {
			s.Deny("DeleteTags")
			_, err := c.DeleteTags(ctx, &awsec2.DeleteTagsInput{Resources: []string{id}})
			return err
		}, "UnauthorizedOperation"},
	} {
		if err := tc.call(); code(err) != tc.want {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.want)
		}
	}
	if got := tags(); len(got) != 0 {
		t.Errorf("failed calls changed the tags: %v", got)
	}
	// An instance DescribeInstances did not show yet when it launched is visible to CreateTags
	// once EC2 caught up; while it lags, CreateTags does not find it either.
	s.SetEventualConsistency(true)
	lagID := aws.ToString(lagging.Instances[0].InstanceId)
	if _, err := c.CreateTags(ctx, &awsec2.CreateTagsInput{Resources: []string{lagID}, Tags: tag("a", "b")}); err != nil {
		t.Errorf("CreateTags on an instance launched before the lag: %v", err)
	}
	fresh, err := c.RunInstances(ctx, run("trn1.32xlarge", "subnet-a", ""))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateTags(ctx, &awsec2.CreateTagsInput{Resources: []string{aws.ToString(fresh.Instances[0].InstanceId)}, Tags: tag("a", "b")}); code(err) != "InvalidInstanceID.NotFound" {
		t.Errorf("CreateTags on an instance EC2 does not show yet: %v", err)
	}
}

// post sends a raw EC2 Query request.
func post(t *testing.T, s *Server, authz string, form url.Values) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.URL(), strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded; charset=utf-8")
	if authz != "" {
		req.Header.Set("Authorization", authz)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func TestWireErrors(t *testing.T) {
	s := start(t)
	form := func(kv ...string) url.Values {
		v := url.Values{}
		for i := 0; i+1 < len(kv); i += 2 {
			v.Set(kv[i], kv[i+1])
		}
		return v
	}
	for _, tc := range []struct {
		name   string
		auth   string
		form   url.Values
		status int
		code   string
	}{
		{"no authorization", "", form("Action", "DescribeInstances", "Version", APIVersion), 401, "AuthFailure"},
		{"not sigv4", "Basic YTpi", form("Action", "DescribeInstances", "Version", APIVersion), 401, "AuthFailure"},
		{"other service", strings.Replace(auth, "/ec2/", "/s3/", 1), form("Action", "DescribeInstances", "Version", APIVersion), 401, "AuthFailure"},
		{"no action", auth, form("Version", APIVersion), 400, "MissingAction"},
		{"unknown action", auth, form("Action", "DescribeVolumes", "Version", APIVersion), 400, "InvalidAction"},
		{"no version", auth, form("Action", "DescribeInstances"), 400, "MissingParameter"},
		{"old version", auth, form("Action", "DescribeInstances", "Version", "2014-01-01"), 400, "NoSuchVersion"},
		{"no count", auth, form("Action", "RunInstances", "Version", APIVersion, "ImageId", "ami-1", "MaxCount", "1"), 400, "MissingParameter"},
		{"bad list index", auth, form("Action", "DescribeInstances", "Version", APIVersion, "Filter.x.Name", "tag:a"), 400, "UnknownParameter"},
		{"filter without value", auth, form("Action", "DescribeInstances", "Version", APIVersion, "Filter.1.Name", "tag:a"), 400, "InvalidParameterValue"},
		{"terminate nothing", auth, form("Action", "TerminateInstances", "Version", APIVersion), 400, "MissingParameter"},
		{"tag nothing", auth, form("Action", "CreateTags", "Version", APIVersion, "Tag.1.Key", "k"), 400, "MissingParameter"},
		{"no tag", auth, form("Action", "CreateTags", "Version", APIVersion, "ResourceId.1", "i-0000000000000dead"), 400, "MissingParameter"},
		{"tag an unknown instance", auth, form("Action", "CreateTags", "Version", APIVersion, "ResourceId.1", "i-0000000000000dead", "Tag.1.Key", "k"), 400, "InvalidInstanceID.NotFound"},
		{"tag member not modeled", auth, form("Action", "DeleteTags", "Version", APIVersion, "ResourceId.1", "i-0000000000000dead", "Tag.1.Color", "red"), 400, "UnknownParameter"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := post(t, s, tc.auth, tc.form)
			var er struct {
				XMLName   xml.Name
				Code      string `xml:"Errors>Error>Code"`
				Message   string `xml:"Errors>Error>Message"`
				RequestID string `xml:"RequestID"`
			}
			if err := xml.Unmarshal([]byte(body), &er); err != nil {
				t.Fatalf("body %q: %v", body, err)
			}
			if status != tc.status || er.XMLName.Local != "Response" || er.Code != tc.code || er.Message == "" || er.RequestID == "" {
				t.Errorf("got %d %s\n%s\nwant %d %s", status, er.Code, body, tc.status, tc.code)
			}
		})
	}

	// A success is a document in the EC2 namespace, as the SDK reads it.
	status, body := post(t, s, auth, form("Action", "DescribeInstances", "Version", APIVersion))
	if status != 200 || !strings.HasPrefix(body, xml.Header+`<DescribeInstancesResponse xmlns="`+Namespace+`"><requestId>`) {
		t.Errorf("success: %d %s", status, body)
	}
	_, body = post(t, s, auth, form("Action", "RunInstances", "Version", APIVersion, "MinCount", "1", "MaxCount", "1", "ImageId", "ami-1"))
	var run struct {
		ID string `xml:"instancesSet>item>instanceId"`
	}
	if err := xml.Unmarshal([]byte(body), &run); err != nil || run.ID == "" {
		t.Fatalf("RunInstances: %s (%v)", body, err)
	}
	for _, action := range []string{"CreateTags", "DeleteTags"} {
		status, body := post(t, s, auth, form("Action", action, "Version", APIVersion, "ResourceId.1", run.ID, "Tag.1.Key", "k", "Tag.1.Value", "v"))
		re := regexp.MustCompile(`^` + regexp.QuoteMeta(xml.Header+`<`+action+`Response xmlns="`+Namespace+`"><requestId>`) + `[0-9a-f-]+</requestId><return>true</return></` + action + `Response>$`)
		if status != 200 || !re.MatchString(body) {
			t.Errorf("%s: %d %s", action, status, body)
		}
	}
}

func TestGlob(t *testing.T) {
	for _, tc := range []struct {
		pattern, s string
		want       bool
	}{
		{"abc", "abc", true},
		{"a*", "abc", true},
		{"*c", "abc", true},
		{"a?c", "abc", true},
		{"a?c", "ac", false},
		{`a\*`, "a*", true},
		{`a\*`, "ab", false},
		{"*", "", true},
		{"", "a", false},
		{`a\`, `a\`, true},
	} {
		if got := glob(tc.pattern, tc.s); got != tc.want {
			t.Errorf("glob(%q, %q) = %v, want %v", tc.pattern, tc.s, got, tc.want)
		}
	}
}

// FuzzServeHTTP sends arbitrary form bodies: the fake never panics, and always answers with an
// EC2 document, a success in its namespace or an error with a code.
func FuzzServeHTTP(f *testing.F) {
	for _, seed := range []string{
		"Action=RunInstances&Version=2016-11-15&MinCount=1&MaxCount=1&LaunchTemplate.LaunchTemplateId=lt-0abc&SubnetId=subnet-a&ClientToken=t&TagSpecification.1.ResourceType=instance&TagSpecification.1.Tag.1.Key=Name&TagSpecification.1.Tag.1.Value=n",
		"Action=DescribeInstances&Version=2016-11-15&Filter.1.Name=tag%3Ateam&Filter.1.Value.1=a*&MaxResults=5",
		"Action=DescribeInstances&Version=2016-11-15&NextToken=ZmFrZWVjMjox",
		"Action=TerminateInstances&Version=2016-11-15&InstanceId.1=i-00000000000000002",
		"Action=CreateTags&Version=2016-11-15&ResourceId.1=i-00000000000000002&Tag.1.Key=k&Tag.1.Value=v",
		"Action=DeleteTags&Version=2016-11-15&ResourceId.1=i-00000000000000002&Tag.1.Key=k",
		"Action=RunInstances&Version=2016-11-15&MinCount=2&MaxCount=1",
		"Action=DescribeInstances&Version=2016-11-15&Filter.01.Name=x",
		"%zz",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, body string) {
		s := newServer()
		s.AddSubnet("subnet-a", "us-west-2a")
		s.AddLaunchTemplate(LaunchTemplate{ID: "lt-0abc", Name: "nodes"})
		for range 2 { // the second request sees what the first one launched
			req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("Authorization", auth)
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, req)
			var doc struct {
				XMLName xml.Name
				Code    string `xml:"Errors>Error>Code"`
			}
			if err := xml.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
				t.Fatalf("%d %q: %v", rec.Code, rec.Body.String(), err)
			}
			switch {
			case rec.Code == http.StatusOK && (doc.XMLName.Space != Namespace || !strings.HasSuffix(doc.XMLName.Local, "Response")):
				t.Fatalf("success %s", rec.Body.String())
			case rec.Code != http.StatusOK && (doc.XMLName.Local != "Response" || doc.Code == ""):
				t.Fatalf("error %d %s", rec.Code, rec.Body.String())
			}
		}
	})
}

// TestResourceNameHostnames: a subnet with resource-name hostnames names its instances'
// private DNS after the instance id; other subnets keep the IP-based name, and DescribeInstances'
// private-dns-name filter finds each by the name RunInstances returned.
func TestResourceNameHostnames(t *testing.T) {
	s := start(t)
	s.SetResourceNameHostnames("subnet-b")
	ctx := context.Background()
	for _, tc := range []struct{ region, subnet, want string }{
		{"us-west-2", "subnet-a", `^ip-10-0-\d+-\d+\.us-west-2\.compute\.internal$`},
		{"us-west-2", "subnet-b", `^i-[0-9a-f]{17}\.us-west-2\.compute\.internal$`},
		{"us-east-1", "subnet-a", `^ip-10-0-\d+-\d+\.ec2\.internal$`},
		{"us-east-1", "subnet-b", `^i-[0-9a-f]{17}\.ec2\.internal$`},
	} {
		c := client(s, tc.region)
		out, err := c.RunInstances(ctx, run("trn1.2xlarge", tc.subnet, ""))
		if err != nil {
			t.Fatal(err)
		}
		in := out.Instances[0]
		dns := aws.ToString(in.PrivateDnsName)
		if !regexp.MustCompile(tc.want).MatchString(dns) {
			t.Errorf("%s %s: private DNS name %q, want %s", tc.region, tc.subnet, dns, tc.want)
		}
		if tc.subnet == "subnet-b" && !strings.HasPrefix(dns, aws.ToString(in.InstanceId)+".") {
			t.Errorf("%s: private DNS name %q does not start with the instance id %s", tc.subnet, dns, aws.ToString(in.InstanceId))
		}
		found, err := c.DescribeInstances(ctx, &awsec2.DescribeInstancesInput{Filters: []types.Filter{{Name: aws.String("private-dns-name"), Values: []string{dns}}}})
		if err != nil {
			t.Fatal(err)
		}
		if len(found.Reservations) != 1 || len(found.Reservations[0].Instances) != 1 || aws.ToString(found.Reservations[0].Instances[0].InstanceId) != aws.ToString(in.InstanceId) {
			t.Errorf("private-dns-name=%s found %+v, want %s only", dns, found.Reservations, aws.ToString(in.InstanceId))
		}
	}
}
