package plan

import (
	"fmt"
	"slices"
	"strings"

	"github.com/kube-neuron/kube-neuron/internal/dra/opaque"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// configKey is one validation of a claim's configs against an instance type.
type configKey struct {
	s   opaque.Settings
	typ string
}

// validate is s.ValidateNew(t), cached across planning rounds: the driver's own checks for a new
// node of type t.
func (ts *DeviceTemplates) validate(s opaque.Settings, t topology.InstanceType) error {
	k := configKey{s, t.Name}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if err, ok := ts.validated[k]; ok {
		return err
	}
	err := s.ValidateNew(t)
	ts.validated[k] = err
	return err
}

// resolveConfigs narrows Matching to the instance types whose DRA driver accepts the opaque
// configs of the request's claim, with Refused saying, in the driver's words, why when none does
// and which types would accept them.
func (ts *DeviceTemplates) resolveConfigs(r *DRARequest) {
	if r.Unmatched != "" || r.ConfigError == "" && r.Configs.IsZero() {
		return
	}
	if r.ConfigError != "" {
		r.Matching = []string{}
		r.Refused = fmt.Sprintf("the DRA driver would refuse the opaque configs of the pod's ResourceClaim on any node: %s. Change the claim's config", r.ConfigError)
		return
	}
	allowed := func(t topology.InstanceType) bool {
		return (r.InstanceTypes == nil || slices.Contains(r.InstanceTypes, t.Name)) && (r.Matching == nil || slices.Contains(r.Matching, t.Name))
	}
	var keep, why []string
	var accept []topology.InstanceType
	for _, t := range ts.cat.Types() {
		err := ts.validate(r.Configs, t)
		switch {
		case err == nil && allowed(t):
			keep = append(keep, t.Name)
		case err == nil:
			accept = append(accept, t)
		case allowed(t) && !slices.Contains(why, err.Error()):
			why = append(why, err.Error())
		}
	}
	r.Matching = keep
	if r.Matching == nil {
		r.Matching = []string{}
	}
	if len(keep) > 0 {
		return
	}
	msg := "the DRA driver of a new node would refuse the opaque configs of the pod's ResourceClaim: "
	if len(why) <= 3 {
		msg += strings.Join(why, "; ")
	} else {
		msg += fmt.Sprintf("none of the %d instance types the claim allows accepts them (%s; ...)", len(why), why[0])
	}
	if len(accept) > 0 {
		sortByPrice(accept)
		var names []string
		for _, t := range accept {
			names = append(names, t.Name)
		}
		msg += fmt.Sprintf("; instance types whose driver accepts them: %s. Change the claim's selectors to one of them, or remove the config", strings.Join(names, ", "))
	} else {
		msg += ". Change the claim's config"
	}
	r.Refused = msg
}
