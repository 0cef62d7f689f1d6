package plan

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"

	neuronv1 "github.com/kube-neuron/kube-neuron/api/neuron.aws.com/v1"
	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// Event reasons on the pod.
const (
	// ReasonNotTriggerScaleUp is a Warning: the pod did not trigger a scale-up.
	ReasonNotTriggerScaleUp = "NotTriggerScaleUp"
	// ReasonTriggeredScaleUp is Normal: a node is launched, or already launching, for the pod.
	ReasonTriggeredScaleUp = "TriggeredScaleUp"
)

// The DaemonSet messages, each the whole event message: seed 000's, verbatim, for the device
// plugin, and the same words for the DRA driver (issue 7).
const (
	MessageDevicePluginRequired = "Neuron daemon set driver is required"
	MessageDRADriverRequired    = "Neuron DRA driver is required"
)

// DeviceClass is the DRA DeviceClass of Neuron devices.
const DeviceClass = neuronv1.DriverName

// Names that identify the DaemonSets Check requires.
const (
	DevicePluginName = "neuron-device-plugin"
	DRADriverName    = "neuron-dra-driver-kubelet-plugin"
)

// Labels of a new node that are not its instance type, family or allocation mode.
const (
	archLabel = "kubernetes.io/arch"
	archValue = "amd64"
	osLabel   = "kubernetes.io/os"
	osValue   = "linux"
)

// Problem is one reason a pending pod does not trigger a scale-up: a NotTriggerScaleUp event.
type Problem struct {
	Reason  string
	Message string
}

func problem(format string, args ...any) Problem {
	return Problem{Reason: ReasonNotTriggerScaleUp, Message: fmt.Sprintf(format, args...)}
}

// Environment is what Check needs to know about the cluster.
type Environment struct {
	// Catalog is the instance catalog; nil means topology.DefaultCatalog().
	Catalog *topology.Catalog
	// DevicePlugin: some DaemonSet satisfies IsDevicePluginDaemonSet.
	DevicePlugin bool
	// DRADriver: some DaemonSet satisfies IsDRADriverDaemonSet.
	DRADriver bool
	// Devices are the ResourceSlices and DeviceClasses DRA pods are placed with; nil means
	// NewDeviceTemplates(Catalog, nil, nil).
	Devices *DeviceTemplates
}

// Check applies seed 000's rules to a pending pod and returns why it cannot trigger a scale-up;
// none means Plan may launch a node for it. A pod that asks for no Neuron hardware has no
// problems (it is not the autoscaler's).
func Check(d PodDemand, env Environment) []Problem {
	if !d.Neuron() {
		return nil
	}
	cat := env.Catalog
	if cat == nil {
		cat = topology.DefaultCatalog()
	}
	var out []Problem
	if len(d.Requests) > 0 && len(d.DRA) > 0 {
		out = append(out, problem("the pod asks for %s and for Neuron devices through a ResourceClaim of DeviceClass %s: "+
			"a Neuron node runs either the device plugin or the DRA driver, never both. Use one of them", d.Requests[0].Resource, DeviceClass))
	}
	taint := NeuronTaint()
	if !ToleratesNeuronTaint(d.Pod) {
		out = append(out, problem("the pod does not tolerate the taint %s=%s:%s that every Neuron node carries. "+
			"Add a toleration for %s to the pod: tolerations: [{key: %s, operator: Exists, effect: %s}]",
			taint.Key, taint.Value, taint.Effect, taint.Key, taint.Key, taint.Effect))
	}
	out = append(out, limitProblems(d.Pod)...)
	if len(d.Requests) > 0 && !env.DevicePlugin {
		out = append(out, problem(MessageDevicePluginRequired))
	}
	if len(d.DRA) > 0 && !env.DRADriver {
		out = append(out, problem(MessageDRADriverRequired))
	}
	if len(d.Requests) > 0 && len(d.DRA) > 0 {
		return out // no node can serve both; the first problem says so
	}
	if p := selectorProblems(d, cat); len(p) > 0 {
		return append(out, p...)
	}
	if p := servingProblem(d, newSim(cat, topology.BestFit, env.Devices)); p != nil {
		out = append(out, *p)
	}
	return out
}

