package deviceplugin

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	podresv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/deviceplugin/ledger"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// restarted is a new plugin process on the same node: the pods as the API server has them now,
// nothing in memory, and the checkpoint in dir.
func restarted(t *testing.T, client *fake.Clientset, dir string) (*Plugin, context.Context) {
	t.Helper()
	p, _, ctx := testPlugin(t)
	p.o.Client, p.o.StateDir = client, dir
	list, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for i := range list.Items {
		if err := indexer.Add(&list.Items[i]); err != nil {
			t.Fatal(err)
		}
	}
	p.pods = corelisters.NewPodLister(indexer)
	if err := p.loadCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	return p, ctx
}

// TestAnswersSurviveARestart: the kubelet admits y first, with id 5; the call is matched to x's
// record (the oldest) and served device 0. The plugin restarts before a refresh has written
// that down. Its PodResources show y holding id 5, which alone says nothing of device 0: the
// checkpoint does. After the refresh y's record names device 0, x's the device nobody got, and
// x's call is served it.
func TestAnswersSurviveARestart(t *testing.T) {
	for _, keep := range []bool{true, false} {
		t.Run(map[bool]string{true: "checkpoint", false: "no checkpoint"}[keep], func(t *testing.T) {
			dir := t.TempDir()
			if !keep {
				dir = ""
			}
			p, client, ctx := testPlugin(t,
				neuronPod("x", 1).Record(neuronRecord(0)).AllocTime(1).Pending().Obj(),
				neuronPod("y", 1).Record(neuronRecord(1)).AllocTime(2).Pending().Obj(),
			)
			p.o.StateDir = dir
			if r, err := p.allocate(ctx, topology.ResourceNeuron, []string{"5"}); err != nil { // y's call, matched to x's record
				t.Fatal(err)
			} else if got := r.Envs[allocation.EnvVisibleDevices]; got != "0" {
				t.Fatalf("y's call got devices %s, want x's record's 0", got)
			}

			p, ctx = restarted(t, client, dir)
			podRes := []*podresv1.PodResources{admitted("y", topology.ResourceNeuron, "5")}
			p.podResources = func(context.Context) ([]*podresv1.PodResources, error) { return podRes, nil }
			pods, _ := p.pods.List(labels.Everything())
			p.reconcile(ctx, pods, podRes, true)

			y := recordOf(t, ctx, client, "y")
			if !keep {
				// Without the checkpoint the plugin takes y's kubelet id for its hardware: the
				// gap this file closes. Seeing it here shows the test reaches it.
				if !y.Served || y.Devices[0] != 5 {
					t.Fatalf("y's record %+v: want it to name the kubelet's id 5 without a checkpoint", y)
				}
				return
			}
			if !y.Served || len(y.Devices) != 1 || y.Devices[0] != 0 {
				t.Fatalf("y's record %+v, want device 0 served: what y's call got", y)
			}
			if x := recordOf(t, ctx, client, "x"); x.Served || len(x.Devices) != 1 || x.Devices[0] != 1 {
				t.Fatalf("x's record %+v, want device 1 (y's old one, which nobody got), waiting", x)
			}
			r, err := p.allocate(ctx, topology.ResourceNeuron, []string{"7"})
			if err != nil {
				t.Fatalf("x's call: %v", err)
			}
			if got := r.Envs[allocation.EnvVisibleDevices]; got != "1" {
				t.Errorf("x's call got devices %s, want 1", got)
			}
		})
	}
}

func recordOf(t *testing.T, ctx context.Context, client *fake.Clientset, name string) allocation.Container {
	t.Helper()
	pod, err := client.CoreV1().Pods("ns").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := allocation.RecordOf(pod)
	if err != nil || r == nil || len(r.Containers) != 1 {
		t.Fatalf("pod %s: record %+v, %v", name, r, err)
	}
	return r.Containers[0]
}

// TestCheckpointIsWrittenBeforeTheAnswerAndPruned: the answer is on disk when Allocate returns,
// and gone from it once the kubelet no longer holds its ids.
func TestCheckpointIsWrittenBeforeTheAnswerAndPruned(t *testing.T) {
	dir := t.TempDir()
	p, _, ctx := testPlugin(t, neuronPod("x", 2).Record(neuronRecord(2, 3)).AllocTime(1).Pending().Obj())
	p.o.StateDir = dir
	if _, err := p.allocate(ctx, topology.ResourceNeuron, []string{"9", "8"}); err != nil {
		t.Fatal(err)
	}
	c := readCheckpoint(t, dir)
	if c.Node != node || c.InstanceType != "trn1.32xlarge" || len(c.Answers) != 1 {
		t.Fatalf("checkpoint %+v, want node %s, trn1.32xlarge and one answer", c, node)
	}
	a := c.Answers[0]
	if a.Resource != topology.ResourceNeuron || strings.Join(a.KubeletIDs, ",") != "8,9" || len(a.Devices) != 2 || a.Devices[0] != 2 || a.Devices[1] != 3 || a.Pod != "ns/x" || a.Container != "app" {
		t.Errorf("answer %+v, want kubelet ids 8,9 served devices 2,3 for ns/x container app", a)
	}

	pods, _ := p.pods.List(labels.Everything())
	podRes := []*podresv1.PodResources{admitted("x", topology.ResourceNeuron, "8", "9")}
	p.reconcile(ctx, pods, podRes, true)
	if c := readCheckpoint(t, dir); len(c.Answers) != 1 || !c.Answers[0].Seen {
		t.Fatalf("checkpoint %+v, want the answer marked seen", c)
	}
	p.reconcile(ctx, pods, nil, true) // the kubelet no longer holds ids 8 and 9
	if c := readCheckpoint(t, dir); len(c.Answers) != 0 {
		t.Errorf("checkpoint %+v, want no answers once the kubelet released the ids", c)
	}
}

