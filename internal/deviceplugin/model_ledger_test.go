package deviceplugin

import (
	"maps"
	"slices"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/deviceplugin/ledger"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// ledgerWorld is the ledger with the plugin's I/O done in memory: the API server and the
// informer are maps of pods (the informer's a copy that lags), and a record write replaces the
// pod's record. The plugin writes its checkpoint after every Allocate and every refresh, the
// only calls that change the answers: a restart reads what encodeCheckpoint makes of them.
type ledgerWorld struct {
	m        *kubeletModel
	l        *ledger.Ledger
	api      map[string]ledger.Pod
	informer map[string]ledger.Pod
}

func newLedgerWorld(m *kubeletModel) modelWorld {
	return &ledgerWorld{m: m, l: ledger.New(m.shape, node), api: map[string]ledger.Pod{}, informer: map[string]ledger.Pod{}}
}

// restart starts with an empty ledger and the answers of the checkpoint.
func (w *ledgerWorld) restart() error {
	data, err := encodeCheckpoint(node, w.m.shape, w.l.Answers())
	if err != nil {
		return err
	}
	answers, err := parseCheckpoint(data, node, w.m.shape)
	if err != nil {
		return err
	}
	w.l = ledger.New(w.m.shape, node)
	w.l.Restore(answers, time.Now())
	return nil
}

func (w *ledgerWorld) bind(mp modelPod, shown bool) error {
	pod := ledger.Pod{
		Key: ledger.PodKey{Namespace: "ns", Name: mp.name}, UID: types.UID("uid-" + mp.name), Pending: true,
		Created: time.Unix(mp.created, 0).UnixNano(), AllocTime: mp.allocTime, Record: mp.record,
	}
	for _, c := range mp.ctrs {
		pod.Asks = append(pod.Asks, allocation.Request{Container: c.name, Resource: c.res, Count: c.count})
	}
	w.api[mp.name] = pod
	if shown {
		w.informer[mp.name] = pod
	}
	return nil
}

func (w *ledgerWorld) remove(name string) error {
	delete(w.api, name)
	delete(w.informer, name)
	return nil
}

func (w *ledgerWorld) catchUp() error {
	w.informer = maps.Clone(w.api)
	return nil
}

func (w *ledgerWorld) records() (map[string]*allocation.Record, error) {
	out := map[string]*allocation.Record{}
	for name, pod := range w.api {
		out[name] = pod.Record
	}
	return out, nil
}

// query is a call's query: the informer's pods, the model's API server and kubelet to ask.
func (w *ledgerWorld) query() ledger.Query {
	return ledger.Query{Pods: podsOf(w.informer), Lookup: w, Records: true, Now: time.Now(), Log: logr.Discard()}
}

func (w *ledgerWorld) preferred(resource string, available []string, count int) []string {
	return w.l.Preferred(w.query(), resource, available, nil, count)
}

func (w *ledgerWorld) allocate(resource string, ids []string) (topology.Allocation, error) {
	g, err := w.l.Allocate(w.query(), resource, ids)
	if err != nil {
		return topology.Allocation{}, err
	}
	if g.Fix != nil {
		w.write(*g.Fix)
	}
	return g.Hardware, nil
}

func (w *ledgerWorld) refresh() error {
	snap := ledger.Snapshot{Pods: podsOf(w.informer), Cached: true, Kubelet: w.m.kubelet(), KubeletOK: true, Now: time.Now()}
	fixes, err := w.l.Refresh(snap, w)
	if err != nil {
		return err
	}
	for _, f := range fixes {
		w.write(f)
	}
	return nil
}

// write is the plugin's record write against the API server: the pod's record with the fix.
func (w *ledgerWorld) write(f ledger.Fix) {
	pod, ok := w.api[f.Pod.Name]
	if !ok || pod.UID != f.Key.UID {
		return
	}
	next, changed, err := ledger.ApplyFix(pod.Record, node, f)
	if err != nil {
		w.m.t.Fatal(err)
	}
	if changed {
		pod.Record = next
		w.api[f.Pod.Name] = pod
		w.l.Landed(f)
	}
	w.l.Wrote(f, time.Now())
}

func (w *ledgerWorld) withdrawn(resource string) map[string]string {
	return w.l.Withdrawn(resource, nil)
}

// ListPods is the API server's list of the node's pods.
func (w *ledgerWorld) ListPods() ([]ledger.Pod, error) { return podsOf(w.api), nil }

// Gone looks the pod up in the API server.
func (w *ledgerWorld) Gone(key ledger.PodKey, uid types.UID) bool {
	pod, ok := w.api[key.Name]
	return !ok || pod.UID != uid || pod.Finished
}

// KubeletHolder looks the ids up in the kubelet.
func (w *ledgerWorld) KubeletHolder(resource string, ids []string) ledger.PodKey {
	want := ledger.KeyOf(resource, ids)
	for _, name := range sortedKeys(w.m.admitted) {
		for i, held := range w.m.admitted[name] {
			if ledger.KeyOf(w.m.pods[name][i].res, held) == want {
				return ledger.PodKey{Namespace: "ns", Name: name}
			}
		}
	}
	return ledger.PodKey{}
}

func podsOf(m map[string]ledger.Pod) []ledger.Pod {
	names := slices.Sorted(maps.Keys(m))
	out := make([]ledger.Pod, len(names))
	for i, name := range names {
		out[i] = m[name]
	}
	return out
}
