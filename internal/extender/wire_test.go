package extender

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/kube-neuron/kube-neuron/internal/testkit"
)

// decodeV1 is what decodeArgs replaces: encoding/json into the wire type, then the names as the
// handlers used to take them.
func decodeV1(body []byte) (extenderArgs, error) {
	var a extenderv1.ExtenderArgs
	if err := json.Unmarshal(body, &a); err != nil {
		return extenderArgs{}, err
	}
	out := extenderArgs{pod: a.Pod}
	switch {
	case a.NodeNames != nil:
		out.names = *a.NodeNames
	case a.Nodes != nil:
		for _, n := range a.Nodes.Items {
			out.names = append(out.names, n.Name)
		}
	}
	return out, nil
}

func TestDecodeArgs(t *testing.T) {
	pod := testkit.MakePod().Name("p").Neuron(4).Obj()
	pod.Annotations = map[string]string{"a": "b"}
	pod.Status.NominatedNodeName = "trn-empty"
	cacheCapable := mustJSON(t, filterArgs(pod, "trn-empty", "inf-empty"))
	nodes := mustJSON(t, &extenderv1.ExtenderArgs{Pod: pod, Nodes: &corev1.NodeList{Items: []corev1.Node{
		{ObjectMeta: metav1.ObjectMeta{Name: "trn-empty", Labels: map[string]string{"x": "y"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "inf-empty"}},
	}}})
	for _, tc := range []struct {
		name      string
		body      string
		wantPod   bool
		wantNames []string
		wantErr   string
	}{
		{name: "nodeCacheCapable", body: string(cacheCapable), wantPod: true, wantNames: []string{"trn-empty", "inf-empty"}},
		{name: "nodes", body: string(nodes), wantPod: true, wantNames: []string{"trn-empty", "inf-empty"}},
		{name: "names win over nodes", body: `{"Nodes":{"items":[{"metadata":{"name":"a"}}]},"NodeNames":["b"]}`, wantNames: []string{"b"}},
		{name: "null names fall back to nodes", body: `{"Nodes":{"items":[{"metadata":{"name":"a"}}]},"NodeNames":null}`, wantNames: []string{"a"}},
		{name: "member names in any case", body: `{"pod":{"metadata":{"name":"p"}},"nodenames":["x"]}`, wantPod: true, wantNames: []string{"x"}},
		{name: "escaped names", body: `{"NodeNames":["a\u002db","\u00e9t\u00e9"]}`, wantNames: []string{"a-b", "été"}},
		{name: "unknown members skipped", body: `{"Extra":[1,{"a":[]}],"NodeNames":[]}`, wantNames: []string{}},
		{name: "null", body: `null`},
		{name: "empty object", body: ` {} `},
		{name: "empty", body: ``, wantErr: "the body is empty (unexpected end of JSON input)"},
		{name: "truncated", body: `{"Pod":`, wantErr: "unexpected end of JSON input"},
		{name: "array", body: `[1,2]`, wantErr: "the body is a JSON array, not an object"},
		{name: "names not an array", body: `{"NodeNames":"a"}`, wantErr: "NodeNames: want an array of node names, not a JSON string"},
		{name: "a name not a string", body: `{"NodeNames":["a",1]}`, wantErr: "NodeNames: want an array of node names, found a JSON number"},
		{name: "pod not an object", body: `{"Pod":[]}`, wantErr: "Pod: "},
		{name: "data after the object", body: `{} {}`, wantErr: "the body has data after its JSON value"},
		{name: "syntax", body: `{"Pod":{"metadata":}}`, wantErr: "invalid character"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeArgs([]byte(tc.body), reuse{})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				if _, v1err := decodeV1([]byte(tc.body)); v1err == nil {
					t.Errorf("encoding/json accepts %s", tc.body)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (got.pod != nil) != tc.wantPod {
				t.Errorf("pod %v, want one: %v", got.pod, tc.wantPod)
			}
			if !slices.Equal(got.names, tc.wantNames) || (got.names == nil) != (tc.wantNames == nil) {
				t.Errorf("names %q, want %q", got.names, tc.wantNames)
			}
			want, err := decodeV1([]byte(tc.body))
			if err != nil {
				t.Fatalf("encoding/json: %v", err)
			}
			if !apiequality.Semantic.DeepEqual(got.pod, want.pod) {
				t.Errorf("pod differs from encoding/json's:\n%+v\n%+v", got.pod, want.pod)
			}
		})
	}
}

// TestDecodeArgsInternsKnownNames: the names of nodes the informer delivered are the informer's
// strings, not one allocation per name and request.
func TestDecodeArgsInternsKnownNames(t *testing.T) {
	e, _, _ := startQuietExtender(t, false, cluster()...)
	body := mustJSON(t, filterArgs(testkit.MakePod().Name("p").Neuron(1).Obj(), "trn-empty", "ghost", "inf-empty"))
	got, err := decodeArgs(body, reuse{intern: e.internName})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.names, []string{"trn-empty", "ghost", "inf-empty"}) {
		t.Fatalf("names %q", got.names)
	}
	e.scores.shapes.mu.RLock()
	defer e.scores.shapes.mu.RUnlock()
	for i, want := range map[int]bool{0: true, 1: false, 2: true} {
		known, ok := e.scores.shapes.byName[got.names[i]]
		shared := ok && unsafe.StringData(known.name) == unsafe.StringData(got.names[i])
		if shared != want {
			t.Errorf("%s: shares the informer's string: %v, want %v", got.names[i], shared, want)
		}
	}
}

