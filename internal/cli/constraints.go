package cli

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	resourcev1 "k8s.io/api/resource/v1"
	dracel "k8s.io/dynamic-resource-allocation/cel"

	"github.com/kube-neuron/kube-neuron/internal/autoscaler/plan"
	"github.com/kube-neuron/kube-neuron/internal/dra/devices"
	"github.com/kube-neuron/kube-neuron/internal/neuron"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// Attributes of a node's devices whose values only the running node knows. The models give them
// placeholder values with the right grouping (devices of one group share a value), and leave them
// out when selectors are evaluated: a selector on them may match.
var runtimeAttributes = []resourcev1.QualifiedName{
	"neuronDriverVersion", "draDriverVersion", "networkNodeLayer1", "networkNodeLayer2", "networkNodeLayer3",
	"ultraserverId", "ultraserverNodeId",
	"resource.aws.com/devicegroup1_id", "resource.aws.com/devicegroup4_id", "resource.aws.com/devicegroup8_id", "resource.aws.com/devicegroup16_id",
}

// modelDevice is one device a node of some instance type publishes through the DRA driver.
type modelDevice struct {
	attrs map[string]string // fully qualified attribute name -> value
	cel   dracel.Device     // what selectors are evaluated against
}

// deviceModels are the devices a node of each instance type of the catalog publishes (the
// driver's own devices.Build), with every attribute a node may have: EFA device groups, network
// nodes, driver versions, on UltraServer types the UltraServer ids.
type deviceModels struct {
	cat    *topology.Catalog
	byType map[string][]modelDevice
	cel    *dracel.Cache
}

func newDeviceModels(cat *topology.Catalog) *deviceModels {
	return &deviceModels{cat: cat, byType: map[string][]modelDevice{}, cel: dracel.NewCache(100, dracel.Features{})}
}

func (m *deviceModels) devices(t topology.InstanceType) []modelDevice {
	if d, ok := m.byType[t.Name]; ok {
		return d
	}
	var out []modelDevice
	if shape, err := topology.NewShape(t, 0); err == nil {
		hw := &neuron.Node{InstanceType: t.Name, DriverVersion: "0.0.0.0", Devices: make([]neuron.Device, t.Devices)}
		for i := range hw.Devices {
			hw.Devices[i].Index = i
			hw.Devices[i].EFAAddress = fmt.Sprintf("0000:%02x:%02x.0", i/32, i%32)
		}
		if t.UltraServerNodes > 0 {
			hw.UltraServer = &neuron.UltraServer{ServerID4: "0000000000000000", NodeID2: -1}
		}
		info := devices.NodeInfo{Name: t.Name, Shape: shape, Hardware: hw, NetworkNodes: [3]string{"nn-1", "nn-2", "nn-3"}, DriverVersion: "0.0.0"}
		built, _ := devices.Build(info, nil)
		for _, d := range built {
			md := modelDevice{attrs: map[string]string{}}
			for k, v := range d.Attributes {
				md.attrs[qualified(string(k))] = attributeValue(v)
			}
			attrs := maps.Clone(d.Attributes)
			for _, a := range runtimeAttributes {
				delete(attrs, a)
			}
			md.cel = dracel.Device{Driver: plan.DeviceClass, Attributes: attrs, Capacity: d.Capacity}
			out = append(out, md)
		}
	}
	m.byType[t.Name] = out
	return out
}

// qualified is the fully qualified name of a device attribute: unqualified names are in the
// driver's domain.
func qualified(name string) string {
	if strings.Contains(name, "/") {
		return name
	}
	return plan.DeviceClass + "/" + name
}

// attributeValue is an attribute's type and value as one comparable string.
func attributeValue(a resourcev1.DeviceAttribute) string {
	switch {
	case a.StringValue != nil:
		return "string:" + *a.StringValue
	case a.IntValue != nil:
		return "int:" + strconv.FormatInt(*a.IntValue, 10)
	case a.BoolValue != nil:
		return "bool:" + strconv.FormatBool(*a.BoolValue)
	case a.VersionValue != nil:
		return "version:" + *a.VersionValue
	}
	return "?"
}

