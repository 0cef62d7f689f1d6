package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// ExitNotFound: explain's pod does not exist.
const ExitNotFound = ExitNoNodes

type explainOptions struct {
	namespace, output string
}

const explainLong = `explain pod NAME tells why a Neuron pod is Pending or Failed, and what to do, in one answer:

  events      the scheduler's (FailedScheduling, with the extender's message), the autoscaler's
              (TriggeredScaleUp, NotTriggerScaleUp), the device plugin's and the DRA driver's
              (FailedPrepareDynamicResources) events on the pod
  request     each container's request as the engine reads it, the pod's total, and the counts
              each instance type the pod may use accepts
  nodes       every Neuron node the pod's nodeSelector and affinity allow: its free devices and
              free connected sets, and why the request does not fit there (a count the type never
              accepts, not enough free, enough free but not connected, a taint, cordoned,
              unhealthy devices, the other allocation mode). When the node is fragmented, the
              smallest set of pods whose release would free a connected set of the size
  autoscaler  its events, and what its planner (the one kubectl-neuron check runs) says now: the
              instance type it would launch, or why it launches nothing
  claims      for DRA pods: each ResourceClaim, allocated or not, its devices and node, reservedFor
  what to do  one line per reason found

A pod that runs shows its node and what it holds. The cluster is read as kubectl-neuron nodes
reads it (allocation records on device-plugin nodes, allocated ResourceClaims on DRA nodes),
with kubectl's client flags.

Output formats (-o): table (default), json, yaml, jsonpath=TEMPLATE over the json document.

Exit codes: 0 explained; 2 bad flags; 4 no kubeconfig, or the cluster cannot be reached or read;
5 the pod does not exist.`

func newExplainCommand(o *options) *cobra.Command {
	eo := &explainOptions{}
	var client *clientFlags
	cmd := &cobra.Command{
		Use:   "explain pod NAME [-n NAMESPACE]",
		Short: "Explain why a Neuron pod is Pending or Failed, and what to do",
		Long:  explainLong,
		Example: `  kubectl-neuron explain pod trainer -n ml
  kubectl-neuron explain pod/trainer -n ml -o json`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, err := explainTarget(args)
			if err != nil {
				return err
			}
			format, err := parseOutput(eo.output, commandFormats["explain"]...)
			if err != nil {
				return err
			}
			cat, err := o.catalog()
			if err != nil {
				return err
			}
			c, err := client.client()
			if err != nil {
				return err
			}
			ns := eo.namespace
			if ns == "" {
				if ns, _, err = client.config.ToRawKubeConfigLoader().Namespace(); err != nil || ns == "" {
					ns = metav1.NamespaceDefault
				}
			}
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			in, err := readExplainInput(ctx, c, ns, name)
			if err != nil {
				return err
			}
			in.Catalog = cat
			return writeExplanation(o.out, format, explainPod(ctx, in))
		},
	}
	f := cmd.Flags()
	f.StringVarP(&eo.namespace, "namespace", "n", "", "the pod's namespace (default: the context's, else default)")
	f.StringVarP(&eo.output, "output", "o", outTable, "output format: table, json, yaml or jsonpath=TEMPLATE")
	client = addClientFlags(f)
	return cmd
}

// explainTarget reads "pod NAME", "pod/NAME" or "pods NAME".
func explainTarget(args []string) (string, error) {
	kind, name, slash := strings.Cut(args[0], "/")
	if !slash {
		if len(args) != 2 {
			return "", usageErr("name the pod: kubectl-neuron explain pod NAME [-n NAMESPACE]")
		}
		name = args[1]
	} else if len(args) != 1 {
		return "", usageErr("name one pod: kubectl-neuron explain pod NAME or pod/NAME")
	}
	if kind != "pod" && kind != "pods" && kind != "po" {
		return "", usageErr("explain explains pods, not %q: kubectl-neuron explain pod NAME", kind)
	}
	if name == "" {
		return "", usageErr("name the pod: kubectl-neuron explain pod NAME")
	}
	return name, nil
}

