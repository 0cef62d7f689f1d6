package v1

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// seedParameters are the opaque parameters of the seed templates (002, 003) and of the driver log
// in seed 003, as the API server stores them.
var seedParameters = []string{
	`{"apiVersion":"resource.neuron.aws.com/v1alphav1","kind":"NeuronConfig","logicalNeuronCore":1}`,
	`{"apiVersion":"neuron.aws.com/v1alphav1","kind":"NeuronConfig","logicalNeuronCore":1}`,
	`{"apiVersion":"neuron.aws.com/v1alphav1","kind":"UltraServerConfig","ultraserverMode":4}`,
	`{"apiVersion":"neuron.aws.com/v1","kind":"NeuronConfig","logicalNeuronCore":1}`,
	`{"kind":"NeuronConfig","apiVersion":"neuron.aws.com/v1","logicalNeuronCore":1}`,
}

func TestDecodeAccepted(t *testing.T) {
	type kindCase struct {
		kind   string
		field  string
		values []int
		want   func(metav1.TypeMeta, int) Config
	}
	kinds := []kindCase{
		{NeuronConfigKind, "logicalNeuronCore", []int{1, 2}, func(m metav1.TypeMeta, v int) Config {
			return &NeuronConfig{TypeMeta: m, LogicalNeuronCore: v}
		}},
		{UltraServerConfigKind, "ultraserverMode", []int{1, 2, 4}, func(m metav1.TypeMeta, v int) Config {
			return &UltraServerConfig{TypeMeta: m, UltraserverMode: v}
		}},
	}
	for _, apiVersion := range APIVersions() {
		for _, k := range kinds {
			for _, v := range k.values {
				want := k.want(metav1.TypeMeta{APIVersion: apiVersion, Kind: k.kind}, v)
				spellings := map[string]string{
					"compact":        fmt.Sprintf(`{"apiVersion":%q,"kind":%q,%q:%d}`, apiVersion, k.kind, k.field, v),
					"field first":    fmt.Sprintf(`{%q:%d,"kind":%q,"apiVersion":%q}`, k.field, v, k.kind, apiVersion),
					"pretty":         fmt.Sprintf("\n{\n  \"apiVersion\": %q,\n  \"kind\": %q,\n  %q: %d\n}\n\t", apiVersion, k.kind, k.field, v),
					"escaped string": fmt.Sprintf(`{"apiVersion":%q,"kind":"%s",%q:%d}`, apiVersion, strings.Replace(k.kind, "C", `\u0043`, 1), k.field, v),
				}
				for name, raw := range spellings {
					t.Run(fmt.Sprintf("%s/%s/%d/%s", apiVersion, k.kind, v, name), func(t *testing.T) {
						got, err := Decode([]byte(raw))
						if err != nil {
							t.Fatalf("Decode(%s): %v", raw, err)
						}
						if !reflect.DeepEqual(got, want) {
							t.Fatalf("Decode(%s) = %#v, want %#v", raw, got, want)
						}
					})
				}
			}
		}
	}
}

