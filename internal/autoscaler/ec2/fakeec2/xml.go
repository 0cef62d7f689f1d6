package fakeec2

import (
	"encoding/xml"
	"time"
)

// The response documents, named as the EC2 API (2016-11-15) names them and as the
// aws-sdk-go-v2 deserializers read them: a <XResponse> root in the EC2 namespace without a
// result wrapper, lists as <fooSet><item>...</item></fooSet>.

type xmlState struct {
	Code int    `xml:"code"`
	Name string `xml:"name"`
}

type xmlTag struct {
	Key   string `xml:"key"`
	Value string `xml:"value"`
}

type xmlPlacement struct {
	AvailabilityZone string `xml:"availabilityZone"`
	GroupName        string `xml:"groupName"`
	Tenancy          string `xml:"tenancy"`
}

type xmlMonitoring struct {
	State string `xml:"state"`
}

type xmlStateReason struct {
	Code    string `xml:"code"`
	Message string `xml:"message"`
}

// xmlSet is an empty <fooSet/>, such as the security groups the fake does not model.
type xmlSet struct{}

type xmlInstance struct {
	InstanceID            string          `xml:"instanceId"`
	ImageID               string          `xml:"imageId"`
	State                 xmlState        `xml:"instanceState"`
	PrivateDNSName        string          `xml:"privateDnsName"`
	DNSName               string          `xml:"dnsName"`
	Reason                string          `xml:"reason"`
	AmiLaunchIndex        int             `xml:"amiLaunchIndex"`
	ProductCodes          xmlSet          `xml:"productCodes"`
	InstanceType          string          `xml:"instanceType"`
	LaunchTime            string          `xml:"launchTime"`
	Placement             xmlPlacement    `xml:"placement"`
	Monitoring            xmlMonitoring   `xml:"monitoring"`
	SubnetID              string          `xml:"subnetId"`
	VpcID                 string          `xml:"vpcId"`
	PrivateIPAddress      string          `xml:"privateIpAddress"`
	SourceDestCheck       bool            `xml:"sourceDestCheck"`
	GroupSet              xmlSet          `xml:"groupSet"`
	StateReason           *xmlStateReason `xml:"stateReason,omitempty"`
	Architecture          string          `xml:"architecture"`
	RootDeviceType        string          `xml:"rootDeviceType"`
	RootDeviceName        string          `xml:"rootDeviceName"`
	VirtualizationType    string          `xml:"virtualizationType"`
	ClientToken           string          `xml:"clientToken"`
	Tags                  []xmlTag        `xml:"tagSet>item,omitempty"`
	Hypervisor            string          `xml:"hypervisor"`
	EbsOptimized          bool            `xml:"ebsOptimized"`
	InstanceLifecycle     string          `xml:"instanceLifecycle,omitempty"`
	CapacityReservationID string          `xml:"capacityReservationId,omitempty"`
	CapacityBlockID       string          `xml:"capacityBlockId,omitempty"`
}

type xmlReservation struct {
	ReservationID string        `xml:"reservationId"`
	OwnerID       string        `xml:"ownerId"`
	GroupSet      xmlSet        `xml:"groupSet"`
	Instances     []xmlInstance `xml:"instancesSet>item"`
}

type runInstancesResponse struct {
	XMLName   xml.Name `xml:"RunInstancesResponse"`
	Xmlns     string   `xml:"xmlns,attr"`
	RequestID string   `xml:"requestId"`
	xmlReservation
}

type describeInstancesResponse struct {
	XMLName      xml.Name         `xml:"DescribeInstancesResponse"`
	Xmlns        string           `xml:"xmlns,attr"`
	RequestID    string           `xml:"requestId"`
	Reservations []xmlReservation `xml:"reservationSet>item"`
	NextToken    string           `xml:"nextToken,omitempty"`
}

type xmlStateChange struct {
	InstanceID    string   `xml:"instanceId"`
	CurrentState  xmlState `xml:"currentState"`
	PreviousState xmlState `xml:"previousState"`
}

