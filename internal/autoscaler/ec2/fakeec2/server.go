// Package fakeec2 is a fake EC2 endpoint for tests: an HTTP server that speaks the real EC2
// Query API (version 2016-11-15) for the five actions the neuron-autoscaler's ec2 provider
// calls, RunInstances, DescribeInstances, TerminateInstances, CreateTags and DeleteTags, so that
// the unmodified
// aws-sdk-go-v2 EC2 client talks to it with only its endpoint overridden. It exists because EC2
// cannot run on a developer's machine or in CI; it is not EC2.
//
// The wire protocol is EC2's: an HTTP POST (or GET) with a form-encoded body
// (Action=RunInstances&Version=2016-11-15&MinCount=1&TagSpecification.1.Tag.1.Key=...), lists
// numbered from 1 (Filter.N.Name, Filter.N.Value.M, InstanceId.N, TagSpecification.N.Tag.M.Key,
// ResourceId.N, Tag.N.Key),
// responses as XML in the namespace http://ec2.amazonaws.com/doc/2016-11-15/ with EC2's
// element names (reservationSet, instancesSet, item, instanceState, tagSet, ...), and errors as
// EC2's <Response><Errors><Error><Code/><Message/></Error></Errors><RequestID/></Response> with
// EC2's codes and HTTP statuses (InsufficientInstanceCapacity is a 500, as on EC2, which the
// SDK's default retryer retries).
//
// What it models: launch templates and subnets (each in an Availability Zone) registered by the
// test; ClientToken idempotency as EC2 does it (the same token with the same parameters returns
// the original reservation, also after the instance terminated; the same token with other
// parameters is an IdempotentParameterMismatch; a failed launch records no token); instance
// states (pending until it has been listed by DescribeInstances PendingDescribes times, then
// running; TerminateInstances moves it to shutting-down and the next DescribeInstances that lists
// it to terminated; terminated instances stay listed, as on EC2 for a while); tags on instances
// (CreateTags adds or overwrites, DeleteTags removes the keys given, only where a given value
// matches, or every tag when no key is given; the fake tags instances only, and other resource
// ids are InvalidID); private DNS names
// (ip-10-0-x-y.<region>.compute.internal, ec2.internal in us-east-1, or, in a subnet with
// resource-name hostnames, i-<id>.<region>.compute.internal) with the region taken from
// the request's SigV4 credential scope; the DescribeInstances filters tag:<key>, tag-key,
// instance-state-name, instance-id, instance-type, private-dns-name, client-token, subnet-id and
// availability-zone with EC2's * and ? wildcards; MaxResults (5 to 1000) and NextToken; and the
// errors InvalidAction, MissingAction, MissingParameter, UnknownParameter, NoSuchVersion,
// InvalidParameterValue, InvalidParameterCombination, InvalidInstanceID.NotFound, InvalidID,
// TagLimitExceeded,
// InvalidSubnetID.NotFound, InvalidLaunchTemplateId.NotFound,
// InvalidLaunchTemplateName.NotFoundException, IdempotentParameterMismatch, DryRunOperation,
// AuthFailure, and, through test hooks, InsufficientInstanceCapacity, Unsupported and
// UnauthorizedOperation. Parameters of these actions that it does not model are rejected as
// UnknownParameter rather than ignored, so a provider change that needs them fails loudly here.
//
// Reserved capacity: tests seed On-Demand Capacity Reservations and Capacity Blocks with
// AddCapacityReservation. DescribeCapacityReservations (ids, filters state, instance-type,
// availability-zone, reservation-type, tag:<key>, tag-key; MaxResults and NextToken),
// DescribeCapacityBlocks (by id: the UltraServer type) and DescribeSubnets answer from them;
// RunInstances with CapacityReservationSpecification.CapacityReservationTarget launches into one,
// counting its AvailableInstanceCount down (ReservationCapacityExceeded when it has no room) and
// refusing a Capacity Block without InstanceMarketOptions.MarketType=capacity-block, a market type
// on an ODCR, another instance type, a subnet in another Availability Zone or a reservation not
// active; TerminateInstances gives the slot back; DescribeInstances shows capacityReservationId,
// capacityBlockId and, on Capacity Blocks, instanceLifecycle capacity-block. EC2's exact codes
// and messages for these refusals are not public; the fake's are close approximations
// (InvalidParameterCombination, InvalidCapacityReservationId.NotFound).
//
// Authentication: a request must carry a SigV4 Authorization header (AuthFailure otherwise),
// whose credential scope names the region and the service ec2; the signature is not verified.
package fakeec2

import (
	"maps"
	"net/http/httptest"
	"sync"
	"time"
)

// Namespace is the XML namespace of EC2 API version APIVersion.
const (
	Namespace  = "http://ec2.amazonaws.com/doc/2016-11-15/"
	APIVersion = "2016-11-15"
	// OwnerID is the account the fake's reservations belong to.
	OwnerID = "123456789012"
	vpcID   = "vpc-0fa4e00000000000a"
	// maxBody caps a request body, as EC2 does (its limit is larger; ours only protects tests).
	maxBody = 1 << 20
)

// Instance is a snapshot of one instance in the fake.
type Instance struct {
	ID, ReservationID     string
	Type                  string
	State                 string
	ImageID               string
	SubnetID              string
	AvailabilityZone      string
	PrivateIP             string
	PrivateDNSName        string
	ClientToken           string
	LaunchTemplateID      string
	LaunchTemplateVersion string // as requested: $Latest, $Default or a number
	Tags                  map[string]string
	VolumeTags            map[string]string
	LaunchTime            time.Time
	// CapacityReservationID is the reservation it launched into; CapacityBlockID its Capacity
	// Block's id; CapacityBlock: launched with the capacity-block market type.
	CapacityReservationID, CapacityBlockID string
	CapacityBlock                          bool
}

