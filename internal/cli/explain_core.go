package cli

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"

	apiv1 "github.com/kube-neuron/kube-neuron/api/neuron.aws.com/v1"
	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/autoscaler/plan"
	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// Verdicts of explain on one node: why the pod does or does not fit there.
const (
	VerdictFits             = "Fits"             // a valid free set exists now
	VerdictUnsupportedCount = "UnsupportedCount" // the node's instance type never accepts the count
	VerdictInsufficient     = "Insufficient"     // fewer devices or cores free than asked for
	VerdictFragmented       = "Fragmented"       // enough free, but in no valid (connected) set
	VerdictTainted          = "Tainted"          // a taint the pod does not tolerate
	VerdictUnschedulable    = "Unschedulable"    // the node is cordoned
	VerdictWrongMode        = "WrongMode"        // the node serves the other allocation mode
	VerdictUnhealthy        = "Unhealthy"        // fits by the records, but devices are unhealthy
)

// explainInput is what explain reads from the cluster for one pod; explainPod decides from it
// alone.
type explainInput struct {
	Catalog *topology.Catalog
	Pod     *corev1.Pod
	// Events are the events whose involved object is the pod.
	Events []corev1.Event
	// Nodes are the cluster's nodes (Neuron or not).
	Nodes []*corev1.Node
	// Pods are the pods of every namespace that have not terminated (their allocation records).
	Pods []*corev1.Pod
	// Claims are the ResourceClaims of every namespace (what DRA nodes hold).
	Claims []*resourcev1.ResourceClaim
	// PodClaims are the pod's own claims, in spec order.
	PodClaims []podClaim
	// Slices and Classes are the ResourceSlices and DeviceClasses DRA requests resolve against.
	Slices  []*resourcev1.ResourceSlice
	Classes []*resourcev1.DeviceClass
}

// podClaim is one entry of the pod's spec.resourceClaims: the claim when it exists, else the
// template's spec (the resourceclaim controller has not made the claim yet).
type podClaim struct {
	Name     string // the name in the pod's spec
	Claim    *resourcev1.ResourceClaim
	Template *resourcev1.ResourceClaimSpec
	Missing  string // the claim or template the spec names that does not exist
}

// Explanation is `kubectl-neuron explain pod -o json`.
type Explanation struct {
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	Phase     string `json:"phase"`
	Node      string `json:"node"`
	// Summary says in one line what the pod is doing and why.
	Summary  string           `json:"summary"`
	Events   []ExplainEvent   `json:"events"`
	Requests []ExplainRequest `json:"requests"`
	// Total is the pod's request as the engine sums it ("7 devices", "4 cores").
	Total string `json:"total"`
	// ValidCounts are the counts each instance type the pod may use accepts.
	ValidCounts []TypeCounts `json:"validCounts"`
	// Nodes are the candidate nodes: Neuron nodes the pod's nodeSelector and affinity allow.
	Nodes []NodeVerdict `json:"nodes"`
	// OtherNodes counts the Neuron nodes the pod's nodeSelector or affinity rules out.
	OtherNodes int              `json:"otherNodes"`
	Autoscaler AutoscalerAnswer `json:"autoscaler"`
	Claims     []ClaimState     `json:"claims"`
	// Holds is what a pod that runs (or ran) holds.
	Holds    []NodeHolder `json:"holds"`
	WhatToDo []string     `json:"whatToDo"`
}

// ExplainEvent is one event on the pod.
type ExplainEvent struct {
	Type    string `json:"type"`
	Reason  string `json:"reason"`
	Source  string `json:"source"`
	Message string `json:"message"`
	Count   int32  `json:"count"`
}

// ExplainRequest is one container's Neuron request.
type ExplainRequest struct {
	Container string `json:"container"`
	Resource  string `json:"resource"`
	Unit      string `json:"unit"`
	Count     int    `json:"count"`
}

// TypeCounts are the counts an instance type accepts.
type TypeCounts struct {
	InstanceType string `json:"instanceType"`
	Devices      []int  `json:"devices"`
	Cores        []int  `json:"cores"`
	// Accepts: every request of the pod is a count the type accepts.
	Accepts bool `json:"accepts"`
}

// NodeVerdict is why the pod fits or does not fit one candidate node.
type NodeVerdict struct {
	Name         string `json:"name"`
	InstanceType string `json:"instanceType"`
	Mode         string `json:"mode"`
	FreeDevices  []int  `json:"freeDevices"`
	FreeCores    []int  `json:"freeCores"`
	// FreeSets are disjoint free connected sets of devices, largest first: what a device
	// request can get there.
	FreeSets  [][]int `json:"freeSets"`
	Unhealthy int     `json:"unhealthy"`
	Verdict   string  `json:"verdict"`
	Message   string  `json:"message"`
	// Move, for a fragmented node, is the smallest set of holders whose release makes a valid
	// set of the size free.
	Move *Move `json:"move,omitempty"`
}