// TestDecodeArgsReusesThePodOfTheSameJSON: prioritize gets the pod filter decoded when the
// scheduler sends it byte for byte the same, a pod that differs is decoded, and a body with two
// Pod members merges them as encoding/json does without changing the pod the memo keeps.
func TestDecodeArgsReusesThePodOfTheSameJSON(t *testing.T) {
	memo := &podMemo{}
	pod := testkit.MakePod().Name("p").Neuron(4).Obj()
	podJSON := string(mustJSON(t, pod))
	decode := func(body string) *corev1.Pod {
		t.Helper()
		got, err := decodeArgs([]byte(body), reuse{pods: memo})
		if err != nil {
			t.Fatal(err)
		}
		want, err := decodeV1([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		if !apiequality.Semantic.DeepEqual(got.pod, want.pod) {
			t.Fatalf("%s: pod differs from encoding/json's:\n%+v\n%+v", body, got.pod, want.pod)
		}
		return got.pod
	}
	filtered := decode(`{"Pod":` + podJSON + `,"NodeNames":["a","b"]}`)
	if prioritized := decode(`{"Pod":` + podJSON + `,"NodeNames":["b"]}`); prioritized != filtered {
		t.Error("the same pod JSON was decoded again")
	}
	other := strings.Replace(podJSON, `"name":"p"`, `"name":"q"`, 1)
	if got := decode(`{"Pod":` + other + `}`); got == filtered || got.Name != "q" {
		t.Errorf("a different pod JSON gave %s (the memo's: %v)", got.Name, got == filtered)
	}
	merged := decode(`{"Pod":` + podJSON + `,"Pod":{"metadata":{"name":"merged"}}}`)
	if merged == filtered || merged.Name != "merged" {
		t.Errorf("two Pod members gave %s (the memo's: %v)", merged.Name, merged == filtered)
	}
	if again := decode(`{"Pod":` + podJSON + `}`); again.Name != "p" {
		t.Errorf("the memo's pod was changed to %s", again.Name)
	}
	if got := decode(`{"Pod":{"metadata":{"name":"merged"}}}`); got == merged {
		t.Error("a merge of two Pod members was kept as the pod of the second")
	}
}

// TestDecodeArgsTakesTheNamesOfTheHint: names equal to the hint's, in its order, are the hint's
// strings; the others are decoded.
func TestDecodeArgsTakesTheNamesOfTheHint(t *testing.T) {
	hint := []string{strings.Clone("a"), strings.Clone("b"), strings.Clone("c")}
	got, err := decodeArgs([]byte(`{"NodeNames":["a","x","c","d"]}`), reuse{names: hint})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.names, []string{"a", "x", "c", "d"}) {
		t.Fatalf("names %q", got.names)
	}
	for i, want := range []bool{true, false, true, false} {
		shared := i < len(hint) && unsafe.StringData(got.names[i]) == unsafe.StringData(hint[i])
		if shared != want {
			t.Errorf("%s: the hint's string: %v, want %v", got.names[i], shared, want)
		}
	}
}

// FuzzDecodeArgs: whatever encoding/json decodes into ExtenderArgs, decodeArgs decodes to the
// same pod and names, and it refuses what encoding/json refuses.
func FuzzDecodeArgs(f *testing.F) {
	for _, s := range []string{
		`{}`, `null`, ``, `{"Pod":null,"NodeNames":null}`, `{"Pod":{"metadata":{"name":"a"}},"Pod":{"spec":{}}}`,
		`{"Nodes":{"items":[{"metadata":{"name":"a"}}]},"Nodes":{"kind":"NodeList"}}`,
		`{"NodeNames":["a","b"],"NodeNames":["c"]}`, `{"nodeNAMES":["\u00e9", "\ud800"]}`, "{\"NodeNames\":[\"\xff\"]}",
		`{"Pod":{"metadata":{"name":"p","uid":"u","annotations":{"k":"v"},"creationTimestamp":"2026-01-02T03:04:05Z"},"spec":{"containers":[{"name":"a","resources":{"limits":{"aws.amazon.com/neuron":"7"}}}]}},"NodeNames":["trn-empty","inf-empty"]}`,
		`{"Pod":{"spec":{"priority":"x"}}}`, `{"Pod":{"spec":{"containers":[{"resources":{"limits":{"x":"1e3000"}}}]}}}`,
		`[]`, `"s"`, `{"NodeNames":[1]}`, `{} x`, `{"Pod":{"metadata":{"name":1}}}`,
	} {
		f.Add([]byte(s))
	}
	f.Add(mustJSON(f, filterArgs(testkit.MakePod().Name("p").NeuronCores(3).Container("b", "aws.amazon.com/neuron", 2).Obj(), allNodes...)))
	// One memo for every input, and the names of the previous input as the hint, as the
	// handlers reuse them: whatever decodeArgs takes from them must be what it would decode.
	memo := &podMemo{}
	var hint []string
	f.Fuzz(func(t *testing.T, body []byte) {
		want, v1err := decodeV1(body)
		for _, r := range []reuse{{}, {pods: memo, names: hint}, {pods: memo, names: hint}} {
			got, err := decodeArgs(body, r)
			if (err == nil) != (v1err == nil) {
				t.Fatalf("decodeArgs: %v; encoding/json: %v", err, v1err)
			}
			if err != nil {
				return
			}
			if !apiequality.Semantic.DeepEqual(got.pod, want.pod) {
				t.Errorf("pod differs from encoding/json's:\n%+v\n%+v", got.pod, want.pod)
			}
			if !slices.Equal(got.names, want.names) {
				t.Errorf("names %q, encoding/json %q", got.names, want.names)
			}
			hint = got.names
		}
	})
}
