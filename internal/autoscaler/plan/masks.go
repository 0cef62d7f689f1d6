package plan

import (
	"context"
	"fmt"
	"slices"
	"strings"

	resourcev1 "k8s.io/api/resource/v1"
	dracel "k8s.io/dynamic-resource-allocation/cel"

	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// Which devices of a new node a selector matches. A new node's template knows every attribute
// its devices publish except the node's own (nodeOwnAttributes: its network nodes, UltraServer
// and device group ids, which are the same kind of value on every device of one node) and, until
// a Neuron node has published them, the versions of learnedAttributes. A selector that reads one
// of those is evaluated with the attribute missing, and where that is all that fails, it is
// taken to match: a new node may have the value. The allocator gets such a selector as the list
// of devices it matches (forNewNode), so that everything else about the claim stays exact.

// unknownSelector reports whether a selector reads an attribute a new node's template cannot
// know: one of the node's own, or a version no Neuron node has published yet.
func (ts *DeviceTemplates) unknownSelector(expr string) bool {
	for _, a := range nodeOwnAttributes {
		if strings.Contains(expr, a) {
			return true
		}
	}
	for _, a := range learnedAttributes {
		if _, known := ts.learned[""][a]; !known && strings.Contains(expr, string(a)) {
			return true
		}
	}
	return false
}

// unknownKey reports whether a CEL evaluation error is an attribute unknownSelector would report
// missing.
func (ts *DeviceTemplates) unknownKey(err error) bool {
	_, key, ok := strings.Cut(err.Error(), "no such key: ")
	return ok && ts.unknownSelector(strings.TrimSpace(key))
}

// maskKey identifies a selector's mask on one instance type.
type maskKey struct {
	typ, expr string
}

// selectorMask returns, per device of type t's template (templateDevices: the devices, then the
// UltraServer node device), whether the selector matches it, a missing unknown attribute
// counting as a match. The error is the selector's own (it does not compile, or fails on a
// device for another reason); no device matches then.
func (ts *DeviceTemplates) selectorMask(ctx context.Context, t topology.InstanceType, expr string) ([]bool, error) {
	key := maskKey{t.Name, expr}
	ts.mu.Lock()
	r, ok := ts.masks[key]
	ts.mu.Unlock()
	if ok {
		return r.m, r.err
	}
	nt := ts.nodeTemplate(t)
	var skey [2]string
	if nt != nil {
		// unknownKey reads which learned attributes are known: part of the key.
		skey = [2]string{nt.key + ";" + ts.knownLearned(), expr}
		if r, ok := shared.masks.get(skey); ok {
			ts.mu.Lock()
			ts.masks[key] = r
			ts.mu.Unlock()
			return r.m, r.err
		}
	}
	devs := ts.templateDevices(t)
	m := make([]bool, len(devs))
	var err error
	c := celCache.GetOrCompile(expr)
	if c.Error != nil {
		err = fmt.Errorf("the selector %q does not compile: %v", expr, c.Error)
	}
	for i, d := range devs {
		if err != nil {
			break
		}
		match, _, evalErr := c.DeviceMatches(ctx, d)
		switch {
		case evalErr == nil:
			m[i] = match
		case ts.unknownKey(evalErr):
			m[i] = true
		default:
			err = fmt.Errorf("the selector %q fails on a %s device: %v", expr, t.Name, evalErr)
			clear(m)
		}
	}
	ts.mu.Lock()
	ts.masks[key] = maskResult{m, err}
	ts.mu.Unlock()
	if nt != nil {
		shared.masks.put(skey, maskResult{m, err})
	}
	return m, err
}

// knownLearned is which of learnedAttributes some Neuron node has published.
func (ts *DeviceTemplates) knownLearned() string {
	var b strings.Builder
	for _, a := range learnedAttributes {
		_, known := ts.learned[""][a]
		fmt.Fprintf(&b, "%v,", known)
	}
	return b.String()
}

// selectorsMask is the devices of type t's template that every selector matches.
func (ts *DeviceTemplates) selectorsMask(ctx context.Context, t topology.InstanceType, exprs []string) ([]bool, error) {
	out := make([]bool, len(ts.templateDevices(t)))
	for i := range out {
		out[i] = true
	}
	for _, e := range exprs {
		m, err := ts.selectorMask(ctx, t, e)
		if err != nil {
			return make([]bool, len(out)), err
		}
		for i := range out {
			out[i] = out[i] && m[i]
		}
	}
	return out, nil
}

// requestMask is the devices of type t's template that a request of the DeviceClass with these
// selectors may get: those the class's selectors and its own match.
func (ts *DeviceTemplates) requestMask(ctx context.Context, t topology.InstanceType, class string, sel []resourcev1.DeviceSelector) ([]bool, error) {
	var exprs []string
	if c, err := ts.classes.Get(class); err == nil {
		for _, s := range c.Spec.Selectors {
			if s.CEL != nil {
				exprs = append(exprs, s.CEL.Expression)
			}
		}
	}
	for _, s := range sel {
		if s.CEL != nil {
			exprs = append(exprs, s.CEL.Expression)
		}
	}
	return ts.selectorsMask(ctx, t, exprs)
}

// forNewNode returns the selectors as the allocator evaluates them on the template of a new node
// of type t: a selector that reads an unknown attribute becomes the devices it matches
// (selectorMask), or is left out when it matches all of them; the others stay as they are, but
// for those that match every device of the node (matchesAll), which are left out too.
func (ts *DeviceTemplates) forNewNode(ctx context.Context, t topology.InstanceType, sel []resourcev1.DeviceSelector) []resourcev1.DeviceSelector {
	var out []resourcev1.DeviceSelector
	for _, s := range sel {
		if s.CEL != nil && !ts.unknownSelector(s.CEL.Expression) && ts.matchesAll(ctx, t, s.CEL.Expression) {
			continue
		}
		if s.CEL == nil || !ts.unknownSelector(s.CEL.Expression) {
			out = append(out, s)
			continue
		}
		m, err := ts.selectorMask(ctx, t, s.CEL.Expression)
		if err != nil {
			out = append(out, s) // the allocator reports it
			continue
		}
		if e, all := maskExpression(m, t.Devices); !all {
			out = append(out, resourcev1.DeviceSelector{CEL: &resourcev1.CELDeviceSelector{Expression: e}})
		}
	}
	return out
}

// maskExpression is a CEL expression that matches exactly the template devices m marks (the
// first n are Neuron devices by deviceId, one more the UltraServer node device); all reports
// that m marks every device, so that no expression is needed.
func maskExpression(m []bool, n int) (expr string, all bool) {
	var ids []string
	all = true
	node := false
	for i, ok := range m {
		all = all && ok
		switch {
		case !ok:
		case i < n:
			ids = append(ids, fmt.Sprint(i))
		default:
			node = true
		}
	}
	attrs := `device.attributes["` + DeviceClass + `"]`
	var terms []string
	if len(ids) > 0 {
		terms = append(terms, fmt.Sprintf(`(%s.resourceType == "neuron_device" && %s.deviceId in [%s])`, attrs, attrs, strings.Join(ids, ", ")))
	}
	if node {
		terms = append(terms, fmt.Sprintf(`%s.resourceType == "neuron_node"`, attrs))
	}
	if len(terms) == 0 {
		return "false", all
	}
	return strings.Join(terms, " || "), all
}

// matchesAll reports whether the selector matches, without an error, every device the template
// of a new node of type t publishes, evaluated as the allocator evaluates it (the devices as the
// slices have them, placeholders included). The allocator then gives the same answers without
// it, and is spared evaluating it on every device of every run: the DeviceClass's
// `device.driver == "neuron.aws.com"`, and a claim's instanceType selector on that type.
func (ts *DeviceTemplates) matchesAll(ctx context.Context, t topology.InstanceType, expr string) bool {
	nt := ts.nodeTemplate(t)
	if nt == nil {
		return false
	}
	key := maskKey{t.Name, expr}
	ts.mu.Lock()
	all, ok := ts.matchAll[key]
	ts.mu.Unlock()
	if ok {
		return all
	}
	skey := [2]string{nt.key, expr}
	if all, ok := shared.all.get(skey); ok {
		ts.mu.Lock()
		ts.matchAll[key] = all
		ts.mu.Unlock()
		return all
	}
	c := celCache.GetOrCompile(expr)
	all = c.Error == nil
	for _, s := range nt.slices {
		for _, d := range s.Spec.Devices {
			if !all {
				break
			}
			match, _, err := c.DeviceMatches(ctx, dracel.Device{Driver: s.Spec.Driver, Attributes: d.Attributes, Capacity: d.Capacity})
			all = err == nil && match
		}
	}
	ts.mu.Lock()
	ts.matchAll[key] = all
	ts.mu.Unlock()
	shared.all.put(skey, all)
	return all
}

// allocatorClasses are the DeviceClasses as the allocator gets them on a new node of type t:
// without the selectors that match every device of the node (matchesAll).
func (ts *DeviceTemplates) allocatorClasses(ctx context.Context, t topology.InstanceType) classLister {
	ts.mu.Lock()
	out, ok := ts.typeClass[t.Name]
	ts.mu.Unlock()
	if ok {
		return out
	}
	out = make(classLister, 0, len(ts.classes))
	for _, c := range ts.classes {
		if slices.ContainsFunc(c.Spec.Selectors, func(s resourcev1.DeviceSelector) bool { return s.CEL != nil && ts.matchesAll(ctx, t, s.CEL.Expression) }) {
			c = c.DeepCopy()
			c.Spec.Selectors = slices.DeleteFunc(c.Spec.Selectors, func(s resourcev1.DeviceSelector) bool {
				return s.CEL != nil && ts.matchesAll(ctx, t, s.CEL.Expression)
			})
		}
		out = append(out, c)
	}
	ts.mu.Lock()
	ts.typeClass[t.Name] = out
	ts.mu.Unlock()
	return out
}
