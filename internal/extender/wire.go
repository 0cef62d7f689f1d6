package extender

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	jsonv1 "github.com/go-json-experiment/json/v1"
	corev1 "k8s.io/api/core/v1"
)

// The kube-scheduler sends every pod twice per scheduling cycle, to filter and to prioritize,
// with the names of up to a few hundred nodes. Decoding that with encoding/json took more CPU
// than filtering (make bench-scheduler; docs/scheduler-extender.md, Throughput), so the
// extender reads it with the encoding/json/v2 implementation (github.com/go-json-experiment/json,
// which mirrors the standard library's encoding/json/v2 and becomes an alias of it on Go 1.27),
// and takes the node names' strings from the nodes it knows instead of allocating one per name.
// The JSON accepted is the JSON encoding/json accepts for extenderv1.ExtenderArgs: member names
// match case-insensitively, the last of duplicate members wins (FuzzDecodeArgs compares the two).

// v1Semantics decodes the pod as encoding/json would: case-insensitive member names, duplicate
// members, invalid UTF-8 replaced, the legacy UnmarshalJSON methods of the API types.
var v1Semantics = jsonv1.DefaultOptionsV1()

// extenderArgs is an ExtenderArgs request: the pod (nil for a JSON null or no "Pod") and the
// candidate node names, from NodeNames (nodeCacheCapable) or from the items of Nodes.
type extenderArgs struct {
	pod   *corev1.Pod
	names []string
}

// nodeNameList is what the extender reads of a NodeList: the names.
type nodeNameList struct {
	Items []struct {
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
	} `json:"items"`
}

// decodeArgs reads an ExtenderArgs body. intern returns the string of a node name it knows
// (without allocating) or "" and false; nil interns nothing.
func decodeArgs(body []byte, intern func([]byte) (string, bool)) (extenderArgs, error) {
	args, err := decodeArgsJSON(body, intern)
	switch {
	case err == nil:
	case errors.Is(err, io.EOF) && len(bytes.TrimSpace(body)) == 0:
		err = errors.New("the body is empty (unexpected end of JSON input)")
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		err = fmt.Errorf("unexpected end of JSON input: %w", err)
	}
	return args, err
}

func decodeArgsJSON(body []byte, intern func([]byte) (string, bool)) (extenderArgs, error) {
	var args extenderArgs
	// A bytes.Buffer is parsed in place, without a copy.
	dec := jsontext.NewDecoder(bytes.NewBuffer(body), v1Semantics)
	switch kind := dec.PeekKind(); kind {
	case 'n':
		if _, err := dec.ReadToken(); err != nil {
			return args, err
		}
		return args, atEnd(dec)
	case '{':
	case 0:
		_, err := dec.ReadToken()
		return args, err
	default:
		return args, fmt.Errorf("the body is a JSON %s, not an object", kindName(kind))
	}
	if _, err := dec.ReadToken(); err != nil {
		return args, err
	}
	var nodes *nodeNameList
	var names []string
	var haveNames bool
	for dec.PeekKind() != '}' {
		key, err := dec.ReadValue()
		if err != nil {
			return args, err
		}
		// The decoder checked the syntax: AppendUnquote can only report invalid UTF-8, which it
		// replaces with U+FFFD as encoding/json does.
		name, _ := jsontext.AppendUnquote(nil, key)
		// Into the same variables each time: a member that comes twice merges as encoding/json
		// merges it.
		switch {
		case bytes.EqualFold(name, []byte("Pod")):
			if err := jsonv2.UnmarshalDecode(dec, &args.pod, v1Semantics); err != nil {
				return args, fmt.Errorf("member Pod: %w", err)
			}
		case bytes.EqualFold(name, []byte("NodeNames")):
			if names, haveNames, err = decodeNames(dec, intern); err != nil {
				return args, fmt.Errorf("member NodeNames: %w", err)
			}
		case bytes.EqualFold(name, []byte("Nodes")):
			if err := jsonv2.UnmarshalDecode(dec, &nodes, v1Semantics); err != nil {
				return args, fmt.Errorf("member Nodes: %w", err)
			}
		default:
			if err := dec.SkipValue(); err != nil {
				return args, err
			}
		}
	}
	if _, err := dec.ReadToken(); err != nil {
		return args, err
	}
	if err := atEnd(dec); err != nil {
		return args, err
	}
	// NodeNames when present (nodeCacheCapable), else the names of Nodes.
	switch {
	case haveNames:
		args.names = names
	case nodes != nil:
		for _, n := range nodes.Items {
			args.names = append(args.names, n.Metadata.Name)
		}
	}
	return args, nil
}

