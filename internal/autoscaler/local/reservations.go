package local

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-neuron/kube-neuron/internal/autoscaler"
	"github.com/kube-neuron/kube-neuron/internal/labels"
)

// AvailabilityZone is the zone the local provider reports for its reservations.
const AvailabilityZone = "local"

// Reservation is reserved capacity the lab pretends was bought: Count instances of InstanceType
// that may run at once under ID. With End set it is a Capacity Block for ML that ends then (its
// nodes carry labels.CapacityReservationEndAnnotation); without, an On-Demand Capacity
// Reservation.
type Reservation struct {
	ID           string
	InstanceType string
	Count        int
	End          time.Time
}

// reservationFile is one entry of a --local-reservations file.
type reservationFile struct {
	ID           string `json:"id"`
	InstanceType string `json:"instanceType"`
	Count        int    `json:"count"`
	EndTime      string `json:"endTime,omitempty"`
}

// LoadReservations reads a --local-reservations file: a JSON list of
// {"id", "instanceType", "count", "endTime" (RFC 3339, optional)}.
func LoadReservations(path string) ([]Reservation, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the local reservations: %w", err)
	}
	rs, err := ParseReservations(data)
	if err != nil {
		return nil, fmt.Errorf("local reservations %s: %w", path, err)
	}
	return rs, nil
}

// ParseReservations decodes the JSON of a reservations file strictly: unknown fields, a
// missing id or instance type, a count below 1, an end time that is not RFC 3339, an id used
// twice and anything after the list are errors that say which entry is wrong.
func ParseReservations(data []byte) ([]Reservation, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var entries []reservationFile
	if err := dec.Decode(&entries); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New(`empty: want a JSON list such as [{"id":"cr-lab-1","instanceType":"trn1.32xlarge","count":2}]`)
		}
		return nil, fmt.Errorf(`not a JSON list of reservations (fields: id, instanceType, count, endTime): %w`, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("unexpected data after the list of reservations")
	}
	var out []Reservation
	seen := map[string]bool{}
	for i, e := range entries {
		where := fmt.Sprintf("reservation %d", i)
		if e.ID == "" {
			return nil, fmt.Errorf("%s: id is required", where)
		}
		where = fmt.Sprintf("reservation %d (%s)", i, e.ID)
		if seen[e.ID] {
			return nil, fmt.Errorf("%s: id %s is used twice", where, e.ID)
		}
		seen[e.ID] = true
		if e.InstanceType == "" {
			return nil, fmt.Errorf("%s: instanceType is required", where)
		}
		if e.Count < 1 {
			return nil, fmt.Errorf("%s: count %d: a reservation holds at least 1 instance", where, e.Count)
		}
		r := Reservation{ID: e.ID, InstanceType: e.InstanceType, Count: e.Count}
		if e.EndTime != "" {
			end, err := time.Parse(time.RFC3339, e.EndTime)
			if err != nil {
				return nil, fmt.Errorf("%s: endTime %q is not an RFC 3339 time such as 2026-11-27T01:00:00Z: %w", where, e.EndTime, err)
			}
			r.End = end.UTC()
		}
		out = append(out, r)
	}
	return out, nil
}

// Reservations implements autoscaler.Provider: each configured reservation with what is left of
// it, Count less its live nodes (those labelled with its id and not being deleted).
func (p *Provider) Reservations(ctx context.Context) ([]autoscaler.Reservation, error) {
	if len(p.o.Reservations) == 0 {
		return nil, nil
	}
	used, err := p.reservedNodes(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]autoscaler.Reservation, 0, len(p.o.Reservations))
	for _, r := range p.o.Reservations {
		ar := autoscaler.Reservation{
			ID: r.ID, InstanceType: r.InstanceType, AvailabilityZone: AvailabilityZone,
			Total: r.Count, Available: max(0, r.Count-used[r.ID]),
			CapacityBlock: !r.End.IsZero(), End: r.End,
		}
		if it, err := p.o.Catalog.Get(r.InstanceType); err == nil && it.UltraServerNodes > 0 {
			// EC2's name of the UltraServer: u-trn2x64 for four trn2u.48xlarge of 16 devices.
			ar.UltraServerType = fmt.Sprintf("u-%sx%d", strings.TrimSuffix(it.Family, "u"), it.Devices*it.UltraServerNodes)
		}
		out = append(out, ar)
	}
	return out, nil
}