type terminateInstancesResponse struct {
	XMLName   xml.Name         `xml:"TerminateInstancesResponse"`
	Xmlns     string           `xml:"xmlns,attr"`
	RequestID string           `xml:"requestId"`
	Instances []xmlStateChange `xml:"instancesSet>item"`
}

// createTagsResponse and deleteTagsResponse answer CreateTags and DeleteTags: only the request id
// and <return>true</return>.
type createTagsResponse struct {
	XMLName   xml.Name `xml:"CreateTagsResponse"`
	Xmlns     string   `xml:"xmlns,attr"`
	RequestID string   `xml:"requestId"`
	Return    bool     `xml:"return"`
}

type deleteTagsResponse struct {
	XMLName   xml.Name `xml:"DeleteTagsResponse"`
	Xmlns     string   `xml:"xmlns,attr"`
	RequestID string   `xml:"requestId"`
	Return    bool     `xml:"return"`
}

// errorResponse is EC2's error document (no namespace; RequestID, not requestId).
type errorResponse struct {
	XMLName   xml.Name   `xml:"Response"`
	Errors    []xmlError `xml:"Errors>Error"`
	RequestID string     `xml:"RequestID"`
}

type xmlError struct {
	Code    string `xml:"Code"`
	Message string `xml:"Message"`
}

// The instance states with EC2's codes.
const (
	StatePending      = "pending"
	StateRunning      = "running"
	StateShuttingDown = "shutting-down"
	StateTerminated   = "terminated"
	StateStopping     = "stopping"
	StateStopped      = "stopped"
)

var stateCodes = map[string]int{
	StatePending:      0,
	StateRunning:      16,
	StateShuttingDown: 32,
	StateTerminated:   48,
	StateStopping:     64,
	StateStopped:      80,
}

func state(name string) xmlState { return xmlState{Code: stateCodes[name], Name: name} }

func (in *instance) xml() xmlInstance {
	x := xmlInstance{
		InstanceID:         in.ID,
		ImageID:            in.ImageID,
		State:              state(in.State),
		PrivateDNSName:     in.PrivateDNSName,
		InstanceType:       in.Type,
		LaunchTime:         in.LaunchTime.UTC().Format("2006-01-02T15:04:05.000Z"),
		Placement:          xmlPlacement{AvailabilityZone: in.AvailabilityZone, Tenancy: "default"},
		Monitoring:         xmlMonitoring{State: "disabled"},
		SubnetID:           in.SubnetID,
		VpcID:              vpcID,
		PrivateIPAddress:   in.PrivateIP,
		SourceDestCheck:    true,
		Architecture:       "x86_64",
		RootDeviceType:     "ebs",
		RootDeviceName:     "/dev/xvda",
		VirtualizationType: "hvm",
		ClientToken:        in.ClientToken,
		Hypervisor:         "xen",
		EbsOptimized:       true,
	}
	if in.State == StateShuttingDown || in.State == StateTerminated {
		x.StateReason = &xmlStateReason{Code: "Client.UserInitiatedShutdown", Message: "Client.UserInitiatedShutdown: User initiated shutdown"}
		x.Reason = "User initiated (" + in.terminatedAt.UTC().Format("2006-01-02 15:04:05 MST") + ")"
	}
	x.CapacityReservationID, x.CapacityBlockID = in.CapacityReservationID, in.CapacityBlockID
	if in.CapacityBlock {
		x.InstanceLifecycle = "capacity-block"
	}
	for _, k := range sortedKeys(in.Tags) {
		x.Tags = append(x.Tags, xmlTag{Key: k, Value: in.Tags[k]})
	}
	return x
}

// reservations groups instances, in order, into their reservations.
func reservations(ins []*instance) []xmlReservation {
	var out []xmlReservation
	for _, in := range ins {
		if len(out) == 0 || out[len(out)-1].ReservationID != in.ReservationID {
			out = append(out, xmlReservation{ReservationID: in.ReservationID, OwnerID: OwnerID})
		}
		r := &out[len(out)-1]
		r.Instances = append(r.Instances, in.xml())
	}
	return out
}

