package ec2

import (
	"encoding/json"
	"fmt"
	"strings"
)

// ReservationSelector selects capacity reservations: by id, or by tags (all of them). Stub of
// the shared API, for the controller's wiring; the ec2 change replaces it.
type ReservationSelector struct {
	ID   string            `json:"id,omitempty"`
	Tags map[string]string `json:"tags,omitempty"`
}

// ParseReservationSelectors parses the JSON list of --ec2-capacity-reservations; "" is none.
func ParseReservationSelectors(s string) ([]ReservationSelector, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []ReservationSelector
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		return nil, fmt.Errorf("capacity reservation selectors: %w", err)
	}
	return out, nil
}
