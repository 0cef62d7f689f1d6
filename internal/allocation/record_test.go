package allocation

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestRecordRoundTrip(t *testing.T) {
	r := &Record{Node: "n1", Containers: []Container{
		{Name: "a", Resource: "aws.amazon.com/neuron", Devices: []int{4, 5}, Cores: []int{8, 9, 10, 11}, Served: true},
		{Name: "b", Resource: "aws.amazon.com/neuroncore", Devices: []int{6}, Cores: []int{12}},
	}}
	back, err := Parse(r.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if back.Encode() != r.Encode() {
		t.Errorf("%s != %s", back.Encode(), r.Encode())
	}
	a := r.Annotations()
	if a[AWSNeuronIDs] != "4,5,12" || a[Allocated] != "false" || a[ResourceType] != "aws.amazon.com/neuron" {
		t.Errorf("annotations %v", a)
	}
	r.Containers[1].Served = true
	if r.Annotations()[Allocated] != "true" {
		t.Error("all served: NEURON_ALLOCATED must be true")
	}
	var patch map[string]map[string]map[string]*string
	if err := json.Unmarshal(MergePatch(map[string]*string{"x": nil, "y": StringPtrs(map[string]string{"y": "1"})["y"]}), &patch); err != nil {
		t.Fatal(err)
	}
	if v, ok := patch["metadata"]["annotations"]["x"]; !ok || v != nil {
		t.Errorf("x must be null (removed): %v", patch)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"node":"n","containers":[],"extra":1}`, "unknown field"},
		{`{"containers":[]}`, "names no node"},
		{`{"node":"n","containers":[{"resource":"aws.amazon.com/neuron"}]}`, "has no name"},
		{`{"node":"n","containers":[{"name":"c","resource":"nvidia.com/gpu"}]}`, "not a Neuron resource"},
		{`{"node":"n","containers":[{"name":"c","resource":"aws.amazon.com/neuron","devices":[3,1]}]}`, "ascending"},
		{`not json`, "not a valid allocation record"},
		{`{"node":"n","containers":[]} {}`, "unexpected data"},
	} {
		if _, err := Parse(tc.in); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.in, err, tc.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add(`{"node":"n","containers":[{"name":"c","resource":"aws.amazon.com/neuron","devices":[0,1],"cores":[0,1,2,3],"served":false}]}`)
	f.Add(`{}`)
	f.Fuzz(func(t *testing.T, s string) {
		r, err := Parse(s)
		if err != nil {
			return
		}
		again, err := Parse(r.Encode())
		if err != nil || again.Encode() != r.Encode() {
			t.Fatalf("round trip of %q: %v", s, err)
		}
	})
}