// matches reports whether the device may match every selector: a selector that does not compile
// or fails on the model (an attribute only the running node knows) counts as a match, since
// what is wrong with it is reported elsewhere or cannot be known offline.
func (m *deviceModels) matches(d modelDevice, selectors []string) bool {
	for _, expr := range selectors {
		c := m.cel.GetOrCompile(expr)
		if c.Error != nil {
			continue
		}
		ok, _, err := c.DeviceMatches(context.Background(), d.cel)
		if err == nil && !ok {
			return false
		}
	}
	return true
}

// constraintCheck is one constraint of a claim over its Neuron requests.
type constraintCheck struct {
	attr     string // fully qualified
	distinct bool   // distinctAttribute rather than matchAttribute
	requests []plan.DRARequest
}

// fitsOn reports whether a node of type t has devices that meet the constraint for its requests,
// and how many devices it can give them at most (the largest group sharing a value, or the
// number of distinct values). ok is false when some request's selectors match no device of t:
// then t cannot serve the claim at all, which the pod's checks report.
func (m *deviceModels) fitsOn(c constraintCheck, t topology.InstanceType) (fits bool, most int, ok bool) {
	devs := m.devices(t)
	type group struct {
		union   int
		matches []int // per request
	}
	groups := map[string]*group{}
	var order []string
	totals := make([]int, len(c.requests)) // matching devices per request, on the node
	need := 0
	for i, r := range c.requests {
		for _, d := range devs {
			if m.matches(d, r.Selectors) {
				totals[i]++
			}
		}
		if totals[i] == 0 {
			return false, 0, false
		}
		if r.All {
			need += totals[i]
		} else {
			need += r.Count
		}
	}
	for _, d := range devs {
		v, has := d.attrs[c.attr]
		if !has {
			continue
		}
		key := v
		if c.distinct {
			key = "" // one pool; its distinct values are counted below
		}
		g := groups[key]
		if g == nil {
			g = &group{matches: make([]int, len(c.requests))}
			groups[key] = g
			order = append(order, key)
		}
		hit := false
		for i, r := range c.requests {
			if m.matches(d, r.Selectors) {
				g.matches[i]++
				hit = true
			}
		}
		if hit {
			g.union++
		}
	}
	if c.distinct {
		values := map[string]bool{}
		for _, d := range devs {
			if v, has := d.attrs[c.attr]; has {
				values[v] = true
			}
		}
		most = len(values)
		return most >= need, most, true
	}
	for _, key := range order {
		g := groups[key]
		most = max(most, g.union)
		if g.union < need {
			continue
		}
		enough := true
		for i, r := range c.requests {
			want := r.Count
			if r.All {
				want = totals[i]
			}
			if g.matches[i] < want {
				enough = false
			}
		}
		if enough {
			return true, most, true
		}
	}
	return false, most, true
}

var groupedAttribute = regexp.MustCompile(`^(.*\D)(\d+)(_id)$`)

