package ec2

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
)

// ReservationSelector is one term naming capacity reservations the autoscaler may launch into:
// the reservation with ID, or every reservation that carries all of Tags (one of the two).
// Terms are ORed: a reservation matched by several counts once.
type ReservationSelector struct {
	ID   string            `json:"id,omitempty"`
	Tags map[string]string `json:"tags,omitempty"`
}

// reservationIDPattern is the form of a Capacity Reservation id: cr- and 17 (older ids: 8) hex digits.
var reservationIDPattern = regexp.MustCompile(`^cr-[0-9a-f]{8}([0-9a-f]{9})?$`)

// maxSelectorTerms bounds the terms, as Karpenter bounds its capacityReservationSelectorTerms.
const maxSelectorTerms = 30

// ParseReservationSelectors reads the --ec2-capacity-reservations value, a JSON list of terms
// [{"id":"cr-0123456789abcdef0"},{"tags":{"team":"ml"}}]. An empty string or [] selects none.
// Each term has exactly one of id and tags; unknown fields are errors. An error names the term
// (by its position, from 1) and what is wrong with it.
func ParseReservationSelectors(s string) ([]ReservationSelector, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var raw []json.RawMessage
	if err := json.Unmarshal([]byte(s), &raw); err != nil {
		return nil, fmt.Errorf("ec2: capacity reservations %q: not a JSON list of terms such as [{\"id\":\"cr-0123456789abcdef0\"},{\"tags\":{\"team\":\"ml\"}}]: %w", s, err)
	}
	if len(raw) > maxSelectorTerms {
		return nil, fmt.Errorf("ec2: capacity reservations: %d terms, at most %d are allowed (select many reservations with one tags term)", len(raw), maxSelectorTerms)
	}
	out := make([]ReservationSelector, 0, len(raw))
	for i, r := range raw {
		term, err := parseTerm(r)
		if err != nil {
			return nil, fmt.Errorf("ec2: capacity reservations: term %d (%s): %w", i+1, r, err)
		}
		if j := slices.IndexFunc(out, func(o ReservationSelector) bool { return o.ID == term.ID && maps.Equal(o.Tags, term.Tags) }); j >= 0 {
			return nil, fmt.Errorf("ec2: capacity reservations: term %d (%s) repeats term %d", i+1, r, j+1)
		}
		out = append(out, term)
	}
	return out, nil
}

func parseTerm(r json.RawMessage) (ReservationSelector, error) {
	var t ReservationSelector
	d := json.NewDecoder(bytes.NewReader(r))
	d.DisallowUnknownFields()
	if err := d.Decode(&t); err != nil {
		return t, fmt.Errorf("a term is an object with either \"id\" or \"tags\": %w", err)
	}
	return t, t.validate()
}

func (t ReservationSelector) validate() error {
	switch {
	case t.ID != "" && len(t.Tags) > 0:
		return fmt.Errorf("has both an id and tags; an id names one reservation, give the tags in a term of their own")
	case t.ID == "" && len(t.Tags) == 0:
		return fmt.Errorf("has neither an id (cr-...) nor tags")
	case t.ID != "" && !reservationIDPattern.MatchString(t.ID):
		return fmt.Errorf("the id %q is not a Capacity Reservation id (cr- and 17 hexadecimal digits, as EC2 shows it)", t.ID)
	}
	for _, k := range slices.Sorted(maps.Keys(t.Tags)) {
		switch v := t.Tags[k]; {
		case k == "":
			return fmt.Errorf("has a tag with an empty key")
		case len(k) > maxTagKey:
			return fmt.Errorf("the tag key %q is longer than EC2's %d characters", k, maxTagKey)
		case len(v) > maxTagValue:
			return fmt.Errorf("the value of tag %q is longer than EC2's %d characters", k, maxTagValue)
		}
	}
	return nil
}
