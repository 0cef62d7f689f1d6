package extender

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/testkit"
)

type response struct {
	status int
	header http.Header
	body   []byte
}

func do(t testing.TB, srv *httptest.Server, method, path string, body []byte) response {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: data}
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func filterArgs(pod *corev1.Pod, nodes ...string) *extenderv1.ExtenderArgs {
	return &extenderv1.ExtenderArgs{Pod: pod, NodeNames: &nodes}
}

func TestHandlerBeforeStart(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	e, err := New(Options{Client: fake.NewClientset(cluster()...)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e.Handler(ctx))
	defer srv.Close()
	body := mustJSON(t, filterArgs(testkit.MakePod().Name("p").Neuron(4).Obj(), "trn-empty"))
	for _, tc := range []struct {
		method, path string
		want         int
	}{
		{http.MethodPost, "/filter", http.StatusServiceUnavailable},
		{http.MethodPost, "/prioritize", http.StatusServiceUnavailable},
		{http.MethodPost, "/bind", http.StatusServiceUnavailable},
		{http.MethodGet, "/readyz", http.StatusServiceUnavailable},
		{http.MethodGet, "/healthz", http.StatusOK},
		{http.MethodGet, "/filter", http.StatusMethodNotAllowed},
	} {
		if r := do(t, srv, tc.method, tc.path, body); r.status != tc.want {
			t.Errorf("%s %s: %d %q, want %d", tc.method, tc.path, r.status, r.body, tc.want)
		}
	}
}

func startServer(t *testing.T) (*httptest.Server, *fake.Clientset, context.Context) {
	t.Helper()
	e, client, ctx := startExtender(t, cluster()...)
	srv := httptest.NewServer(e.Handler(ctx))
	t.Cleanup(srv.Close)
	return srv, client, ctx
}

func TestHandlerStatus(t *testing.T) {
	srv, _, _ := startServer(t)
	valid := mustJSON(t, filterArgs(testkit.MakePod().Name("p").Neuron(4).Obj(), "trn-empty"))
	tooBig := append([]byte(`{"Pod":{"metadata":{"name":"`), bytes.Repeat([]byte("a"), MaxBodyBytes)...)
	for _, tc := range []struct {
		name, method, path string
		body               []byte
		want               int
		wantBody           string
	}{
		{"readyz", http.MethodGet, "/readyz", nil, http.StatusOK, "ok"},
		{"healthz", http.MethodGet, "/healthz", nil, http.StatusOK, "ok"},
		{"filter", http.MethodPost, "/filter", valid, http.StatusOK, ""},
		{"prioritize", http.MethodPost, "/prioritize", valid, http.StatusOK, ""},
		{"GET filter", http.MethodGet, "/filter", nil, http.StatusMethodNotAllowed, "filter takes POST"},
		{"PUT bind", http.MethodPut, "/bind", nil, http.StatusMethodNotAllowed, "bind takes POST"},
		{"malformed filter", http.MethodPost, "/filter", []byte(`{"Pod":`), http.StatusBadRequest, "filter: the body is not a kube-scheduler extender filter request"},
		{"malformed prioritize", http.MethodPost, "/prioritize", []byte(`[1,2]`), http.StatusBadRequest, "prioritize: the body is not a kube-scheduler extender prioritize request"},
		{"malformed bind", http.MethodPost, "/bind", []byte(`not json`), http.StatusBadRequest, "bind: the body is not a kube-scheduler extender bind request"},
		{"empty filter body", http.MethodPost, "/filter", nil, http.StatusBadRequest, "unexpected end of JSON input"},
		{"body over the cap", http.MethodPost, "/filter", tooBig, http.StatusRequestEntityTooLarge, "request body larger than 8388608 bytes"},
		{"body at the cap", http.MethodPost, "/filter", append(valid, bytes.Repeat([]byte(" "), MaxBodyBytes-len(valid))...), http.StatusOK, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := do(t, srv, tc.method, tc.path, tc.body)
			if r.status != tc.want {
				t.Fatalf("status %d (%q), want %d", r.status, truncate(r.body), tc.want)
			}
			if !strings.Contains(string(r.body), tc.wantBody) {
				t.Errorf("body %q does not contain %q", truncate(r.body), tc.wantBody)
			}
			if tc.want == http.StatusMethodNotAllowed && r.header.Get("Allow") != http.MethodPost {
				t.Errorf("Allow header %q, want POST", r.header.Get("Allow"))
			}
			if tc.want == http.StatusOK && tc.method == http.MethodPost && r.header.Get("Content-Type") != "application/json" {
				t.Errorf("Content-Type %q", r.header.Get("Content-Type"))
			}
		})
	}
}