// readExplainInput reads what explainPod needs from the cluster.
func readExplainInput(ctx context.Context, c kubernetes.Interface, ns, name string) (explainInput, error) {
	var in explainInput
	pod, err := c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return in, &exitError{code: ExitNotFound, err: fmt.Errorf("pod %q not found in namespace %s: kubectl get pods -n %s lists its pods (-n names another namespace)", name, ns, ns)}
	}
	if err != nil {
		return in, clusterErr("get pod "+ns+"/"+name, err)
	}
	in.Pod = pod
	evs, err := c.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: fields.Set{"involvedObject.name": name, "involvedObject.kind": "Pod"}.String()})
	if err != nil {
		return in, clusterErr("list the pod's events", err)
	}
	for _, ev := range evs.Items {
		if ev.InvolvedObject.UID == "" || ev.InvolvedObject.UID == pod.UID {
			in.Events = append(in.Events, ev)
		}
	}
	slices.SortStableFunc(in.Events, func(a, b corev1.Event) int { return eventTime(a).Compare(eventTime(b)) })
	nodes, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return in, clusterErr("list nodes", err)
	}
	for i := range nodes.Items {
		in.Nodes = append(in.Nodes, &nodes.Items[i])
	}
	byNode, err := recordPods(ctx, c, func(string, ...any) {})
	if err != nil {
		return in, err
	}
	for _, pods := range byNode {
		in.Pods = append(in.Pods, pods...)
	}
	claims, err := c.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return in, nil // no DRA in this cluster
	case err != nil:
		return in, clusterErr("list resourceclaims in all namespaces", err)
	}
	for i := range claims.Items {
		in.Claims = append(in.Claims, &claims.Items[i])
	}
	for _, rc := range pod.Spec.ResourceClaims {
		pc := podClaim{Name: rc.Name}
		claimName := rc.ResourceClaimName
		for _, st := range pod.Status.ResourceClaimStatuses {
			if claimName == nil && st.Name == rc.Name {
				claimName = st.ResourceClaimName
			}
		}
		if claimName != nil {
			for _, cl := range in.Claims {
				if cl.Namespace == ns && cl.Name == *claimName {
					pc.Claim = cl
				}
			}
			if pc.Claim == nil {
				pc.Missing = "ResourceClaim " + *claimName
			}
		}
		if pc.Claim == nil && rc.ResourceClaimTemplateName != nil {
			t, err := c.ResourceV1().ResourceClaimTemplates(ns).Get(ctx, *rc.ResourceClaimTemplateName, metav1.GetOptions{})
			switch {
			case err == nil:
				pc.Template, pc.Missing = &t.Spec.Spec, ""
			case apierrors.IsNotFound(err):
				pc.Missing = "ResourceClaimTemplate " + *rc.ResourceClaimTemplateName
			default:
				return in, clusterErr("get resourceclaimtemplate "+*rc.ResourceClaimTemplateName, err)
			}
		}
		in.PodClaims = append(in.PodClaims, pc)
	}
	if len(in.PodClaims) > 0 {
		if sl, err := c.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{}); err == nil {
			for i := range sl.Items {
				in.Slices = append(in.Slices, &sl.Items[i])
			}
		}
		if cl, err := c.ResourceV1().DeviceClasses().List(ctx, metav1.ListOptions{}); err == nil {
			in.Classes = []*resourcev1.DeviceClass{}
			for i := range cl.Items {
				in.Classes = append(in.Classes, &cl.Items[i])
			}
		}
	}
	return in, nil
}

func eventTime(ev corev1.Event) time.Time {
	switch {
	case !ev.LastTimestamp.IsZero():
		return ev.LastTimestamp.Time
	case ev.Series != nil:
		return ev.Series.LastObservedTime.Time
	case !ev.EventTime.IsZero():
		return ev.EventTime.Time
	}
	return ev.CreationTimestamp.Time
}

