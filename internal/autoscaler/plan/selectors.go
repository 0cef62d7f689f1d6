package plan

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	resourcev1 "k8s.io/api/resource/v1"
	dracel "k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/utils/ptr"

	"github.com/kube-neuron/kube-neuron/internal/dra/devices"
	"github.com/kube-neuron/kube-neuron/internal/neuron"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// Attributes a new node's devices publish that only the running node knows. The versions are
// learned from the Neuron nodes' ResourceSlices (nodes of one launch template run one AMI and one
// chart); the others are the node's own and can never be known before it runs.
var (
	learnedAttributes = []resourcev1.QualifiedName{"neuronDriverVersion", "draDriverVersion"}
	nodeOwnAttributes = []string{"networkNodeLayer1", "networkNodeLayer2", "networkNodeLayer3", "ultraserverId", "ultraserverNodeId",
		"devicegroup1_id", "devicegroup4_id", "devicegroup8_id", "devicegroup16_id"}
)

// celCache holds the compiled selectors of all planning rounds.
var celCache = dracel.NewCache(1000, dracel.Features{})

// DeviceTemplates evaluates ResourceClaim selectors against the devices a new node of each
// instance type would publish through the DRA driver (devices.Build, the driver's own code), so
// that a claim no new node can satisfy (a selector on a driver version no node runs, on a type
// outside the catalog, on an attribute the driver does not publish) launches nothing. An
// attribute only the running node knows (its network nodes, its UltraServer, a version no Neuron
// node has published yet) cannot be decided: a selector that needs it may match.
type DeviceTemplates struct {
	cat     *topology.Catalog
	learned map[string]map[resourcev1.QualifiedName]resourcev1.DeviceAttribute // instance type ("" any) -> attribute

	mu        sync.Mutex
	devices   map[string][]dracel.Device // instance type -> its template devices
	validated map[configKey]error        // claim configs against an instance type
}

// NewDeviceTemplates learns the attributes in learnedAttributes from the driver's ResourceSlices
// (the value most of the type's devices publish, else most of any type's).
func NewDeviceTemplates(cat *topology.Catalog, rslices []*resourcev1.ResourceSlice) *DeviceTemplates {
	if cat == nil {
		cat = topology.DefaultCatalog()
	}
	type key struct {
		typ  string
		attr resourcev1.QualifiedName
	}
	counts := map[key]map[string]int{}
	values := map[string]resourcev1.DeviceAttribute{}
	for _, s := range rslices {
		if s.Spec.Driver != DeviceClass {
			continue
		}
		for _, d := range s.Spec.Devices {
			typ := ptr.Deref(d.Attributes["instanceType"].StringValue, "")
			for _, a := range learnedAttributes {
				v, ok := d.Attributes[a]
				if !ok {
					continue
				}
				text := attributeText(v)
				values[text] = v
				for _, k := range []key{{typ, a}, {"", a}} {
					if counts[k] == nil {
						counts[k] = map[string]int{}
					}
					counts[k][text]++
				}
			}
		}
	}
	learned := map[string]map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{}
	for k, c := range counts {
		// The most frequent value; among equals the greatest, for a stable choice.
		best := slices.MaxFunc(slices.Collect(maps.Keys(c)), func(a, b string) int {
			return cmp.Or(cmp.Compare(c[a], c[b]), strings.Compare(a, b))
		})
		if learned[k.typ] == nil {
			learned[k.typ] = map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{}
		}
		learned[k.typ][k.attr] = values[best]
	}
	return &DeviceTemplates{cat: cat, learned: learned, devices: map[string][]dracel.Device{}, validated: map[configKey]error{}}
}

// attributeText is the value of an attribute as text.
func attributeText(a resourcev1.DeviceAttribute) string {
	switch {
	case a.StringValue != nil:
		return *a.StringValue
	case a.VersionValue != nil:
		return *a.VersionValue
	case a.IntValue != nil:
		return fmt.Sprint(*a.IntValue)
	case a.BoolValue != nil:
		return fmt.Sprint(*a.BoolValue)
	}
	return ""
}

