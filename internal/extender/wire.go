package extender

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"

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

// reuse is what decodeArgs may take from earlier requests instead of decoding it again; the
// zero value takes nothing. What it returns is the same either way.
type reuse struct {
	// intern returns the string of a node name it knows (without allocating) or "" and false.
	intern func([]byte) (string, bool)
	// pods are the pods of recent requests, by their exact JSON.
	pods *podMemo
	// names is the list the request's node names probably repeat, in order: prioritize is sent
	// the nodes filter passed.
	names []string
}

// decodeArgs reads an ExtenderArgs body.
func decodeArgs(body []byte, r reuse) (extenderArgs, error) {
	args, err := decodeArgsJSON(body, r)
	switch {
	case err == nil:
	case errors.Is(err, io.EOF) && len(bytes.TrimSpace(body)) == 0:
		err = errors.New("the body is empty (unexpected end of JSON input)")
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		err = fmt.Errorf("unexpected end of JSON input: %w", err)
	}
	return args, err
}

func decodeArgsJSON(body []byte, r reuse) (extenderArgs, error) {
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
	// The JSON of the pod decoded, how many Pod members the body has, and whether args.pod is
	// the memo's.
	var podJSON string
	var podMembers int
	var shared bool
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
			raw, err := dec.ReadValue()
			if err != nil {
				return args, fmt.Errorf("member Pod: %w", err)
			}
			podMembers++
			if args.pod == nil {
				if p := r.pods.get(raw); p != nil {
					args.pod, shared = p, true
					continue
				}
			}
			if shared {
				// A second Pod member merges into the first: not into the memo's pod.
				args.pod, shared = args.pod.DeepCopy(), false
			}
			if r.pods != nil {
				podJSON = string(raw) // raw is the decoder's until its next read
			}
			if err := jsonv2.Unmarshal(raw, &args.pod, v1Semantics); err != nil {
				return args, fmt.Errorf("member Pod: %w", err)
			}
		case bytes.EqualFold(name, []byte("NodeNames")):
			if names, haveNames, err = decodeNames(dec, r); err != nil {
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
	if podMembers == 1 && !shared && args.pod != nil {
		r.pods.put(podJSON, args.pod)
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

// podMemo keeps the last few pods decodeArgs decoded, by their exact JSON. The kube-scheduler
// sends a pod to filter and then the same pod, encoded the same, to prioritize (and again to
// filter when it tries the pod again), so prioritize takes the pod filter decoded: the bytes
// are the same, so is the pod. The pods are shared: nothing may change them.
type podMemo struct {
	mu   sync.Mutex
	next int
	json [4]string
	pods [4]*corev1.Pod
}

// get returns the pod decoded from exactly these bytes, or nil. A nil memo has none.
func (m *podMemo) get(raw []byte) *corev1.Pod {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, p := range m.pods {
		if p != nil && m.json[i] == string(raw) {
			return p
		}
	}
	return nil
}

// put keeps pod as decoded from raw, in place of the oldest.
func (m *podMemo) put(raw string, pod *corev1.Pod) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.json[m.next], m.pods[m.next] = raw, pod
	m.next = (m.next + 1) % len(m.pods)
}

// decodeNames reads a JSON array of strings, or null (ok false). The decoder checks the array's
// syntax as it reads it whole; the names are then cut out of it by hand, which costs a fraction
// of reading them value by value.
func decodeNames(dec *jsontext.Decoder, r reuse) (names []string, ok bool, err error) {
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
		if i := len(names); i < len(r.names) && r.names[i] == string(raw) {
			name, known = r.names[i], true
		} else if r.intern != nil {
			name, known = r.intern(raw)
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
