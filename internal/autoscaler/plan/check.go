package plan

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/klog/v2"

	neuronv1 "github.com/kube-neuron/kube-neuron/api/neuron.aws.com/v1"
	"github.com/kube-neuron/kube-neuron/internal/allocation"
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

// NewNodeLabels returns the labels a new Neuron node of type t carries; mode is
// labels.AllocationModeDevicePlugin or labels.AllocationModeDRA. Check and Plan evaluate pods'
// nodeSelector and node affinity against these labels and no other.
func NewNodeLabels(t topology.InstanceType, mode string) map[string]string {
	return map[string]string{
		labels.InstanceType:   t.Name,
		labels.InstanceFamily: t.Family,
		archLabel:             archValue,
		osLabel:               osValue,
		labels.AllocationMode: mode,
	}
}

// newNodeLabelKeys describes NewNodeLabels in messages.
const newNodeLabelKeys = labels.InstanceType + ", " + labels.InstanceFamily + ", " + archLabel + "=" + archValue +
	", " + osLabel + "=" + osValue + " and " + labels.AllocationMode

// NeuronTaint is the taint every new Neuron node carries: aws.amazon.com/neuron=true:NoSchedule.
func NeuronTaint() corev1.Taint {
	return corev1.Taint{Key: labels.NeuronTaintKey, Value: labels.NeuronTaintValue, Effect: corev1.TaintEffect(labels.NeuronTaintEffect)}
}

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
}

// DRARequest is one request of a pod's ResourceClaims for Neuron devices (DeviceClass
// neuron.aws.com), as the caller resolved it: Count devices, or with All every device of the node.
type DRARequest struct {
	// Name is the request's name in its claim (with firstAvailable, the subrequest's).
	Name  string
	Count int
	All   bool
	// InstanceTypes are the types the request's CEL selectors name (instanceType == 'X' in a
	// conjunction); nil means any.
	InstanceTypes []string
	// Selectors are the request's CEL expressions.
	Selectors []string
	// Matching are the instance types whose new nodes would publish enough devices that match
	// every selector (DeviceTemplates.Resolve); nil when not evaluated. Unmatched says why
	// there is none.
	Matching  []string
	Unmatched string
}

func (r DRARequest) String() string {
	if r.All {
		return "all devices"
	}
	return topology.Request{Unit: topology.UnitDevice, Count: r.Count}.String()
}

// PodDemand is a pending pod and what it asks of a Neuron node.
type PodDemand struct {
	Pod *corev1.Pod
	// Requests are the device plugin requests, as the scheduler extender reads them.
	Requests []allocation.Request
	// DRA are the Neuron requests of the pod's ResourceClaims.
	DRA []DRARequest
}

// NewPodDemand reads the pod's device plugin requests; dra are the requests the caller resolved
// from the pod's claims (DRARequestsOf). A DRA count below 1 counts as 1.
func NewPodDemand(pod *corev1.Pod, dra []DRARequest) PodDemand {
	d := PodDemand{Pod: pod, Requests: allocation.PodRequests(pod)}
	for _, r := range dra {
		if !r.All && r.Count < 1 {
			r.Count = 1
		}
		d.DRA = append(d.DRA, r)
	}
	return d
}

// Key is namespace/name.
func (d PodDemand) Key() string { return d.Pod.Namespace + "/" + d.Pod.Name }

// id identifies the pod across plans: its UID, or its key when it has none.
func (d PodDemand) id() string {
	if d.Pod.UID != "" {
		return string(d.Pod.UID)
	}
	return d.Key()
}

// Neuron reports whether the pod asks for Neuron devices or cores at all.
func (d PodDemand) Neuron() bool { return len(d.Requests) > 0 || len(d.DRA) > 0 }

// Mode is the allocation mode of the nodes that can serve the pod.
func (d PodDemand) Mode() string {
	if len(d.DRA) > 0 {
		return labels.AllocationModeDRA
	}
	return labels.AllocationModeDevicePlugin
}