// templateDevices are the devices a new node of type t would publish: those devices.Build gives
// for the type's shape, without the node's own attributes, with the learned versions.
func (ts *DeviceTemplates) templateDevices(t topology.InstanceType) []dracel.Device {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if d, ok := ts.devices[t.Name]; ok {
		return d
	}
	var out []dracel.Device
	if shape, err := topology.NewShape(t, 0); err == nil {
		hw := &neuron.Node{InstanceType: t.Name, Devices: make([]neuron.Device, t.Devices)}
		for i := range hw.Devices {
			hw.Devices[i].Index = i
		}
		if t.UltraServerNodes > 0 {
			hw.UltraServer = &neuron.UltraServer{NodeID2: -1}
		}
		built, _ := devices.Build(devices.NodeInfo{Name: t.Name, Shape: shape, Hardware: hw}, nil)
		for _, d := range built {
			attrs := maps.Clone(d.Attributes)
			for _, a := range nodeOwnAttributes {
				delete(attrs, resourcev1.QualifiedName(a))
			}
			for _, src := range []string{"", t.Name} { // the type's own value wins
				maps.Copy(attrs, ts.learned[src])
			}
			out = append(out, dracel.Device{Driver: DeviceClass, Attributes: attrs, Capacity: d.Capacity})
		}
	}
	ts.devices[t.Name] = out
	return out
}

// unknownAttribute returns the attribute a CEL evaluation error says is missing when it is one
// a new node publishes but the autoscaler cannot know: such a selector may match.
func (ts *DeviceTemplates) unknownAttribute(err error) (string, bool) {
	_, key, ok := strings.Cut(err.Error(), "no such key: ")
	if !ok {
		return "", false
	}
	key = strings.TrimSpace(key)
	if slices.Contains(nodeOwnAttributes, key) {
		return key, true
	}
	for _, a := range learnedAttributes {
		if string(a) == key {
			_, any := ts.learned[""][a]
			return key, !any // known once any Neuron node has published it
		}
	}
	return "", false
}

// Resolve sets Matching on each request that has CEL selectors: the instance types of the catalog
// whose template devices every selector matches, or enough of them (Count, or one for All), with
// Unmatched saying why when there is none. On a request whose claim has opaque configs, it keeps
// in Matching only the types whose DRA driver accepts them (resolveConfigs), with Refused saying
// why when there is none.
func (ts *DeviceTemplates) Resolve(ctx context.Context, reqs []DRARequest) []DRARequest {
	for i := range reqs {
		ts.resolveSelectors(ctx, &reqs[i])
		ts.resolveConfigs(&reqs[i])
	}
	return reqs
}

func (ts *DeviceTemplates) resolveSelectors(ctx context.Context, r *DRARequest) {
	if len(r.Selectors) == 0 {
		return
	}
	need := r.Count
	if r.All || need < 1 {
		need = 1
	}
	r.Matching = []string{}
	var why string
	var compiled []dracel.CompilationResult
	for _, expr := range r.Selectors {
		c := celCache.GetOrCompile(expr)
		if c.Error != nil {
			why = fmt.Sprintf("the selector %q does not compile: %v", expr, c.Error)
			break
		}
		compiled = append(compiled, c)
	}
	if why != "" {
		r.Unmatched = why
		return
	}
	var evalErr string
	for _, t := range ts.cat.Types() {
		matching := 0
		for _, d := range ts.templateDevices(t) {
			ok := true
			for j, c := range compiled {
				m, _, err := c.DeviceMatches(ctx, d)
				if err != nil {
					if _, unknown := ts.unknownAttribute(err); unknown {
						continue
					}
					if evalErr == "" {
						evalErr = fmt.Sprintf("the selector %q fails on a %s device: %v", r.Selectors[j], t.Name, err)
					}
					ok = false
					break
				}
				if !m {
					ok = false
					break
				}
			}
			if ok {
				matching++
			}
		}
		// A type whose every device matches is the selectors' to allow; whether it has
		// enough devices is the topology simulation's to say (with the counts it accepts).
		if matching >= need || matching > 0 && matching == len(ts.templateDevices(t)) {
			r.Matching = append(r.Matching, t.Name)
		}
	}
	if len(r.Matching) == 0 {
		r.Unmatched = ts.unmatched(r, evalErr)
	}
}

// unmatched explains why no new node's devices satisfy the request: what such devices publish.
func (ts *DeviceTemplates) unmatched(r *DRARequest, evalErr string) string {
	var known []string
	for _, a := range learnedAttributes {
		if v, ok := ts.learned[""][a]; ok {
			known = append(known, fmt.Sprintf("%s %s", a, attributeText(v)))
		}
	}
	msg := fmt.Sprintf("no instance type's devices match the selectors of ResourceClaim request %s (%s)", r.Name, strings.Join(r.Selectors, "; "))
	if evalErr != "" {
		msg += ": " + evalErr
	}
	if len(known) > 0 {
		msg += fmt.Sprintf("; the cluster's Neuron nodes publish %s, and a new node would too", strings.Join(known, " and "))
	}
	return msg
}