// limitProblems reports Neuron resources set in requests without a limit, or with a different
// limit: AWS requires them in limits, equal to requests.
func limitProblems(pod *corev1.Pod) []Problem {
	var out []Problem
	for _, c := range append(slices.Clone(pod.Spec.InitContainers), pod.Spec.Containers...) {
		for _, res := range topology.Resources {
			name := corev1.ResourceName(res)
			req, hasReq := c.Resources.Requests[name]
			lim, hasLim := c.Resources.Limits[name]
			switch {
			case hasReq && !hasLim:
				out = append(out, problem("container %s requests %s: %s without a limit: Neuron resources must be set in limits, equal to requests. "+
					"Add resources.limits[%q]: %s", c.Name, res, req.String(), res, req.String()))
			case hasReq && hasLim && req.Cmp(lim) != 0:
				out = append(out, problem("container %s requests %s: %s but limits it to %s: Neuron requests and limits must be equal. "+
					"Set both to the number the container needs", c.Name, res, req.String(), lim.String()))
			}
		}
	}
	return out
}

// selectorProblems reports a nodeSelector on labels no new node carries, and a nodeSelector and
// affinity that together allow no instance type of the catalog.
func selectorProblems(d PodDemand, cat *topology.Catalog) []Problem {
	var out []Problem
	known := withCapacity(NewNodeLabels(topology.InstanceType{}, d.Mode()), reservedMarker) // some new node carries each capacity label
	for _, k := range sortedKeys(d.Pod.Spec.NodeSelector) {
		if _, us := ultraServerKeys[k]; us {
			out = append(out, problem("the pod's nodeSelector %s=%s pins it to the nodes of one UltraServer (a LeaderWorkerSet's workers follow their leader so): "+
				"no new node has that UltraServer's id, so the autoscaler launches nothing for it. It runs once a node of that UltraServer has room", k, d.Pod.Spec.NodeSelector[k]))
			continue
		}
		if _, ok := known[k]; !ok {
			out = append(out, problem("the pod's nodeSelector %s=%s can never match a new Neuron node: new nodes carry only the labels %s. "+
				"Remove %s from the pod's nodeSelector", k, d.Pod.Spec.NodeSelector[k], newNodeLabelKeys, k))
		}
	}
	if len(out) > 0 {
		return out
	}
	for _, r := range d.DRA {
		for _, name := range r.InstanceTypes {
			if _, ok := cat.Lookup(name); !ok {
				out = append(out, problem("the pod's ResourceClaim selects instanceType %s, which is not in the instance catalog (known: %s). "+
					"Change the claim's selector, or add the type with a catalog file", name, strings.Join(cat.Names(), ", ")))
			}
		}
	}
	if len(out) > 0 {
		return out
	}
	for _, r := range d.DRA {
		if r.Unmatched != "" {
			out = append(out, problem("%s. Change the claim's selectors", r.Unmatched))
		}
	}
	if len(out) > 0 {
		return out
	}
	for _, r := range d.DRA {
		if r.Refused != "" && !slices.ContainsFunc(out, func(p Problem) bool { return p.Message == r.Refused }) {
			out = append(out, problem("%s", r.Refused))
		}
	}
	if len(out) > 0 {
		return out
	}
	for _, t := range cat.Types() {
		if d.Allows(t) {
			return nil
		}
	}
	return []Problem{problem("the pod's %s allow%s no Neuron instance type: a new node is labelled %s=<type>, %s=<family>, %s=%s, %s=%s and %s=%s (families: %s). "+
		"Change the pod's %s", constraintNames(d), pluralS(len(constraintList(d)) == 1), labels.InstanceType, labels.InstanceFamily,
		archLabel, archValue, osLabel, osValue, labels.AllocationMode, d.Mode(), strings.Join(Families(cat.Types()), ", "), constraintNames(d))}
}