func readCheckpoint(t *testing.T, dir string) checkpoint {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, CheckpointFile))
	if err != nil {
		t.Fatal(err)
	}
	var c checkpoint
	if err := json.Unmarshal(data, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestAnAnswerThatCannotBeKeptIsNotGiven: like the kubelet, which fails an admission whose
// checkpoint it cannot write, Allocate refuses, says what to do, and holds nothing.
func TestAnAnswerThatCannotBeKeptIsNotGiven(t *testing.T) {
	dir := t.TempDir()
	p, _, ctx := testPlugin(t, neuronPod("x", 1).Record(neuronRecord(4)).AllocTime(1).Pending().Obj())
	p.o.StateDir = filepath.Join(dir, "missing") // not created: loadCheckpoint was not called
	_, err := p.allocate(ctx, topology.ResourceNeuron, []string{"4"})
	if err == nil {
		t.Fatal("allocate answered without keeping the answer")
	}
	for _, want := range []string{"pod ns/x container app", "writing the checkpoint", "--state-dir"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q\ndoes not contain %q", err, want)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if answers, inflight := p.ledger.Answers(), p.ledger.InFlight(); len(answers) != 0 || len(inflight) != 0 {
		t.Errorf("answers %v inflight %v, want nothing held after a refused call", answers, inflight)
	}
}

// TestLoadCheckpoint: what a start does with the file it finds.
func TestLoadCheckpoint(t *testing.T) {
	shape := trn1(t)
	at := time.Date(2026, 11, 23, 1, 2, 3, 0, time.UTC)
	good := checkpoint{Version: 1, Node: node, InstanceType: shape.Type.Name, LNC: shape.LNC, Answers: []checkpointAnswer{
		{Resource: topology.ResourceNeuron, KubeletIDs: []string{"5"}, Devices: []int{0}, Cores: []int{0, 1}, PodUID: "uid-y", Pod: "ns/y", Container: "app", At: at, Seen: true},
		{Resource: topology.ResourceNeuronCore, KubeletIDs: []string{"3", "2"}, Devices: []int{4}, Cores: []int{8, 9}, At: at},
	}}
	encode := func(c checkpoint) string {
		data, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	with := func(f func(*checkpoint)) string {
		c := good
		c.Answers = append([]checkpointAnswer(nil), good.Answers...)
		f(&c)
		return encode(c)
	}
	for _, tc := range []struct {
		name, content string
		answers       int
		invalid       string // the error logged when the file is moved aside
	}{
		{name: "none"},
		{name: "good", content: encode(good), answers: 2},
		{name: "another node", content: with(func(c *checkpoint) { c.Node = "other" })},
		{name: "another LNC", content: with(func(c *checkpoint) { c.LNC = 2 })},
		{name: "not JSON", content: "{", invalid: "not a neuron-device-plugin checkpoint"},
		{name: "unknown field", content: `{"version":1,"nodes":"x"}`, invalid: `unknown field "nodes"`},
		{name: "newer version", content: with(func(c *checkpoint) { c.Version = 2 }), invalid: "checkpoint version 2: this plugin reads version 1"},
		{name: "unknown resource", content: with(func(c *checkpoint) { c.Answers[0].Resource = "aws.amazon.com/gpu" }), invalid: `answer 0: resource "aws.amazon.com/gpu" is not one this plugin serves`},
		{name: "device out of range", content: with(func(c *checkpoint) { c.Answers[0].Devices, c.Answers[0].Cores = []int{16}, []int{32, 33} }), invalid: "answer 0: hardware: device 16 does not exist"},
		{name: "cores of another device", content: with(func(c *checkpoint) { c.Answers[0].Cores = []int{2, 3} }), invalid: "answer 0: devices [0] and cores [2 3] do not go together"},
		{name: "bad kubelet id", content: with(func(c *checkpoint) { c.Answers[1].KubeletIDs = []string{"x"} }), invalid: `answer 1: kubelet ids: device id "x"`},
		{name: "answered twice", content: with(func(c *checkpoint) { c.Answers[1] = c.Answers[0] }), invalid: "answer 1: aws.amazon.com/neuron ids [5] are answered twice"},
		{name: "no time", content: with(func(c *checkpoint) { c.Answers[1].At = time.Time{} }), invalid: "answer 1: no time"},
		{name: "time out of range", content: strings.Replace(encode(good), "2026-11-23T01:02:03Z", "0000-01-01T00:00:00+01:00", 1), invalid: "answer 0: time 0000-01-01T00:00:00+01:00 is out of range"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, CheckpointFile)
			if tc.content != "" {
				if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			p, _, ctx := testPlugin(t)
			p.o.StateDir = dir
			if err := p.loadCheckpoint(ctx); err != nil {
				t.Fatal(err)
			}
			if n := len(p.ledger.Answers()); n != tc.answers {
				t.Errorf("loaded %d answers, want %d", n, tc.answers)
			}
			_, err := os.Stat(path + ".invalid")
			if moved := err == nil; moved != (tc.invalid != "") {
				t.Errorf("moved aside: %v, want %v", moved, tc.invalid != "")
			}
			if tc.invalid != "" {
				_, perr := parseCheckpoint([]byte(tc.content), node, shape)
				if perr == nil || !strings.Contains(perr.Error(), tc.invalid) {
					t.Errorf("error %v, want one containing %q", perr, tc.invalid)
				}
			}
		})
	}

	// What was loaded is what was written.
	p, _, _ := testPlugin(t)
	served, err := parseCheckpoint([]byte(encode(good)), node, p.shape)
	if err != nil {
		t.Fatal(err)
	}
	data, err := encodeCheckpoint(node, p.shape, served)
	if err != nil {
		t.Fatal(err)
	}
	again, err := parseCheckpoint(data, node, p.shape)
	if err != nil {
		t.Fatal(err)
	}
	if len(again) != 2 || again[ledger.KeyOf(topology.ResourceNeuron, []string{"5"})].Pod.String() != "ns/y" || !again[ledger.KeyOf(topology.ResourceNeuron, []string{"5"})].Seen ||
		!again[ledger.KeyOf(topology.ResourceNeuronCore, []string{"2", "3"})].At.Equal(at) {
		t.Errorf("round trip lost something: %+v", again)
	}
}

// FuzzParseCheckpoint: whatever the file holds, parsing does not panic, and what it accepts is
// hardware of the node that encodes back to what parses the same.
func FuzzParseCheckpoint(f *testing.F) {
	f.Add(`{"version":1,"node":"trn1-a","instanceType":"trn1.32xlarge","lnc":1,"answers":[{"resource":"aws.amazon.com/neuron","kubeletIDs":["5"],"devices":[0],"cores":[0,1],"at":"2026-11-23T01:02:03Z"}]}`)
	f.Add(`{"version":1,"node":"trn1-a","instanceType":"trn1.32xlarge","lnc":1,"answers":[{"resource":"aws.amazon.com/neuroncore","kubeletIDs":["3","2"],"devices":[4],"cores":[8,9],"pod":"ns/y","podUID":"u","container":"c","at":"2026-11-23T01:02:03Z","seen":true}]}`)
	f.Add(`{"version":1,"node":"trn1-a","instanceType":"trn1.32xlarge","lnc":1,"answers":[]}`)
	f.Add(`{}`)
	f.Add(`[]`)
	shape := trn1(f)
	f.Fuzz(func(t *testing.T, data string) {
		served, err := parseCheckpoint([]byte(data), node, shape)
		if err != nil {
			return
		}
		for k, e := range served {
			if k != ledger.KeyOf(e.Resource, e.Kubelet) {
				t.Fatalf("answer under key %v is for %s %v", k, e.Resource, e.Kubelet)
			}
			if len(e.Hardware.Cores) == 0 || e.Hardware.Devices[len(e.Hardware.Devices)-1] >= shape.Devices() || e.Hardware.Cores[len(e.Hardware.Cores)-1] >= shape.Cores() {
				t.Fatalf("accepted hardware %+v, not the node's", e.Hardware)
			}
		}
		out, err := encodeCheckpoint(node, shape, served)
		if err != nil {
			t.Fatal(err)
		}
		again, err := parseCheckpoint(out, node, shape)
		if err != nil {
			t.Fatalf("what was accepted does not parse once written again: %v\n%s", err, out)
		}
		if len(again) != len(served) {
			t.Fatalf("%d answers, %d after writing them again", len(served), len(again))
		}
	})
}

// TestTheCheckpointIsNotRewrittenWhenNothingChanged: refreshes come every second; the file is
// written only when the answers change.
func TestTheCheckpointIsNotRewrittenWhenNothingChanged(t *testing.T) {
	dir := t.TempDir()
	p, _, ctx := testPlugin(t, neuronPod("x", 1).Record(neuronRecord(4)).AllocTime(1).Pending().Obj())
	p.o.StateDir = dir
	if _, err := p.allocate(ctx, topology.ResourceNeuron, []string{"4"}); err != nil {
		t.Fatal(err)
	}
	pods, _ := p.pods.List(labels.Everything())
	podRes := []*podresv1.PodResources{admitted("x", topology.ResourceNeuron, "4")}
	p.reconcile(ctx, pods, podRes, true)
	path := filepath.Join(dir, CheckpointFile)
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		p.reconcile(ctx, pods, podRes, true)
	}
	after, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(before, after) {
		t.Errorf("the checkpoint was rewritten by refreshes that changed nothing")
	}
}
