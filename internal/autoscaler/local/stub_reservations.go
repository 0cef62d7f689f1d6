package local

import (
	"encoding/json"
	"fmt"
	"os"
	"time"
)

// Reservation is a lab reservation. Stub of the shared API, for the controller's wiring; the
// local provider's change replaces it.
type Reservation struct {
	ID           string    `json:"id"`
	InstanceType string    `json:"instanceType"`
	Count        int       `json:"count"`
	End          time.Time `json:"endTime"`
}

// LoadReservations reads the JSON file of --local-reservations.
func LoadReservations(path string) ([]Reservation, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []Reservation
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("reservations file %s: %w", path, err)
	}
	return out, nil
}