// servingProblem reports a request that no instance type the pod allows can serve, with the
// counts those types accept and the types that could serve it.
func servingProblem(d PodDemand, s *sim) *Problem {
	cat := s.cat
	shape := requestShape(d)
	var allowed []topology.InstanceType
	for _, t := range cat.Types() {
		if d.Allows(t) {
			if s.serves(t, d, shape) {
				return nil
			}
			allowed = append(allowed, t)
		}
	}
	var alternatives []topology.InstanceType
	for _, t := range cat.Types() {
		if s.serves(t, d, shape) {
			alternatives = append(alternatives, t)
		}
	}
	sortByPrice(alternatives)
	what, change := "the pod", "the request"
	if len(d.DRA) > 0 {
		change = "the claim"
	}
	constrained := slices.ContainsFunc(claimsOf(d), func(c *resourcev1.ResourceClaim) bool { return len(c.Spec.Devices.Constraints) > 0 })
	switch n := len(d.Requests) + len(d.DRA); {
	case n == 1 && !constrained:
		what = demandString(d)
	case len(d.DRA) > 0:
		what = "the pod's claims"
	}
	var msg string
	switch refusal := s.refusal(allowed, d); {
	case refusal != "":
		msg = "the scheduler's allocator refuses the pod's claims on every instance type the pod allows: " + refusal
	case len(allowed) == 1:
		msg = "instance type " + s.whyNot(allowed[0], d)
	case len(allowed) <= 3:
		var why []string
		for _, t := range allowed {
			why = append(why, s.whyNot(t, d))
		}
		msg = fmt.Sprintf("no instance type the pod allows can serve %s: %s", what, strings.Join(why, "; "))
	default:
		msg = fmt.Sprintf("none of the %d instance types the pod allows can serve %s (the largest have %s)", len(allowed), what, plural(maxDevices(allowed), "device"))
	}
	if len(alternatives) > 0 {
		var names []string
		for _, t := range alternatives {
			names = append(names, t.Name+" ("+priceString(t)+")")
		}
		msg += fmt.Sprintf("; types that can serve %s: %s", what, strings.Join(names, ", "))
	} else if len(allowed) < len(cat.Types()) {
		msg += fmt.Sprintf("; no instance type in the catalog can serve %s", what)
	}
	msg += ". Change " + change
	if len(alternatives) > 0 && len(constraintList(d)) > 0 {
		msg += " or the pod's " + constraintNames(d)
	}
	p := problem("%s", msg)
	return &p
}

// refusal is the allocator's error for the pod's claims when it is the same on an empty node of
// every type that has enough devices (a DeviceClass that does not exist, a selector that fails);
// "" otherwise.
func (s *sim) refusal(types []topology.InstanceType, d PodDemand) string {
	if len(d.DRA) == 0 || len(types) == 0 {
		return ""
	}
	var first string
	for _, t := range types {
		shape := s.shape(t)
		if shape == nil {
			return ""
		}
		_, err := s.allocate(topology.NewUsage(shape), d)
		switch {
		case errors.Is(err, errNoFit):
		case err == nil || first != "" && err.Error() != first:
			return ""
		default:
			first = err.Error()
		}
	}
	return first
}

// draDevices is the number of devices the requests ask for at least (an All request one).
func draDevices(rs []DRARequest) int {
	n := 0
	for _, r := range rs {
		if !r.FirstAvailable {
			n += max(r.Count, 1)
		}
	}
	return n
}

// whyNot says why a node of type t cannot take the pod, starting with the type's name.
func (s *sim) whyNot(t topology.InstanceType, d PodDemand) string {
	shape := s.shape(t)
	if shape == nil {
		return t.Name + " is not a valid instance type"
	}
	if len(d.DRA) > 0 {
		_, err := s.allocate(topology.NewUsage(shape), d)
		switch {
		case err != nil && !errors.Is(err, errNoFit):
			return fmt.Sprintf("%s: the scheduler's allocator refuses the pod's claims: %v", t.Name, err)
		case draDevices(d.DRA) <= t.Devices:
			return fmt.Sprintf("%s has %s, but no set of them satisfies the pod's claims (%s) together with their selectors and constraints", t.Name, plural(t.Devices, "Neuron device"), draString(d.DRA))
		}
		return fmt.Sprintf("%s has %s, too few for the pod's claims (%s)", t.Name, plural(t.Devices, "Neuron device"), draString(d.DRA))
	}
	for _, r := range d.Requests {
		u, err := topology.UnitOf(r.Resource)
		if err != nil {
			return err.Error()
		}
		if shape.Validate(topology.Request{Unit: u, Count: r.Count}) != nil {
			sizes := shape.DeviceSizes()
			if u == topology.UnitCore {
				sizes = shape.CoreSizes()
			}
			return fmt.Sprintf("%s accepts %s requests of %s, not %d", t.Name, r.Resource, FormatSizes(sizes, u), r.Count)
		}
	}
	var reqs []string
	for _, r := range d.Requests {
		u, _ := topology.UnitOf(r.Resource)
		reqs = append(reqs, fmt.Sprintf("container %s: %s", r.Container, topology.Request{Unit: u, Count: r.Count}))
	}
	return fmt.Sprintf("%s has %s (%s), too few for the pod's requests together (%s)", t.Name, plural(t.Devices, "device"), plural(shape.Cores(), "core"), strings.Join(reqs, ", "))
}
