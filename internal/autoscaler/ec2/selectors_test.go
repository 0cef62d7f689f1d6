package ec2_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/kube-neuron/kube-neuron/internal/autoscaler/ec2"
)

func TestParseReservationSelectors(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []ec2.ReservationSelector
		wantErr []string
	}{
		{in: "", want: nil},
		{in: " [] ", want: []ec2.ReservationSelector{}},
		{in: `[{"id":"cr-0123456789abcdef0"},{"tags":{"team":"ml","kube-neuron.io/pool":"a"}}]`,
			want: []ec2.ReservationSelector{{ID: "cr-0123456789abcdef0"}, {Tags: map[string]string{"team": "ml", "kube-neuron.io/pool": "a"}}}},
		{in: `[{"id":"cr-01234567"}]`, want: []ec2.ReservationSelector{{ID: "cr-01234567"}}},
		{in: `{"id":"cr-0123456789abcdef0"}`, wantErr: []string{"not a JSON list of terms"}},
		{in: `[{"id":"cr-0123456789abcdef0"},{"id":"i-0123"}]`, wantErr: []string{"term 2", `"i-0123" is not a Capacity Reservation id`}},
		{in: `[{"id":"cr-0123456789abcdef0","tags":{"a":"b"}}]`, wantErr: []string{"term 1", "has both an id and tags"}},
		{in: `[{}]`, wantErr: []string{"term 1 ({})", "neither an id"}},
		{in: `[{"tags":{}}]`, wantErr: []string{"term 1", "neither an id"}},
		{in: `[{"ids":["cr-0123456789abcdef0"]}]`, wantErr: []string{"term 1", `unknown field "ids"`}},
		{in: `[{"tags":{"":"x"}}]`, wantErr: []string{"term 1", "empty key"}},
		{in: `[{"tags":{"k":"` + strings.Repeat("v", 257) + `"}}]`, wantErr: []string{"term 1", `value of tag "k" is longer`}},
		{in: `[{"id":"cr-0123456789abcdef0"},{"id":"cr-0123456789abcdef0"}]`, wantErr: []string{"term 2", "repeats term 1"}},
		{in: `["cr-0123456789abcdef0"]`, wantErr: []string{"term 1", "either \"id\" or \"tags\""}},
		{in: `[{"id":"cr-0123456789abcdef0"}] x`, wantErr: []string{"not a JSON list"}},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ec2.ParseReservationSelectors(tc.in)
			if tc.wantErr != nil {
				if err == nil {
					t.Fatalf("got %v, want an error", got)
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q lacks %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %#v, want %#v", got, tc.want)
			}
		})
	}
}

// FuzzParseReservationSelectors: any input either fails or gives terms that each have exactly
// one of an id and tags, and every error says what it is about.
func FuzzParseReservationSelectors(f *testing.F) {
	for _, s := range []string{``, `[]`, `[{"id":"cr-0123456789abcdef0"}]`, `[{"tags":{"a":"b"}}]`, `[{"id":"cr-01234567","tags":{"a":"b"}}]`, `[{}]`, `[1]`, `[{"tags":{"":""}}]`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ec2.ParseReservationSelectors(s)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "ec2: capacity reservations") {
				t.Fatalf("error %q does not say what it is about", err)
			}
			return
		}
		for i, term := range got {
			if (term.ID == "") == (len(term.Tags) == 0) {
				t.Fatalf("term %d %+v has not exactly one of id and tags", i, term)
			}
		}
	})
}