// Move is the pods to move off a fragmented node and what their release frees.
type Move struct {
	Pods []MovedPod `json:"pods"`
	// Frees is the set the request would get once they are gone.
	Frees []int  `json:"frees"`
	Unit  string `json:"unit"`
}

// MovedPod is a pod that holds part of a set the request needs.
type MovedPod struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Devices   []int  `json:"devices"`
	Cores     []int  `json:"cores"`
}

// AutoscalerAnswer is what neuron-autoscaler said (its events) and what its planner says now.
type AutoscalerAnswer struct {
	Events []ExplainEvent `json:"events"`
	// Problems are the planner's reasons not to launch a node (NotTriggerScaleUp messages).
	Problems []string `json:"problems"`
	// Launch is the instance type the planner would launch for the pod alone; "" when none.
	Launch string `json:"launch"`
}

// ClaimState is one of the pod's ResourceClaims.
type ClaimState struct {
	Name        string   `json:"name"`
	Claim       string   `json:"claim"`
	Allocated   bool     `json:"allocated"`
	Node        string   `json:"node"`
	Devices     []string `json:"devices"`
	ReservedFor []string `json:"reservedFor"`
	Message     string   `json:"message"`
}

// Event reasons explain looks for.
const (
	eventFailedScheduling = "FailedScheduling"
	eventFailedPrepare    = "FailedPrepareDynamicResources"
)

// maxMoveTrials bounds the holder sets tried on one fragmented node; maxMovePods the pods in one.
const (
	maxMoveTrials = 4096
	maxMovePods   = 4
)