// reservedNodes counts the live nodes of each reservation id.
func (p *Provider) reservedNodes(ctx context.Context) (map[string]int, error) {
	list, err := p.o.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: labels.CapacityReservationID})
	if err != nil {
		return nil, fmt.Errorf("listing the nodes of capacity reservations: %w", err)
	}
	used := map[string]int{}
	for _, n := range list.Items {
		if n.DeletionTimestamp == nil {
			used[n.Labels[labels.CapacityReservationID]]++
		}
	}
	return used, nil
}

// reservation returns the configured reservation with the id.
func (p *Provider) reservation(id string) (Reservation, bool) {
	i := slices.IndexFunc(p.o.Reservations, func(r Reservation) bool { return r.ID == id })
	if i < 0 {
		return Reservation{}, false
	}
	return p.o.Reservations[i], true
}

// admit checks that the requests that name a reservation fit into what is left of it, counting
// only those whose node does not exist yet (launching an existing name returns that node). The
// caller holds p.mu, so that no other launch takes the same room meanwhile.
func (p *Provider) admit(ctx context.Context, reqs []autoscaler.NodeRequest, now time.Time) error {
	need := map[string]int{}
	var ids []string
	for _, r := range reqs {
		if r.Reservation == "" {
			continue
		}
		res, ok := p.reservation(r.Reservation)
		if !ok {
			var known []string
			for _, c := range p.o.Reservations {
				known = append(known, c.ID)
			}
			return fmt.Errorf("node %s: unknown capacity reservation %q (configured: %s)", r.Name, r.Reservation, orNone(known))
		}
		if res.InstanceType != r.Type {
			return fmt.Errorf("node %s: capacity reservation %s holds %s instances, not %s", r.Name, res.ID, res.InstanceType, r.Type)
		}
		if !res.End.IsZero() && !now.Before(res.End) {
			return fmt.Errorf("node %s: capacity reservation %s ended at %s", r.Name, res.ID, res.End.Format(time.RFC3339))
		}
		exists, err := p.exists(ctx, r.Name)
		if err != nil {
			return err
		}
		if !exists {
			if need[res.ID] == 0 {
				ids = append(ids, res.ID)
			}
			need[res.ID]++
		}
	}
	if len(need) == 0 {
		return nil
	}
	used, err := p.reservedNodes(ctx)
	if err != nil {
		return err
	}
	for _, id := range ids {
		res, _ := p.reservation(id)
		if used[id]+need[id] > res.Count {
			return fmt.Errorf("capacity reservation %s is full: %d of its %d %s instances run, %d more asked for", id, used[id], res.Count, res.InstanceType, need[id])
		}
	}
	return nil
}

func orNone(ids []string) string {
	if len(ids) == 0 {
		return "none"
	}
	return strings.Join(ids, ", ")
}

// capacityLabels sets the labels and annotation of the node's capacity: the reservation's id,
// type reserved and, for a Capacity Block, its end; or on-demand.
func (p *Provider) capacityLabels(r autoscaler.NodeRequest, l, annotations map[string]string) {
	if r.Reservation == "" {
		delete(l, labels.CapacityReservationID)
		delete(annotations, labels.CapacityReservationEndAnnotation)
		l[labels.CapacityType] = labels.CapacityTypeOnDemand
		return
	}
	res, _ := p.reservation(r.Reservation)
	l[labels.CapacityReservationID] = res.ID
	l[labels.CapacityType] = labels.CapacityTypeReserved
	if res.End.IsZero() {
		delete(annotations, labels.CapacityReservationEndAnnotation)
	} else {
		annotations[labels.CapacityReservationEndAnnotation] = res.End.UTC().Format(time.RFC3339)
	}
}
