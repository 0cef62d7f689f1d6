package fakeec2

import (
	"flag"
	"fmt"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite testdata/wire.golden with the fake's answers")

// TestWireGolden sends a fixed sequence of requests, valid and invalid, through every action
// and test hook and compares the status and XML of every answer with testdata/wire.golden:
// the fake's wire answers change only on purpose (go test -run TestWireGolden -update).
func TestWireGolden(t *testing.T) {
	s := newServer()
	s.now = func() time.Time { return time.Unix(1700000000, 0).UTC() }
	s.AddSubnet("subnet-a", "us-west-2a")
	s.AddSubnet("subnet-b", "us-west-2b")
	s.AddLaunchTemplate(LaunchTemplate{ID: "lt-1", Name: "tmpl", Versions: 3})
	s.AddLaunchTemplate(LaunchTemplate{ID: "lt-2", Name: "typed", InstanceType: "trn1.2xlarge", ImageID: "ami-x"})
	var out strings.Builder
	do := func(q string) {
		form, err := url.ParseQuery(q)
		if err != nil {
			t.Fatal(err)
		}
		if form.Get("Version") == "" {
			form.Set("Version", APIVersion)
		}
		r := httptest.NewRequest("POST", "/", strings.NewReader(form.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=AK/20260101/us-west-2/ec2/aws4_request, SignedHeaders=host, Signature=00")
		w := httptest.NewRecorder()
		s.ServeHTTP(w, r)
		fmt.Fprintf(&out, "== %s\n%d %s\n", q, w.Code, w.Body.String())
	}
	run := "Action=RunInstances&MinCount=1&MaxCount=1"
	for _, q := range []string{
		"Action=RunInstances",
		"Action=RunInstances&MinCount=1",
		"Action=RunInstances&MinCount=x&MaxCount=1",
		"Action=RunInstances&MinCount=2&MaxCount=1",
		run + "&ClientToken=" + strings.Repeat("a", 65),
		run + "&LaunchTemplate.Foo=1",
		run + "&LaunchTemplate.LaunchTemplateId=lt-1&LaunchTemplate.LaunchTemplateName=tmpl",
		run + "&LaunchTemplate.LaunchTemplateId=lt-9",
		run + "&LaunchTemplate.LaunchTemplateName=nope",
		run + "&LaunchTemplate.Version=2",
		run + "&LaunchTemplate.LaunchTemplateId=lt-1&LaunchTemplate.Version=4",
		run + "&LaunchTemplate.LaunchTemplateId=lt-1&LaunchTemplate.Version=x",
		run,
		run + "&ImageId=ami-1&SubnetId=subnet-z",
		run + "&ImageId=ami-1&TagSpecification.1.Foo=x",
		run + "&ImageId=ami-1&TagSpecification.1.Tag.1.Key=a",
		run + "&ImageId=ami-1&TagSpecification.1.ResourceType=bucket",
		run + "&ImageId=ami-1&TagSpecification.1.ResourceType=instance&TagSpecification.2.ResourceType=instance",
		run + "&ImageId=ami-1&TagSpecification.1.ResourceType=instance&TagSpecification.1.Tag.1.Key=a&TagSpecification.1.Tag.1.Bad=1",
		run + "&ImageId=ami-1&TagSpecification.1.ResourceType=instance&TagSpecification.1.Tag.1.Value=a",
		run + "&ImageId=ami-1&TagSpecification.1.ResourceType=instance&TagSpecification.1.Tag.1.Key=aws:x",
		run + "&ImageId=ami-1&TagSpecification.1.ResourceType=instance&TagSpecification.1.Tag.1.Key=a&TagSpecification.1.Tag.2.Key=a",
		run + "&ImageId=ami-1&TagSpecification.x.ResourceType=instance",
		run + "&ImageId=ami-1&DryRun=true",
		run + "&ImageId=ami-1&DryRun=maybe",
		run + "&ImageId=ami-1&TagSpecification.1.ResourceType=instance&TagSpecification.1.Tag.1.Key=Name&TagSpecification.1.Tag.1.Value=n1&TagSpecification.2.ResourceType=volume&TagSpecification.2.Tag.1.Key=v&ClientToken=tok1",
		run + "&ImageId=ami-1&TagSpecification.1.ResourceType=instance&TagSpecification.1.Tag.1.Key=Name&TagSpecification.1.Tag.1.Value=n1&TagSpecification.2.ResourceType=volume&TagSpecification.2.Tag.1.Key=v&ClientToken=tok1",
		run + "&ImageId=ami-2&ClientToken=tok1",
		run + "&LaunchTemplate.LaunchTemplateName=typed&SubnetId=subnet-b&ClientToken=tok2",
		"Action=RunInstances&MinCount=1&MaxCount=3&LaunchTemplate.LaunchTemplateId=lt-1&LaunchTemplate.Version=2&InstanceType=inf2.xlarge",
		"Action=RunInstances&MinCount=1&MaxCount=101&ImageId=ami-1",
		"Action=RunInstances&MinCount=1&MaxCount=1&ImageId=ami-1&Foo=1",
		"Action=Nope",
		"Version=2016-11-15",
		"Action=DescribeInstances&Version=2000-01-01",
		"Action=DescribeInstances",
		"Action=DescribeInstances&MaxResults=5",
		"Action=DescribeInstances&MaxResults=4",
		"Action=DescribeInstances&MaxResults=5&InstanceId.1=i-x",
		"Action=DescribeInstances&NextToken=zzz",
		"Action=DescribeInstances&Filter.1.Name=bogus&Filter.1.Value.1=x",
		"Action=DescribeInstances&Filter.1.Value.1=x",
		"Action=DescribeInstances&Filter.1.Name=instance-type",
		"Action=DescribeInstances&Filter.1.Name=instance-type&Filter.1.Foo=1",
		"Action=DescribeInstances&Filter.1.Name=instance-type&Filter.1.Value.1=inf2.*",
		"Action=DescribeInstances&Filter.1.Name=tag:Name&Filter.1.Value.1=n?",
		"Action=DescribeInstances&Filter.1.Name=tag-key&Filter.1.Value.1=Name",
		"Action=DescribeInstances&Filter.1.Name=instance-state-name&Filter.1.Value.1=running&Filter.2.Name=subnet-id&Filter.2.Value.1=subnet-a&Filter.2.Value.2=subnet-b",
		"Action=DescribeInstances&Filter.1.Name=availability-zone&Filter.1.Value.1=us-west-2b",
		"Action=DescribeInstances&Filter.1.Name=client-token&Filter.1.Value.1=tok*",
		"Action=DescribeInstances&Filter.1.Name=private-dns-name&Filter.1.Value.1=ip-10-0-0-*",
		"Action=DescribeInstances&Filter.1.Name=instance-id&Filter.1.Value.1=i-*3",
		"Action=DescribeInstances&InstanceId.1=i-00000000000000003&InstanceId.2=i-00000000000000002",
		"Action=DescribeInstances&InstanceId.1=i-nope&InstanceId.2=i-nope2",
		"Action=DescribeInstances&DryRun=true",
		"Action=CreateTags&ResourceId.1=i-00000000000000002&Tag.1.Key=x&Tag.1.Value=y",
		"Action=CreateTags&ResourceId.1=vol-1&Tag.1.Key=x",
		"Action=DeleteTags&ResourceId.1=i-00000000000000002&Tag.1.Key=x&Tag.1.Value=z",
		"Action=DeleteTags&ResourceId.1=i-00000000000000002&Tag.1.Key=x",
		"Action=TerminateInstances&InstanceId.1=i-00000000000000002",
		"Action=TerminateInstances&InstanceId.1=i-nope",
		"Action=DescribeInstances&MaxResults=5",
		"Action=DescribeInstances&MaxResults=5&NextToken=ZmFrZWVjMjo3",
		"Action=DescribeInstances",
	} {
		do(q)
	}
	s.FailCapacity("subnet-a")
	do(run + "&ImageId=ami-1")
	s.RestoreCapacity("subnet-a")
	s.SetUnsupported("us-west-2a", "m1.small")
	do(run + "&ImageId=ami-1")
	s.SetEventualConsistency(true)
	s.SetPendingDescribes(0)
	do(run + "&ImageId=ami-1&InstanceType=x1&ClientToken=tok3")
	do("Action=DescribeInstances")
	s.SetEventualConsistency(false)
	s.Deny("DescribeInstances")
	do("Action=DescribeInstances")
	// Reserved capacity: an ODCR, a Capacity Block of an UltraServer, a scheduled one.
	s.AddCapacityReservation(CapacityReservation{ID: "cr-1", InstanceType: "trn1.32xlarge", AvailabilityZone: "us-west-2a", Total: 1, Tags: map[string]string{"team": "ml"}})
	s.AddCapacityReservation(CapacityReservation{ID: "cr-2", InstanceType: "trn2u.48xlarge", AvailabilityZone: "us-west-2b", Total: 4, CapacityBlock: true,
		CapacityBlockID: "cb-1", UltraServerType: "u-trn2x64", Start: time.Unix(1699990000, 0), End: time.Unix(1700090000, 0), Tags: map[string]string{"team": "ml"}})
	s.AddCapacityReservation(CapacityReservation{ID: "cr-3", InstanceType: "trn1.32xlarge", AvailabilityZone: "us-west-2a", Total: 2, State: "scheduled", Start: time.Unix(1700100000, 0)})
	lt := run + "&ImageId=ami-1&InstanceType=trn1.32xlarge&SubnetId=subnet-a"
	for _, q := range []string{
		"Action=DescribeCapacityReservations",
		"Action=DescribeCapacityReservations&CapacityReservationId.1=cr-3&CapacityReservationId.2=cr-1",
		"Action=DescribeCapacityReservations&CapacityReservationId.1=cr-9",
		"Action=DescribeCapacityReservations&Filter.1.Name=tag:team&Filter.1.Value.1=ml&Filter.2.Name=state&Filter.2.Value.1=active",
		"Action=DescribeCapacityReservations&Filter.1.Name=bogus&Filter.1.Value.1=x",
		"Action=DescribeCapacityReservations&MaxResults=2",
		"Action=DescribeCapacityReservations&MaxResults=2&NextToken=ZmFrZWVjMjoxOQ",
		"Action=DescribeCapacityReservations&MaxResults=0",
		"Action=DescribeCapacityBlocks&CapacityBlockId.1=cb-1",
		"Action=DescribeCapacityBlocks&CapacityBlockId.1=cb-9",
		"Action=DescribeSubnets&SubnetId.1=subnet-b",
		"Action=DescribeSubnets",
		"Action=DescribeSubnets&SubnetId.1=subnet-z",
		lt + "&CapacityReservationSpecification.CapacityReservationTarget.CapacityReservationId=cr-9",
		lt + "&CapacityReservationSpecification.CapacityReservationTarget.CapacityReservationId=cr-1&CapacityReservationSpecification.CapacityReservationPreference=open",
		lt + "&CapacityReservationSpecification.CapacityReservationTarget.Foo=x",
		lt + "&CapacityReservationSpecification.CapacityReservationTarget.CapacityReservationId=cr-3",
		lt + "&CapacityReservationSpecification.CapacityReservationTarget.CapacityReservationId=cr-1&InstanceMarketOptions.MarketType=capacity-block",
		lt + "&InstanceMarketOptions.MarketType=capacity-block",
		lt + "&InstanceMarketOptions.MarketType=bogus",
		run + "&ImageId=ami-1&InstanceType=m5.large&SubnetId=subnet-a&CapacityReservationSpecification.CapacityReservationTarget.CapacityReservationId=cr-1",
		run + "&ImageId=ami-1&InstanceType=trn1.32xlarge&SubnetId=subnet-b&CapacityReservationSpecification.CapacityReservationTarget.CapacityReservationId=cr-1",
		lt + "&CapacityReservationSpecification.CapacityReservationTarget.CapacityReservationId=cr-1&CapacityReservationSpecification.CapacityReservationPreference=capacity-reservations-only&ClientToken=res1",
		lt + "&CapacityReservationSpecification.CapacityReservationTarget.CapacityReservationId=cr-1&CapacityReservationSpecification.CapacityReservationPreference=capacity-reservations-only&ClientToken=res1",
		lt + "&CapacityReservationSpecification.CapacityReservationTarget.CapacityReservationId=cr-1&ClientToken=res2",
		"Action=DescribeCapacityReservations&CapacityReservationId.1=cr-1",
		run + "&ImageId=ami-1&InstanceType=trn2u.48xlarge&SubnetId=subnet-b&CapacityReservationSpecification.CapacityReservationTarget.CapacityReservationId=cr-2",
		"Action=RunInstances&MinCount=4&MaxCount=4&ImageId=ami-1&InstanceType=trn2u.48xlarge&SubnetId=subnet-b&CapacityReservationSpecification.CapacityReservationTarget.CapacityReservationId=cr-2&InstanceMarketOptions.MarketType=capacity-block",
		"Action=DescribeInstances&Filter.1.Name=instance-type&Filter.1.Value.1=trn*",
		"Action=TerminateInstances&InstanceId.1=i-00000000000000018",
		"Action=DescribeCapacityReservations&CapacityReservationId.1=cr-1",
	} {
		do(q)
	}
	const golden = "testdata/wire.golden"
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != string(want) {
		gotLines, wantLines := strings.Split(got, "\n"), strings.Split(string(want), "\n")
		for i := range min(len(gotLines), len(wantLines)) {
			if gotLines[i] != wantLines[i] {
				t.Fatalf("answer differs from %s at line %d:\n got  %s\n want %s", golden, i+1, gotLines[i], wantLines[i])
			}
		}
		t.Fatalf("%d lines of answers, %s has %d", len(gotLines), golden, len(wantLines))
	}
}
