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
	// A bytes.Buffer is parsed in place, without a copy.
	dec := jsontext.NewDecoder(bytes.NewBuffer(body), v1Semantics)
	if done, err := openObject(dec); done || err != nil {
		return extenderArgs{}, err
	}
	d := argsDecoder{r: r}
	for dec.PeekKind() != '}' {
		if err := d.member(dec); err != nil {
			return d.args, err
		}
	}
	if _, err := dec.ReadToken(); err != nil {
		return d.args, err
	}
	if err := atEnd(dec); err != nil {
		return d.args, err
	}
	return d.finish(), nil
}

// openObject reads the start of the body's top-level object. done reports a body with nothing
// more to read: JSON null (no pod, no names), or one that is not an object (err says why).
func openObject(dec *jsontext.Decoder) (done bool, err error) {
	switch kind := dec.PeekKind(); kind {
	case 'n':
		if _, err := dec.ReadToken(); err != nil {
			return true, err
		}
		return true, atEnd(dec)
	case '{':
		_, err := dec.ReadToken()
		return false, err
	case 0:
		_, err := dec.ReadToken()
		return true, err
	default:
		return true, fmt.Errorf("the body is a JSON %s, not an object", kindName(kind))
	}
}

// argsDecoder reads the members of an ExtenderArgs object. A member that comes twice is read
// into the same fields: it merges as encoding/json merges it.
type argsDecoder struct {
	r     reuse
	args  extenderArgs
	nodes *nodeNameList
	names []string
	// haveNames: the body has NodeNames, and it is not null.
	haveNames bool
	// podJSON is the JSON of the pod decoded, podMembers how many Pod members the body has, and
	// shared whether args.pod is the memo's.
	podJSON    string
	podMembers int
	shared     bool
}

// member reads one member of the object.
func (d *argsDecoder) member(dec *jsontext.Decoder) error {
	key, err := dec.ReadValue()
	if err != nil {
		return err
	}
	// The decoder checked the syntax: AppendUnquote can only report invalid UTF-8, which it
	// replaces with U+FFFD as encoding/json does.
	name, _ := jsontext.AppendUnquote(nil, key)
	switch {
	case bytes.EqualFold(name, []byte("Pod")):
		return d.pod(dec)
	case bytes.EqualFold(name, []byte("NodeNames")):
		if d.names, d.haveNames, err = decodeNames(dec, d.r); err != nil {
			return fmt.Errorf("member NodeNames: %w", err)
		}
	case bytes.EqualFold(name, []byte("Nodes")):
		if err := jsonv2.UnmarshalDecode(dec, &d.nodes, v1Semantics); err != nil {
			return fmt.Errorf("member Nodes: %w", err)
		}
	default:
		return dec.SkipValue()
	}
	return nil
}

// pod reads a Pod member, or takes the pod the memo decoded from the same bytes.
func (d *argsDecoder) pod(dec *jsontext.Decoder) error {
	raw, err := dec.ReadValue()
	if err != nil {
		return fmt.Errorf("member Pod: %w", err)
	}
	d.podMembers++
	if d.args.pod == nil {
		if p := d.r.pods.get(raw); p != nil {
			d.args.pod, d.shared = p, true
			return nil
		}
	}
	if d.shared {
		// A second Pod member merges into the first: not into the memo's pod.
		d.args.pod, d.shared = d.args.pod.DeepCopy(), false
	}
	if d.r.pods != nil {
		d.podJSON = string(raw) // raw is the decoder's until its next read
	}
	if err := jsonv2.Unmarshal(raw, &d.args.pod, v1Semantics); err != nil {
		return fmt.Errorf("member Pod: %w", err)
	}
	return nil
}

// finish returns the arguments read, and keeps a pod decoded from one Pod member in the memo.
func (d *argsDecoder) finish() extenderArgs {
	if d.podMembers == 1 && !d.shared && d.args.pod != nil {
		d.r.pods.put(d.podJSON, d.args.pod)
	}
	// NodeNames when present (nodeCacheCapable), else the names of Nodes.
	switch {
	case d.haveNames:
		d.args.names = d.names
	case d.nodes != nil:
		for _, n := range d.nodes.Items {
			d.args.names = append(d.args.names, n.Metadata.Name)
		}
	}
	return d.args
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
