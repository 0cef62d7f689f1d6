// Package demo is `make demo`: it starts a lab with a small fleet, runs the components that
// exist, applies the files in examples/, prints what every pod got and the nodes' topology
// maps, and stops everything.
package demo

import (
	"context"
	"encoding/json"
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
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-neuron/kube-neuron/internal/autoscaler"
	"github.com/kube-neuron/kube-neuron/internal/cli"
	"github.com/kube-neuron/kube-neuron/internal/lab"
	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// Namespace is where the demo applies the examples.
const Namespace = "demo"

// Examples are the example files the demo applies (globs under examples/), in groups; the demo
// lets each group settle before the next (the extender's pods pack tightly first, then the
// default scheduler's pods of device-plugin/ take what is left, then the DRA claims).
var Examples = [][]string{
	{"lab/*.yaml"},
	{"extender/*.yaml"},
	{"device-plugin/*.yaml"},
	// The DRA examples that fit the demo's fleet: connected sets on trn2-a, one device on a
	// trn1.2xlarge, the seed's LNC error on the other, a driver version no node has (pending),
	// and four pods on the four nodes of one UltraServer.
	{"dra/1x4-connected-neurons.yaml", "dra/l-trn2.yaml", "dra/single-neuron-device.yaml", "dra/lnc-1-trn1.yaml",
		"dra/driver-version-missing.yaml", "dra/us-4-node-config.yaml"},
}

// Fleet is the demo's fleet: every example has a node it fits. trn2-a, the trn1.2xlarge nodes
// and the UltraServer us-1 are served by the DRA driver. Where real nodes can run, inf2-a is one
// (RealNode): seed 001's inf2-three-devices runs there in a real container.
var Fleet = lab.FleetFile{Nodes: []lab.FleetEntry{
	{Name: "inf1-a", InstanceType: "inf1.6xlarge"},
	{Name: "inf2-a", InstanceType: "inf2.48xlarge"},
	{Name: "trn1-a", InstanceType: "trn1.32xlarge"},
	{Name: "trn1-b", InstanceType: "trn1.32xlarge"},
	{Name: "trn1-c", InstanceType: "trn1.32xlarge"},
	{Name: "trn2-a", InstanceType: "trn2.48xlarge", Mode: lab.ModeDRA},
	{Name: "trn1-s", InstanceType: "trn1.2xlarge", Mode: lab.ModeDRA, Count: 2},
	{Name: "us-1", InstanceType: "trn2u.48xlarge", Mode: lab.ModeDRA, Count: 4, UltraServer: "us-1"},
}}

// RealNode is the demo's real node, where real nodes can run.
const RealNode = "inf2-a"

// fleet is Fleet, with RealNode a real node when real is set.
func fleet(real bool) *lab.FleetFile {
	f := lab.FleetFile{Nodes: slices.Clone(Fleet.Nodes)}
	for i := range f.Nodes {
		if real && f.Nodes[i].Name == RealNode {
			f.Nodes[i].Kubelet = lab.KubeletReal
		}
	}
	return &f
}

// realNodesSkipped says why the demo runs without its real node, "" when it has one.
func realNodesSkipped(o lab.Options) string {
	switch {
	case os.Getenv("KUBE_NEURON_REAL_NODES") == "0":
		return "KUBE_NEURON_REAL_NODES=0"
	case lab.RealNodesUnavailable() != "":
		return lab.RealNodesUnavailable()
	case o.NodeBinDir == "":
		return "no --node-bin-dir (make demo passes what hack/real-nodes.sh makes)"
	}
	return ""
}

// Options configure Run.
type Options struct {
	Lab lab.Options
	// Examples is the examples/ directory.
	Examples string
	Out      io.Writer
	// Wait bounds the wait for the example pods to settle.
	Wait time.Duration
}

// Run runs the demo.
func Run(ctx context.Context, o Options) error {
	out := o.Out
	begin := time.Now()
	skipped := realNodesSkipped(o.Lab)
	if o.Lab.Fleet == nil {
		o.Lab.Fleet = fleet(skipped == "")
	}
	// Each group of examples waits for the nodes' status before the next (WaitForNodeStatus):
	// the simulated nodes post theirs every second to keep the demo short; real ones every 10 s.
	if o.Lab.StatusUpdateFrequency == 0 {
		o.Lab.StatusUpdateFrequency = time.Second
	}
	if skipped == "" {
		fmt.Fprintf(out, "== Starting the lab: a real control plane, simulated Neuron nodes and a real one (%s: kubelet v1.36.3, containerd, runc), the chart installed with helm (state in %s)\n", RealNode, o.Lab.Dir)
	} else {
		fmt.Fprintf(out, "== Starting the lab: a real control plane on 127.0.0.1, simulated Neuron nodes, and %v (state in %s)\n", o.Lab.Components, o.Lab.Dir)
		fmt.Fprintf(out, "(no real node in this demo: %s; the rest runs as usual)\n", skipped)
	}
	l, err := lab.Start(ctx, o.Lab)
	if err != nil {
		return err
	}
	defer func() {
		fmt.Fprintln(out, "\n== Stopping the lab")
		if err := l.Stop(); err != nil {
			fmt.Fprintln(out, "stopping:", err)
		}
	}()
	fmt.Fprintf(out, "ready in %v\n\n", time.Since(begin).Round(time.Millisecond))
	client := l.Client()
	if err := printNodes(ctx, out, l); err != nil {
		return err
	}
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	fmt.Fprintf(out, "\n== Applying the examples (namespace %s)\n", Namespace)
	var pods []corev1.Pod
	for _, group := range Examples {
		var files []string
		for _, g := range group {
			matches, _ := filepath.Glob(filepath.Join(o.Examples, g))
			sort.Strings(matches)
			files = append(files, matches...)
		}
		for _, f := range files {
			objs, err := lab.ApplyFile(ctx, l.RESTConfig(), "kube-neuron-demo", f, Namespace)
			if err != nil {
				return err
			}
			var names []string
			for _, obj := range objs {
				names = append(names, strings.ToLower(obj.GetKind())+"/"+obj.GetName())
			}
			rel, _ := filepath.Rel(filepath.Dir(o.Examples), f)
			fmt.Fprintf(out, "%s: %s\n", rel, strings.Join(names, ", "))
		}
		if pods, err = settle(ctx, l, o.Wait); err != nil {
			return err
		}
		// The next group's pods are placed on what the nodes posted: wait until their status
		// says what the pods of this group took (a kubelet posts it every 10 s).
		if err := l.WaitForNodeStatus(ctx, 30*time.Second); err != nil {
			return err
		}
	}
	fmt.Fprintln(out, "\n== What every pod got (the device plugin's and the DRA driver's answers: as the simulated kubelet recorded them, or as the container on a real node printed them)")
	failing, err := prepareFailures(ctx, l)
	if err != nil {
		return err
	}
	printed := printedOnRealNodes(ctx, l, pods)
	printPods(out, pods, failing, printed)
	if skipped == "" {
		if err := realNodeAct(ctx, out, l, pods, printed); err != nil {
			return err
		}
	}
	fmt.Fprintln(out, "\n== $ kubectl-neuron nodes   (usage derived from the pods' allocation records)")
	var stderr strings.Builder
	if code := cli.Main([]string{"nodes", "--kubeconfig", l.Kubeconfig()}, out, &stderr); code != 0 {
		fmt.Fprintf(out, "kubectl-neuron nodes failed (exit %d): %s\n", code, stderr.String())
	}
	if skipped == "" {
		topAct(out, l)
	}
	explainAct(out, l, pods)
	return scaleUp(ctx, out, l, o.Wait)
}

// scaleUp is the autoscaler's act: a pod that no node of the fleet can take stays pending,
// neuron-autoscaler (local provider) launches a node of the type it asks for, the simulated
// kubelet brings the node up with the device plugin, and the pod runs there.
func scaleUp(ctx context.Context, out io.Writer, l *lab.Lab, wait time.Duration) error {
	const typ = "inf2.24xlarge"
	fmt.Fprintf(out, "\n== neuron-autoscaler: a pod for an %s, a type no node of the fleet has\n", typ)
	begin := time.Now()
	if err := l.StartAutoscaler(); err != nil {
		return err
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "needs-a-new-node", Namespace: Namespace},
		Spec: corev1.PodSpec{
			SchedulerName: lab.CustomSchedulerName,
			NodeSelector:  map[string]string{labels.InstanceType: typ},
			Tolerations:   []corev1.Toleration{{Key: labels.NeuronTaintKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			Containers: []corev1.Container{{Name: "app", Image: "my-neuron-image", Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{corev1.ResourceName(topology.ResourceNeuron): *resource.NewQuantity(4, resource.DecimalSI)},
			}}},
		},
	}
	client := l.Client()
	if _, err := client.CoreV1().Pods(Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return err
	}
	if wait == 0 {
		wait = 90 * time.Second
	}
	deadline := time.Now().Add(wait)
	var lastPhase corev1.PodPhase
	seenNodes := map[string]bool{}
	for {
		p, err := client.CoreV1().Pods(Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != lastPhase {
			lastPhase = p.Status.Phase
			fmt.Fprintf(out, "%5.1fs  pod %s/%s: %s %s\n", time.Since(begin).Seconds(), Namespace, pod.Name, p.Status.Phase, dash(p.Spec.NodeName))
		}
		nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: autoscaler.LaunchedByLabel})
		if err != nil {
			return err
		}
		for _, n := range nodes.Items {
			if !seenNodes[n.Name] {
				seenNodes[n.Name] = true
				fmt.Fprintf(out, "%5.1fs  node %s appears (%s, launched by neuron-autoscaler)\n", time.Since(begin).Seconds(), n.Name, n.Labels[labels.InstanceType])
			}
		}
		if p.Status.Phase == corev1.PodRunning || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	// What the autoscaler told every pending pod of the demo, this one and the earlier examples'.
	events, err := client.CoreV1().Events(Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, e := range events.Items {
		if strings.HasSuffix(e.Reason, "ScaleUp") {
			fmt.Fprintf(out, "pod %s: %s %s: %s\n", e.InvolvedObject.Name, e.Type, e.Reason, e.Message)
		}
	}
	if lastPhase != corev1.PodRunning {
		fmt.Fprintf(out, "the pod is still %s after %v: the logs are under %s\n", lastPhase, wait, filepath.Dir(l.Kubeconfig()))
	}
	return nil
}

func printNodes(ctx context.Context, out io.Writer, l *lab.Lab) error {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "NODE\tINSTANCE TYPE\tMODE\tLNC\tDEVICES\tCORES\tTAINT")
	for _, s := range l.Nodes() {
		n, err := l.Client().CoreV1().Nodes().Get(ctx, s.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		taint := ""
		for _, t := range n.Spec.Taints {
			taint = fmt.Sprintf("%s=%s:%s", t.Key, t.Value, t.Effect)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%d\t%s\n", s.Name, s.InstanceType.Name, s.Mode, s.LNC, s.InstanceType.Devices, s.InstanceType.LogicalCores(s.LNC), taint)
	}
	return w.Flush()
}

// settle waits until every pod of the demo namespace is Running or Failed, or the time is up.
func settle(ctx context.Context, l *lab.Lab, wait time.Duration) ([]corev1.Pod, error) {
	if wait == 0 {
		wait = 60 * time.Second
	}
	deadline := time.Now().Add(wait)
	for {
		list, err := l.Client().CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		failing, err := prepareFailures(ctx, l)
		if err != nil {
			return nil, err
		}
		settled := true
		// A StatefulSet's pods appear after it: wait until its controller created them all.
		sets, err := l.Client().AppsV1().StatefulSets(Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		for _, ss := range sets.Items {
			if ss.Spec.Replicas != nil && ss.Status.Replicas < *ss.Spec.Replicas {
				settled = false
			}
		}
		for _, p := range list.Items {
			if p.Status.Phase != corev1.PodRunning && p.Status.Phase != corev1.PodFailed && !unschedulable(p) && failing[p.Name] == "" {
				settled = false
			}
		}
		if settled || time.Now().After(deadline) {
			sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
			return list.Items, nil
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// prepareFailures returns, per pod of the demo namespace, the last message of the kubelet's
// FailedPrepareDynamicResources events (a scheduled pod whose claim the DRA driver refused).
func prepareFailures(ctx context.Context, l *lab.Lab) (map[string]string, error) {
	events, err := l.Client().CoreV1().Events(Namespace).List(ctx, metav1.ListOptions{FieldSelector: "reason=FailedPrepareDynamicResources"})
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, e := range events.Items {
		out[e.InvolvedObject.Name] = e.Message
	}
	return out, nil
}

// unschedulable reports whether the scheduler found no node for the pod (it stays Pending).
func unschedulable(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return true
		}
	}
	return false
}

// row is what the summary shows of one container or claim.
type row struct {
	name, devices, cores, env string
	coreIDs                   []int
}

func envRow(name string, devices []string, env map[string]string) row {
	r := row{name: name, devices: compactDevices(devices)}
	if cores, err := topology.ParseList(env["NEURON_RT_VISIBLE_CORES"]); err == nil {
		r.coreIDs = cores
		r.cores = topology.FormatList(cores)
	}
	var kv []string
	for k, v := range env {
		if ids, err := topology.ParseList(v); err == nil && len(ids) > 2 {
			v = topology.FormatList(ids) // shortened for the table; the container gets the full list
		}
		kv = append(kv, k+"="+v)
	}
	slices.Sort(kv)
	r.env = strings.Join(kv, " ")
	return r
}

// rows returns one row per Neuron container and per claim of the pod, or one empty row. A pod
// of a real node has no simulated kubelet's record: its containers' own output says what they
// got (printed).
func rows(p corev1.Pod, printed map[string]realnodeOutput) []row {
	var a lab.PodAllocations
	_ = json.Unmarshal([]byte(p.Annotations[lab.AllocationsAnnotation]), &a)
	var out []row
	for _, c := range p.Spec.Containers {
		if got, ok := printed[p.Name+"/"+c.Name]; ok {
			out = append(out, envRow(p.Name+"/"+c.Name, got.devices, got.neuronEnv()))
		}
	}
	for _, c := range a.Containers {
		var devices []string
		for _, r := range c.Resources {
			devices = append(devices, r.Devices...)
		}
		out = append(out, envRow(p.Name+"/"+c.Name, devices, c.Env))
	}
	for _, c := range a.Claims {
		out = append(out, envRow(p.Name+" claim "+c.Name, c.DeviceNodes, c.Env))
	}
	if len(out) == 0 {
		out = append(out, row{name: p.Name})
	}
	return out
}

// compactDevices writes /dev/neuron0,/dev/neuron1,... as /dev/neuron[0-1].
func compactDevices(paths []string) string {
	var ids []int
	for _, p := range paths {
		n, err := strconv.Atoi(strings.TrimPrefix(p, "/dev/neuron"))
		if err != nil {
			return strings.Join(paths, ",")
		}
		ids = append(ids, n)
	}
	if len(ids) == 0 {
		return ""
	}
	return "/dev/neuron[" + topology.FormatList(ids) + "]"
}

func printPods(out io.Writer, pods []corev1.Pod, failing map[string]string, printed map[string]realnodeOutput) {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "POD/CONTAINER\tNODE\tPHASE\tDEVICE NODES\tCORES\tENV (id lists shortened)")
	for _, p := range pods {
		phase := string(p.Status.Phase)
		if p.Status.Reason != "" {
			phase += " (" + p.Status.Reason + ")"
		}
		for _, r := range rows(p, printed) {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", r.name, dash(p.Spec.NodeName), phase, dash(r.devices), dash(r.cores), dash(r.env))
		}
	}
	_ = w.Flush()
	for _, p := range pods {
		if p.Status.Phase == corev1.PodPending {
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
					fmt.Fprintf(out, "%s is pending: %s\n", p.Name, c.Message)
				}
			}
		}
		if msg := failing[p.Name]; msg != "" && p.Status.Phase == corev1.PodPending {
			fmt.Fprintf(out, "%s is not started by the kubelet: %s\n", p.Name, msg)
		}
		if p.Status.Phase == corev1.PodFailed {
			fmt.Fprintf(out, "%s failed: %s\n", p.Name, p.Status.Message)
		}
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// RepoExamples finds examples/ from the working directory.
func RepoExamples() string {
	if _, err := os.Stat("examples"); err == nil {
		abs, _ := filepath.Abs("examples")
		return abs
	}
	return "examples"
}
