package lab

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kube-neuron/kube-neuron/internal/labels"
)

// StatusOptions configure ReadStatus.
type StatusOptions struct {
	// Dir is the lab's directory.
	Dir string
	// Client reads the lab's API; nil: a client from the lab's kubeconfig.
	Client kubernetes.Interface
}

// LabStatus is what `neuron-lab status` shows of the lab in a directory.
type LabStatus struct {
	Dir string
	// PID is the lab's own process (`neuron-lab serve`), 0 when none runs.
	PID int
	// Ready is what the lab wrote once it was ready; nil while it starts or when none runs.
	Ready *ReadyInfo
	// Processes are the lab's recorded processes that run (control plane, components, nodes).
	Processes []State
	// Nodes and Pending are read from the lab's API server; APIError says why they could not be.
	Nodes    []corev1.Node
	Pending  []PendingPod
	APIError error
}

// PendingPod is a Pending pod and why it waits (ExplainPending).
type PendingPod struct {
	Namespace, Name, Why string
}

// Running reports whether a lab runs in the directory and is ready.
func (s *LabStatus) Running() bool { return s.PID != 0 && s.Ready != nil }

// ReadStatus says whether a lab runs in o.Dir and, when one does, its nodes, its components and
// its pending pods with the reason each waits. No lab is not an error.
func ReadStatus(ctx context.Context, o StatusOptions) (*LabStatus, error) {
	s := &LabStatus{Dir: o.Dir}
	if data, err := os.ReadFile(filepath.Join(o.Dir, PIDFile)); err == nil {
		if pid, _ := strconv.Atoi(strings.TrimSpace(string(data))); pid > 1 && isLabServe(pid) {
			s.PID = pid
			s.Ready = readReady(o.Dir)
		}
	}
	entries, err := ReadState(o.Dir)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if e.PID > 1 && pidRuns(e.PID, e.Path) {
			s.Processes = append(s.Processes, e)
		}
	}
	if !s.Running() {
		return s, nil
	}
	client := o.Client
	if client == nil {
		cfg, err := clientcmd.BuildConfigFromFlags("", s.Ready.Kubeconfig)
		if err != nil {
			s.APIError = err
			return s, nil
		}
		cfg.Timeout = 10 * time.Second
		if client, err = kubernetes.NewForConfig(cfg); err != nil {
			s.APIError = err
			return s, nil
		}
	}
	s.APIError = s.readAPI(ctx, client)
	return s, nil
}

// readAPI lists the lab's nodes and explains its Pending pods.
func (s *LabStatus) readAPI(ctx context.Context, client kubernetes.Interface) error {
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing the nodes: %w", err)
	}
	s.Nodes = nodes.Items
	sort.Slice(s.Nodes, func(i, j int) bool { return s.Nodes[i].Name < s.Nodes[j].Name })
	pods, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "status.phase=Pending"})
	if err != nil {
		return fmt.Errorf("listing the pending pods: %w", err)
	}
	if len(pods.Items) == 0 {
		return nil
	}
	events, err := client.CoreV1().Events("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing the events: %w", err)
	}
	byPod := map[string][]corev1.Event{}
	for _, e := range events.Items {
		byPod[string(e.InvolvedObject.UID)] = append(byPod[string(e.InvolvedObject.UID)], e)
	}
	facts := s.facts()
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Status.Phase != corev1.PodPending {
			continue
		}
		evs := byPod[string(p.UID)]
		sort.SliceStable(evs, func(i, j int) bool { return eventTime(evs[i]).Before(eventTime(evs[j])) })
		s.Pending = append(s.Pending, PendingPod{Namespace: p.Namespace, Name: p.Name, Why: ExplainPending(p, evs, facts)})
	}
	sort.Slice(s.Pending, func(i, j int) bool {
		return s.Pending[i].Namespace+"/"+s.Pending[i].Name < s.Pending[j].Namespace+"/"+s.Pending[j].Name
	})
	return nil
}

func eventTime(e corev1.Event) time.Time {
	switch {
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	}
	return e.CreationTimestamp.Time
}