// Allows reports whether the pod's nodeSelector, required node affinity and, for DRA, its
// claims' instance types allow a new node of type t.
func (d PodDemand) Allows(t topology.InstanceType) bool {
	for _, r := range d.DRA {
		if r.InstanceTypes != nil && !slices.Contains(r.InstanceTypes, t.Name) || r.Matching != nil && !slices.Contains(r.Matching, t.Name) {
			return false
		}
	}
	return matchesNode(d.Pod, NewNodeLabels(t, d.Mode()))
}

// WaitingForScaleUp reports whether the pod is one the autoscaler acts on: pending, not bound,
// not being deleted, and marked unschedulable by the scheduler. Whether it asks for Neuron
// hardware is PodDemand.Neuron.
func WaitingForScaleUp(pod *corev1.Pod) bool {
	if pod.Spec.NodeName != "" || pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodPending {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			return c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable
		}
	}
	return false
}

// ToleratesNeuronTaint reports whether the pod tolerates NeuronTaint, which every Neuron node
// carries.
func ToleratesNeuronTaint(pod *corev1.Pod) bool {
	taint := NeuronTaint()
	return slices.ContainsFunc(pod.Spec.Tolerations, func(t corev1.Toleration) bool {
		return t.ToleratesTaint(klog.Background(), &taint, false)
	})
}

// IsDevicePluginDaemonSet reports whether ds is a Neuron device plugin: its name or its pod
// template's name contains neuron-device-plugin (seed 000). It may have no pods yet.
func IsDevicePluginDaemonSet(ds *appsv1.DaemonSet) bool {
	return strings.Contains(ds.Name, DevicePluginName) || strings.Contains(ds.Spec.Template.Name, DevicePluginName)
}

// IsDRADriverDaemonSet reports whether ds is the Neuron DRA driver's kubelet plugin: its name or
// its pod template's name contains neuron-dra-driver-kubelet-plugin, or its pod template has the
// label app: neuron-dra-driver-kubelet-plugin (both the published chart and ours).
func IsDRADriverDaemonSet(ds *appsv1.DaemonSet) bool {
	return strings.Contains(ds.Name, DRADriverName) || strings.Contains(ds.Spec.Template.Name, DRADriverName) ||
		ds.Spec.Template.Labels["app"] == DRADriverName
}

// instanceTypeCEL matches `device.attributes['neuron.aws.com'].instanceType == 'X'` (either
// quote, either side).
var instanceTypeCEL = regexp.MustCompile(`device\.attributes\[\s*["']` + regexp.QuoteMeta(DeviceClass) +
	`["']\s*\]\.instanceType\s*==\s*["']([^"']+)["']|["']([^"']+)["']\s*==\s*device\.attributes\[\s*["']` +
	regexp.QuoteMeta(DeviceClass) + `["']\s*\]\.instanceType`)