// explainPod decides, from the objects alone, why the pod is where it is and what to do.
func explainPod(ctx context.Context, in explainInput) Explanation {
	pod := in.Pod
	cat := cmp.Or(in.Catalog, topology.DefaultCatalog())
	e := Explanation{Namespace: pod.Namespace, Pod: pod.Name, Phase: string(pod.Status.Phase), Node: pod.Spec.NodeName,
		Events: []ExplainEvent{}, Requests: []ExplainRequest{}, ValidCounts: []TypeCounts{}, Nodes: []NodeVerdict{},
		Autoscaler: AutoscalerAnswer{Events: []ExplainEvent{}, Problems: []string{}}, Claims: []ClaimState{}, Holds: []NodeHolder{}, WhatToDo: []string{}}
	for _, ev := range in.Events {
		x := ExplainEvent{Type: ev.Type, Reason: ev.Reason, Source: cmp.Or(ev.ReportingController, ev.Source.Component), Message: ev.Message, Count: max(ev.Count, 1)}
		if ev.Series != nil {
			x.Count = max(x.Count, ev.Series.Count)
		}
		// The same event written twice (a series and its first occurrence) is shown once, last.
		same := func(o ExplainEvent) bool {
			return o.Type == x.Type && o.Reason == x.Reason && o.Source == x.Source && o.Message == x.Message
		}
		if i := slices.IndexFunc(e.Events, same); i >= 0 {
			x.Count += e.Events[i].Count
			e.Events = slices.Delete(e.Events, i, i+1)
		}
		e.Events = append(e.Events, x)
	}
	for _, x := range e.Events {
		if x.Reason == plan.ReasonTriggeredScaleUp || x.Reason == plan.ReasonNotTriggerScaleUp {
			e.Autoscaler.Events = append(e.Autoscaler.Events, x)
		}
	}
	todo := func(format string, args ...any) {
		s := fmt.Sprintf(format, args...)
		if !slices.Contains(e.WhatToDo, s) {
			e.WhatToDo = append(e.WhatToDo, s)
		}
	}

	// The request as the engine sees it.
	templates := plan.NewDeviceTemplates(cat, in.Slices, in.Classes)
	var dra []plan.DRARequest
	var claims []*resourcev1.ResourceClaim
	for _, pc := range in.PodClaims {
		cs := ClaimState{Name: pc.Name, Devices: []string{}, ReservedFor: []string{}}
		var spec *resourcev1.ResourceClaimSpec
		switch {
		case pc.Claim != nil:
			c := pc.Claim
			spec = &c.Spec
			cs.Claim = c.Name
			if a := c.Status.Allocation; a != nil {
				cs.Allocated = true
				for _, r := range a.Devices.Results {
					cs.Devices = append(cs.Devices, r.Device)
					cs.Node = cmp.Or(cs.Node, r.Pool)
				}
			}
			for _, ref := range c.Status.ReservedFor {
				cs.ReservedFor = append(cs.ReservedFor, strings.TrimSuffix(ref.Resource, "s")+"/"+ref.Name)
			}
			if !cs.Allocated {
				cs.Message = "the scheduler has found no node whose devices satisfy it (its FailedScheduling event says why)"
			}
		case pc.Template != nil:
			spec = pc.Template
			cs.Message = "the claim does not exist yet: the resourceclaim controller (kube-controller-manager) makes it from the template"
			todo("Claim %s does not exist yet: check that kube-controller-manager runs its resourceclaim-controller (without it, a pod using a template waits with no event)", pc.Name)
		default:
			cs.Message = fmt.Sprintf("%s does not exist", pc.Missing)
			todo("Create %s in namespace %s, or change the pod's resourceClaims: the pod cannot start without it", pc.Missing, pod.Namespace)
		}
		if spec != nil {
			if reqs := plan.DRARequestsOf(*spec); len(reqs) > 0 {
				dra = append(dra, reqs...)
				if pc.Claim != nil {
					claims = append(claims, pc.Claim)
				} else {
					claims = append(claims, plan.ClaimFromTemplate(pod.Namespace, pod.Name, pc.Name, *spec))
				}
			}
		}
		e.Claims = append(e.Claims, cs)
	}
	if len(dra) > 0 {
		dra = templates.Resolve(ctx, dra)
	}
	d := plan.NewPodDemand(pod, dra)
	d.Claims = claims
	for _, r := range d.Requests {
		u, _ := topology.UnitOf(r.Resource)
		e.Requests = append(e.Requests, ExplainRequest{Container: r.Container, Resource: r.Resource, Unit: u.String(), Count: r.Count})
	}
	for _, r := range d.DRA {
		count := r.Count
		if r.All {
			count = 0
		}
		e.Requests = append(e.Requests, ExplainRequest{Container: "claim request " + r.Name, Resource: apiv1.DriverName, Unit: topology.UnitDevice.String(), Count: count})
	}
	e.Total = requestTotal(d)

	if !d.Neuron() && len(in.PodClaims) == 0 {
		e.Summary = "the pod asks for no Neuron device or core: kube-neuron plays no part in where it runs"
		return e
	}

	// A pod that got a node and started, or terminated.
	switch pod.Status.Phase {
	case corev1.PodRunning, corev1.PodSucceeded:
		e.Holds = heldBy(cat, pod, in.Nodes, e.Claims)
		verb := "is running"
		if pod.Status.Phase == corev1.PodSucceeded {
			verb = "has succeeded"
		}
		e.Summary = fmt.Sprintf("the pod %s on node %s%s", verb, pod.Spec.NodeName, describeHolds(e.Holds))
		return e
	case corev1.PodFailed:
		e.Holds = heldBy(cat, pod, in.Nodes, e.Claims)
		e.Summary = fmt.Sprintf("the pod failed on node %s: %s", cmp.Or(pod.Spec.NodeName, "(none)"), cmp.Or(strings.TrimSpace(pod.Status.Reason+": "+pod.Status.Message), "see the events"))
		if pod.Status.Reason == "UnexpectedAdmissionError" {
			todo("The kubelet could not give the pod its Neuron devices (the device plugin's Allocate failed): delete the pod so that it is scheduled again (its controller recreates it); the events say which device")
		} else {
			todo("A failed pod is not restarted: read its logs (kubectl logs -n %s %s --previous) and events, then delete it or let its controller replace it", pod.Namespace, pod.Name)
		}
		return e
	}
	if pod.Spec.NodeName != "" {
		e.Holds = heldBy(cat, pod, in.Nodes, e.Claims)
		e.Summary = fmt.Sprintf("the pod is bound to node %s%s but has not started", pod.Spec.NodeName, describeHolds(e.Holds))
		for _, ev := range e.Events {
			if ev.Type == corev1.EventTypeWarning {
				e.Summary += ": " + ev.Reason + ": " + ev.Message
				if ev.Reason == eventFailedPrepare {
					todo("The DRA driver on %s could not prepare the claim's devices: its log (and the node's events) say why; delete the pod to have it scheduled again once the node is fixed", pod.Spec.NodeName)
				} else {
					todo("The node's kubelet or Neuron agent refused the pod (%s): check the device plugin or DRA driver on %s, then delete the pod so that it is scheduled again", ev.Reason, pod.Spec.NodeName)
				}
				break
			}
		}
		return e
	}

	// Pending without a node: valid counts, each candidate node, the autoscaler.
	allowed := allowedTypes(cat, d)
	nodeTypes := map[string]bool{}
	for _, n := range in.Nodes {
		if allocation.IsNeuronNode(cat, n) && podMatchesNode(pod, n) {
			nodeTypes[n.Labels[labels.InstanceType]] = true
		}
	}
	// The types of the candidate nodes, and the types a new node may have when they are few.
	for _, t := range cat.Types() {
		if !nodeTypes[t.Name] && (len(allowed) > 6 || !slices.ContainsFunc(allowed, func(a topology.InstanceType) bool { return a.Name == t.Name })) {
			continue
		}
		shape, err := topology.NewShape(t, 0)
		if err != nil {
			continue
		}
		tc := TypeCounts{InstanceType: t.Name, Devices: shape.DeviceSizes(), Cores: shape.CoreSizes(), Accepts: true}
		for _, r := range d.Requests {
			u, _ := topology.UnitOf(r.Resource)
			if shape.Validate(topology.Request{Unit: u, Count: r.Count}) != nil {
				tc.Accepts = false
			}
		}
		e.ValidCounts = append(e.ValidCounts, tc)
	}

	byNode := map[string][]*corev1.Pod{}
	for _, p := range in.Pods {
		if r, err := allocation.RecordOf(p); err == nil && r != nil {
			byNode[r.Node] = append(byNode[r.Node], p)
		}
	}
	for _, n := range in.Nodes {
		if !allocation.IsNeuronNode(cat, n) {
			continue
		}
		if !podMatchesNode(pod, n) {
			e.OtherNodes++
			continue
		}
		shape, err := allocation.ShapeOfNode(cat, n)
		if err != nil {
			continue
		}
		e.Nodes = append(e.Nodes, judgeNode(n, shape, d, byNode[n.Name], in.Claims))
	}
	slices.SortFunc(e.Nodes, func(a, b NodeVerdict) int { return strings.Compare(a.Name, b.Name) })

	// The autoscaler's planner, as kubectl-neuron check runs it, on the live pod.
	for _, p := range plan.Check(d, plan.Environment{Catalog: cat, DevicePlugin: true, DRADriver: true, Devices: templates}) {
		e.Autoscaler.Problems = append(e.Autoscaler.Problems, p.Message)
	}
	if len(e.Autoscaler.Problems) == 0 {
		up, decisions := plan.Plan([]plan.PodDemand{d}, nil, plan.Options{Catalog: cat, Devices: templates})
		if len(decisions) == 1 && decisions[0].Reason == plan.ReasonTriggeredScaleUp && decisions[0].Node >= 0 && decisions[0].Node < len(up.Nodes) {
			e.Autoscaler.Launch = up.Nodes[decisions[0].Node].InstanceType.Name
		} else if len(decisions) == 1 {
			e.Autoscaler.Problems = append(e.Autoscaler.Problems, decisions[0].Message)
		}
	}

	e.Summary, e.WhatToDo = pendingAdvice(e, d, e.WhatToDo)
	return e
}