func truncate(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "..."
	}
	return string(b)
}

func TestHandlerFilterWire(t *testing.T) {
	srv, _, _ := startServer(t)
	r := do(t, srv, http.MethodPost, "/filter", mustJSON(t, filterArgs(testkit.MakePod().Name("p").Neuron(4).Obj(), "trn-empty", "trn-full", "cpu")))
	if r.status != http.StatusOK {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"} {
		if _, ok := m[k]; !ok {
			t.Errorf("filter answer %s has no field %s", r.body, k)
		}
	}
	if names, ok := m["NodeNames"].([]any); !ok || len(names) != 1 || names[0] != "trn-empty" {
		t.Errorf("NodeNames %v, want [trn-empty]", m["NodeNames"])
	}
	if failed, ok := m["FailedNodes"].(map[string]any); !ok || failed["trn-full"] == nil || len(failed) != 1 {
		t.Errorf("FailedNodes %v, want trn-full", m["FailedNodes"])
	}
	if un, ok := m["FailedAndUnresolvableNodes"].(map[string]any); !ok || un["cpu"] == nil || len(un) != 1 {
		t.Errorf("FailedAndUnresolvableNodes %v, want cpu", m["FailedAndUnresolvableNodes"])
	}
	if m["Error"] != "" {
		t.Errorf("Error %q, want empty", m["Error"])
	}

	// A scheduler that is not node-cache capable sends whole nodes.
	args := &extenderv1.ExtenderArgs{Pod: testkit.MakePod().Name("p").Neuron(4).Obj(), Nodes: &corev1.NodeList{Items: []corev1.Node{
		*testkit.MakeNode().Name("trn-partly").InstanceType(trn1).Obj(), *testkit.MakeNode().Name("trn-dra").Obj(),
	}}}
	var res extenderv1.ExtenderFilterResult
	if err := json.Unmarshal(do(t, srv, http.MethodPost, "/filter", mustJSON(t, args)).body, &res); err != nil {
		t.Fatal(err)
	}
	if res.NodeNames == nil || !slices.Equal(*res.NodeNames, []string{"trn-partly"}) || len(res.FailedAndUnresolvableNodes) != 1 {
		t.Errorf("filter over Nodes: %+v", res)
	}

	// No pod: a logical error, status 200.
	r = do(t, srv, http.MethodPost, "/filter", []byte(`{"NodeNames":["trn-empty"]}`))
	if err := json.Unmarshal(r.body, &res); r.status != http.StatusOK || err != nil || res.Error == "" {
		t.Errorf("filter without a pod: %d %s", r.status, r.body)
	}
}