// DRARequestsOf returns the Neuron requests of a ResourceClaim (or template) spec: the requests
// of DeviceClass neuron.aws.com (for firstAvailable, the first such subrequest), with their count
// or All, and the instance type when a CEL selector requires instanceType == 'X' (in a
// conjunction; an expression with || or ! is not read and allows any type).
func DRARequestsOf(spec resourcev1.ResourceClaimSpec) []DRARequest {
	var out []DRARequest
	for _, r := range spec.Devices.Requests {
		var class string
		var sel []resourcev1.DeviceSelector
		var mode resourcev1.DeviceAllocationMode
		var count int64
		name := r.Name
		switch {
		case r.Exactly != nil:
			class, sel, mode, count = r.Exactly.DeviceClassName, r.Exactly.Selectors, r.Exactly.AllocationMode, r.Exactly.Count
		default:
			for _, s := range r.FirstAvailable {
				if s.DeviceClassName == DeviceClass {
					class, sel, mode, count = s.DeviceClassName, s.Selectors, s.AllocationMode, s.Count
					name += "/" + s.Name
					break
				}
			}
		}
		if class != DeviceClass {
			continue
		}
		req := DRARequest{Name: name, All: mode == resourcev1.DeviceAllocationModeAll, Count: int(count)}
		for _, s := range sel {
			if s.CEL != nil {
				req.Selectors = append(req.Selectors, s.CEL.Expression)
			}
		}
		if !req.All && req.Count < 1 {
			req.Count = 1
		}
		for _, s := range sel {
			if s.CEL == nil {
				continue
			}
			e := strings.ReplaceAll(s.CEL.Expression, "!=", "")
			if strings.Contains(e, "||") || strings.Contains(e, "!") {
				continue
			}
			for _, m := range instanceTypeCEL.FindAllStringSubmatch(s.CEL.Expression, -1) {
				name := m[1] + m[2]
				if req.InstanceTypes == nil {
					req.InstanceTypes = []string{name}
				} else if !slices.Contains(req.InstanceTypes, name) {
					req.InstanceTypes = []string{} // two different types in one conjunction: none
				}
			}
		}
		out = append(out, req)
	}
	return out
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
	if p := servingProblem(d, newSim(cat, topology.BestFit)); p != nil {
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
	known := NewNodeLabels(topology.InstanceType{}, d.Mode())
	for _, k := range sortedKeys(d.Pod.Spec.NodeSelector) {
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
	var allowed []topology.InstanceType
	for _, t := range cat.Types() {
		if d.Allows(t) {
			if s.serves(t, d) {
				return nil
			}
			allowed = append(allowed, t)
		}
	}
	var alternatives []topology.InstanceType
	for _, t := range cat.Types() {
		if s.serves(t, d) {
			alternatives = append(alternatives, t)
		}
	}
	sortByPrice(alternatives)
	what := "the pod"
	if n := len(d.Requests) + len(d.DRA); n == 1 {
		what = demandString(d)
	}
	var msg string
	switch {
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
	msg += ". Change the request"
	if len(alternatives) > 0 && len(constraintList(d)) > 0 {
		msg += " or the pod's " + constraintNames(d)
	}
	p := problem("%s", msg)
	return &p
}

// constraintList names what restricts the pod's instance types.
func constraintList(d PodDemand) []string {
	var out []string
	if len(d.Pod.Spec.NodeSelector) > 0 {
		out = append(out, "nodeSelector")
	}
	if a := d.Pod.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		out = append(out, "node affinity")
	}
	for _, r := range d.DRA {
		if r.InstanceTypes != nil {
			out = append(out, "ResourceClaim's instanceType selector")
			break
		}
	}
	return out
}

func constraintNames(d PodDemand) string {
	l := constraintList(d)
	if len(l) == 0 {
		return "requests"
	}
	return joinOr(l, "and")
}

// plural is "1 device", "2 devices".
func plural(n int, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return fmt.Sprintf("%d %ss", n, unit)
}

func pluralS(singular bool) string {
	if singular {
		return "s"
	}
	return ""
}

// demandString describes a single-request pod: "7 devices", "6 cores", "all devices".
func demandString(d PodDemand) string {
	if len(d.Requests) == 1 {
		u, err := topology.UnitOf(d.Requests[0].Resource)
		if err != nil {
			return "the pod"
		}
		return topology.Request{Unit: u, Count: d.Requests[0].Count}.String()
	}
	if len(d.DRA) == 1 {
		return d.DRA[0].String()
	}
	return "the pod"
}

// whyNot says why a node of type t cannot take the pod, starting with the type's name.
func (s *sim) whyNot(t topology.InstanceType, d PodDemand) string {
	shape := s.shape(t)
	if shape == nil {
		return t.Name + " is not a valid instance type"
	}
	if len(d.DRA) > 0 {
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
			return fmt.Sprintf("%s accepts %s requests of %s, not %d", t.Name, r.Resource, formatSizes(sizes, u), r.Count)
		}
	}
	var reqs []string
	for _, r := range d.Requests {
		u, _ := topology.UnitOf(r.Resource)
		reqs = append(reqs, fmt.Sprintf("container %s: %s", r.Container, topology.Request{Unit: u, Count: r.Count}))
	}
	return fmt.Sprintf("%s has %s (%s), too few for the pod's requests together (%s)", t.Name, plural(t.Devices, "device"), plural(shape.Cores(), "core"), strings.Join(reqs, ", "))
}

func draString(rs []DRARequest) string {
	var out []string
	for _, r := range rs {
		out = append(out, r.String())
	}
	return strings.Join(out, ", ")
}

// formatSizes writes accepted counts: "1, 4, 8 or 16 devices", "1 to 4, 16, 32 or 64 cores".
func formatSizes(sizes []int, u topology.Unit) string {
	var parts []string
	for i := 0; i < len(sizes); {
		j := i
		for j+1 < len(sizes) && sizes[j+1] == sizes[j]+1 {
			j++
		}
		if j-i >= 2 {
			parts = append(parts, fmt.Sprintf("%d to %d", sizes[i], sizes[j]))
		} else {
			for k := i; k <= j; k++ {
				parts = append(parts, strconv.Itoa(sizes[k]))
			}
		}
		i = j + 1
	}
	unit := u.String() + "s"
	if len(sizes) == 1 && sizes[0] == 1 {
		unit = u.String()
	}
	return joinOr(parts, "or") + " " + unit
}

// joinOr joins "a, b or c".
func joinOr(parts []string, conj string) string {
	if len(parts) <= 1 {
		return strings.Join(parts, "")
	}
	return strings.Join(parts[:len(parts)-1], ", ") + " " + conj + " " + parts[len(parts)-1]
}

// priceString is "$21.5/h" or "price unknown".
func priceString(t topology.InstanceType) string {
	if !t.PriceKnown() {
		return "price unknown"
	}
	return "$" + strconv.FormatFloat(*t.PriceUSDPerHour, 'f', -1, 64) + "/h"
}

// sortByPrice orders types by price, unknown prices last, then by name.
func sortByPrice(ts []topology.InstanceType) {
	sort.SliceStable(ts, func(i, j int) bool {
		a, b := ts[i], ts[j]
		if a.PriceKnown() != b.PriceKnown() {
			return a.PriceKnown()
		}
		if a.PriceKnown() && *a.PriceUSDPerHour != *b.PriceUSDPerHour {
			return *a.PriceUSDPerHour < *b.PriceUSDPerHour
		}
		return a.Name < b.Name
	})
}

func maxDevices(ts []topology.InstanceType) int {
	n := 0
	for _, t := range ts {
		n = max(n, t.Devices)
	}
	return n
}

// Families lists the families of ts, each once, in the order of ts.
func Families(ts []topology.InstanceType) []string {
	var out []string
	for _, t := range ts {
		if !slices.Contains(out, t.Family) {
			out = append(out, t.Family)
		}
	}
	return out
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// matchesNode reports whether a new node with labels lbls satisfies the pod's nodeSelector and
// required node affinity (terms ORed, expressions ANDed, as the scheduler evaluates them). A new
// node's name is not known: matchFields on metadata.name match only through NotIn.
func matchesNode(pod *corev1.Pod, lbls map[string]string) bool {
	for k, v := range pod.Spec.NodeSelector {
		if got, ok := lbls[k]; !ok || got != v {
			return false
		}
	}
	a := pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return true
	}
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		if termMatches(term, lbls) {
			return true
		}
	}
	return false
}

