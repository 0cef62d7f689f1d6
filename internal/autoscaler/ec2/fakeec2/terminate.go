package fakeec2

import "net/url"

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
			if r := s.reservation(in.CapacityReservationID); r != nil {
				r.Available = min(r.Available+1, r.Total) // the slot is free again
			}
		}
		resp.Instances = append(resp.Instances, xmlStateChange{InstanceID: id, CurrentState: state(in.State), PreviousState: state(prev)})
	}
	return resp, nil
}