func TestHandlerPrioritize(t *testing.T) {
	srv, _, _ := startServer(t)
	names := []string{"trn-empty", "trn-partly", "trn-full", "cpu"}
	r := do(t, srv, http.MethodPost, "/prioritize", mustJSON(t, filterArgs(testkit.MakePod().Name("p").Neuron(4).Obj(), names...)))
	if r.status != http.StatusOK {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	var raw []map[string]any
	if err := json.Unmarshal(r.body, &raw); err != nil {
		t.Fatal(err)
	}
	for _, hp := range raw {
		if _, ok := hp["Host"]; !ok {
			t.Errorf("entry %v has no Host", hp)
		}
		if _, ok := hp["Score"]; !ok {
			t.Errorf("entry %v has no Score", hp)
		}
	}
	var list extenderv1.HostPriorityList
	if err := json.Unmarshal(r.body, &list); err != nil {
		t.Fatal(err)
	}
	// Listed nodes come in request order with their score above the request's lowest; a node
	// left out scores 0 (the scheduler adds nothing to it).
	scores := map[string]int64{}
	next := 0
	for _, hp := range list {
		i := slices.Index(names, hp.Host)
		if i < next {
			t.Errorf("%s listed out of request order or twice: %v", hp.Host, list)
		}
		next = i + 1
		if hp.Score <= 0 || hp.Score > 10 {
			t.Errorf("%s: score %d, want 1-10 (zeros are left out)", hp.Host, hp.Score)
		}
		scores[hp.Host] = hp.Score
	}
	if scores["trn-partly"] <= scores["trn-empty"] {
		t.Errorf("scores %v: want trn-partly above trn-empty", scores)
	}
	// No pod: an empty list.
	r = do(t, srv, http.MethodPost, "/prioritize", []byte(`{}`))
	if r.status != http.StatusOK || strings.TrimSpace(string(r.body)) != "[]" {
		t.Errorf("prioritize without a pod: %d %s", r.status, r.body)
	}
}

func TestHandlerBind(t *testing.T) {
	srv, client, ctx := startServer(t)
	pod := createPod(t, ctx, client, testkit.MakePod().Name("p").Neuron(4).Obj())
	for _, tc := range []struct {
		name    string
		args    extenderv1.ExtenderBindingArgs
		wantErr string // "" for success
	}{
		{"no pod name", extenderv1.ExtenderBindingArgs{PodNamespace: "default", Node: "trn-empty"}, "needs PodName, PodNamespace and Node"},
		{"no namespace", extenderv1.ExtenderBindingArgs{PodName: "p", Node: "trn-empty"}, "needs PodName, PodNamespace and Node"},
		{"no node", extenderv1.ExtenderBindingArgs{PodName: "p", PodNamespace: "default"}, "needs PodName, PodNamespace and Node"},
		{"missing pod", extenderv1.ExtenderBindingArgs{PodName: "nope", PodNamespace: "default", PodUID: "x", Node: "trn-empty"}, "getting pod default/nope"},
		{"full node", extenderv1.ExtenderBindingArgs{PodName: "p", PodNamespace: "default", PodUID: pod.UID, Node: "trn-full"}, "no longer fits"},
		{"ok", extenderv1.ExtenderBindingArgs{PodName: "p", PodNamespace: "default", PodUID: pod.UID, Node: "trn-empty"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := do(t, srv, http.MethodPost, "/bind", mustJSON(t, tc.args))
			if r.status != http.StatusOK {
				t.Fatalf("status %d: %s", r.status, r.body)
			}
			var m map[string]any
			if err := json.Unmarshal(r.body, &m); err != nil {
				t.Fatal(err)
			}
			msg, ok := m["Error"].(string)
			if !ok {
				t.Fatalf("bind answer %s has no Error string", r.body)
			}
			if tc.wantErr == "" && msg != "" || !strings.Contains(msg, tc.wantErr) {
				t.Errorf("Error %q, want %q", msg, tc.wantErr)
			}
		})
	}
	got, err := client.CoreV1().Pods("default").Get(ctx, "p", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rec, err := allocation.RecordOf(got); err != nil || rec == nil || rec.Node != "trn-empty" {
		t.Errorf("record after the HTTP bind: %v, %v", rec, err)
	}
}

func TestHandlerMetrics(t *testing.T) {
	srv, _, _ := startServer(t)
	do(t, srv, http.MethodPost, "/filter", mustJSON(t, filterArgs(testkit.MakePod().Name("p").Neuron(4).Obj(), "trn-empty")))
	r := do(t, srv, http.MethodGet, "/metrics", nil)
	if r.status != http.StatusOK {
		t.Fatalf("status %d", r.status)
	}
	for _, want := range []string{
		"# TYPE neuron_scheduler_extender_filter_duration_seconds histogram",
		"neuron_scheduler_extender_filter_duration_seconds_count 1",
		"neuron_scheduler_extender_bind_duration_seconds",
	} {
		if !strings.Contains(string(r.body), want) {
			t.Errorf("/metrics has no %q", want)
		}
	}
}

// fuzzTarget posts body to path on a started extender and checks the contract: no panic, one of
// 200, 400 and 413, and a 200 answer that decodes as the verb's result.
func fuzzTarget(f *testing.F, path string, seeds [][]byte, check func(t *testing.T, body []byte)) {
	e, client, ctx := startQuietExtender(f, false, cluster()...)
	for _, p := range []*corev1.Pod{testkit.MakePod().Name("p").Neuron(4).Obj(), testkit.MakePod().Name("q").NeuronCores(3).Obj()} {
		if _, err := client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			f.Fatal(err)
		}
	}
	h := e.Handler(ctx)
	for _, s := range seeds {
		f.Add(s)
		for _, n := range []int{1, len(s) / 2, len(s) - 1} {
			if n > 0 && n < len(s) {
				f.Add(s[:n]) // truncated JSON
			}
		}
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		client.ClearActions() // the fake clientset records every call; keep memory flat
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body)))
		switch rec.Code {
		case http.StatusOK:
			check(t, rec.Body.Bytes())
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		default:
			t.Fatalf("status %d for %q: %s", rec.Code, body, rec.Body.Bytes())
		}
	})
}

