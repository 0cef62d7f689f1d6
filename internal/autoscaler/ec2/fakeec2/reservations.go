package fakeec2

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// CapacityReservation is an On-Demand Capacity Reservation or a Capacity Block for ML that
// tests seed with AddCapacityReservation. Available counts down as instances launch into it
// and up again as they terminate.
type CapacityReservation struct {
	ID, InstanceType, AvailabilityZone string
	Total, Available                   int
	// CapacityBlock: ReservationType capacity-block (launches need the capacity-block market
	// type); else default (a targeted ODCR).
	CapacityBlock bool
	// CapacityBlockID is the Capacity Block's id (cb-...); UltraServerType its UltraServer type
	// (DescribeCapacityBlocks), set on an UltraServer Capacity Block.
	CapacityBlockID, UltraServerType string
	State                            string // active (default), scheduled, expired, ...
	Start, End                       time.Time
	Tags                             map[string]string
	seq                              int
}

// AddCapacityReservation seeds a reservation (Available defaults to Total, State to active).
func (s *Server) AddCapacityReservation(r CapacityReservation) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.State == "" {
		r.State = "active"
	}
	if r.Available == 0 {
		r.Available = r.Total
	}
	s.seq++
	r.seq = s.seq
	r.Tags = nonNil(r.Tags)
	s.reservations = append(s.reservations, &r)
}

// CapacityReservations returns a snapshot of the seeded reservations.
func (s *Server) CapacityReservations() []CapacityReservation {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]CapacityReservation, 0, len(s.reservations))
	for _, r := range s.reservations {
		out = append(out, *r)
	}
	return out
}

func (s *Server) reservation(id string) *CapacityReservation {
	for _, r := range s.reservations {
		if r.ID == id {
			return r
		}
	}
	return nil
}

var reservationFilters = map[string]func(*CapacityReservation) []string{
	"state":                   func(r *CapacityReservation) []string { return []string{r.State} },
	"instance-type":           func(r *CapacityReservation) []string { return []string{r.InstanceType} },
	"availability-zone":       func(r *CapacityReservation) []string { return []string{r.AvailabilityZone} },
	"capacity-reservation-id": func(r *CapacityReservation) []string { return []string{r.ID} },
	"reservation-type":        func(r *CapacityReservation) []string { return []string{reservationType(r)} },
	"instance-match-criteria": func(*CapacityReservation) []string { return []string{"targeted"} },
	"tag-key":                 func(r *CapacityReservation) []string { return sortedKeys(r.Tags) },
}

func reservationType(r *CapacityReservation) string {
	if r.CapacityBlock {
		return "capacity-block"
	}
	return "default"
}

func (f filter) matchesReservation(r *CapacityReservation) bool {
	var got []string
	if key, ok := strings.CutPrefix(f.name, "tag:"); ok {
		if v, ok := r.Tags[key]; ok {
			got = []string{v}
		}
	} else {
		got = reservationFilters[f.name](r)
	}
	return slices.ContainsFunc(f.values, func(want string) bool {
		return slices.ContainsFunc(got, func(g string) bool { return glob(want, g) })
	})
}

// describeCapacityReservations answers by CapacityReservationId.N (an unknown id is
// InvalidCapacityReservationId.NotFound), Filter.N (state, instance-type, availability-zone,
// capacity-reservation-id, reservation-type, instance-match-criteria, tag-key, tag:<key>),
// MaxResults (1 to 1000) and NextToken.
func (s *Server) describeCapacityReservations(form url.Values, reqID string, dryRun bool) (any, *apiError) {
	ids, aerr := list(form, "CapacityReservationId")
	if aerr != nil {
		return nil, aerr
	}
	fs, aerr := s.checkedFilters(form, reservationFilters)
	if aerr != nil {
		return nil, aerr
	}
	maxResults, after, aerr := paging(form, 1)
	if aerr != nil {
		return nil, aerr
	}
	if dryRun {
		return nil, dryRunError
	}
	for _, id := range ids {
		if s.reservation(id) == nil {
			return nil, errorf(http.StatusBadRequest, "InvalidCapacityReservationId.NotFound", "The Capacity Reservation ID '%s' does not exist", id)
		}
	}
	resp := describeCapacityReservationsResponse{Xmlns: Namespace, RequestID: reqID}
	for _, r := range s.reservations {
		if r.seq <= after || len(ids) > 0 && !slices.Contains(ids, r.ID) {
			continue
		}
		if !slices.ContainsFunc(fs, func(f filter) bool { return !f.matchesReservation(r) }) {
			if maxResults > 0 && len(resp.Reservations) == maxResults {
				resp.NextToken = encodeToken(s.reservation(resp.Reservations[len(resp.Reservations)-1].ID).seq)
				break
			}
			resp.Reservations = append(resp.Reservations, r.xml())
		}
	}
	return resp, nil
}

// describeCapacityBlocks answers by CapacityBlockId.N (the blocks of the seeded reservations).
func (s *Server) describeCapacityBlocks(form url.Values, reqID string, dryRun bool) (any, *apiError) {
	ids, aerr := list(form, "CapacityBlockId")
	if aerr != nil {
		return nil, aerr
	}
	if dryRun {
		return nil, dryRunError
	}
	resp := describeCapacityBlocksResponse{Xmlns: Namespace, RequestID: reqID}
	for _, id := range ids {
		var b *xmlCapacityBlock
		for _, r := range s.reservations {
			if r.CapacityBlockID != id {
				continue
			}
			if b == nil {
				b = &xmlCapacityBlock{ID: id, UltraServerType: r.UltraServerType, AvailabilityZone: r.AvailabilityZone,
					StartDate: timestamp(r.Start), EndDate: timestamp(r.End), State: r.State}
			}
			b.ReservationIDs = append(b.ReservationIDs, r.ID)
		}
		if b == nil {
			return nil, errorf(http.StatusBadRequest, "InvalidCapacityBlockId.NotFound", "The Capacity Block ID '%s' does not exist", id)
		}
		resp.Blocks = append(resp.Blocks, *b)
	}
	return resp, nil
}