// decodeNames reads a JSON array of strings, or null (ok false). The decoder checks the array's
// syntax as it reads it whole; the names are then cut out of it by hand, which costs a fraction
// of reading them value by value.
func decodeNames(dec *jsontext.Decoder, intern func([]byte) (string, bool)) (names []string, ok bool, err error) {
	switch kind := dec.PeekKind(); kind {
	case 'n':
		_, err := dec.ReadToken()
		return nil, false, err
	case '[':
	case 0:
		_, err := dec.ReadToken()
		return nil, false, err
	default:
		return nil, false, fmt.Errorf("want an array of node names, not a JSON %s", kindName(kind))
	}
	array, err := dec.ReadValue()
	if err != nil {
		return nil, false, err
	}
	names = make([]string, 0, bytes.Count(array, []byte{'"'})/2)
	var buf []byte
	rest := array[1:] // after '['
	for {
		rest = skipSpaceAndComma(rest)
		if rest[0] == ']' {
			return names, true, nil
		}
		if rest[0] != '"' {
			return nil, false, fmt.Errorf("want an array of node names, found a JSON %s", kindName(jsontext.Value(rest).Kind()))
		}
		// The closing quote is the first one not escaped; a name without escapes or non-ASCII
		// bytes is the bytes between the quotes.
		end, escaped := 1, false
		for ; rest[end] != '"'; end++ {
			switch c := rest[end]; {
			case c == '\\':
				escaped = true
				end++
			case c >= 0x80:
				escaped = true
			}
		}
		raw := rest[1:end]
		if escaped {
			// The decoder checked the syntax: AppendUnquote can only report invalid UTF-8,
			// which it replaces with U+FFFD as encoding/json does.
			buf, _ = jsontext.AppendUnquote(buf[:0], rest[:end+1])
			raw = buf
		}
		name, known := "", false
		if intern != nil {
			name, known = intern(raw)
		}
		if !known {
			name = string(raw)
		}
		names = append(names, name)
		rest = rest[end+1:]
	}
}

// skipSpaceAndComma skips the white space and commas between the values of a checked array.
func skipSpaceAndComma(b []byte) []byte {
	for len(b) > 0 {
		switch b[0] {
		case ' ', '\t', '\n', '\r', ',':
			b = b[1:]
		default:
			return b
		}
	}
	return b
}

// atEnd fails when anything but white space follows the top-level value.
func atEnd(dec *jsontext.Decoder) error {
	if _, err := dec.ReadToken(); err != io.EOF {
		if err == nil {
			return errors.New("the body has data after its JSON value")
		}
		return err
	}
	return nil
}

func kindName(k jsontext.Kind) string {
	switch k {
	case 'n':
		return "null"
	case 'f', 't':
		return "boolean"
	case '"':
		return "string"
	case '0':
		return "number"
	case '{':
		return "object"
	case '[':
		return "array"
	}
	return "value"
}

// internName is decodeArgs's intern: the string of a node the node informer delivered.
func (e *Extender) internName(b []byte) (string, bool) {
	e.nodeShapesMu.RLock()
	ns, ok := e.nodeShapes[string(b)]
	e.nodeShapesMu.RUnlock()
	return ns.name, ok
}
