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
// Authentication: a request must carry a SigV4 Authorization header (AuthFailure otherwise),
// whose credential scope names the region and the service ec2; the signature is not verified.
package fakeec2

import (
	"cmp"
	"encoding/base64"
	"encoding/xml"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
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

// apiError is an EC2 error response.
type apiError struct {
	status        int
	code, message string
}

func errorf(status int, code, format string, args ...any) *apiError {
	return &apiError{status: status, code: code, message: fmt.Sprintf(format, args...)}
}

func missing(param string) *apiError {
	return errorf(http.StatusBadRequest, "MissingParameter", "The request must contain the parameter %s", param)
}

func invalidValue(param, value, why string) *apiError {
	return errorf(http.StatusBadRequest, "InvalidParameterValue", "Value (%s) for parameter %s is invalid. %s", value, param, why)
}

// ServeHTTP answers one EC2 Query API request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.requests++
	reqID := fmt.Sprintf("fa4e0000-0000-4000-8000-%012x", s.requests)
	s.mu.Unlock()

	var body any
	var aerr *apiError
	switch r.Method {
	case http.MethodPost, http.MethodGet:
		r.Body = http.MaxBytesReader(w, r.Body, maxBody)
		if err := r.ParseForm(); err != nil {
			aerr = errorf(http.StatusBadRequest, "MalformedQueryString", "The query string is malformed: %v", err)
		} else {
			body, aerr = s.handle(r.Header.Get("Authorization"), r.Form, reqID)
		}
	default:
		aerr = errorf(http.StatusMethodNotAllowed, "InvalidHttpRequest", "The HTTP method %s is not supported; use POST or GET.", r.Method)
	}
	status := http.StatusOK
	if aerr != nil {
		status = aerr.status
		body = errorResponse{Errors: []xmlError{{Code: aerr.code, Message: aerr.message}}, RequestID: reqID}
	}
	out, err := xml.Marshal(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	w.Header().Set("X-Amzn-Requestid", reqID)
	w.WriteHeader(status)
	_, _ = w.Write([]byte(xml.Header))
	_, _ = w.Write(out)
}

func (s *Server) handle(auth string, form url.Values, reqID string) (any, *apiError) {
	region, aerr := regionOf(auth)
	if aerr != nil {
		return nil, aerr
	}
	action := form.Get("Action")
	if action == "" {
		return nil, errorf(http.StatusBadRequest, "MissingAction", "The request must contain the parameter Action")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[action]++
	allowed, ok := actionParams[action]
	if !ok {
		return nil, errorf(http.StatusBadRequest, "InvalidAction", "The action %s is not valid for this web service.", action)
	}
	switch v := form.Get("Version"); v {
	case APIVersion:
	case "":
		return nil, missing("Version")
	default:
		return nil, errorf(http.StatusBadRequest, "NoSuchVersion", "The requested version (%s) of service AmazonEC2 does not exist", v)
	}
	for _, k := range sortedKeys(form) {
		top, _, _ := strings.Cut(k, ".")
		if !slices.Contains(allowed, top) {
			return nil, errorf(http.StatusBadRequest, "UnknownParameter", "The parameter %s is not recognized (fakeec2 models %s with the parameters %s)", k, action, strings.Join(allowed, ", "))
		}
	}
	if s.denied[action] {
		return nil, errorf(http.StatusForbidden, "UnauthorizedOperation",
			"You are not authorized to perform this operation. User: arn:aws:sts::%s:assumed-role/neuron-autoscaler/fakeec2 is not authorized to perform: ec2:%s on resource: arn:aws:ec2:%s:%s:instance/* because no identity-based policy allows the ec2:%s action. Encoded authorization failure message: ZmFrZWVjMg",
			OwnerID, action, region, OwnerID, action)
	}
	dryRun := false
	if v := form.Get("DryRun"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, invalidValue("DryRun", v, "It must be true or false.")
		}
		dryRun = b
	}
	switch action {
	case "RunInstances":
		return s.runInstances(region, form, reqID, dryRun)
	case "DescribeInstances":
		return s.describeInstances(form, reqID, dryRun)
	case "CreateTags":
		return s.createTags(form, reqID, dryRun)
	case "DeleteTags":
		return s.deleteTags(form, reqID, dryRun)
	default:
		return s.terminateInstances(form, reqID, dryRun)
	}
}

// actionParams are the top-level parameters the fake models per action.
var actionParams = map[string][]string{
	"RunInstances":       {"Action", "Version", "DryRun", "ClientToken", "MinCount", "MaxCount", "InstanceType", "ImageId", "SubnetId", "LaunchTemplate", "TagSpecification"},
	"DescribeInstances":  {"Action", "Version", "DryRun", "Filter", "InstanceId", "MaxResults", "NextToken"},
	"TerminateInstances": {"Action", "Version", "DryRun", "InstanceId"},
	"CreateTags":         {"Action", "Version", "DryRun", "ResourceId", "Tag"},
	"DeleteTags":         {"Action", "Version", "DryRun", "ResourceId", "Tag"},
}

var dryRunError = errorf(http.StatusPreconditionFailed, "DryRunOperation", "Request would have succeeded, but DryRun flag is set.")

// regionOf reads the region from a SigV4 Authorization header's credential scope
// (AWS4-HMAC-SHA256 Credential=<key>/<date>/<region>/ec2/aws4_request, SignedHeaders=...,
// Signature=...). The signature is not verified.
func regionOf(auth string) (string, *apiError) {
	fail := errorf(http.StatusUnauthorized, "AuthFailure", "AWS was not able to validate the provided access credentials")
	rest, ok := strings.CutPrefix(auth, "AWS4-HMAC-SHA256 ")
	if !ok {
		return "", fail
	}
	for field := range strings.SplitSeq(rest, ",") {
		cred, ok := strings.CutPrefix(strings.TrimSpace(field), "Credential=")
		if !ok {
			continue
		}
		scope := strings.Split(cred, "/")
		if len(scope) != 5 || scope[0] == "" || scope[2] == "" || scope[3] != "ec2" || scope[4] != "aws4_request" {
			return "", fail
		}
		if !strings.Contains(rest, "Signature=") {
			return "", fail
		}
		return scope[2], nil
	}
	return "", fail
}

// indices returns the list member numbers N of the keys prefix.N and prefix.N.<member>, in
// order. EC2 numbers lists from 1.
func indices(form url.Values, prefix string) ([]int, *apiError) {
	seen := map[int]bool{}
	for k := range form {
		rest, ok := strings.CutPrefix(k, prefix+".")
		if !ok {
			continue
		}
		n, _, _ := strings.Cut(rest, ".")
		i, err := strconv.Atoi(n)
		if err != nil || i < 1 || strconv.Itoa(i) != n {
			return nil, errorf(http.StatusBadRequest, "UnknownParameter", "The parameter %s is not recognized", k)
		}
		seen[i] = true
	}
	out := make([]int, 0, len(seen))
	for i := range seen {
		out = append(out, i)
	}
	sort.Ints(out)
	return out, nil
}

// list returns the values of prefix.1, prefix.2, ... in order.
func list(form url.Values, prefix string) ([]string, *apiError) {
	idx, aerr := indices(form, prefix)
	if aerr != nil {
		return nil, aerr
	}
	out := make([]string, 0, len(idx))
	for _, i := range idx {
		k := prefix + "." + strconv.Itoa(i)
		if _, ok := form[k]; !ok {
			return nil, errorf(http.StatusBadRequest, "UnknownParameter", "The parameter %s.%d.* is not recognized", prefix, i)
		}
		out = append(out, form.Get(k))
	}
	return out, nil
}

// keysUnder checks that the members of an object are the known ones.
func keysUnder(form url.Values, prefix string, known ...string) *apiError {
	for k := range form {
		rest, ok := strings.CutPrefix(k, prefix+".")
		if !ok {
			continue
		}
		if !slices.Contains(known, rest) {
			return errorf(http.StatusBadRequest, "UnknownParameter", "The parameter %s is not recognized", k)
		}
	}
	return nil
}

func positive(form url.Values, name string) (int, *apiError) {
	v := form.Get(name)
	if v == "" {
		return 0, missing(name)
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, invalidValue(name, v, "It must be a positive integer.")
	}
	return n, nil
}

var taggable = []string{"instance", "volume", "network-interface", "spot-instances-request"}

func (s *Server) runInstances(region string, form url.Values, reqID string, dryRun bool) (any, *apiError) {
	minCount, aerr := positive(form, "MinCount")
	if aerr != nil {
		return nil, aerr
	}
	maxCount, aerr := positive(form, "MaxCount")
	if aerr != nil {
		return nil, aerr
	}
	if minCount > maxCount {
		return nil, invalidValue("MinCount", form.Get("MinCount"), "It must not exceed MaxCount.")
	}
	token := form.Get("ClientToken")
	if len(token) > 64 {
		return nil, invalidValue("ClientToken", token, "It must be at most 64 ASCII characters.")
	}

	// Launch template, image and type.
	if aerr := keysUnder(form, "LaunchTemplate", "LaunchTemplateId", "LaunchTemplateName", "Version"); aerr != nil {
		return nil, aerr
	}
	var lt *LaunchTemplate
	ltID, ltName, ltVersion := form.Get("LaunchTemplate.LaunchTemplateId"), form.Get("LaunchTemplate.LaunchTemplateName"), form.Get("LaunchTemplate.Version")
	switch {
	case ltID != "" && ltName != "":
		return nil, errorf(http.StatusBadRequest, "InvalidParameterCombination", "A launch template ID and a launch template name cannot be specified in the same request.")
	case ltID != "":
		if lt = s.template(func(t LaunchTemplate) bool { return t.ID == ltID }); lt == nil {
			return nil, errorf(http.StatusBadRequest, "InvalidLaunchTemplateId.NotFound", "The specified launch template, with template ID %s, does not exist.", ltID)
		}
	case ltName != "":
		if lt = s.template(func(t LaunchTemplate) bool { return t.Name == ltName }); lt == nil {
			return nil, errorf(http.StatusBadRequest, "InvalidLaunchTemplateName.NotFoundException", "The specified launch template, with template name %s, does not exist.", ltName)
		}
	case ltVersion != "":
		return nil, missing("LaunchTemplate.LaunchTemplateId or LaunchTemplate.LaunchTemplateName")
	}
	if lt != nil && ltVersion != "" && ltVersion != "$Latest" && ltVersion != "$Default" {
		if v, err := strconv.Atoi(ltVersion); err != nil || v < 1 || v > lt.Versions {
			return nil, errorf(http.StatusBadRequest, "InvalidLaunchTemplateId.VersionNotFound", "Could not find launch template version %s for the launch template %s.", ltVersion, lt.ID)
		}
	}
	image, itype := form.Get("ImageId"), form.Get("InstanceType")
	if lt != nil {
		image = cmp.Or(image, lt.ImageID)
		itype = cmp.Or(itype, lt.InstanceType)
	}
	if image == "" {
		return nil, missing("ImageId")
	}
	itype = cmp.Or(itype, "m1.small")

	// Subnet.
	subnet := form.Get("SubnetId")
	if subnet == "" {
		if len(s.subnetOrder) == 0 {
			return nil, errorf(http.StatusBadRequest, "VPCIdNotSpecified", "No default VPC for this user. GroupName is only supported for EC2-Classic and default VPC.")
		}
		subnet = s.subnetOrder[0]
	}
	az, ok := s.subnets[subnet]
	if !ok {
		return nil, errorf(http.StatusBadRequest, "InvalidSubnetID.NotFound", "The subnet ID '%s' does not exist", subnet)
	}

	// Tags.
	tags := map[string]map[string]string{}
	specs, aerr := indices(form, "TagSpecification")
	if aerr != nil {
		return nil, aerr
	}
	for _, n := range specs {
		p := "TagSpecification." + strconv.Itoa(n)
		for k := range form {
			if rest, ok := strings.CutPrefix(k, p+"."); ok && rest != "ResourceType" && !strings.HasPrefix(rest, "Tag.") {
				return nil, errorf(http.StatusBadRequest, "UnknownParameter", "The parameter %s is not recognized", k)
			}
		}
		rt := form.Get(p + ".ResourceType")
		if rt == "" {
			return nil, missing(p + ".ResourceType")
		}
		if !slices.Contains(taggable, rt) {
			return nil, errorf(http.StatusBadRequest, "InvalidParameterValue", "'%s' is not a valid taggable resource type for this operation.", rt)
		}
		if tags[rt] != nil {
			return nil, errorf(http.StatusBadRequest, "InvalidParameterValue", "The same resource type may not be specified more than once in tag specifications")
		}
		tags[rt] = map[string]string{}
		ts, aerr := indices(form, p+".Tag")
		if aerr != nil {
			return nil, aerr
		}
		for _, m := range ts {
			tp := p + ".Tag." + strconv.Itoa(m)
			if aerr := keysUnder(form, tp, "Key", "Value"); aerr != nil {
				return nil, aerr
			}
			key, value := form.Get(tp+".Key"), form.Get(tp+".Value")
			if aerr := checkTag(tp, key, value); aerr != nil {
				return nil, aerr
			}
			if _, dup := tags[rt][key]; dup {
				return nil, errorf(http.StatusBadRequest, "InvalidParameterValue", "Duplicate tag key '%s' specified.", key)
			}
			tags[rt][key] = value
		}
		if len(tags[rt]) > 50 {
			return nil, errorf(http.StatusBadRequest, "TagLimitExceeded", "The maximum number of tags per resource is 50.")
		}
	}
	if dryRun {
		return nil, dryRunError
	}

	// Idempotency: EC2 compares every parameter but the token itself.
	params := canonical(form)
	if token != "" {
		if l, ok := s.tokens[token]; ok {
			if l.params != params {
				return nil, errorf(http.StatusBadRequest, "IdempotentParameterMismatch", "Arguments on this idempotent request are inconsistent with arguments used in previous request(s).")
			}
			ins := make([]*instance, 0, len(l.ids))
			for _, id := range l.ids {
				ins = append(ins, s.byID[id])
			}
			return runResponse(reqID, ins), nil
		}
	}

	// Capacity.
	if s.unsupported[[2]string{az, itype}] {
		return nil, errorf(http.StatusBadRequest, "Unsupported", "Your requested instance type (%s) is not supported in your requested Availability Zone (%s). Please retry your request by not specifying an Availability Zone or choosing %s.", itype, az, s.otherZones(az))
	}
	if s.noCapacity[subnet] {
		return nil, errorf(http.StatusInternalServerError, "InsufficientInstanceCapacity", "We currently do not have sufficient %s capacity in the Availability Zone you requested (%s). Our system will be working on provisioning additional capacity. You can currently get %s capacity by not specifying an Availability Zone in your request or choosing %s.", itype, az, itype, s.otherZones(az))
	}
	if maxCount > 100 {
		return nil, errorf(http.StatusBadRequest, "InstanceLimitExceeded", "You have requested more instances (%d) than your current instance limit of 100 allows for the specified instance type.", maxCount)
	}

	s.seq++
	resID := fmt.Sprintf("r-%017x", s.seq)
	l := &launch{params: params}
	var ins []*instance
	for i := 0; i < maxCount; i++ {
		s.seq++
		ip := fmt.Sprintf("10.0.%d.%d", s.seq/250, s.seq%250+4)
		domain := region + ".compute.internal"
		if region == "us-east-1" {
			domain = "ec2.internal"
		}
		id := fmt.Sprintf("i-%017x", s.seq)
		host := "ip-" + strings.ReplaceAll(ip, ".", "-")
		if s.resourceNames[subnet] {
			host = id
		}
		in := &instance{
			Instance: Instance{
				ID:               id,
				ReservationID:    resID,
				Type:             itype,
				State:            StatePending,
				ImageID:          image,
				SubnetID:         subnet,
				AvailabilityZone: az,
				PrivateIP:        ip,
				PrivateDNSName:   host + "." + domain,
				ClientToken:      token,
				Tags:             nonNil(tags["instance"]),
				VolumeTags:       nonNil(tags["volume"]),
				LaunchTime:       s.now(),
			},
			seq:    s.seq,
			hidden: s.lagging,
		}
		if lt != nil {
			in.LaunchTemplateID, in.LaunchTemplateVersion = lt.ID, cmp.Or(ltVersion, "$Default")
		}
		if s.pendingDescribes == 0 {
			in.State = StateRunning
		}
		s.instances = append(s.instances, in)
		s.byID[in.ID] = in
		l.ids = append(l.ids, in.ID)
		ins = append(ins, in)
	}
	if token != "" {
		s.tokens[token] = l
	}
	return runResponse(reqID, ins), nil
}

// checkTag checks a tag's key and value as EC2 does (the member prefix names a missing key).
func checkTag(prefix, key, value string) *apiError {
	switch {
	case key == "":
		return missing(prefix + ".Key")
	case len(key) > 128:
		return errorf(http.StatusBadRequest, "InvalidParameterValue", "Tag key exceeds the maximum length of 128 characters")
	case len(value) > 256:
		return errorf(http.StatusBadRequest, "InvalidParameterValue", "Tag value exceeds the maximum length of 256 characters")
	case strings.HasPrefix(strings.ToLower(key), "aws:"):
		return errorf(http.StatusBadRequest, "InvalidParameterValue", "Tag keys starting with 'aws:' are reserved for internal use")
	}
	return nil
}

// tagged returns the instances named by ResourceId.N, the resources of CreateTags and DeleteTags.
// An id that is not an instance's (i-...) is InvalidID: the fake tags instances only. An
// instance EC2 does not show yet (eventual consistency) is InvalidInstanceID.NotFound, as on
// EC2 right after RunInstances.
func (s *Server) tagged(form url.Values) ([]*instance, *apiError) {
	ids, aerr := list(form, "ResourceId")
	if aerr != nil {
		return nil, aerr
	}
	if len(ids) == 0 {
		return nil, missing("ResourceId")
	}
	if len(ids) > 1000 {
		return nil, invalidValue("ResourceId", strconv.Itoa(len(ids)), "Up to 1000 resource IDs may be given.")
	}
	var out []*instance
	var unknown []string
	for _, id := range ids {
		if !strings.HasPrefix(id, "i-") {
			return nil, errorf(http.StatusBadRequest, "InvalidID", "The ID '%s' is not valid", id)
		}
		in, ok := s.byID[id]
		if !ok || in.hidden {
			unknown = append(unknown, id)
			continue
		}
		if !slices.Contains(out, in) {
			out = append(out, in)
		}
	}
	if aerr := notFound(unknown); aerr != nil {
		return nil, aerr
	}
	return out, nil
}

// tagsOf reads Tag.N.Key and Tag.N.Value, in order; hasValue says whether Tag.N.Value was given.
func tagsOf(form url.Values) (keys, values []string, hasValue []bool, aerr *apiError) {
	idx, aerr := indices(form, "Tag")
	if aerr != nil {
		return nil, nil, nil, aerr
	}
	for _, m := range idx {
		tp := "Tag." + strconv.Itoa(m)
		if aerr := keysUnder(form, tp, "Key", "Value"); aerr != nil {
			return nil, nil, nil, aerr
		}
		key, value := form.Get(tp+".Key"), form.Get(tp+".Value")
		if aerr := checkTag(tp, key, value); aerr != nil {
			return nil, nil, nil, aerr
		}
		_, has := form[tp+".Value"]
		keys, values, hasValue = append(keys, key), append(values, value), append(hasValue, has)
	}
	return keys, values, hasValue, nil
}

// createTags adds the tags to the instances, or overwrites the values of keys they have.
func (s *Server) createTags(form url.Values, reqID string, dryRun bool) (any, *apiError) {
	keys, values, _, aerr := tagsOf(form)
	if aerr != nil {
		return nil, aerr
	}
	if len(keys) == 0 {
		return nil, missing("Tag")
	}
	for i, k := range keys {
		if slices.Contains(keys[:i], k) {
			return nil, errorf(http.StatusBadRequest, "InvalidParameterValue", "Duplicate tag key '%s' specified.", k)
		}
	}
	ins, aerr := s.tagged(form)
	if aerr != nil {
		return nil, aerr
	}
	for _, in := range ins {
		n := len(in.Tags)
		for _, k := range keys {
			if _, ok := in.Tags[k]; !ok {
				n++
			}
		}
		if n > 50 {
			return nil, errorf(http.StatusBadRequest, "TagLimitExceeded", "The maximum number of tags per resource is 50.")
		}
	}
	if dryRun {
		return nil, dryRunError
	}
	for _, in := range ins {
		for i, k := range keys {
			in.Tags[k] = values[i]
		}
	}
	return createTagsResponse{Xmlns: Namespace, RequestID: reqID, Return: true}, nil
}

// deleteTags removes the tags of the keys given (only where the value matches, when one is
// given), or every tag when no key is given.
func (s *Server) deleteTags(form url.Values, reqID string, dryRun bool) (any, *apiError) {
	keys, values, hasValue, aerr := tagsOf(form)
	if aerr != nil {
		return nil, aerr
	}
	ins, aerr := s.tagged(form)
	if aerr != nil {
		return nil, aerr
	}
	if dryRun {
		return nil, dryRunError
	}
	for _, in := range ins {
		if len(keys) == 0 {
			clear(in.Tags)
		}
		for i, k := range keys {
			if v, ok := in.Tags[k]; ok && (!hasValue[i] || v == values[i]) {
				delete(in.Tags, k)
			}
		}
	}
	return deleteTagsResponse{Xmlns: Namespace, RequestID: reqID, Return: true}, nil
}

func runResponse(reqID string, ins []*instance) runInstancesResponse {
	r := reservations(ins)[0]
	return runInstancesResponse{Xmlns: Namespace, RequestID: reqID, xmlReservation: r}
}

func (s *Server) template(match func(LaunchTemplate) bool) *LaunchTemplate {
	for i := range s.templates {
		if match(s.templates[i]) {
			return &s.templates[i]
		}
	}
	return nil
}

func (s *Server) otherZones(az string) string {
	var zs []string
	for _, z := range s.subnets {
		if z != az && !slices.Contains(zs, z) {
			zs = append(zs, z)
		}
	}
	sort.Strings(zs)
	if len(zs) == 0 {
		return "another Availability Zone"
	}
	return strings.Join(zs, ", ")
}

// canonical is the request's parameters but the client token, in a stable order.
func canonical(form url.Values) string {
	var b strings.Builder
	for _, k := range sortedKeys(form) {
		if k == "ClientToken" {
			continue
		}
		b.WriteString(url.QueryEscape(k) + "=" + url.QueryEscape(strings.Join(form[k], ",")) + "&")
	}
	return b.String()
}

type filter struct {
	name   string
	values []string
}

var filterNames = []string{"instance-state-name", "instance-id", "instance-type", "private-dns-name", "client-token", "subnet-id", "availability-zone", "tag-key"}

func (f filter) matches(in *instance) bool {
	var got []string
	switch {
	case strings.HasPrefix(f.name, "tag:"):
		v, ok := in.Tags[strings.TrimPrefix(f.name, "tag:")]
		if !ok {
			return false
		}
		got = []string{v}
	case f.name == "tag-key":
		got = sortedKeys(in.Tags)
	case f.name == "instance-state-name":
		got = []string{in.State}
	case f.name == "instance-id":
		got = []string{in.ID}
	case f.name == "instance-type":
		got = []string{in.Type}
	case f.name == "private-dns-name":
		got = []string{in.PrivateDNSName}
	case f.name == "client-token":
		got = []string{in.ClientToken}
	case f.name == "subnet-id":
		got = []string{in.SubnetID}
	case f.name == "availability-zone":
		got = []string{in.AvailabilityZone}
	}
	for _, want := range f.values {
		for _, g := range got {
			if glob(want, g) {
				return true
			}
		}
	}
	return false
}

// glob matches EC2 filter wildcards: * any run of characters, ? one character, \ escapes the
// next character. It backtracks only to the last *, so it takes O(len(pattern)*len(s)).
func glob(pattern, s string) bool {
	type tok struct {
		c    byte
		kind byte // 'c' a literal, '?' any one, '*' any run
	}
	var toks []tok
	for i := 0; i < len(pattern); i++ {
		switch c := pattern[i]; {
		case c == '\\' && i+1 < len(pattern):
			i++
			toks = append(toks, tok{pattern[i], 'c'})
		case c == '*' || c == '?':
			toks = append(toks, tok{c, c})
		default:
			toks = append(toks, tok{c, 'c'})
		}
	}
	p, i, star, mark := 0, 0, -1, 0
	for i < len(s) {
		switch {
		case p < len(toks) && (toks[p].kind == '?' || toks[p].kind == 'c' && toks[p].c == s[i]):
			p++
			i++
		case p < len(toks) && toks[p].kind == '*':
			star, mark = p, i
			p++
		case star >= 0:
			mark++
			p, i = star+1, mark
		default:
			return false
		}
	}
	for p < len(toks) && toks[p].kind == '*' {
		p++
	}
	return p == len(toks)
}

func (s *Server) describeInstances(form url.Values, reqID string, dryRun bool) (any, *apiError) {
	ids, aerr := list(form, "InstanceId")
	if aerr != nil {
		return nil, aerr
	}
	var filters []filter
	fis, aerr := indices(form, "Filter")
	if aerr != nil {
		return nil, aerr
	}
	for _, n := range fis {
		p := "Filter." + strconv.Itoa(n)
		for k := range form {
			if rest, ok := strings.CutPrefix(k, p+"."); ok && rest != "Name" && !strings.HasPrefix(rest, "Value.") {
				return nil, errorf(http.StatusBadRequest, "UnknownParameter", "The parameter %s is not recognized", k)
			}
		}
		name := form.Get(p + ".Name")
		if name == "" {
			return nil, missing(p + ".Name")
		}
		if !strings.HasPrefix(name, "tag:") && !slices.Contains(filterNames, name) {
			return nil, errorf(http.StatusBadRequest, "InvalidParameterValue", "The filter '%s' is invalid", name)
		}
		values, aerr := list(form, p+".Value")
		if aerr != nil {
			return nil, aerr
		}
		if len(values) == 0 {
			return nil, errorf(http.StatusBadRequest, "InvalidParameterValue", "The filter '%s' requires at least one value", name)
		}
		filters = append(filters, filter{name: name, values: values})
	}
	maxResults := 0
	if v := form.Get("MaxResults"); v != "" {
		if len(ids) > 0 {
			return nil, errorf(http.StatusBadRequest, "InvalidParameterCombination", "The parameter instancesSet cannot be used with the parameter maxResults")
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 5 || n > 1000 {
			return nil, invalidValue("MaxResults", v, "It must be between 5 and 1000.")
		}
		maxResults = n
	}
	after := 0
	if v := form.Get("NextToken"); v != "" {
		n, err := decodeToken(v)
		if err != nil {
			return nil, errorf(http.StatusBadRequest, "InvalidParameterValue", "The token '%s' is invalid.", v)
		}
		after = n
	}
	if dryRun {
		return nil, dryRunError
	}

	var candidates []*instance
	if len(ids) > 0 {
		var unknown []string
		for _, id := range ids {
			in, ok := s.byID[id]
			if !ok || in.hidden {
				unknown = append(unknown, id)
				continue
			}
			candidates = append(candidates, in)
		}
		if aerr := notFound(unknown); aerr != nil {
			return nil, aerr
		}
		sort.Slice(candidates, func(i, j int) bool { return candidates[i].seq < candidates[j].seq })
	} else {
		for _, in := range s.instances {
			if !in.hidden {
				candidates = append(candidates, in)
			}
		}
	}
	var page []*instance
	next := ""
	for _, in := range candidates {
		if in.seq <= after || !all(filters, in) {
			continue
		}
		if maxResults > 0 && len(page) == maxResults {
			next = encodeToken(page[len(page)-1].seq)
			break
		}
		page = append(page, in)
	}
	resp := describeInstancesResponse{Xmlns: Namespace, RequestID: reqID, Reservations: reservations(page), NextToken: next}
	for _, in := range page {
		in.describes++
		switch {
		case in.State == StatePending && in.describes >= s.pendingDescribes:
			in.State = StateRunning
		case in.State == StateShuttingDown:
			in.State = StateTerminated
		}
	}
	return resp, nil
}

func all(filters []filter, in *instance) bool {
	for _, f := range filters {
		if !f.matches(in) {
			return false
		}
	}
	return true
}

func notFound(ids []string) *apiError {
	switch len(ids) {
	case 0:
		return nil
	case 1:
		return errorf(http.StatusBadRequest, "InvalidInstanceID.NotFound", "The instance ID '%s' does not exist", ids[0])
	default:
		return errorf(http.StatusBadRequest, "InvalidInstanceID.NotFound", "The instance IDs '%s' do not exist", strings.Join(ids, ", "))
	}
}

func encodeToken(seq int) string {
	return base64.RawURLEncoding.EncodeToString([]byte("fakeec2:" + strconv.Itoa(seq)))
}

func decodeToken(t string) (int, error) {
	b, err := base64.RawURLEncoding.DecodeString(t)
	if err != nil {
		return 0, err
	}
	n, ok := strings.CutPrefix(string(b), "fakeec2:")
	if !ok {
		return 0, fmt.Errorf("not a fakeec2 token")
	}
	return strconv.Atoi(n)
}

func (s *Server) terminateInstances(form url.Values, reqID string, dryRun bool) (any, *apiError) {
	ids, aerr := list(form, "InstanceId")
	if aerr != nil {
		return nil, aerr
	}
	if len(ids) == 0 {
		return nil, missing("InstanceId")
	}
	var unknown []string
	for _, id := range ids {
		if _, ok := s.byID[id]; !ok {
			unknown = append(unknown, id)
		}
	}
	if aerr := notFound(unknown); aerr != nil {
		return nil, aerr
	}
	if dryRun {
		return nil, dryRunError
	}
	resp := terminateInstancesResponse{Xmlns: Namespace, RequestID: reqID}
	for _, id := range ids {
		in := s.byID[id]
		prev := in.State
		if prev != StateShuttingDown && prev != StateTerminated {
			in.State = StateShuttingDown
			in.terminatedAt = s.now()
		}
		resp.Instances = append(resp.Instances, xmlStateChange{InstanceID: id, CurrentState: state(in.State), PreviousState: state(prev)})
	}
	return resp, nil
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}
