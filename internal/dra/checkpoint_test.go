package dra

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func sampleCheckpoint() *Checkpoint {
	c := NewCheckpoint()
	c.Claims["uid-a"] = &PreparedClaim{
		Plan: Plan{Namespace: "ml", Name: "a", Env: map[string]string{EnvVisibleCores: "0,1"},
			Devices: []PlannedDevice{{Request: "neurons", Pool: "n", Device: "neurondevice0", Indexes: []int{0}}}},
		CDISpec: "k8s.neuron.aws.com-neuron_uid-a.json", CDIDevices: [][]string{{"k8s.neuron.aws.com/neuron=uid-a-neurondevice0"}},
	}
	return c
}

func TestCheckpointRoundTrip(t *testing.T) {
	c := sampleCheckpoint()
	dir := t.TempDir()
	if err := c.Save(dir); err != nil {
		t.Fatal(err)
	}
	got, err := LoadCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, c) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, c)
	}
	empty, err := LoadCheckpoint(t.TempDir())
	if err != nil || len(empty.Claims) != 0 || empty.Version != CheckpointVersion {
		t.Fatalf("missing checkpoint: %+v, %v", empty, err)
	}
}

func TestDecodeCheckpointErrors(t *testing.T) {
	good, _ := json.Marshal(sampleCheckpoint())
	for _, tc := range []struct{ name, data, err string }{
		{"other version", strings.Replace(string(good), "checkpoint/v1", "checkpoint/v2", 1), `version "neuron.aws.com/checkpoint/v2" is not`},
		{"unknown field", strings.Replace(string(good), `"claims"`, `"claimz":{},"claims"`, 1), "unknown field"},
		{"truncated", string(good[:len(good)-5]), "decoding"},
		{"trailing", string(good) + "{}", "trailing data"},
		{"null claim", `{"version":"neuron.aws.com/checkpoint/v1","claims":{"x":null}}`, "empty entry"},
		{"cdi mismatch", `{"version":"neuron.aws.com/checkpoint/v1","claims":{"x":{"namespace":"a","name":"b","devices":[{"request":"r","pool":"p","device":"d","indexes":[1]}],"env":{},"cdiSpec":"s","cdiDevices":[]}}}`, "1 devices but 0 CDI device lists"},
		{"negative index", `{"version":"neuron.aws.com/checkpoint/v1","claims":{"x":{"namespace":"a","name":"b","devices":[{"request":"r","pool":"p","device":"d","indexes":[-1]}],"env":{},"cdiSpec":"s","cdiDevices":[[]]}}}`, "invalid Neuron device indexes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeCheckpoint([]byte(tc.data))
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("error %v, want %q", err, tc.err)
			}
		})
	}
}

func FuzzDecodeCheckpoint(f *testing.F) {
	good, _ := json.Marshal(sampleCheckpoint())
	f.Add(good)
	f.Add([]byte(`{"version":"neuron.aws.com/checkpoint/v1","claims":{}}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := DecodeCheckpoint(data)
		if err != nil {
			return
		}
		// What decodes re-encodes to the same checkpoint, and Holder never panics on it.
		again, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		c2, err := DecodeCheckpoint(again)
		if err != nil {
			t.Fatalf("re-encoded checkpoint does not decode: %v", err)
		}
		if !reflect.DeepEqual(c, c2) {
			t.Fatalf("round trip changed the checkpoint")
		}
		c.Holder("x", []int{0, 1, 2})
	})
}