func TestDecodeSeeds(t *testing.T) {
	for _, raw := range seedParameters {
		t.Run(raw, func(t *testing.T) {
			if _, err := Decode([]byte(raw)); err != nil {
				t.Fatalf("Decode: %v", err)
			}
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	const accepted = "neuron.aws.com/v1, neuron.aws.com/v1alphav1, resource.neuron.aws.com/v1alphav1"
	tests := []struct {
		name string
		raw  string
		want []string // substrings of the message, in order
	}{
		{"empty", ``, []string{"empty parameters", "apiVersion, kind"}},
		{"blank", " \n\t", []string{"empty parameters"}},
		{"array", `[]`, []string{"must be a JSON object, got array"}},
		{"string", `"NeuronConfig"`, []string{"must be a JSON object, got string"}},
		{"null", `null`, []string{"must be a JSON object, got null"}},
		{"number", `1`, []string{"must be a JSON object, got number"}},
		{"truncated", `{"apiVersion":"neuron.aws.com/v1"`, []string{"not valid JSON", "unexpected end of input"}},
		{"bad syntax", `{"apiVersion" "neuron.aws.com/v1"}`, []string{"not valid JSON at offset"}},
		{"unquoted key", `{apiVersion: "neuron.aws.com/v1"}`, []string{"not valid JSON at offset"}},
		{"yaml", "apiVersion: neuron.aws.com/v1\nkind: NeuronConfig\nlogicalNeuronCore: 1\n", []string{"not valid JSON"}},
		{"trailing object", `{"apiVersion":"neuron.aws.com/v1","kind":"NeuronConfig","logicalNeuronCore":1} {}`,
			[]string{"unexpected data after the JSON object at offset 79", "pass exactly one object"}},
		{"trailing garbage", `{"apiVersion":"neuron.aws.com/v1","kind":"NeuronConfig","logicalNeuronCore":1}x`,
			[]string{"unexpected data after the JSON object"}},
		{"missing apiVersion", `{"kind":"NeuronConfig","logicalNeuronCore":1}`,
			[]string{"missing apiVersion", "set it to one of " + accepted}},
		{"empty apiVersion", `{"apiVersion":"","kind":"NeuronConfig","logicalNeuronCore":1}`,
			[]string{"missing apiVersion", accepted}},
		{"unknown apiVersion", `{"apiVersion":"neuron.aws.com/v2","kind":"NeuronConfig","logicalNeuronCore":1}`,
			[]string{`unsupported apiVersion "neuron.aws.com/v2"`, "use one of " + accepted}},
		{"other group", `{"apiVersion":"gpu.nvidia.com/v1beta1","kind":"GpuConfig"}`,
			[]string{`unsupported apiVersion "gpu.nvidia.com/v1beta1"`, accepted}},
		{"apiVersion not a string", `{"apiVersion":1,"kind":"NeuronConfig","logicalNeuronCore":1}`,
			[]string{"apiVersion must be a string, got number 1: set it to one of " + accepted}},
		{"long number as apiVersion", `{"apiVersion":` + strings.Repeat("1", 100) + `}`,
			[]string{"apiVersion must be a string, got number " + strings.Repeat("1", 64) + "...: set it"}},
		{"long unknown field", `{"apiVersion":"neuron.aws.com/v1","kind":"NeuronConfig","` + strings.Repeat("x", 100) + `":1}`,
			[]string{`unknown field "` + strings.Repeat("x", 64) + `"... in NeuronConfig`}},
		{"duplicate apiVersion", `{"apiVersion":"neuron.aws.com/v1","apiVersion":"neuron.aws.com/v1","kind":"NeuronConfig","logicalNeuronCore":1}`,
			[]string{`duplicate field "apiVersion"`, "give each field once"}},
		{"missing kind", `{"apiVersion":"neuron.aws.com/v1","logicalNeuronCore":1}`,
			[]string{"missing kind", "NeuronConfig or UltraServerConfig"}},
		{"unknown kind", `{"apiVersion":"neuron.aws.com/v1","kind":"GpuConfig","logicalNeuronCore":1}`,
			[]string{`unknown kind "GpuConfig"`, "use NeuronConfig or UltraServerConfig"}},
		{"kind in lower case", `{"apiVersion":"neuron.aws.com/v1","kind":"neuronconfig","logicalNeuronCore":1}`,
			[]string{`unknown kind "neuronconfig"`}},
		{"kind not a string", `{"apiVersion":"neuron.aws.com/v1","kind":["NeuronConfig"],"logicalNeuronCore":1}`,
			[]string{"kind must be a string, got array: set it to NeuronConfig or UltraServerConfig"}},
		{"duplicate kind", `{"apiVersion":"neuron.aws.com/v1","kind":"NeuronConfig","kind":"UltraServerConfig","logicalNeuronCore":1}`,
			[]string{`duplicate field "kind"`}},
		{"unknown field", `{"apiVersion":"neuron.aws.com/v1","kind":"NeuronConfig","logicalNeuronCores":1}`,
			[]string{`unknown field "logicalNeuronCores" in NeuronConfig: known fields are apiVersion, kind, logicalNeuronCore`}},
		{"field of the other kind", `{"apiVersion":"neuron.aws.com/v1","kind":"UltraServerConfig","logicalNeuronCore":1}`,
			[]string{`unknown field "logicalNeuronCore" in UltraServerConfig: known fields are apiVersion, kind, ultraserverMode`}},
		{"field in other case", `{"apiVersion":"neuron.aws.com/v1","kind":"NeuronConfig","LogicalNeuronCore":1}`,
			[]string{`unknown field "LogicalNeuronCore" in NeuronConfig`}},
		{"apiVersion in other case", `{"apiversion":"neuron.aws.com/v1","kind":"NeuronConfig","logicalNeuronCore":1}`,
			[]string{"missing apiVersion"}},
		{"metadata", `{"apiVersion":"neuron.aws.com/v1","kind":"NeuronConfig","metadata":{},"logicalNeuronCore":1}`,
			[]string{`unknown field "metadata" in NeuronConfig`}},
		{"duplicate field", `{"apiVersion":"neuron.aws.com/v1","kind":"NeuronConfig","logicalNeuronCore":1,"logicalNeuronCore":2}`,
			[]string{`duplicate field "logicalNeuronCore" in NeuronConfig`, "give each field once"}},
		{"missing field", `{"apiVersion":"neuron.aws.com/v1","kind":"NeuronConfig"}`,
			[]string{`missing field "logicalNeuronCore" in NeuronConfig`, "set it to 1 or 2"}},
		{"missing mode", `{"apiVersion":"neuron.aws.com/v1alphav1","kind":"UltraServerConfig"}`,
			[]string{`missing field "ultraserverMode" in UltraServerConfig`, "set it to 1, 2 or 4"}},
		{"string number", `{"apiVersion":"neuron.aws.com/v1","kind":"NeuronConfig","logicalNeuronCore":"1"}`,
			[]string{`logicalNeuronCore in NeuronConfig must be a number, got string "1"`, "use 1 or 2"}},
		{"null field", `{"apiVersion":"neuron.aws.com/v1","kind":"NeuronConfig","logicalNeuronCore":null}`,
			[]string{"logicalNeuronCore in NeuronConfig must be a number, got null"}},
		{"boolean field", `{"apiVersion":"neuron.aws.com/v1","kind":"UltraServerConfig","ultraserverMode":true}`,
			[]string{"ultraserverMode in UltraServerConfig must be a number, got boolean true", "use 1, 2 or 4"}},
		{"object field", `{"apiVersion":"neuron.aws.com/v1","kind":"NeuronConfig","logicalNeuronCore":{"value":1}}`,
			[]string{"logicalNeuronCore in NeuronConfig must be a number, got object"}},
		{"fraction", `{"apiVersion":"neuron.aws.com/v1","kind":"NeuronConfig","logicalNeuronCore":1.5}`,
			[]string{"logicalNeuronCore in NeuronConfig must be a whole number", "got 1.5"}},
		{"exponent", `{"apiVersion":"neuron.aws.com/v1","kind":"NeuronConfig","logicalNeuronCore":1e0}`,
			[]string{"must be a whole number", "got 1e0"}},
		{"out of range", `{"apiVersion":"neuron.aws.com/v1","kind":"NeuronConfig","logicalNeuronCore":99999999999999999999}`,
			[]string{"logicalNeuronCore in NeuronConfig is out of range, got 99999999999999999999", "use 1 or 2"}},
		{"lnc 0", `{"apiVersion":"neuron.aws.com/v1","kind":"NeuronConfig","logicalNeuronCore":0}`,
			[]string{"logicalNeuronCore 0 is not allowed in NeuronConfig: use 1 or 2"}},
		{"lnc 4", `{"apiVersion":"resource.neuron.aws.com/v1alphav1","kind":"NeuronConfig","logicalNeuronCore":4}`,
			[]string{"logicalNeuronCore 4 is not allowed in NeuronConfig: use 1 or 2"}},
		{"lnc -1", `{"apiVersion":"neuron.aws.com/v1","kind":"NeuronConfig","logicalNeuronCore":-1}`,
			[]string{"logicalNeuronCore -1 is not allowed"}},
		{"mode 3", `{"apiVersion":"neuron.aws.com/v1","kind":"UltraServerConfig","ultraserverMode":3}`,
			[]string{"ultraserverMode 3 is not allowed in UltraServerConfig: use 1, 2 or 4"}},
		{"mode 8", `{"apiVersion":"neuron.aws.com/v1alphav1","kind":"UltraServerConfig","ultraserverMode":8}`,
			[]string{"ultraserverMode 8 is not allowed in UltraServerConfig"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Decode([]byte(tt.raw))
			if err == nil {
				t.Fatalf("Decode(%s) = %#v, want an error", tt.raw, got)
			}
			checkMessage(t, err)
			msg, rest := err.Error(), err.Error()
			for _, w := range tt.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("Decode(%s) error %q lacks %q (in order)", tt.raw, msg, w)
				}
				rest = rest[i+len(w):]
			}
		})
	}
}

// checkMessage holds error strings to staticcheck ST1005: no capital first letter (identifiers
// like apiVersion are fine), no trailing punctuation or newline.
func checkMessage(t *testing.T, err error) {
	t.Helper()
	msg := err.Error()
	if msg == "" {
		t.Fatal("empty error message")
	}
	if unicode.IsUpper([]rune(msg)[0]) {
		t.Errorf("error %q starts with a capital letter", msg)
	}
	if strings.ContainsAny(msg[len(msg)-1:], ".:!\n ") {
		t.Errorf("error %q ends with punctuation or space", msg)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		c    Config
		want string // "" when valid
	}{
		{&NeuronConfig{LogicalNeuronCore: 1}, ""},
		{&NeuronConfig{LogicalNeuronCore: 2}, ""},
		{&NeuronConfig{}, "logicalNeuronCore 0 is not allowed in NeuronConfig: use 1 or 2"},
		{&NeuronConfig{LogicalNeuronCore: 3}, "logicalNeuronCore 3 is not allowed in NeuronConfig: use 1 or 2"},
		{&UltraServerConfig{UltraserverMode: 1}, ""},
		{&UltraServerConfig{UltraserverMode: 2}, ""},
		{&UltraServerConfig{UltraserverMode: 4}, ""},
		{&UltraServerConfig{}, "ultraserverMode 0 is not allowed in UltraServerConfig: use 1, 2 or 4"},
		{&UltraServerConfig{UltraserverMode: 3}, "ultraserverMode 3 is not allowed in UltraServerConfig: use 1, 2 or 4"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%#v", tt.c), func(t *testing.T) {
			err := tt.c.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tt.want != "" && (err == nil || err.Error() != tt.want):
				t.Fatalf("Validate() = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestRoundTrip(t *testing.T) {
	var configs []Config
	for _, apiVersion := range APIVersions() {
		for _, v := range []int{1, 2} {
			configs = append(configs, &NeuronConfig{TypeMeta: metav1.TypeMeta{APIVersion: apiVersion, Kind: NeuronConfigKind}, LogicalNeuronCore: v})
		}
		for _, v := range []int{1, 2, 4} {
			configs = append(configs, &UltraServerConfig{TypeMeta: metav1.TypeMeta{APIVersion: apiVersion, Kind: UltraServerConfigKind}, UltraserverMode: v})
		}
	}
	for _, c := range configs {
		t.Run(fmt.Sprintf("%#v", c), func(t *testing.T) {
			checkRoundTrip(t, c)
		})
	}
}

// checkRoundTrip checks that c encodes to JSON that decodes to c.
func checkRoundTrip(t *testing.T, c Config) {
	t.Helper()
	raw, err := json.Marshal(c)
	if err != nil {
		t.Fatalf("json.Marshal(%#v): %v", c, err)
	}
	got, err := Decode(raw)
	if err != nil {
		t.Fatalf("Decode(json.Marshal(%#v) = %s): %v", c, raw, err)
	}
	if !reflect.DeepEqual(got, c) {
		t.Fatalf("Decode(json.Marshal(%#v) = %s) = %#v", c, raw, got)
	}
}

func FuzzDecode(f *testing.F) {
	for _, raw := range seedParameters {
		f.Add([]byte(raw))
	}
	for _, raw := range []string{
		``, `{}`, `[]`, `null`, `{"apiVersion":"neuron.aws.com/v1","kind":"UltraServerConfig","ultraserverMode":2}`,
		`{"apiVersion":"neuron.aws.com/v1","kind":"NeuronConfig","logicalNeuronCore":"1"}`,
		`{"apiVersion":"neuron.aws.com/v1","kind":"NeuronConfig","logicalNeuronCore":1,"logicalNeuronCore":2}`,
		`{"apiVersion":"neuron.aws.com/v1","kind":"NeuronConfig","LogicalNeuronCore":2}`,
		`{"apiVersion":"neuron.aws.com/v1","kind":"NeuronConfig","logicalNeuronCore":1} {}`,
	} {
		f.Add([]byte(raw))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		c, err := Decode(raw)
		if err != nil {
			if c != nil {
				t.Fatalf("Decode(%q) returned %#v with error %v", raw, c, err)
			}
			checkMessage(t, err)
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Decode(%q) accepted %#v, which does not validate: %v", raw, c, err)
		}
		if !json.Valid(raw) {
			t.Fatalf("Decode accepted invalid JSON %q", raw)
		}
		// What Decode accepts, the lenient standard decoder reads the same way.
		var lenient Config
		switch c.(type) {
		case *NeuronConfig:
			lenient = &NeuronConfig{}
		case *UltraServerConfig:
			lenient = &UltraServerConfig{}
		default:
			t.Fatalf("Decode(%q) returned %T", raw, c)
		}
		if err := json.Unmarshal(raw, lenient); err != nil || !reflect.DeepEqual(lenient, c) {
			t.Fatalf("Decode(%q) = %#v, json.Unmarshal = %#v, %v", raw, c, lenient, err)
		}
		checkRoundTrip(t, c)
	})
}