type xmlCapacityReservation struct {
	ID                     string   `xml:"capacityReservationId"`
	OwnerID                string   `xml:"ownerId"`
	InstanceType           string   `xml:"instanceType"`
	InstancePlatform       string   `xml:"instancePlatform"`
	AvailabilityZone       string   `xml:"availabilityZone"`
	Tenancy                string   `xml:"tenancy"`
	TotalInstanceCount     int      `xml:"totalInstanceCount"`
	AvailableInstanceCount int      `xml:"availableInstanceCount"`
	State                  string   `xml:"state"`
	StartDate              string   `xml:"startDate,omitempty"`
	EndDate                string   `xml:"endDate,omitempty"`
	EndDateType            string   `xml:"endDateType"`
	InstanceMatchCriteria  string   `xml:"instanceMatchCriteria"`
	ReservationType        string   `xml:"reservationType"`
	CapacityBlockID        string   `xml:"capacityBlockId,omitempty"`
	Tags                   []xmlTag `xml:"tagSet>item,omitempty"`
}

type describeCapacityReservationsResponse struct {
	XMLName      xml.Name                 `xml:"DescribeCapacityReservationsResponse"`
	Xmlns        string                   `xml:"xmlns,attr"`
	RequestID    string                   `xml:"requestId"`
	Reservations []xmlCapacityReservation `xml:"capacityReservationSet>item"`
	NextToken    string                   `xml:"nextToken,omitempty"`
}

type xmlCapacityBlock struct {
	ID               string   `xml:"capacityBlockId"`
	UltraServerType  string   `xml:"ultraserverType,omitempty"`
	AvailabilityZone string   `xml:"availabilityZone"`
	ReservationIDs   []string `xml:"capacityReservationIdSet>item"`
	StartDate        string   `xml:"startDate,omitempty"`
	EndDate          string   `xml:"endDate,omitempty"`
	State            string   `xml:"state"`
}

type describeCapacityBlocksResponse struct {
	XMLName   xml.Name           `xml:"DescribeCapacityBlocksResponse"`
	Xmlns     string             `xml:"xmlns,attr"`
	RequestID string             `xml:"requestId"`
	Blocks    []xmlCapacityBlock `xml:"capacityBlockSet>item"`
}

type xmlSubnet struct {
	ID               string `xml:"subnetId"`
	AvailabilityZone string `xml:"availabilityZone"`
	VpcID            string `xml:"vpcId"`
	State            string `xml:"state"`
	OwnerID          string `xml:"ownerId"`
}

type describeSubnetsResponse struct {
	XMLName   xml.Name    `xml:"DescribeSubnetsResponse"`
	Xmlns     string      `xml:"xmlns,attr"`
	RequestID string      `xml:"requestId"`
	Subnets   []xmlSubnet `xml:"subnetSet>item"`
}

func timestamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z")
}

func (r *CapacityReservation) xml() xmlCapacityReservation {
	x := xmlCapacityReservation{
		ID: r.ID, OwnerID: OwnerID, InstanceType: r.InstanceType, InstancePlatform: "Linux/UNIX",
		AvailabilityZone: r.AvailabilityZone, Tenancy: "default", TotalInstanceCount: r.Total,
		AvailableInstanceCount: r.Available, State: r.State, StartDate: timestamp(r.Start), EndDate: timestamp(r.End),
		EndDateType: "unlimited", InstanceMatchCriteria: "targeted", ReservationType: reservationType(r), CapacityBlockID: r.CapacityBlockID,
	}
	if !r.End.IsZero() {
		x.EndDateType = "limited"
	}
	for _, k := range sortedKeys(r.Tags) {
		x.Tags = append(x.Tags, xmlTag{Key: k, Value: r.Tags[k]})
	}
	return x
}
