package plan

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"

	"github.com/kube-neuron/kube-neuron/internal/dra/devices"
	"github.com/kube-neuron/kube-neuron/internal/neuron"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// draFeatures are the DRA features the kube-scheduler v1.36 enables by default (the
// dynamicresources plugin's structured.Features): admin access, prioritized lists
// (firstAvailable) and partitionable devices (shared counters: the UltraServer node device
// against the devices of its node).
var draFeatures = structured.Features{AdminAccess: true, PrioritizedList: true, PartitionableDevices: true}

// DefaultDeviceClass is the DeviceClass the chart installs for the driver, used when the cluster's
// classes are not known (kubectl-neuron check offline).
func DefaultDeviceClass() *resourcev1.DeviceClass {
	return &resourcev1.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: DeviceClass},
		Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{
			CEL: &resourcev1.CELDeviceSelector{Expression: `device.driver == "` + DeviceClass + `"`},
		}}},
	}
}

// nodeTemplate is what a new node of one instance type publishes: its Node (for the slices'
// node name) and its ResourceSlices, as the DRA driver builds them (devices.Build).
type nodeTemplate struct {
	key     string // templateKey
	node    *corev1.Node
	slices  []*resourcev1.ResourceSlice
	devices int
}

// The values a new node's own attributes take in its template. They are placeholders: only their
// structure is right (which devices share a device group, that every device of the node has the
// same UltraServer and network nodes), which is what matchAttribute constraints compare. A
// selector that reads one of them is taken to match (unknownSelector).
const (
	templateNodePrefix = "new-node-"
	templateEFAPrefix  = "new-node-efa-"
	templateServerID   = "new-ultraserver"
)

// nodeTemplate returns the template of a new node of type t; nil when t has no valid shape.
func (ts *DeviceTemplates) nodeTemplate(t topology.InstanceType) *nodeTemplate {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if nt, ok := ts.nodes[t.Name]; ok {
		return nt
	}
	learned := ts.learnedFor(t.Name)
	key := templateKey(t, learned)
	nt, ok := shared.nodes.get(key)
	if !ok {
		nt = buildTemplate(t, learned)
		if nt != nil {
			nt.key = key
		}
		shared.nodes.put(key, nt)
	}
	ts.nodes[t.Name] = nt
	return nt
}

// templateKey is what buildTemplate reads: the instance type and the learned versions.
func templateKey(t topology.InstanceType, learned map[resourcev1.QualifiedName]resourcev1.DeviceAttribute) string {
	b, _ := json.Marshal(t)
	for _, a := range learnedAttributes {
		v, _ := json.Marshal(learned[a])
		b = append(append(b, ';'), v...)
	}
	return string(b)
}

// shared holds what every planning round of the process would otherwise work out again: the
// template of a new node of each type (under templateKey) and which of its devices a selector
// matches (selectorMask, matchesAll, under the template's key and the expression). They depend
// on nothing else, and a round of a thousand pods spends as long building them as placing
// its DRA pods. It forgets everything when it holds too much (selectors come from users' claims).
var shared = struct {
	nodes *boundedCache[string, *nodeTemplate]
	masks *boundedCache[[2]string, maskResult]
	all   *boundedCache[[2]string, bool]
}{newBoundedCache[string, *nodeTemplate](1 << 14), newBoundedCache[[2]string, maskResult](1 << 14), newBoundedCache[[2]string, bool](1 << 14)}

// maskResult is selectorMask's answer: which devices the selector matches, or why it fails.
type maskResult struct {
	m   []bool
	err error
}

// boundedCache is a map for concurrent use that forgets everything when it holds limit entries.
type boundedCache[K comparable, V any] struct {
	mu    sync.Mutex
	limit int
	m     map[K]V
}

func newBoundedCache[K comparable, V any](limit int) *boundedCache[K, V] {
	return &boundedCache[K, V]{limit: limit, m: map[K]V{}}
}

func (c *boundedCache[K, V]) get(k K) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[k]
	return v, ok
}

func (c *boundedCache[K, V]) put(k K, v V) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= c.limit {
		clear(c.m)
	}
	c.m[k] = v
}

// learnedFor are the learned attributes of type typ's devices: the type's own values over any
// type's.
func (ts *DeviceTemplates) learnedFor(typ string) map[resourcev1.QualifiedName]resourcev1.DeviceAttribute {
	out := maps.Clone(ts.learned[""])
	if out == nil {
		out = map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{}
	}
	maps.Copy(out, ts.learned[typ])
	return out
}