// LaunchTemplate is a launch template RunInstances may name by id or name.
type LaunchTemplate struct {
	ID, Name     string
	ImageID      string // default ami-0fa4e0000000000a1
	InstanceType string // used when RunInstances names none; default m1.small, as EC2's
	Versions     int    // numbered versions 1..Versions; default 1
}

type instance struct {
	Instance
	seq          int
	describes    int  // DescribeInstances responses that listed it
	hidden       bool // launched while eventual consistency was on
	terminatedAt time.Time
}

type launch struct {
	params string
	ids    []string
}

// Server is the fake EC2 endpoint. Its methods are safe for concurrent use.
type Server struct {
	srv *httptest.Server
	now func() time.Time

	mu               sync.Mutex
	subnets          map[string]string // subnet id -> availability zone
	subnetOrder      []string
	resourceNames    map[string]bool // subnets whose hostname type is resource-name
	templates        []LaunchTemplate
	noCapacity       map[string]bool
	unsupported      map[[2]string]bool // {az, type}
	denied           map[string]bool
	lagging          bool
	pendingDescribes int
	instances        []*instance
	byID             map[string]*instance
	tokens           map[string]*launch
	calls            map[string]int
	reservations     []*CapacityReservation
	seq              int
	requests         int
}

// NewServer starts a fake EC2 endpoint on a loopback port. Register subnets and launch
// templates before launching; Close it when done.
func NewServer() *Server {
	s := newServer()
	s.srv = httptest.NewServer(s)
	return s
}

func newServer() *Server {
	return &Server{
		now:              time.Now,
		subnets:          map[string]string{},
		resourceNames:    map[string]bool{},
		noCapacity:       map[string]bool{},
		unsupported:      map[[2]string]bool{},
		denied:           map[string]bool{},
		pendingDescribes: 1,
		byID:             map[string]*instance{},
		tokens:           map[string]*launch{},
		calls:            map[string]int{},
	}
}

// URL is the endpoint to give the SDK (ec2.Options.BaseEndpoint).
func (s *Server) URL() string { return s.srv.URL }

// Close stops the server.
func (s *Server) Close() { s.srv.Close() }

// AddSubnet registers a subnet in an Availability Zone (e.g. us-west-2a). The first one added
// is the default subnet, used when RunInstances names none.
func (s *Server) AddSubnet(id, az string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.subnets[id]; !ok {
		s.subnetOrder = append(s.subnetOrder, id)
	}
	s.subnets[id] = az
}

// SetResourceNameHostnames gives the subnet the hostname type resource-name (EC2's
// PrivateDnsNameOptionsOnLaunch.HostnameType): the instances launched into it from then on have
// the private DNS name i-<id>.<region>.compute.internal (i-<id>.ec2.internal in us-east-1)
// instead of ip-<address>.<region>.compute.internal.
func (s *Server) SetResourceNameHostnames(subnet string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resourceNames[subnet] = true
}

// AddLaunchTemplate registers a launch template.
func (s *Server) AddLaunchTemplate(lt LaunchTemplate) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if lt.ImageID == "" {
		lt.ImageID = "ami-0fa4e0000000000a1"
	}
	if lt.Versions == 0 {
		lt.Versions = 1
	}
	s.templates = append(s.templates, lt)
}

// FailCapacity makes RunInstances in the subnet fail with InsufficientInstanceCapacity (HTTP
// 500) until RestoreCapacity.
func (s *Server) FailCapacity(subnet string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.noCapacity[subnet] = true
}

// RestoreCapacity undoes FailCapacity.
func (s *Server) RestoreCapacity(subnet string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.noCapacity, subnet)
}

// SetUnsupported makes the Availability Zone not offer the instance type: RunInstances there
// fails with Unsupported (HTTP 400).
func (s *Server) SetUnsupported(az, instanceType string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unsupported[[2]string{az, instanceType}] = true
}

// Deny makes every call of the action (RunInstances, DescribeInstances, TerminateInstances,
// CreateTags, DeleteTags) fail with UnauthorizedOperation (HTTP 403), as when the caller's IAM
// policy lacks it.
func (s *Server) Deny(action string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.denied[action] = true
}

// SetEventualConsistency, while on, keeps the instances launched meanwhile out of
// DescribeInstances (by filter and by id), as EC2 may for a while after RunInstances returns.
// Turning it off makes them visible.
func (s *Server) SetEventualConsistency(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lagging = on
	if !on {
		for _, in := range s.instances {
			in.hidden = false
		}
	}
}

// SetPendingDescribes sets how many DescribeInstances responses list a new instance as pending
// before it is running (default 1; 0 makes it running right after RunInstances returns).
func (s *Server) SetPendingDescribes(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pendingDescribes = n
}

// Instances returns a snapshot of every instance, terminated ones included, in launch order.
func (s *Server) Instances() []Instance {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Instance, 0, len(s.instances))
	for _, in := range s.instances {
		c := in.Instance
		c.Tags = maps.Clone(in.Tags)
		c.VolumeTags = maps.Clone(in.VolumeTags)
		out = append(out, c)
	}
	return out
}

// Calls is how many requests of the action the fake has answered, errors included.
func (s *Server) Calls(action string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[action]
}