func termMatches(term corev1.NodeSelectorTerm, lbls map[string]string) bool {
	if len(term.MatchExpressions) == 0 && len(term.MatchFields) == 0 {
		return false // an empty term matches no node
	}
	for _, r := range term.MatchExpressions {
		if !requirementMatches(r, lbls) {
			return false
		}
	}
	for _, r := range term.MatchFields {
		if r.Key != "metadata.name" || r.Operator != corev1.NodeSelectorOpNotIn {
			return false
		}
	}
	return true
}

func requirementMatches(r corev1.NodeSelectorRequirement, lbls map[string]string) bool {
	v, ok := lbls[r.Key]
	switch r.Operator {
	case corev1.NodeSelectorOpIn:
		return ok && slices.Contains(r.Values, v)
	case corev1.NodeSelectorOpNotIn:
		return !ok || !slices.Contains(r.Values, v)
	case corev1.NodeSelectorOpExists:
		return ok
	case corev1.NodeSelectorOpDoesNotExist:
		return !ok
	case corev1.NodeSelectorOpGt, corev1.NodeSelectorOpLt:
		if !ok || len(r.Values) != 1 {
			return false
		}
		have, err1 := strconv.ParseInt(v, 10, 64)
		want, err2 := strconv.ParseInt(r.Values[0], 10, 64)
		if err1 != nil || err2 != nil {
			return false
		}
		if r.Operator == corev1.NodeSelectorOpGt {
			return have > want
		}
		return have < want
	}
	return false
}