// facts are what the explanations of pending pods depend on.
func (s *LabStatus) facts() PendingFacts {
	f := PendingFacts{SystemNode: s.hasSystemNode()}
	for _, p := range s.Processes {
		switch p.Name {
		case CustomSchedulerName:
			f.MyScheduler = true
		case ComponentAutoscaler:
			f.Autoscaler = true
		}
	}
	// With real nodes the chart's Deployments run the extender and my-scheduler.
	if f.SystemNode && s.Ready != nil && slices.Contains(s.Ready.Components, ComponentExtender) {
		f.MyScheduler = true
	}
	return f
}

func (s *LabStatus) hasSystemNode() bool {
	return slices.ContainsFunc(s.Nodes, func(n corev1.Node) bool { return n.Name == SystemNodeName })
}

// Write prints the status for people: whether a lab runs, where its kubeconfig is, its nodes,
// its components and why each pending pod waits.
func (s *LabStatus) Write(w io.Writer) {
	if !s.Running() {
		switch {
		case s.PID != 0:
			fmt.Fprintf(w, "a lab is starting in %s (pid %d), not ready yet: its log is %s\n", s.Dir, s.PID, filepath.Join(s.Dir, ServeLog))
		default:
			fmt.Fprintf(w, "no lab runs in %s: start one with `make lab-up`\n", s.Dir)
		}
		if s.PID == 0 && len(s.Processes) > 0 {
			fmt.Fprintf(w, "%d processes of a lab that did not stop still run (%s): `make lab-down` stops them\n",
				len(s.Processes), strings.Join(stateNames(s.Processes), ", "))
		}
		return
	}
	r := s.Ready
	fmt.Fprintf(w, "a lab runs in %s (pid %d, ready in %s)\n", s.Dir, s.PID, r.StartedIn)
	fmt.Fprintf(w, "kubeconfig: %s\n  %s --kubeconfig %s get pods -A\n", r.Kubeconfig, r.Kubectl, r.Kubeconfig)
	if r.Chart != "" {
		fmt.Fprintf(w, "chart: %s, namespace %s\n", r.Chart, ChartNamespace)
	}
	if s.APIError != nil {
		fmt.Fprintf(w, "the lab's API server does not answer (%v): its log is %s\n", s.APIError, filepath.Join(s.Dir, "logs", "kube-apiserver.log"))
	} else {
		s.writeNodes(w)
	}
	s.writeComponents(w)
	if s.APIError != nil {
		return
	}
	if len(s.Pending) == 0 {
		fmt.Fprintln(w, "pending pods: none")
		return
	}
	fmt.Fprintf(w, "pending pods (%d), and why each waits:\n", len(s.Pending))
	for _, p := range s.Pending {
		fmt.Fprintf(w, "  %s/%s: %s\n", p.Namespace, p.Name, strings.ReplaceAll(p.Why, "\n", "\n      "))
	}
}

func (s *LabStatus) writeNodes(w io.Writer) {
	if len(s.Nodes) == 0 {
		if s.facts().Autoscaler {
			fmt.Fprintln(w, "nodes: none yet (the autoscaler launches one for a pending pod that asks for Neuron hardware)")
		} else {
			fmt.Fprintln(w, "nodes: none")
		}
		return
	}
	fmt.Fprintf(w, "nodes (%d):\n", len(s.Nodes))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, n := range s.Nodes {
		ready := "NotReady"
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				ready = "Ready"
			}
		}
		typ, mode := n.Labels[labels.InstanceType], n.Labels[labels.AllocationMode]
		if n.Name == SystemNodeName {
			typ, mode = "(system node)", "-"
		}
		if strings.HasPrefix(n.Spec.ProviderID, LocalProviderIDPrefix) {
			ready += "  (launched by the autoscaler)"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s kubelet\t%s\n", n.Name, typ, orDash(mode), orDash(n.Labels[LabKubeletLabel]), ready)
	}
	_ = tw.Flush()
}