func FuzzFilterBody(f *testing.F) {
	seeds := [][]byte{
		[]byte(`{}`),
		[]byte(`null`),
		[]byte(`{"Pod":null,"NodeNames":null}`),
		[]byte(`{"Pod":{"metadata":{"name":"p","uid":"u"},"spec":{"containers":[{"name":"a","resources":{"limits":{"aws.amazon.com/neuron":"7"}}}]}},"NodeNames":["trn-empty","inf-empty"]}`),
		[]byte(`{"Pod":{"spec":{"initContainers":[{"name":"i","resources":{"requests":{"aws.amazon.com/neuroncore":"-3"}}}],"containers":[{"name":"a","resources":{"limits":{"aws.amazon.com/neurondevice":"1e18"}}}]}},"Nodes":{"items":[{"metadata":{"name":"trn-full"}}]}}`),
		[]byte(`{"Pod":{"spec":{"containers":[{"name":"a","resources":{"limits":{"aws.amazon.com/neuroncore":"13"}}}]}},"NodeNames":["trn-empty","trn-partly","trn-full","inf-empty","trn-dra","cpu","ghost"]}`),
	}
	for _, args := range []*extenderv1.ExtenderArgs{
		filterArgs(testkit.MakePod().Name("p").Neuron(4).Obj(), allNodes...),
		filterArgs(testkit.MakePod().Name("q").NeuronCores(1).Container("b", "aws.amazon.com/neuron", 2).Obj(), "trn-partly"),
	} {
		data, _ := json.Marshal(args)
		seeds = append(seeds, data)
	}
	fuzzTarget(f, "/filter", seeds, func(t *testing.T, body []byte) {
		var res extenderv1.ExtenderFilterResult
		if err := json.Unmarshal(body, &res); err != nil {
			t.Fatalf("a 200 filter answer does not decode: %v: %s", err, body)
		}
	})
}

func FuzzBindBody(f *testing.F) {
	seeds := [][]byte{
		[]byte(`{}`),
		[]byte(`null`),
		[]byte(`{"PodName":"p","PodNamespace":"default","PodUID":"uid-p","Node":"trn-empty"}`),
		[]byte(`{"PodName":"q","PodNamespace":"default","PodUID":"uid-q","Node":"inf-empty"}`),
		[]byte(`{"PodName":"p","PodNamespace":"default","PodUID":"other","Node":"trn-full"}`),
		[]byte(`{"PodName":"holder-full","PodNamespace":"default","PodUID":"uid-holder-full","Node":"trn-dra"}`),
		[]byte(`{"PodName":"p","PodNamespace":"default","Node":"cpu"}`),
	}
	fuzzTarget(f, "/bind", seeds, func(t *testing.T, body []byte) {
		var res extenderv1.ExtenderBindingResult
		if err := json.Unmarshal(body, &res); err != nil {
			t.Fatalf("a 200 bind answer does not decode: %v: %s", err, body)
		}
	})
}

