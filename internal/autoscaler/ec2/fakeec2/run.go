package fakeec2

import (
	"cmp"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
)

var taggable = []string{"instance", "volume", "network-interface", "spot-instances-request"}

// runRequest is a checked RunInstances request.
type runRequest struct {
	maxCount     int
	token        string
	template     *LaunchTemplate // nil: none named
	version      string          // LaunchTemplate.Version as given
	image, itype string
	subnet, az   string
	tags         map[string]map[string]string // resource type -> key -> value
	reservation  string                       // CapacityReservationTarget.CapacityReservationId
	marketType   string                       // InstanceMarketOptions.MarketType
}

// runInstances answers RunInstances in four steps: parse and check the request (parseRun, in
// EC2's order of checks), answer a retry of a recorded ClientToken (replay), check the capacity
// of the zone (capacity), then launch and answer.
func (s *Server) runInstances(region string, form url.Values, reqID string, dryRun bool) (any, *apiError) {
	req, aerr := s.parseRun(form)
	if aerr != nil {
		return nil, aerr
	}
	if dryRun {
		return nil, dryRunError
	}
	// Idempotency: EC2 compares every parameter but the token itself.
	params := canonical(form)
	ins, aerr := s.replay(req.token, params)
	if aerr != nil {
		return nil, aerr
	}
	if ins == nil {
		if aerr := s.targetedLaunch(req); aerr != nil {
			return nil, aerr
		}
		if aerr := s.capacity(req); aerr != nil {
			return nil, aerr
		}
		ins = s.launch(region, req, params)
	}
	return runResponse(reqID, ins), nil
}

// parseRun reads and checks the request: counts, client token, launch template, image and
// type, subnet, tag specifications, each failing with EC2's error.
func (s *Server) parseRun(form url.Values) (runRequest, *apiError) {
	var req runRequest
	var aerr *apiError
	if req.maxCount, aerr = counts(form); aerr != nil {
		return req, aerr
	}
	req.token = form.Get("ClientToken")
	if len(req.token) > 64 {
		return req, invalidValue("ClientToken", req.token, "It must be at most 64 ASCII characters.")
	}
	if req.template, req.version, aerr = s.launchTemplate(form); aerr != nil {
		return req, aerr
	}
	if req.image, req.itype, aerr = imageAndType(form, req.template); aerr != nil {
		return req, aerr
	}
	if req.subnet, req.az, aerr = s.subnet(form); aerr != nil {
		return req, aerr
	}
	if req.tags, aerr = tagSpecifications(form); aerr != nil {
		return req, aerr
	}
	req.reservation, req.marketType, aerr = reservationTarget(form)
	return req, aerr
}

// reservationTarget reads CapacityReservationSpecification (a target only with the preference
// capacity-reservations-only or none given) and InstanceMarketOptions.MarketType.
func reservationTarget(form url.Values) (id, market string, aerr *apiError) {
	const spec = "CapacityReservationSpecification"
	if aerr := keysUnder(form, spec, "CapacityReservationPreference", "CapacityReservationTarget.CapacityReservationId"); aerr != nil {
		return "", "", aerr
	}
	if aerr := keysUnder(form, "InstanceMarketOptions", "MarketType"); aerr != nil {
		return "", "", aerr
	}
	id, pref := form.Get(spec+".CapacityReservationTarget.CapacityReservationId"), form.Get(spec+".CapacityReservationPreference")
	switch pref {
	case "", "capacity-reservations-only", "open", "none":
	default:
		return "", "", invalidValue(spec+".CapacityReservationPreference", pref, "It must be capacity-reservations-only, open or none.")
	}
	if id != "" && pref != "" && pref != "capacity-reservations-only" {
		return "", "", errorf(http.StatusBadRequest, "InvalidParameterCombination", "A CapacityReservationTarget can only be used with the preference capacity-reservations-only.")
	}
	market = form.Get("InstanceMarketOptions.MarketType")
	switch market {
	case "", "capacity-block", "on-demand", "spot":
	default:
		return "", "", invalidValue("InstanceMarketOptions.MarketType", market, "It must be spot, capacity-block or on-demand.")
	}
	return id, market, nil
}

// counts checks MinCount and MaxCount and returns MaxCount.
func counts(form url.Values) (int, *apiError) {
	minCount, aerr := positive(form, "MinCount")
	if aerr != nil {
		return 0, aerr
	}
	maxCount, aerr := positive(form, "MaxCount")
	if aerr != nil {
		return 0, aerr
	}
	if minCount > maxCount {
		return 0, invalidValue("MinCount", form.Get("MinCount"), "It must not exceed MaxCount.")
	}
	return maxCount, nil
}