// pendingAdvice sums up a pending pod's verdicts and says what to do, after todo (the claims').
func pendingAdvice(e Explanation, d plan.PodDemand, todo []string) (string, []string) {
	add := func(format string, args ...any) {
		s := fmt.Sprintf(format, args...)
		if !slices.Contains(todo, s) {
			todo = append(todo, s)
		}
	}
	var why []string
	count := map[string]int{}
	for _, n := range e.Nodes {
		count[n.Verdict]++
	}
	unsupported := slices.ContainsFunc(e.ValidCounts, func(tc TypeCounts) bool { return !tc.Accepts })
	switch {
	case len(e.Nodes) == 0 && e.OtherNodes == 0:
		why = append(why, "the cluster has no Neuron node")
	case len(e.Nodes) == 0:
		why = append(why, fmt.Sprintf("none of the %d Neuron nodes matches the pod's nodeSelector and affinity", e.OtherNodes))
		add("Change the pod's nodeSelector or affinity to allow an existing Neuron node (kubectl-neuron nodes lists them), or let the autoscaler launch one (below)")
	case count[VerdictFits] > 0:
		why = append(why, fmt.Sprintf("%d candidate node(s) have room for it now", count[VerdictFits]))
		add("The Neuron request fits now: the scheduler's events say what else holds the pod back (CPU, memory, other constraints), or it has not retried yet")
	}
	for _, n := range e.Nodes {
		switch n.Verdict {
		case VerdictUnsupportedCount:
			w := fmt.Sprintf("%s is not a count %s accepts", e.Total, n.InstanceType)
			if !slices.Contains(why, w) {
				why = append(why, w)
			}
		case VerdictFragmented:
			frag, _, _ := strings.Cut(n.Message, ";")
			why = append(why, fmt.Sprintf("%s is fragmented (%s)", n.Name, frag))
			if n.Move != nil {
				var pods []string
				for _, p := range n.Move.Pods {
					pods = append(pods, p.Namespace+"/"+p.Name)
				}
				add("Fragmentation on %s: moving %s (delete %s; a controller-owned pod comes back elsewhere) frees %s %s there; or wait for pods there to end. kubectl-neuron nodes %s shows who holds what",
					n.Name, strings.Join(pods, ", "), pluralWord(len(pods), "it"), n.Move.Unit+"s", topology.FormatList(n.Move.Frees), n.Name)
			}
		case VerdictInsufficient:
			if !slices.Contains(why, "not enough free devices or cores on the candidate nodes") {
				why = append(why, "not enough free devices or cores on the candidate nodes")
			}
		case VerdictTainted:
			why = append(why, fmt.Sprintf("%s has a taint the pod does not tolerate", n.Name))
			add("%s: %s", n.Name, n.Message)
		case VerdictUnschedulable:
			add("Node %s is cordoned: kubectl uncordon %s when it may take pods again", n.Name, n.Name)
		case VerdictWrongMode:
			add("Node %s is a %s node, the pod needs the other mode: a device-plugin node takes aws.amazon.com/neuron* requests, a DRA node ResourceClaims of DeviceClass %s", n.Name, n.Mode, apiv1.DriverName)
		case VerdictUnhealthy:
			add("Node %s: %s", n.Name, n.Message)
		}
	}
	if unsupported {
		var parts []string
		for _, tc := range e.ValidCounts {
			parts = append(parts, tc.InstanceType+": "+validCounts(tc, e.Requests))
		}
		add("Request a count the instance type accepts (%s), or allow a type that accepts this one (the Autoscaler line names them)", strings.Join(parts, "; "))
	}
	if count[VerdictInsufficient] > 0 && count[VerdictFits] == 0 && !unsupported {
		add("Wait for pods on the candidate nodes to end, request fewer, or add a node")
	}
	for _, c := range e.Claims {
		if c.Claim != "" && !c.Allocated {
			add("Claim %s (ResourceClaim %s) is not allocated: the scheduler's FailedScheduling event says which constraint or selector no node meets", c.Name, c.Claim)
		}
	}
	var last *ExplainEvent
	if n := len(e.Autoscaler.Events); n > 0 {
		last = &e.Autoscaler.Events[n-1]
	}
	switch {
	case last != nil && last.Reason == plan.ReasonNotTriggerScaleUp:
		why = append(why, "neuron-autoscaler launches nothing for it (NotTriggerScaleUp)")
		add("Autoscaler: %s", last.Message)
	case last != nil && last.Reason == plan.ReasonTriggeredScaleUp:
		why = append(why, "neuron-autoscaler is launching a node for it (TriggeredScaleUp)")
		add("Wait for the new node to join (kubectl get nodes -w); the pod is scheduled there: %s", last.Message)
	case e.Autoscaler.Launch != "":
		msg := fmt.Sprintf("the autoscaler's planner would launch one %s node for the pod", e.Autoscaler.Launch)
		if len(e.Autoscaler.Events) == 0 {
			msg += " (no event from neuron-autoscaler on the pod: check that it runs and that the pod is marked unschedulable)"
		}
		if count[VerdictFits] == 0 {
			why = append(why, msg)
		}
	case len(e.Autoscaler.Problems) > 0:
		why = append(why, "the autoscaler will launch nothing for it")
		for _, p := range e.Autoscaler.Problems {
			add("Autoscaler: %s", p)
		}
	}
	if len(why) == 0 {
		why = append(why, "no reason found in the Neuron request; see the events")
	}
	return "the pod is Pending: " + strings.Join(why, "; "), todo
}

// allowedTypes are the catalog's types the pod's constraints allow (a new node's labels).
func allowedTypes(cat *topology.Catalog, d plan.PodDemand) []topology.InstanceType {
	var out []topology.InstanceType
	for _, t := range cat.Types() {
		if d.Allows(t) {
			out = append(out, t)
		}
	}
	return out
}
