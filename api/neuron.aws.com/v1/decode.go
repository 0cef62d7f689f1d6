package v1

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Decode strictly decodes one opaque configuration, as the API server stores it in a claim's
// spec.devices.config[].opaque.parameters (JSON), and validates it. It returns *NeuronConfig or
// *UltraServerConfig, keeping the apiVersion as written. It refuses what a lenient decoder would
// silently accept: unknown, misspelt or differently cased fields, duplicate fields, a number
// written as a string, a missing required field and anything after the object.
//
// The configs are flat objects of scalars, so Decode reads the members itself instead of going
// through a strict serializer: that lets every message name the kind and list what is allowed.
func Decode(raw []byte) (Config, error) {
	members, err := readObject(raw)
	if err != nil {
		return nil, err
	}
	count := map[string]int{}
	for _, m := range members {
		count[m.name]++
	}
	for _, name := range []string{fieldAPIVersion, fieldKind} {
		if count[name] > 1 {
			return nil, fmt.Errorf("duplicate field %q: give each field once", name)
		}
	}
	versions, kinds := strings.Join(APIVersions(), ", "), strings.Join(Kinds(), " or ")
	apiVersion, err := typeField(members, fieldAPIVersion, "set it to one of "+versions)
	if err != nil {
		return nil, err
	}
	switch {
	case apiVersion == "":
		return nil, fmt.Errorf("missing apiVersion: set it to one of %s", versions)
	case !slices.Contains(APIVersions(), apiVersion):
		return nil, fmt.Errorf("unsupported apiVersion %s: use one of %s", quote(apiVersion), versions)
	}
	kind, err := typeField(members, fieldKind, "set it to "+kinds)
	if err != nil {
		return nil, err
	}
	var field, allowed string
	switch kind {
	case "":
		return nil, fmt.Errorf("missing kind: set it to %s", kinds)
	case NeuronConfigKind:
		field, allowed = fieldLogicalNeuronCore, allowedLogicalNeuronCore
	case UltraServerConfigKind:
		field, allowed = fieldUltraserverMode, allowedUltraserverMode
	default:
		return nil, fmt.Errorf("unknown kind %s: use %s", quote(kind), kinds)
	}

	value, found := 0, false
	for _, m := range members {
		if m.name == fieldAPIVersion || m.name == fieldKind {
			continue
		}
		if m.name != field {
			return nil, fmt.Errorf("unknown field %s in %s: known fields are %s, %s, %s", quote(m.name), kind, fieldAPIVersion, fieldKind, field)
		}
		if count[m.name] > 1 {
			return nil, fmt.Errorf("duplicate field %q in %s: give each field once", m.name, kind)
		}
		if value, err = intValue(m.value); err != nil {
			return nil, fmt.Errorf("%s in %s %w: use %s", field, kind, err, allowed)
		}
		found = true
	}
	if !found {
		return nil, fmt.Errorf("missing field %q in %s: set it to %s", field, kind, allowed)
	}

	meta := metav1.TypeMeta{APIVersion: apiVersion, Kind: kind}
	var c Config
	switch kind {
	case NeuronConfigKind:
		c = &NeuronConfig{TypeMeta: meta, LogicalNeuronCore: value}
	default:
		c = &UltraServerConfig{TypeMeta: meta, UltraserverMode: value}
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

type member struct {
	name  string
	value json.RawMessage
}

// readObject reads exactly one JSON object and returns its members in document order.
func readObject(raw []byte) ([]member, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if errors.Is(err, io.EOF) {
		return nil, errors.New("empty parameters: pass a JSON object with apiVersion, kind and the kind's fields")
	}
	if err != nil {
		return nil, syntaxError(err)
	}
	if tok != json.Delim('{') {
		return nil, fmt.Errorf("parameters must be a JSON object, got %s", tokenType(tok))
	}
	var members []member
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, syntaxError(err)
		}
		name, _ := tok.(string) // inside an object the decoder only yields string keys
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return nil, syntaxError(err)
		}
		members = append(members, member{name: name, value: value})
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, syntaxError(err)
	}
	if rest := bytes.TrimLeft(raw[dec.InputOffset():], " \t\r\n"); len(rest) > 0 { // JSON's whitespace
		return nil, fmt.Errorf("unexpected data after the JSON object at offset %d: pass exactly one object", len(raw)-len(rest))
	}
	return members, nil
}

func syntaxError(err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return errors.New("parameters are not valid JSON: unexpected end of input")
	}
	var s *json.SyntaxError
	if errors.As(err, &s) {
		return fmt.Errorf("parameters are not valid JSON at offset %d: %w", s.Offset, err)
	}
	return fmt.Errorf("parameters are not valid JSON: %w", err)
}

// typeField returns apiVersion or kind, "" when absent; fix says how to correct a wrong type.
func typeField(members []member, name, fix string) (string, error) {
	for _, m := range members {
		if m.name != name {
			continue
		}
		var s string
		if len(m.value) == 0 || m.value[0] != '"' || json.Unmarshal(m.value, &s) != nil {
			return "", fmt.Errorf("%s must be a string, got %s: %s", name, describe(m.value), fix)
		}
		return s, nil
	}
	return "", nil
}

// intValue parses a JSON integer literal; its errors read after "<field> in <Kind> ".
func intValue(v json.RawMessage) (int, error) {
	if len(v) == 0 || (v[0] != '-' && (v[0] < '0' || v[0] > '9')) {
		return 0, fmt.Errorf("must be a number, got %s", describe(v))
	}
	n, err := strconv.Atoi(string(v))
	if errors.Is(err, strconv.ErrRange) {
		return 0, fmt.Errorf("is out of range, got %s", shorten(string(v)))
	}
	if err != nil {
		return 0, fmt.Errorf("must be a whole number without fraction or exponent, got %s", shorten(string(v)))
	}
	return n, nil
}

// describe names a JSON value's type and shows the value.
func describe(v json.RawMessage) string {
	s := shorten(string(v))
	switch {
	case len(v) == 0:
		return "nothing"
	case v[0] == '"':
		return "string " + s
	case v[0] == '{':
		return "object"
	case v[0] == '[':
		return "array"
	case v[0] == 't' || v[0] == 'f':
		return "boolean " + s
	case v[0] == 'n':
		return "null"
	}
	return "number " + s
}

func tokenType(tok json.Token) string {
	switch t := tok.(type) {
	case json.Delim:
		if t == '[' {
			return "array"
		}
		return string(t)
	case string:
		return "string"
	case float64, json.Number:
		return "number"
	case bool:
		return "boolean"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", tok)
}

// shownLimit bounds how much of a value from the input a message shows.
const shownLimit = 64

// shorten keeps a value from the input readable in a message; no message ends with it.
func shorten(s string) string {
	if len(s) <= shownLimit {
		return s
	}
	return s[:shownLimit] + "..."
}

// quote quotes a name or value from the input for a message.
func quote(s string) string {
	if len(s) <= shownLimit {
		return strconv.Quote(s)
	}
	return strconv.Quote(s[:shownLimit]) + "..."
}
