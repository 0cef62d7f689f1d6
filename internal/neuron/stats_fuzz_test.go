package neuron

import (
	"strconv"
	"strings"
	"testing"
)

func FuzzParsePowerUtilization(f *testing.F) {
	for _, s := range []string{
		"POWER_STATUS_VALID,1712345678,40.00,80.00,62.50\n", "POWER_STATUS_NO_DATA,1712345678,0.00,0.00,0.00",
		"POWER_STATUS_INVALID,0,0,0,0", "POWER_STATUS_VALID,1,100.00,100,99.9", "POWER_STATUS_VALID,1,100.01,1,1",
		"", ",,,,", "POWER_STATUS_VALID,1,1,1", "POWER_STATUS_VALID,-1,1,1,1", "POWER_STATUS_VALID,1,1e1,1,1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got, err := parsePowerUtilization([]byte(in))
		if err != nil {
			if err.Error() == "" || got != (PowerUtilization{}) {
				t.Fatalf("parsePowerUtilization(%q) = %+v with error %q", in, got, err)
			}
			return
		}
		for _, v := range []float64{got.Min, got.Max, got.Avg} {
			if !(v >= 0 && v <= 100) {
				t.Fatalf("parsePowerUtilization(%q) = %+v: a value outside 0..100", in, got)
			}
		}
		fields := strings.Split(strings.TrimSpace(in), ",")
		if got.Valid != (fields[0] == powerStatusValid) {
			t.Fatalf("parsePowerUtilization(%q).Valid = %v for status %q", in, got.Valid, fields[0])
		}
		if sec, err := strconv.ParseInt(fields[1], 10, 64); err != nil || got.At.Unix() != sec || sec < 0 {
			t.Fatalf("parsePowerUtilization(%q).At = %v, want unix %s", in, got.At, fields[1])
		}
	})
}

func FuzzParseStatValue(f *testing.F) {
	for _, s := range []string{"0", "7\n", " 42 ", "18446744073709551615", "18446744073709551616", "-1", "", "0x10", "1_000", "1.5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got, err := parseStatValue([]byte(in), "count")
		want, perr := strconv.ParseUint(strings.TrimSpace(in), 10, 64)
		if err != nil {
			if got != 0 || !strings.Contains(err.Error(), "expected a decimal count") {
				t.Fatalf("parseStatValue(%q) = %d, %v", in, got, err)
			}
			if perr == nil && isDigits(strings.TrimSpace(in)) {
				t.Fatalf("parseStatValue(%q) rejected a decimal strconv accepts (%d)", in, want)
			}
			return
		}
		if perr != nil || got != want {
			t.Fatalf("parseStatValue(%q) = %d, strconv says %d, %v", in, got, want, perr)
		}
	})
}
