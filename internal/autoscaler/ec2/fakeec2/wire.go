package fakeec2

import (
	"encoding/xml"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
)

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
	case "DescribeCapacityReservations":
		return s.describeCapacityReservations(form, reqID, dryRun)
	case "DescribeCapacityBlocks":
		return s.describeCapacityBlocks(form, reqID, dryRun)
	case "DescribeSubnets":
		return s.describeSubnets(form, reqID, dryRun)
	default:
		return s.terminateInstances(form, reqID, dryRun)
	}
}

// actionParams are the top-level parameters the fake models per action.
var actionParams = map[string][]string{
	"RunInstances":                 {"Action", "Version", "DryRun", "ClientToken", "MinCount", "MaxCount", "InstanceType", "ImageId", "SubnetId", "LaunchTemplate", "TagSpecification", "CapacityReservationSpecification", "InstanceMarketOptions"},
	"DescribeCapacityReservations": {"Action", "Version", "DryRun", "CapacityReservationId", "Filter", "MaxResults", "NextToken"},
	"DescribeCapacityBlocks":       {"Action", "Version", "DryRun", "CapacityBlockId"},
	"DescribeSubnets":              {"Action", "Version", "DryRun", "SubnetId"},
	"DescribeInstances":            {"Action", "Version", "DryRun", "Filter", "InstanceId", "MaxResults", "NextToken"},
	"TerminateInstances":           {"Action", "Version", "DryRun", "InstanceId"},
	"CreateTags":                   {"Action", "Version", "DryRun", "ResourceId", "Tag"},
	"DeleteTags":                   {"Action", "Version", "DryRun", "ResourceId", "Tag"},
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

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}