func TestRelativeScoresKeepTheRanking(t *testing.T) {
	for _, tc := range []struct {
		names  []string
		scores []int64
		whole  int64
		listed int
	}{
		{[]string{"a", "b", "c"}, []int64{8, 9, 8}, -1, 1},
		{[]string{"a", "b"}, []int64{3, 3}, -1, 0},
		{[]string{"a", "b", "c", "d"}, []int64{10, 0, 4, 0}, -1, 2},
		{[]string{"a"}, []int64{7}, -1, 0},
		{nil, nil, -1, 0},
		// The best whole node scores 4: c and d (no better than a whole node) rank alike.
		{[]string{"a", "b", "c", "d", "e"}, []int64{6, 0, 4, 2, 5}, 4, 2},
		// Nothing beats a whole node: the pod opens one, and every rank is kept.
		{[]string{"a", "b", "c"}, []int64{4, 0, 2}, 4, 2},
		// Whole nodes score below every node of the request: every rank is kept.
		{[]string{"a", "b", "c"}, []int64{4, 3, 2}, 1, 2},
	} {
		list := relativeScores(tc.names, tc.scores, tc.whole)
		if len(list) != tc.listed {
			t.Errorf("%v (whole %d) -> %v: %d nodes listed, want %d", tc.scores, tc.whole, list, len(list), tc.listed)
		}
		got := map[string]int64{}
		for _, hp := range list {
			if hp.Score <= 0 {
				t.Errorf("%v: %s listed with score %d", tc.scores, hp.Host, hp.Score)
			}
			got[hp.Host] = hp.Score
		}
		top := slices.Max(append([]int64{0}, tc.scores...))
		for i, a := range tc.names {
			for j, b := range tc.names {
				sa, sb := tc.scores[i], tc.scores[j]
				switch {
				case top > tc.whole && sb <= tc.whole && sa <= tc.whole:
					// Both no better than a whole node, which some node beats: alike.
					if got[a] != got[b] {
						t.Errorf("%v (whole %d) -> %v: %s and %s rank apart", tc.scores, tc.whole, list, a, b)
					}
				case top > tc.whole && sb <= tc.whole:
					// a beats every whole node, b does not: a stays ahead by at least as much
					// as a whole node's score would leave it.
					if got[a]-got[b] < sa-max(sb, tc.whole) || got[a] <= got[b] {
						t.Errorf("%v (whole %d) -> %v: %s-%s is %d, want at least %d", tc.scores, tc.whole, list, a, b, got[a]-got[b], sa-max(sb, tc.whole))
					}
				case top > tc.whole && sa <= tc.whole:
				default:
					// What the scheduler adds (0 for a node left out) differs between the two
					// exactly as their scores do.
					if got[a]-got[b] != sa-sb {
						t.Errorf("%v (whole %d) -> %v: %s-%s is %d, want %d", tc.scores, tc.whole, list, a, b, got[a]-got[b], sa-sb)
					}
				}
			}
		}
	}
}

// TestPrioritizeAnswerNamesTheNodesThatBeatAWholeNode: a one-core pod fits tighter on the partly
// used trn1 than on any whole node, so the answer names that node only; with only whole nodes to
// choose from, it ranks the empty inf2.48xlarge (a 12-device ring) above the empty trn1.32xlarge
// (16 devices), so the pod opens the smaller node.
func TestPrioritizeAnswerNamesTheNodesThatBeatAWholeNode(t *testing.T) {
	srv, _, _ := startServer(t)
	prioritize := func(names ...string) extenderv1.HostPriorityList {
		t.Helper()
		r := do(t, srv, http.MethodPost, "/prioritize", mustJSON(t, filterArgs(testkit.MakePod().Name("p").NeuronCores(1).Obj(), names...)))
		var list extenderv1.HostPriorityList
		if err := json.Unmarshal(r.body, &list); r.status != http.StatusOK || err != nil {
			t.Fatalf("status %d, %v: %s", r.status, err, r.body)
		}
		return list
	}
	if list := prioritize("trn-empty", "trn-partly", "inf-empty"); len(list) != 1 || list[0].Host != "trn-partly" {
		t.Errorf("answer %v, want trn-partly alone", list)
	}
	if list := prioritize("trn-empty", "inf-empty"); len(list) != 1 || list[0].Host != "inf-empty" {
		t.Errorf("answer %v, want inf-empty alone (above trn-empty)", list)
	}
}