// launchTemplate returns the launch template the request names by id or name (nil for none)
// and the version asked for.
func (s *Server) launchTemplate(form url.Values) (*LaunchTemplate, string, *apiError) {
	if aerr := keysUnder(form, "LaunchTemplate", "LaunchTemplateId", "LaunchTemplateName", "Version"); aerr != nil {
		return nil, "", aerr
	}
	var lt *LaunchTemplate
	id, name, version := form.Get("LaunchTemplate.LaunchTemplateId"), form.Get("LaunchTemplate.LaunchTemplateName"), form.Get("LaunchTemplate.Version")
	switch {
	case id != "" && name != "":
		return nil, "", errorf(http.StatusBadRequest, "InvalidParameterCombination", "A launch template ID and a launch template name cannot be specified in the same request.")
	case id != "":
		if lt = s.template(func(t LaunchTemplate) bool { return t.ID == id }); lt == nil {
			return nil, "", errorf(http.StatusBadRequest, "InvalidLaunchTemplateId.NotFound", "The specified launch template, with template ID %s, does not exist.", id)
		}
	case name != "":
		if lt = s.template(func(t LaunchTemplate) bool { return t.Name == name }); lt == nil {
			return nil, "", errorf(http.StatusBadRequest, "InvalidLaunchTemplateName.NotFoundException", "The specified launch template, with template name %s, does not exist.", name)
		}
	case version != "":
		return nil, "", missing("LaunchTemplate.LaunchTemplateId or LaunchTemplate.LaunchTemplateName")
	}
	if lt != nil && version != "" && version != "$Latest" && version != "$Default" {
		if v, err := strconv.Atoi(version); err != nil || v < 1 || v > lt.Versions {
			return nil, "", errorf(http.StatusBadRequest, "InvalidLaunchTemplateId.VersionNotFound", "Could not find launch template version %s for the launch template %s.", version, lt.ID)
		}
	}
	return lt, version, nil
}

// imageAndType are the request's image and instance type, else the launch template's; the
// type defaults to m1.small, as EC2's.
func imageAndType(form url.Values, lt *LaunchTemplate) (image, itype string, aerr *apiError) {
	image, itype = form.Get("ImageId"), form.Get("InstanceType")
	if lt != nil {
		image = cmp.Or(image, lt.ImageID)
		itype = cmp.Or(itype, lt.InstanceType)
	}
	if image == "" {
		return "", "", missing("ImageId")
	}
	return image, cmp.Or(itype, "m1.small"), nil
}

// subnet is the request's subnet, else the default one, and its Availability Zone.
func (s *Server) subnet(form url.Values) (subnet, az string, aerr *apiError) {
	subnet = form.Get("SubnetId")
	if subnet == "" {
		if len(s.subnetOrder) == 0 {
			return "", "", errorf(http.StatusBadRequest, "VPCIdNotSpecified", "No default VPC for this user. GroupName is only supported for EC2-Classic and default VPC.")
		}
		subnet = s.subnetOrder[0]
	}
	az, ok := s.subnets[subnet]
	if !ok {
		return "", "", errorf(http.StatusBadRequest, "InvalidSubnetID.NotFound", "The subnet ID '%s' does not exist", subnet)
	}
	return subnet, az, nil
}

// tagSpecifications reads TagSpecification.N: the tags by resource type.
func tagSpecifications(form url.Values) (map[string]map[string]string, *apiError) {
	tags := map[string]map[string]string{}
	specs, aerr := indices(form, "TagSpecification")
	if aerr != nil {
		return nil, aerr
	}
	for _, n := range specs {
		if aerr := tagSpecification(form, "TagSpecification."+strconv.Itoa(n), tags); aerr != nil {
			return nil, aerr
		}
	}
	return tags, nil
}

// tagSpecification reads the tag specification under prefix p into tags.
func tagSpecification(form url.Values, p string, tags map[string]map[string]string) *apiError {
	for k := range form {
		if rest, ok := strings.CutPrefix(k, p+"."); ok && rest != "ResourceType" && !strings.HasPrefix(rest, "Tag.") {
			return errorf(http.StatusBadRequest, "UnknownParameter", "The parameter %s is not recognized", k)
		}
	}
	rt := form.Get(p + ".ResourceType")
	switch {
	case rt == "":
		return missing(p + ".ResourceType")
	case !slices.Contains(taggable, rt):
		return errorf(http.StatusBadRequest, "InvalidParameterValue", "'%s' is not a valid taggable resource type for this operation.", rt)
	case tags[rt] != nil:
		return errorf(http.StatusBadRequest, "InvalidParameterValue", "The same resource type may not be specified more than once in tag specifications")
	}
	tags[rt] = map[string]string{}
	ts, aerr := indices(form, p+".Tag")
	if aerr != nil {
		return aerr
	}
	for _, m := range ts {
		tp := p + ".Tag." + strconv.Itoa(m)
		if aerr := keysUnder(form, tp, "Key", "Value"); aerr != nil {
			return aerr
		}
		key, value := form.Get(tp+".Key"), form.Get(tp+".Value")
		if aerr := checkTag(tp, key, value); aerr != nil {
			return aerr
		}
		if _, dup := tags[rt][key]; dup {
			return errorf(http.StatusBadRequest, "InvalidParameterValue", "Duplicate tag key '%s' specified.", key)
		}
		tags[rt][key] = value
	}
	if len(tags[rt]) > 50 {
		return errorf(http.StatusBadRequest, "TagLimitExceeded", "The maximum number of tags per resource is 50.")
	}
	return nil
}