// writeExplanation renders the explanation fully, then writes it.
func writeExplanation(out io.Writer, format outputFormat, e Explanation) error {
	var buf bytes.Buffer
	if format.data() {
		if err := writeData(&buf, format, e, false); err != nil {
			return err
		}
		_, err := out.Write(buf.Bytes())
		return err
	}
	p := func(format string, args ...any) { fmt.Fprintf(&buf, format+"\n", args...) }
	p("Pod %s/%s: %s", e.Namespace, e.Pod, e.Summary)
	if len(e.Events) > 0 {
		p("\nEvents:")
		for _, ev := range e.Events {
			count := ""
			if ev.Count > 1 {
				count = fmt.Sprintf(" (x%d)", ev.Count)
			}
			p("  %s %s from %s%s: %s", ev.Type, ev.Reason, orText(ev.Source, "?"), count, ev.Message)
		}
	}
	if len(e.Requests) > 0 {
		p("\nRequest: %s", e.Total)
		for _, r := range e.Requests {
			if r.Resource == DRADriver {
				n := fmt.Sprint(r.Count)
				if r.Count == 0 {
					n = "all"
				}
				p("  %s: %s devices of DeviceClass %s", r.Container, n, DRADriver)
				continue
			}
			p("  container %s: %s=%d (%s)", r.Container, r.Resource, r.Count, topology.Request{Unit: unitOf(r.Unit), Count: r.Count})
		}
	}
	if len(e.ValidCounts) > 0 {
		p("\nValid counts of the instance types the pod may use:")
		for _, tc := range e.ValidCounts {
			mark := ""
			if !tc.Accepts {
				mark = "   <- not the pod's count"
			}
			p("  %s: %s%s", tc.InstanceType, validCounts(tc, e.Requests), mark)
		}
	}
	if len(e.Claims) > 0 {
		p("\nClaims:")
		for _, c := range e.Claims {
			state := "not allocated"
			if c.Allocated {
				state = fmt.Sprintf("allocated on %s: %s", c.Node, strings.Join(c.Devices, ", "))
			}
			line := fmt.Sprintf("  %s (ResourceClaim %s): %s", c.Name, orText(c.Claim, "-"), state)
			if len(c.ReservedFor) > 0 {
				line += "; reserved for " + strings.Join(c.ReservedFor, ", ")
			}
			if c.Message != "" {
				line += "; " + c.Message
			}
			p("%s", line)
		}
	}
	if len(e.Nodes) > 0 || e.OtherNodes > 0 {
		p("\nCandidate nodes: %d (%s ruled out by the pod's nodeSelector or affinity)", len(e.Nodes), plural(e.OtherNodes, "other Neuron node"))
		for _, n := range e.Nodes {
			var sets []string
			for _, s := range n.FreeSets {
				sets = append(sets, topology.FormatList(s))
			}
			p("  %s (%s, %s): %s: %s", n.Name, n.InstanceType, n.Mode, n.Verdict, n.Message)
			p("    free devices %s; free connected sets %s", orDash(n.FreeDevices), orText(strings.Join(sets, " | "), "-"))
		}
	}
	if e.Phase == string(corev1.PodPending) && e.Node == "" {
		p("\nAutoscaler:")
		if len(e.Autoscaler.Events) == 0 {
			p("  no event from neuron-autoscaler on the pod")
		}
		for _, ev := range e.Autoscaler.Events {
			p("  event %s: %s", ev.Reason, ev.Message)
		}
		if e.Autoscaler.Launch != "" {
			p("  its planner would launch one %s node for the pod", e.Autoscaler.Launch)
		}
		for _, pr := range e.Autoscaler.Problems {
			p("  its planner launches nothing: %s", pr)
		}
	}
	if len(e.WhatToDo) > 0 {
		p("\nWhat to do:")
		for _, w := range e.WhatToDo {
			p("  - %s", w)
		}
	}
	_, err := out.Write(buf.Bytes())
	return err
}

func unitOf(s string) topology.Unit {
	if s == topology.UnitCore.String() {
		return topology.UnitCore
	}
	return topology.UnitDevice
}

func orText(s, none string) string {
	if s == "" {
		return none
	}
	return s
}