func buildTemplate(t topology.InstanceType, learned map[resourcev1.QualifiedName]resourcev1.DeviceAttribute) *nodeTemplate {
	shape, err := topology.NewShape(t, 0)
	if err != nil {
		return nil
	}
	name := templateNodePrefix + strings.ReplaceAll(t.Name, ".", "-")
	hw := &neuron.Node{InstanceType: t.Name, Devices: make([]neuron.Device, t.Devices)}
	for i := range hw.Devices {
		hw.Devices[i] = neuron.Device{Index: i, EFAAddress: fmt.Sprintf("%s%d", templateEFAPrefix, i)}
	}
	if t.UltraServerNodes > 0 {
		hw.UltraServer = &neuron.UltraServer{ServerID4: templateServerID, NodeID4: 0, NodeID2: -1}
	}
	if v := learned["neuronDriverVersion"].StringValue; v != nil {
		hw.DriverVersion = *v
	}
	info := devices.NodeInfo{Name: name, Shape: shape, Hardware: hw,
		NetworkNodes: [3]string{name + "-layer1", name + "-layer2", name + "-layer3"}}
	if v := learned["draDriverVersion"].VersionValue; v != nil {
		info.DriverVersion = *v
	}
	devs, counters := devices.Build(info, nil)
	pool := resourcev1.ResourcePool{Name: name, Generation: 1, ResourceSliceCount: 1}
	if counters != nil {
		pool.ResourceSliceCount = 2
	}
	slice := func(i int) *resourcev1.ResourceSlice {
		return &resourcev1.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", name, i)},
			Spec:       resourcev1.ResourceSliceSpec{Driver: DeviceClass, NodeName: ptr.To(name), Pool: pool},
		}
	}
	nt := &nodeTemplate{node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, devices: t.Devices}
	s := slice(0)
	s.Spec.Devices = devs
	nt.slices = append(nt.slices, s)
	if counters != nil {
		s := slice(1)
		s.Spec.SharedCounters = counters
		nt.slices = append(nt.slices, s)
	}
	return nt
}

// classLister serves the DeviceClasses to the allocator.
type classLister []*resourcev1.DeviceClass

func (l classLister) List() ([]*resourcev1.DeviceClass, error) { return l, nil }

func (l classLister) Get(name string) (*resourcev1.DeviceClass, error) {
	for _, c := range l {
		if c.Name == name {
			return c, nil
		}
	}
	return nil, fmt.Errorf("DeviceClass %s does not exist: create it (the chart's DRA driver installs %s)", name, DeviceClass)
}

// errNoFit is allocate's answer when the claims do not fit on the node.
var errNoFit = errors.New("no fit")

// allocate runs the kube-scheduler's structured allocator over a new node of type t whose devices
// used are already allocated, for the claims (prepared by allocationClaims). It returns, per
// claim, the indices of the Neuron devices it gets (the UltraServer node device stands for all
// of the node's). The error is errNoFit when they do not fit, or the allocator's own error
// (a selector that fails, a DeviceClass that does not exist), which no node of the type escapes.
func (ts *DeviceTemplates) allocate(ctx context.Context, t topology.InstanceType, used []int, claims []*resourcev1.ResourceClaim) ([][]int, error) {
	nt := ts.nodeTemplate(t)
	if nt == nil || !ts.enoughDevices(ctx, t, used, claims) {
		return nil, errNoFit
	}
	if devs, ok, err := ts.firstFit(ctx, t, used, claims); ok {
		return devs, err
	}
	claims, ok := ts.withoutHopelessAlternatives(ctx, t, used, claims)
	if !ok {
		return nil, errNoFit
	}
	return ts.runAllocator(ctx, t, nt, used, claims)
}

// runAllocator is allocate's run of the allocator over nt, the template of type t, with no check
// before it.
func (ts *DeviceTemplates) runAllocator(ctx context.Context, t topology.InstanceType, nt *nodeTemplate, used []int, claims []*resourcev1.ResourceClaim) ([][]int, error) {
	state := structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	for _, i := range used {
		state.AllocatedDevices.Insert(structured.MakeDeviceID(DeviceClass, nt.node.Name, devices.DeviceName(i)))
	}
	a, err := structured.NewAllocator(ctx, draFeatures, state, ts.allocatorClasses(ctx, t), nt.slices, celCache)
	if err != nil {
		return nil, err
	}
	results, err := a.Allocate(ctx, nt.node, claims)
	switch {
	case err != nil:
		return nil, err
	case len(results) != len(claims):
		return nil, errNoFit
	}
	out := make([][]int, len(claims))
	for k, r := range results {
		out[k] = deviceIndices(r.Devices.Results, nt.devices)
	}
	return out, nil
}

