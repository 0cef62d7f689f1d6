package fakeec2

import "encoding/xml"

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
	InstanceID         string          `xml:"instanceId"`
	ImageID            string          `xml:"imageId"`
	State              xmlState        `xml:"instanceState"`
	PrivateDNSName     string          `xml:"privateDnsName"`
	DNSName            string          `xml:"dnsName"`
	Reason             string          `xml:"reason"`
	AmiLaunchIndex     int             `xml:"amiLaunchIndex"`
	ProductCodes       xmlSet          `xml:"productCodes"`
	InstanceType       string          `xml:"instanceType"`
	LaunchTime         string          `xml:"launchTime"`
	Placement          xmlPlacement    `xml:"placement"`
	Monitoring         xmlMonitoring   `xml:"monitoring"`
	SubnetID           string          `xml:"subnetId"`
	VpcID              string          `xml:"vpcId"`
	PrivateIPAddress   string          `xml:"privateIpAddress"`
	SourceDestCheck    bool            `xml:"sourceDestCheck"`
	GroupSet           xmlSet          `xml:"groupSet"`
	StateReason        *xmlStateReason `xml:"stateReason,omitempty"`
	Architecture       string          `xml:"architecture"`
	RootDeviceType     string          `xml:"rootDeviceType"`
	RootDeviceName     string          `xml:"rootDeviceName"`
	VirtualizationType string          `xml:"virtualizationType"`
	ClientToken        string          `xml:"clientToken"`
	Tags               []xmlTag        `xml:"tagSet>item,omitempty"`
	Hypervisor         string          `xml:"hypervisor"`
	EbsOptimized       bool            `xml:"ebsOptimized"`
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
