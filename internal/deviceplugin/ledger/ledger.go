package ledger

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// Holding is hardware in use, or reserved, and through which kubelet pool.
type Holding struct {
	// Pod is the pod that holds the hardware; zero when the plugin cannot name it (Who says what
	// holds it then).
	Pod    PodKey
	Who    string
	PodUID types.UID
	// Container is the container that holds the hardware; "" when not known.
	Container string
	// Resource is the pool the container asks through.
	Resource string
	// KubeletIDs are the ids the kubelet holds for the container in that pool; nil when the
	// kubelet holds none (not admitted yet, or not known).
	KubeletIDs []string
	// Hardware is what the container has (or will have).
	Hardware topology.Allocation
	// Reserved marks an extender allocation whose container the device plugin has not served
	// yet: the hardware is promised, the kubelet has not handed out anything for it.
	Reserved bool
	// Admitted marks a holding the kubelet's PodResources show: the kubelet holds KubeletIDs for
	// this container of this pod.
	Admitted bool
}

// Holder names the holding's pod (namespace/name), or what holds the hardware.
func (h Holding) Holder() string {
	if !h.Pod.IsZero() {
		return h.Pod.String()
	}
	return h.Who
}

// Answer is what the plugin answered an Allocate call: the hardware a container got for the
// kubelet's ids.
type Answer struct {
	Hardware topology.Allocation
	Resource string
	Kubelet  []string // the kubelet's ids, ascending
	// PodUID, Pod and Container name the container the answer is for: the one whose record the
	// call was matched to, and, once the kubelet's PodResources show the ids, the one holding
	// them. Zero for an answer from the kubelet's ids to a pod the plugin could not name.
	PodUID    types.UID
	Pod       PodKey
	Container string
	At        time.Time
	// Seen is set once the kubelet's PodResources showed the ids: from then on, their
	// disappearance there means the pod is gone.
	Seen bool
}

// holding is the answer as a holding; what says what holds it when it names no pod.
func (a Answer) holding(what string) Holding {
	return Holding{Pod: a.Pod, Who: what, PodUID: a.PodUID, Container: a.Container, Resource: a.Resource, KubeletIDs: a.Kubelet, Hardware: a.Hardware}
}

// Pod is what the ledger needs to know of one of the node's pods.
type Pod struct {
	Key PodKey
	UID types.UID
	// Pending is a pod the kubelet has not started (phase Pending, or none yet); Running one in
	// phase Running; Finished one that succeeded or failed; Deleting one being deleted.
	Pending, Running, Finished, Deleting bool
	Created                              int64 // creation time, unix nanoseconds
	AllocTime                            int64 // NEURON_ALLOC_TIME (allocation.AllocTimeOf)
	// Record is the pod's allocation record (allocation.RecordOf): nil when it has none, or one
	// that cannot be read.
	Record *allocation.Record
	// Published marks a record derived from the published Neuron stack's annotations.
	Published bool
	// Asks are the Neuron limits of the pod's containers, for messages naming who a call is for.
	Asks []allocation.Request
}

// Admitted is what the kubelet's PodResources show for one container and resource: the ids it
// holds, ascending.
type Admitted struct {
	Pod       PodKey
	Container string
	Resource  string
	IDs       []string
}

// Ledger is the plugin's state between calls: the holdings of the last refresh, the answers
// given, the containers matched by calls whose record write has not landed yet, and the record
// entries written that the informer may not show yet.
type Ledger struct {
	shape *topology.Shape
	node  string

	holdings []Holding
	answers  map[AnswerKey]Answer
	// inflight are the containers matched by calls whose record write is in flight: a next call
	// is not matched to them again.
	inflight map[ContainerRef]time.Time
	// written holds the record entries this plugin wrote until the informer shows them: the
	// plugin reads its own writes, also when its watch lags.
	written map[ContainerKey]written
}

// New returns an empty ledger of the node with shape.
func New(shape *topology.Shape, node string) *Ledger {
	return &Ledger{shape: shape, node: node, answers: map[AnswerKey]Answer{}, inflight: map[ContainerRef]time.Time{}, written: map[ContainerKey]written{}}
}

// Shape is the node's shape.
func (l *Ledger) Shape() *topology.Shape { return l.shape }

// Holdings returns the holdings.
func (l *Ledger) Holdings() []Holding { return slices.Clone(l.holdings) }

// SetHoldings replaces the holdings (tests).
func (l *Ledger) SetHoldings(h []Holding) { l.holdings = slices.Clone(h) }

// Answers returns the answers given that still count (the checkpoint's content).
func (l *Ledger) Answers() map[AnswerKey]Answer { return maps.Clone(l.answers) }

// Restore adds answers a previous run gave (read from the checkpoint). An answer from the future
// (the clock was set back) would never age out: it counts from now.
func (l *Ledger) Restore(answers map[AnswerKey]Answer, now time.Time) {
	for k, a := range answers {
		if a.At.After(now) {
			a.At = now
		}
		l.answers[k] = a
	}
}

// current returns the holdings with every answer not yet seen to go: the holdings of the last
// refresh may predate answers given since.
func (l *Ledger) current() []Holding {
	out := slices.Clone(l.holdings)
	for _, k := range sortedAnswerKeys(l.answers) {
		out = append(out, l.answers[k].holding("(served by this plugin)"))
	}
	return out
}

func sortedAnswerKeys(m map[AnswerKey]Answer) []AnswerKey {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b AnswerKey) int {
		return cmp.Or(strings.Compare(a.Resource, b.Resource), strings.Compare(a.IDs, b.IDs))
	})
	return keys
}

// InFlight returns the containers matched by calls whose record write has not landed yet.
func (l *Ledger) InFlight() []ContainerRef { return slices.Collect(maps.Keys(l.inflight)) }