// describeSubnets answers by SubnetId.N (InvalidSubnetID.NotFound for an unknown one) or lists
// every subnet.
func (s *Server) describeSubnets(form url.Values, reqID string, dryRun bool) (any, *apiError) {
	ids, aerr := list(form, "SubnetId")
	if aerr != nil {
		return nil, aerr
	}
	if dryRun {
		return nil, dryRunError
	}
	if len(ids) == 0 {
		ids = s.subnetOrder
	}
	resp := describeSubnetsResponse{Xmlns: Namespace, RequestID: reqID}
	for _, id := range ids {
		az, ok := s.subnets[id]
		if !ok {
			return nil, errorf(http.StatusBadRequest, "InvalidSubnetID.NotFound", "The subnet ID '%s' does not exist", id)
		}
		resp.Subnets = append(resp.Subnets, xmlSubnet{ID: id, AvailabilityZone: az, VpcID: vpcID, State: "available", OwnerID: OwnerID})
	}
	return resp, nil
}

// checkedFilters reads Filter.N and checks the names against known (and tag:<key>).
func (s *Server) checkedFilters(form url.Values, known map[string]func(*CapacityReservation) []string) ([]filter, *apiError) {
	fis, aerr := indices(form, "Filter")
	if aerr != nil {
		return nil, aerr
	}
	var out []filter
	for _, n := range fis {
		p := "Filter." + strconv.Itoa(n)
		name := form.Get(p + ".Name")
		if _, ok := known[name]; !ok && !strings.HasPrefix(name, "tag:") {
			return nil, errorf(http.StatusBadRequest, "InvalidParameterValue", "The filter '%s' is invalid", name)
		}
		values, aerr := list(form, p+".Value")
		if aerr != nil {
			return nil, aerr
		}
		if len(values) == 0 {
			return nil, errorf(http.StatusBadRequest, "InvalidParameterValue", "The filter '%s' requires at least one value", name)
		}
		out = append(out, filter{name: name, values: values})
	}
	return out, nil
}

// paging reads MaxResults (min to 1000) and NextToken.
func paging(form url.Values, minResults int) (maxResults, after int, aerr *apiError) {
	if v := form.Get("MaxResults"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < minResults || n > 1000 {
			return 0, 0, invalidValue("MaxResults", v, "It must be between "+strconv.Itoa(minResults)+" and 1000.")
		}
		maxResults = n
	}
	if v := form.Get("NextToken"); v != "" {
		n, err := decodeToken(v)
		if err != nil {
			return 0, 0, errorf(http.StatusBadRequest, "InvalidParameterValue", "The token '%s' is invalid.", v)
		}
		after = n
	}
	return maxResults, after, nil
}

// targetedLaunch checks a RunInstances into a reservation: it exists and is active, the
// instance type and Availability Zone are its, a Capacity Block is launched with the
// capacity-block market type (and nothing else is), and it has room for the count.
func (s *Server) targetedLaunch(req runRequest) *apiError {
	if req.reservation == "" {
		if req.marketType == "capacity-block" {
			return errorf(http.StatusBadRequest, "InvalidParameterCombination", "The capacity-block market type requires a CapacityReservationTarget naming a Capacity Block.")
		}
		return nil
	}
	r := s.reservation(req.reservation)
	switch {
	case r == nil:
		return errorf(http.StatusBadRequest, "InvalidCapacityReservationId.NotFound", "The Capacity Reservation ID '%s' does not exist", req.reservation)
	case r.State != "active":
		return errorf(http.StatusBadRequest, "InvalidCapacityReservationId.Malformed", "The Capacity Reservation '%s' is %s; instances launch into active Capacity Reservations only.", r.ID, r.State)
	case r.CapacityBlock && req.marketType != "capacity-block":
		return errorf(http.StatusBadRequest, "InvalidParameterCombination", "The Capacity Reservation '%s' is a Capacity Block; launch into it with InstanceMarketOptions.MarketType capacity-block.", r.ID)
	case !r.CapacityBlock && req.marketType != "":
		return errorf(http.StatusBadRequest, "InvalidParameterCombination", "The market type %s cannot be used with the Capacity Reservation '%s'.", req.marketType, r.ID)
	case r.InstanceType != req.itype:
		return errorf(http.StatusBadRequest, "InvalidParameterCombination", "The instance type %s does not match the instance type %s of the Capacity Reservation '%s'.", req.itype, r.InstanceType, r.ID)
	case r.AvailabilityZone != req.az:
		return errorf(http.StatusBadRequest, "InvalidParameterCombination", "The Availability Zone %s of subnet %s does not match the Availability Zone %s of the Capacity Reservation '%s'.", req.az, req.subnet, r.AvailabilityZone, r.ID)
	case r.Available < req.maxCount:
		return errorf(http.StatusBadRequest, "ReservationCapacityExceeded", "The requested number of instances (%d) exceeds the available capacity (%d) of the Capacity Reservation '%s'.", req.maxCount, r.Available, r.ID)
	}
	return nil
}