// enoughDevices is a necessary condition for the claims to fit on a new node of type t whose
// devices used are taken, checked before the allocator runs: every ExactCount request has as
// many free devices matching it as it asks for, and all of them together have as many. The
// allocator searches exhaustively, and an ExactCount request for more devices than are left
// makes it try every order of them before it gives up (the kube-scheduler bounds that search
// with a timeout); this answers those cases at once.
func (ts *DeviceTemplates) enoughDevices(ctx context.Context, t topology.InstanceType, used []int, claims []*resourcev1.ResourceClaim) bool {
	free := freeDevices(t, used)
	var union []bool
	total := 0
	for _, c := range claims {
		for _, r := range c.Spec.Devices.Requests {
			if r.Exactly == nil || r.Exactly.AllocationMode == resourcev1.DeviceAllocationModeAll {
				continue
			}
			m, _ := ts.requestMask(ctx, t, r.Exactly.DeviceClassName, r.Exactly.Selectors)
			if union == nil {
				union = make([]bool, len(m))
			}
			n := 0
			for i, ok := range m {
				if ok && free(i) {
					n++
					union[i] = true
				}
			}
			if int64(n) < r.Exactly.Count {
				return false
			}
			total += int(r.Exactly.Count)
		}
	}
	n := 0
	for _, ok := range union {
		if ok {
			n++
		}
	}
	return total <= n
}

// freeDevices reports which devices of a new node of type t's template are free when the Neuron
// devices used are taken.
func freeDevices(t topology.InstanceType, used []int) func(i int) bool {
	taken := make([]bool, t.Devices)
	for _, i := range used {
		taken[i] = true
	}
	return func(i int) bool {
		if i < t.Devices {
			return !taken[i]
		}
		return len(used) == 0 // the node device: only while no device of the node is taken
	}
}

// withoutHopelessAlternatives returns the claims without the firstAvailable alternatives that
// cannot be allocated on a new node of type t whose devices used are taken: an ExactCount
// subrequest for more devices than are free among those it matches. The allocator tries the
// alternatives in order, and one that cannot be enough makes it try every order of the free
// devices it matches before it moves on to the next (seconds, for 16 devices of which 8 are
// free); without it the allocator gives the same answer at once. It returns false when no
// alternative of a request is left (the claims do not fit). It keeps an alternative that a
// constraint names, or that the allocator could refuse with an error of its own (a DeviceClass
// that does not exist, a selector that fails). The claims it returns are copies where they change.
func (ts *DeviceTemplates) withoutHopelessAlternatives(ctx context.Context, t topology.InstanceType, used []int, claims []*resourcev1.ResourceClaim) ([]*resourcev1.ResourceClaim, bool) {
	free := freeDevices(t, used)
	hopeless := func(c *resourcev1.ResourceClaim, req string, s resourcev1.DeviceSubRequest) bool {
		if s.AllocationMode != resourcev1.DeviceAllocationModeExactCount {
			return false
		}
		if _, err := ts.classes.Get(s.DeviceClassName); err != nil {
			return false
		}
		for _, k := range c.Spec.Devices.Constraints {
			if slices.Contains(k.Requests, req+"/"+s.Name) {
				return false
			}
		}
		m, err := ts.requestMask(ctx, t, s.DeviceClassName, s.Selectors)
		if err != nil {
			return false
		}
		n := 0
		for i, ok := range m {
			if ok && free(i) {
				n++
			}
		}
		return int64(n) < s.Count
	}
	out, copied := claims, false
	for ci, c := range claims {
		var reqs []resourcev1.DeviceRequest
		for ri, r := range c.Spec.Devices.Requests {
			if r.Exactly != nil {
				continue
			}
			var subs []resourcev1.DeviceSubRequest
			for si, s := range r.FirstAvailable {
				if !hopeless(c, r.Name, s) {
					if subs != nil {
						subs = append(subs, s)
					}
					continue
				}
				if subs == nil {
					subs = append(make([]resourcev1.DeviceSubRequest, 0, len(r.FirstAvailable)), r.FirstAvailable[:si]...)
				}
			}
			if subs == nil {
				continue
			}
			if len(subs) == 0 {
				return nil, false
			}
			if reqs == nil {
				reqs = slices.Clone(c.Spec.Devices.Requests)
			}
			reqs[ri].FirstAvailable = subs
		}
		if reqs == nil {
			continue
		}
		if !copied {
			out, copied = slices.Clone(claims), true
		}
		cc := *c
		cc.Spec.Devices.Requests = reqs
		out[ci] = &cc
	}
	return out, true
}
