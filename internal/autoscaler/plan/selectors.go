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

	classes classLister // the cluster's DeviceClasses, without selectors that unknownSelector reports

	mu        sync.Mutex
	nodes     map[string]*nodeTemplate   // instance type -> its new node
	devices   map[string][]dracel.Device // instance type -> its template devices
	masks     map[maskKey]maskResult     // which template devices a selector matches, or why it fails
	validated map[configKey]error        // claim configs against an instance type
	matchAll  map[maskKey]bool           // whether a selector matches every device of a new node
	typeClass map[string]classLister     // instance type -> classes as the allocator gets them
}

// NewDeviceTemplates learns the attributes in learnedAttributes from the driver's ResourceSlices
// (the value most of the type's devices publish, else most of any type's). classes are the
// cluster's DeviceClasses; nil means the one the chart installs (DefaultDeviceClass).
func NewDeviceTemplates(cat *topology.Catalog, rslices []*resourcev1.ResourceSlice, classes []*resourcev1.DeviceClass) *DeviceTemplates {
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
	ts := &DeviceTemplates{cat: cat, learned: learned, nodes: map[string]*nodeTemplate{}, devices: map[string][]dracel.Device{}, masks: map[maskKey]maskResult{}, validated: map[configKey]error{},
		matchAll: map[maskKey]bool{}, typeClass: map[string]classLister{}}
	if classes == nil {
		classes = []*resourcev1.DeviceClass{DefaultDeviceClass()}
	}
	for _, c := range classes {
		c = c.DeepCopy()
		c.Spec.Selectors = slices.DeleteFunc(c.Spec.Selectors, func(s resourcev1.DeviceSelector) bool {
			return s.CEL != nil && ts.unknownSelector(s.CEL.Expression)
		})
		ts.classes = append(ts.classes, c)
	}
	return ts
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

// templateDevices are the devices a new node of type t would publish (its template's), as CEL
// sees them, without the attributes only the running node knows (nodeOwnAttributes).
func (ts *DeviceTemplates) templateDevices(t topology.InstanceType) []dracel.Device {
	nt := ts.nodeTemplate(t)
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if d, ok := ts.devices[t.Name]; ok {
		return d
	}
	var out []dracel.Device
	if nt != nil {
		for _, d := range nt.slices[0].Spec.Devices {
			attrs := maps.Clone(d.Attributes)
			maps.DeleteFunc(attrs, func(name resourcev1.QualifiedName, _ resourcev1.DeviceAttribute) bool {
				_, id, _ := strings.Cut(string(name), "/")
				return slices.Contains(nodeOwnAttributes, id) || slices.Contains(nodeOwnAttributes, string(name))
			})
			out = append(out, dracel.Device{Driver: DeviceClass, Attributes: attrs, Capacity: d.Capacity})
		}
	}
	ts.devices[t.Name] = out
	return out
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
	for _, expr := range r.Selectors {
		if c := celCache.GetOrCompile(expr); c.Error != nil {
			r.Unmatched = fmt.Sprintf("the selector %q does not compile: %v", expr, c.Error)
			return
		}
	}
	var evalErr string
	for _, t := range ts.cat.Types() {
		m, err := ts.selectorsMask(ctx, t, r.Selectors)
		if err != nil && evalErr == "" {
			evalErr = err.Error()
		}
		matching := 0
		for _, ok := range m {
			if ok {
				matching++
			}
		}
		// A type whose every device matches is the selectors' to allow; whether it has
		// enough devices is the allocator's to say.
		if matching >= need || matching > 0 && matching == len(m) {
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