// replay returns the instances of the launch recorded under token, nil when there is none,
// or IdempotentParameterMismatch when the token was used with other parameters.
func (s *Server) replay(token, params string) ([]*instance, *apiError) {
	l, ok := s.tokens[token]
	if token == "" || !ok {
		return nil, nil
	}
	if l.params != params {
		return nil, errorf(http.StatusBadRequest, "IdempotentParameterMismatch", "Arguments on this idempotent request are inconsistent with arguments used in previous request(s).")
	}
	ins := make([]*instance, 0, len(l.ids))
	for _, id := range l.ids {
		ins = append(ins, s.byID[id])
	}
	return ins, nil
}

// capacity checks that the zone offers the type, has capacity (test hooks) and that the
// count is within the account's limit.
func (s *Server) capacity(req runRequest) *apiError {
	if s.unsupported[[2]string{req.az, req.itype}] {
		return errorf(http.StatusBadRequest, "Unsupported", "Your requested instance type (%s) is not supported in your requested Availability Zone (%s). Please retry your request by not specifying an Availability Zone or choosing %s.", req.itype, req.az, s.otherZones(req.az))
	}
	if s.noCapacity[req.subnet] {
		return errorf(http.StatusInternalServerError, "InsufficientInstanceCapacity", "We currently do not have sufficient %s capacity in the Availability Zone you requested (%s). Our system will be working on provisioning additional capacity. You can currently get %s capacity by not specifying an Availability Zone in your request or choosing %s.", req.itype, req.az, req.itype, s.otherZones(req.az))
	}
	if req.maxCount > 100 {
		return errorf(http.StatusBadRequest, "InstanceLimitExceeded", "You have requested more instances (%d) than your current instance limit of 100 allows for the specified instance type.", req.maxCount)
	}
	return nil
}

// launch starts MaxCount instances in one reservation and records the client token.
func (s *Server) launch(region string, req runRequest, params string) []*instance {
	s.seq++
	resID := fmt.Sprintf("r-%017x", s.seq)
	l := &launch{params: params}
	var ins []*instance
	for range req.maxCount {
		in := s.newInstance(region, req, resID)
		s.instances = append(s.instances, in)
		s.byID[in.ID] = in
		l.ids = append(l.ids, in.ID)
		ins = append(ins, in)
	}
	if req.token != "" {
		s.tokens[req.token] = l
	}
	if r := s.reservation(req.reservation); r != nil {
		r.Available -= req.maxCount
	}
	return ins
}

// newInstance is the next instance of reservation resID: its id, address and private DNS name
// (instance-id based in a subnet with resource-name hostnames), pending unless no describe is
// needed to run.
func (s *Server) newInstance(region string, req runRequest, resID string) *instance {
	s.seq++
	ip := fmt.Sprintf("10.0.%d.%d", s.seq/250, s.seq%250+4)
	domain := region + ".compute.internal"
	if region == "us-east-1" {
		domain = "ec2.internal"
	}
	id := fmt.Sprintf("i-%017x", s.seq)
	host := "ip-" + strings.ReplaceAll(ip, ".", "-")
	if s.resourceNames[req.subnet] {
		host = id
	}
	in := &instance{
		Instance: Instance{
			ID:                    id,
			ReservationID:         resID,
			Type:                  req.itype,
			State:                 StatePending,
			ImageID:               req.image,
			SubnetID:              req.subnet,
			AvailabilityZone:      req.az,
			PrivateIP:             ip,
			PrivateDNSName:        host + "." + domain,
			ClientToken:           req.token,
			Tags:                  nonNil(req.tags["instance"]),
			VolumeTags:            nonNil(req.tags["volume"]),
			LaunchTime:            s.now(),
			CapacityReservationID: req.reservation,
		},
		seq:    s.seq,
		hidden: s.lagging,
	}
	if req.template != nil {
		in.LaunchTemplateID, in.LaunchTemplateVersion = req.template.ID, cmp.Or(req.version, "$Default")
	}
	if r := s.reservation(req.reservation); r != nil {
		in.CapacityBlockID = r.CapacityBlockID
		in.CapacityBlock = r.CapacityBlock
	}
	if s.pendingDescribes == 0 {
		in.State = StateRunning
	}
	return in
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
