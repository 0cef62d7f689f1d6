package fakeec2

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// filterValues are, by DescribeInstances filter name, the values of an instance the filter's
// values match; tag:<key> filters match the value of the tag key.
var filterValues = map[string]func(*instance) []string{
	"instance-state-name": func(in *instance) []string { return []string{in.State} },
	"instance-id":         func(in *instance) []string { return []string{in.ID} },
	"instance-type":       func(in *instance) []string { return []string{in.Type} },
	"private-dns-name":    func(in *instance) []string { return []string{in.PrivateDNSName} },
	"client-token":        func(in *instance) []string { return []string{in.ClientToken} },
	"subnet-id":           func(in *instance) []string { return []string{in.SubnetID} },
	"availability-zone":   func(in *instance) []string { return []string{in.AvailabilityZone} },
	"tag-key":             func(in *instance) []string { return sortedKeys(in.Tags) },
}

type filter struct {
	name   string
	values []string
}

// valuesOf are the instance's values the filter looks at.
func (f filter) valuesOf(in *instance) []string {
	if key, ok := strings.CutPrefix(f.name, "tag:"); ok {
		if v, ok := in.Tags[key]; ok {
			return []string{v}
		}
		return nil
	}
	return filterValues[f.name](in)
}

// matches reports whether one of the filter's values (with wildcards) matches one of the
// instance's.
func (f filter) matches(in *instance) bool {
	got := f.valuesOf(in)
	return slices.ContainsFunc(f.values, func(want string) bool {
		return slices.ContainsFunc(got, func(g string) bool { return glob(want, g) })
	})
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

// describeRequest is a checked DescribeInstances request.
type describeRequest struct {
	ids        []string
	filters    []filter
	maxResults int // 0: no paging
	after      int // the seq NextToken continues after
}

// describeInstances answers DescribeInstances in three steps: parse and check the request
// (parseDescribe), choose the candidates (by id or all that EC2 shows) and page through those
// the filters match, then answer and advance the states of the instances listed.
func (s *Server) describeInstances(form url.Values, reqID string, dryRun bool) (any, *apiError) {
	req, aerr := parseDescribe(form)
	if aerr != nil {
		return nil, aerr
	}
	if dryRun {
		return nil, dryRunError
	}
	candidates, aerr := s.candidates(req.ids)
	if aerr != nil {
		return nil, aerr
	}
	page, next := req.page(candidates)
	resp := describeInstancesResponse{Xmlns: Namespace, RequestID: reqID, Reservations: reservations(page), NextToken: next}
	s.listed(page)
	return resp, nil
}

// parseDescribe reads and checks InstanceId.N, the filters, MaxResults and NextToken.
func parseDescribe(form url.Values) (describeRequest, *apiError) {
	var req describeRequest
	var aerr *apiError
	if req.ids, aerr = list(form, "InstanceId"); aerr != nil {
		return req, aerr
	}
	if req.filters, aerr = filters(form); aerr != nil {
		return req, aerr
	}
	if v := form.Get("MaxResults"); v != "" {
		if len(req.ids) > 0 {
			return req, errorf(http.StatusBadRequest, "InvalidParameterCombination", "The parameter instancesSet cannot be used with the parameter maxResults")
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 5 || n > 1000 {
			return req, invalidValue("MaxResults", v, "It must be between 5 and 1000.")
		}
		req.maxResults = n
	}
	if v := form.Get("NextToken"); v != "" {
		n, err := decodeToken(v)
		if err != nil {
			return req, errorf(http.StatusBadRequest, "InvalidParameterValue", "The token '%s' is invalid.", v)
		}
		req.after = n
	}
	return req, nil
}

// filters reads Filter.N.Name and Filter.N.Value.M.
func filters(form url.Values) ([]filter, *apiError) {
	var out []filter
	fis, aerr := indices(form, "Filter")
	if aerr != nil {
		return nil, aerr
	}
	for _, n := range fis {
		f, aerr := parseFilter(form, "Filter."+strconv.Itoa(n))
		if aerr != nil {
			return nil, aerr
		}
		out = append(out, f)
	}
	return out, nil
}

// parseFilter reads the filter under prefix p: a known name and at least one value.
func parseFilter(form url.Values, p string) (filter, *apiError) {
	for k := range form {
		if rest, ok := strings.CutPrefix(k, p+"."); ok && rest != "Name" && !strings.HasPrefix(rest, "Value.") {
			return filter{}, errorf(http.StatusBadRequest, "UnknownParameter", "The parameter %s is not recognized", k)
		}
	}
	name := form.Get(p + ".Name")
	if name == "" {
		return filter{}, missing(p + ".Name")
	}
	if _, known := filterValues[name]; !strings.HasPrefix(name, "tag:") && !known {
		return filter{}, errorf(http.StatusBadRequest, "InvalidParameterValue", "The filter '%s' is invalid", name)
	}
	values, aerr := list(form, p+".Value")
	if aerr != nil {
		return filter{}, aerr
	}
	if len(values) == 0 {
		return filter{}, errorf(http.StatusBadRequest, "InvalidParameterValue", "The filter '%s' requires at least one value", name)
	}
	return filter{name: name, values: values}, nil
}

// candidates are the instances named by id, in launch order (InvalidInstanceID.NotFound for
// those EC2 does not show), or, without ids, every instance EC2 shows.
func (s *Server) candidates(ids []string) ([]*instance, *apiError) {
	var out []*instance
	if len(ids) == 0 {
		for _, in := range s.instances {
			if !in.hidden {
				out = append(out, in)
			}
		}
		return out, nil
	}
	var unknown []string
	for _, id := range ids {
		in, ok := s.byID[id]
		if !ok || in.hidden {
			unknown = append(unknown, id)
			continue
		}
		out = append(out, in)
	}
	if aerr := notFound(unknown); aerr != nil {
		return nil, aerr
	}
	sort.Slice(out, func(i, j int) bool { return out[i].seq < out[j].seq })
	return out, nil
}

// page returns the candidates after the NextToken that every filter matches, at most
// maxResults, and the token of the next page ("" for the last).
func (req describeRequest) page(candidates []*instance) (page []*instance, next string) {
	for _, in := range candidates {
		if in.seq <= req.after || !all(req.filters, in) {
			continue
		}
		if req.maxResults > 0 && len(page) == req.maxResults {
			return page, encodeToken(page[len(page)-1].seq)
		}
		page = append(page, in)
	}
	return page, ""
}

// listed advances the instances a response listed: pending ones run once listed
// pendingDescribes times, shutting-down ones are terminated.
func (s *Server) listed(page []*instance) {
	for _, in := range page {
		in.describes++
		switch {
		case in.State == StatePending && in.describes >= s.pendingDescribes:
			in.State = StateRunning
		case in.State == StateShuttingDown:
			in.State = StateTerminated
		}
	}
}

func all(filters []filter, in *instance) bool {
	for _, f := range filters {
		if !f.matches(in) {
			return false
		}
	}
	return true
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