func (s *LabStatus) writeComponents(w io.Writer) {
	perNode := map[string][]string{} // component -> nodes it runs for as a host process
	running := map[string]bool{}
	var controlPlane []string
	for _, p := range s.Processes {
		switch {
		case p.Name == CustomSchedulerName && filepath.Base(p.Path) == ComponentKubeScheduler:
			running[ComponentKubeScheduler] = true
		case p.Name == ComponentExtender || p.Name == ComponentAutoscaler || p.Name == CustomSchedulerName:
			running[p.Name] = true
		case strings.HasPrefix(p.Name, ComponentDevicePlugin+"-"), strings.HasPrefix(p.Name, ComponentDRADriver+"-"):
			c := ComponentDevicePlugin
			if strings.HasPrefix(p.Name, ComponentDRADriver+"-") {
				c = ComponentDRADriver
			}
			perNode[c] = append(perNode[c], processNode(p.Name))
		case strings.HasPrefix(p.Name, "etcd") || strings.HasPrefix(p.Name, "kube-"):
			controlPlane = append(controlPlane, p.Name)
		}
	}
	asked := s.Ready.Components
	realNodes := map[string][]string{} // mode -> real Neuron nodes (the chart's DaemonSets serve them)
	for _, n := range s.Nodes {
		if n.Labels[LabKubeletLabel] == KubeletReal && n.Name != SystemNodeName {
			mode := n.Labels[labels.AllocationMode]
			realNodes[mode] = append(realNodes[mode], n.Name)
		}
	}
	fmt.Fprintf(w, "components (logs in %s):\n", filepath.Join(s.Dir, "logs"))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	var left []string
	for _, c := range KnownComponents() {
		if !slices.Contains(asked, c) {
			// Of the two ways to run my-scheduler, the one not asked for is not left out.
			other := map[string]string{ComponentExtender: ComponentKubeScheduler, ComponentKubeScheduler: ComponentExtender}[c]
			if other == "" || !slices.Contains(asked, other) {
				left = append(left, c)
			}
			continue
		}
		var where []string
		switch c {
		case ComponentDevicePlugin, ComponentDRADriver:
			mode := ModeDevicePlugin
			if c == ComponentDRADriver {
				mode = ModeDRA
			}
			switch ns := perNode[c]; len(ns) {
			case 0:
			case 1:
				where = append(where, "a host process for "+ns[0])
			default:
				sort.Strings(ns)
				where = append(where, "host processes for "+strings.Join(ns, ", "))
			}
			if ns := realNodes[mode]; len(ns) > 0 {
				where = append(where, "the chart's DaemonSet on "+strings.Join(ns, ", "))
			}
			if len(where) == 0 {
				where = append(where, "no node in "+mode+" mode yet")
			}
		case ComponentExtender:
			switch {
			case running[ComponentExtender]:
				where = append(where, "a host process, with my-scheduler (pods opt in with schedulerName: my-scheduler); "+
					"the chart's Deployments k8s-neuron-scheduler and my-scheduler have 0 replicas")
			case s.hasSystemNode():
				where = append(where, "the chart's Deployments k8s-neuron-scheduler and my-scheduler, on "+SystemNodeName)
			default:
				where = append(where, "not running")
			}
		case ComponentKubeScheduler:
			if running[ComponentKubeScheduler] {
				where = append(where, "a host process, my-scheduler with the NeuronTopology plugin (pods opt in with schedulerName: my-scheduler)")
			} else {
				where = append(where, "not running")
			}
		case ComponentAutoscaler:
			if running[ComponentAutoscaler] {
				where = append(where, "a host process, local provider: launches simulated nodes for pending pods")
			} else {
				where = append(where, "not running")
			}
		}
		fmt.Fprintf(tw, "  %s\t%s\n", c, strings.Join(where, "; "))
	}
	_ = tw.Flush()
	if len(left) > 0 {
		fmt.Fprintf(w, "  left out (COMPONENTS, neuron-lab --components): %s\n", strings.Join(left, ", "))
	}
	if len(controlPlane) > 0 {
		fmt.Fprintf(w, "control plane: %s\n", strings.Join(controlPlane, ", "))
	}
}

func stateNames(s []State) []string {
	out := make([]string, len(s))
	for i, e := range s {
		out[i] = e.Name
	}
	return out
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