// constraintProblems says, for each constraint of the claim spec that no node of any instance
// type the requests allow can meet, why.
func (m *deviceModels) constraintProblems(spec resourcev1.ResourceClaimSpec) []string {
	reqs := plan.DRARequestsOf(spec)
	var out []string
	for i, c := range spec.Devices.Constraints {
		check := constraintCheck{}
		field := "matchAttribute"
		switch {
		case c.MatchAttribute != nil:
			check.attr = string(*c.MatchAttribute)
		case c.DistinctAttribute != nil:
			check.attr, check.distinct, field = string(*c.DistinctAttribute), true, "distinctAttribute"
		default:
			continue
		}
		where := fmt.Sprintf("constraints[%d].%s %s", i, field, check.attr)
		if !strings.Contains(check.attr, "/") {
			out = append(out, fmt.Sprintf("%s: the name has no domain, and the API server refuses it (a fully qualified name must be a domain and a name separated by a slash): write %s",
				where, qualified(check.attr)))
			continue
		}
		for _, r := range reqs {
			base, _, _ := strings.Cut(r.Name, "/")
			if len(c.Requests) == 0 || slices.Contains(c.Requests, base) || slices.Contains(c.Requests, r.Name) {
				check.requests = append(check.requests, r)
			}
		}
		if len(check.requests) == 0 {
			continue
		}
		fits, most, anyType, hasAttr := m.fitsAnywhere(check)
		if fits || !anyType {
			continue
		}
		out = append(out, m.explain(where, check, most, hasAttr))
	}
	return out
}

// fitsAnywhere evaluates the constraint on every instance type its requests allow.
func (m *deviceModels) fitsAnywhere(c constraintCheck) (fits bool, most int, anyType, hasAttr bool) {
	for _, t := range m.cat.Types() {
		if !allowsType(c.requests, t.Name) {
			continue
		}
		f, n, ok := m.fitsOn(c, t)
		if !ok {
			continue
		}
		anyType = true
		if f {
			return true, n, true, true
		}
		most = max(most, n)
		for _, d := range m.devices(t) {
			if _, has := d.attrs[c.attr]; has {
				hasAttr = true
				break
			}
		}
	}
	return false, most, anyType, hasAttr
}

func allowsType(reqs []plan.DRARequest, name string) bool {
	for _, r := range reqs {
		if r.InstanceTypes != nil && !slices.Contains(r.InstanceTypes, name) {
			return false
		}
	}
	return true
}

// explain says why the constraint cannot be met, and what would work.
func (m *deviceModels) explain(where string, c constraintCheck, most int, hasAttr bool) string {
	names := make([]string, len(c.requests))
	count, all := 0, false
	for i, r := range c.requests {
		names[i] = r.Name
		count += r.Count
		all = all || r.All
	}
	what := fmt.Sprintf("the %d devices of request %s", count, strings.Join(names, ", "))
	if all {
		what = "the devices of request " + strings.Join(names, ", ") + " (allocationMode All)"
	}
	if !hasAttr {
		msg := fmt.Sprintf("%s: no Neuron device publishes the attribute %s (on the instance types the requests allow), so no set of devices meets the constraint", where, c.attr)
		_, local, _ := strings.Cut(c.attr, "/")
		for _, t := range m.cat.Types() {
			for _, d := range m.devices(t) {
				for k := range d.attrs {
					if _, l, _ := strings.Cut(k, "/"); l == local && k != c.attr {
						return msg + fmt.Sprintf(". Did you mean %s?", k)
					}
				}
			}
		}
		return msg + ": see the attributes in docs/claim-templates.md"
	}
	if c.distinct {
		return fmt.Sprintf("%s asks %s to have different values of %s, but a node has at most %d different values: request at most %d devices",
			where, what, c.attr, most, most)
	}
	msg := fmt.Sprintf("%s asks %s to share one value of %s, but no device group is that large: at most %d devices of one node share a value on any instance type the requests allow. Request at most %d devices",
		where, what, c.attr, most, most)
	if sm := groupedAttribute.FindStringSubmatch(c.attr); sm != nil {
		size, _ := strconv.Atoi(sm[2])
		for _, bigger := range []int{2, 4, 8, 16, 32, 64} {
			if bigger <= size {
				continue
			}
			alt := c
			alt.attr = sm[1] + strconv.Itoa(bigger) + sm[3]
			if fits, _, _, _ := m.fitsAnywhere(alt); fits {
				msg += fmt.Sprintf(", or match on %s (groups of %d devices)", alt.attr, bigger)
				break
			}
		}
	}
	return msg
}
