package lab

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
)

// fakeServeEnv makes the test binary play a lab's own process (`neuron-lab serve`): it waits
// for SIGTERM and exits.
const fakeServeEnv = "KUBE_NEURON_LAB_TEST_FAKE_SERVE"

func TestMain(m *testing.M) {
	if os.Getenv(fakeServeEnv) == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		select {
		case <-ctx.Done():
		case <-time.After(time.Minute):
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// startFakeLab starts a process that looks like a lab's `serve` and records it in dir as a
// running lab would (PIDFile, and ReadyFile when ready is not nil).
func startFakeLab(t *testing.T, dir string, ready *ReadyInfo) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "serve")
	cmd.Env = append(os.Environ(), fakeServeEnv+"=1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	for deadline := time.Now().Add(10 * time.Second); !isLabServe(cmd.Process.Pid); time.Sleep(5 * time.Millisecond) { // until the exec is done
		if time.Now().After(deadline) {
			t.Fatal("the fake lab process did not start within 10 s")
		}
	}
	if err := os.WriteFile(filepath.Join(dir, PIDFile), []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if ready != nil {
		data, _ := json.Marshal(ready)
		if err := os.WriteFile(filepath.Join(dir, ReadyFile), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return cmd
}

// recordSleep starts `sleep` and records it in dir's state under name, as the lab records its
// processes.
func recordSleep(t *testing.T, dir, name string) *Process {
	t.Helper()
	p := startTestProcess(t, ProcessOptions{Name: name, Path: "sleep", Args: []string{"60"}})
	if err := AddToState(dir, p, StopOrderComponent); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDefaultComponentsRunTheAutoscaler(t *testing.T) {
	want := []string{ComponentDevicePlugin, ComponentDRADriver, ComponentExtender, ComponentAutoscaler}
	if got := DefaultComponents(); !slices.Equal(got, want) {
		t.Errorf("DefaultComponents() = %v, want %v", got, want)
	}
	if err := CheckComponents(want); err != nil {
		t.Errorf("CheckComponents(%v): %v", want, err)
	}
	err := CheckComponents([]string{ComponentDevicePlugin, "neuron-autoscaller"})
	if err == nil || !strings.Contains(err.Error(), `"neuron-autoscaller"`) || !strings.Contains(err.Error(), ComponentAutoscaler) {
		t.Errorf("CheckComponents of a misspelt name: %v, want an error naming it and the known ones", err)
	}
	plugin := []string{ComponentDevicePlugin, ComponentKubeScheduler, ComponentAutoscaler}
	if err := CheckComponents(plugin); err != nil {
		t.Errorf("CheckComponents(%v): %v", plugin, err)
	}
	err = CheckComponents([]string{ComponentExtender, ComponentKubeScheduler})
	if err == nil || !strings.Contains(err.Error(), "both run my-scheduler") || !strings.Contains(err.Error(), "name one of them") {
		t.Errorf("CheckComponents of both ways to run my-scheduler: %v, want an error saying to name one", err)
	}
}

// TestStatusOfALabWithTheKubeScheduler: my-scheduler run by neuron-kube-scheduler is shown as
// that component, and the extender is not listed as left out.
func TestStatusOfALabWithTheKubeScheduler(t *testing.T) {
	dir := t.TempDir()
	startFakeLab(t, dir, &ReadyInfo{Kubeconfig: filepath.Join(dir, "kubeconfig"), Kubectl: "kubectl", StartedIn: "1s",
		Components: []string{ComponentDevicePlugin, ComponentKubeScheduler}})
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), ComponentKubeScheduler)
	if err := os.Symlink(sleep, bin); err != nil {
		t.Fatal(err)
	}
	p := startTestProcess(t, ProcessOptions{Name: CustomSchedulerName, Path: bin, Args: []string{"60"}})
	if err := AddToState(dir, p, StopOrderControllers); err != nil {
		t.Fatal(err)
	}
	st, err := ReadStatus(context.Background(), StatusOptions{Dir: dir, Client: fake.NewClientset()})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	st.Write(&out)
	if want := "neuron-kube-scheduler  a host process, my-scheduler with the NeuronTopology plugin"; !strings.Contains(out.String(), want) {
		t.Errorf("status:\n%s\nwant it to contain %q", out.String(), want)
	}
	if want := "left out (COMPONENTS, neuron-lab --components): neuron-dra-driver, neuron-autoscaler\n"; !strings.Contains(out.String(), want) {
		t.Errorf("status:\n%s\nwant it to contain %q", out.String(), want)
	}
	if strings.Contains(out.String(), ComponentExtender) {
		t.Errorf("status names the extender, which this lab does not run in place of neuron-kube-scheduler:\n%s", out.String())
	}
}

// pod builds a Pending pod for the tests.
type pod struct{ corev1.Pod }

func newPod(name string) *pod {
	return &pod{corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(name + "-uid")},
		Status: corev1.PodStatus{Phase: corev1.PodPending}}}
}

func (p *pod) scheduler(name string) *pod { p.Spec.SchedulerName = name; return p }
func (p *pod) node(name string) *pod      { p.Spec.NodeName = name; return p }
func (p *pod) label(k, v string) *pod {
	if p.Labels == nil {
		p.Labels = map[string]string{}
	}
	p.Labels[k] = v
	return p
}
func (p *pod) annotate(k, v string) *pod { p.Annotations = map[string]string{k: v}; return p }
func (p *pod) tolerateNeuron() *pod {
	p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: "aws.amazon.com/neuron", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule})
	return p
}
func (p *pod) unschedulable(msg string) *pod {
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: msg})
	return p
}
func (p *pod) waiting(container, reason, msg string) *pod {
	p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: container,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}})
	return p
}
func (p *pod) neuron(n int64) *pod {
	p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "main", Resources: corev1.ResourceRequirements{
		Limits: corev1.ResourceList{"aws.amazon.com/neuron": *resource.NewQuantity(n, resource.DecimalSI)}}})
	return p
}
func (p *pod) obj() *corev1.Pod { return &p.Pod }

func event(p *pod, typ, reason, msg string, at time.Time) corev1.Event {
	return corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: p.Name + "." + reason, Namespace: p.Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: p.Name, Namespace: p.Namespace, UID: p.UID},
		Type:           typ, Reason: reason, Message: msg, LastTimestamp: metav1.NewTime(at)}
}

// TestExplainPending: every Pending pod gets a reason that says what the lab does about it and
// what would change it.
func TestExplainPending(t *testing.T) {
	const taintMsg = "0/3 nodes are available: 3 node(s) had untolerated taint(s)."
	const fullMsg = "0/3 nodes are available: 3 Insufficient aws.amazon.com/neuron."
	now := time.Now()
	all := PendingFacts{MyScheduler: true, Autoscaler: true}
	full := newPod("big").neuron(4).tolerateNeuron().unschedulable(fullMsg)
	for _, tc := range []struct {
		name   string
		pod    *corev1.Pod
		events []corev1.Event
		facts  PendingFacts
		want   []string
	}{{
		name:  "the chart's extender pod without a system node",
		pod:   newPod("k8s-neuron-scheduler-abc").label("app.kubernetes.io/instance", ChartRelease).label("app.kubernetes.io/name", ComponentExtender).unschedulable(taintMsg).obj(),
		facts: all,
		want:  []string{"the chart's neuron-scheduler-extender Deployment", "0 replicas", "host processes", "values file", "lab-system"},
	}, {
		name:  "the chart's my-scheduler pod without a system node",
		pod:   newPod("my-scheduler-abc").label("app.kubernetes.io/instance", ChartRelease).label("app.kubernetes.io/name", CustomSchedulerName).unschedulable(taintMsg).obj(),
		facts: all,
		want:  []string{"the chart's my-scheduler Deployment", "0 replicas"},
	}, {
		name:  "the chart's my-scheduler pod with a system node is explained as any pod",
		pod:   newPod("my-scheduler-abc").label("app.kubernetes.io/instance", ChartRelease).label("app.kubernetes.io/name", CustomSchedulerName).tolerateNeuron().unschedulable("0/4 nodes are available: 1 Insufficient cpu.").obj(),
		facts: PendingFacts{SystemNode: true, MyScheduler: true, Autoscaler: true},
		want:  []string{"no node takes it: 0/4 nodes are available: 1 Insufficient cpu.", "the autoscaler launches nodes only for pods that ask for Neuron devices or cores"},
	}, {
		name:  "no toleration, no Neuron hardware, no system node",
		pod:   newPod("plain").unschedulable(taintMsg).obj(),
		facts: all,
		want:  []string{taintMsg, "aws.amazon.com/neuron=true:NoSchedule", "does not tolerate it", "asks for no Neuron hardware, and this lab has no other node"},
	}, {
		name:  "no toleration, Neuron hardware",
		pod:   newPod("needs").neuron(1).unschedulable(taintMsg).obj(),
		facts: all,
		want:  []string{taintMsg, "does not tolerate it (the examples show the toleration)", "the autoscaler has not decided about it yet"},
	}, {
		name:   "no node fits, the autoscaler answered",
		pod:    full.obj(),
		events: []corev1.Event{event(full, "Normal", "Scheduled", "older", now.Add(-time.Minute)), event(full, "Normal", "TriggeredScaleUp", "pod triggered scale-up: a new trn1.32xlarge node", now)},
		facts:  all,
		want:   []string{fullMsg, "the autoscaler: pod triggered scale-up: a new trn1.32xlarge node"},
	}, {
		name:  "no node fits, the autoscaler left out",
		pod:   newPod("big").neuron(4).tolerateNeuron().unschedulable(fullMsg).obj(),
		facts: PendingFacts{MyScheduler: true},
		want:  []string{fullMsg, "neuron-autoscaler, which launches nodes for pending pods, is left out of this lab (COMPONENTS)"},
	}, {
		name:  "my-scheduler left out",
		pod:   newPod("ext").scheduler(CustomSchedulerName).obj(),
		facts: PendingFacts{Autoscaler: true},
		want:  []string{"schedulerName: my-scheduler", "add neuron-scheduler-extender or neuron-kube-scheduler to COMPONENTS"},
	}, {
		name:  "an unknown scheduler",
		pod:   newPod("other").scheduler("volcano").obj(),
		facts: all,
		want:  []string{"schedulerName: volcano", "no scheduler of that name runs"},
	}, {
		name:  "held by the simulated kubelet",
		pod:   newPod("held").node("trn1-a").annotate(HoldAdmissionAnnotation, "true").obj(),
		facts: all,
		want:  []string{"on node trn1-a", "held by the simulated kubelet", HoldAdmissionAnnotation},
	}, {
		name:  "on a real node, an image that cannot be pulled",
		pod:   newPod("pull").node("trn1-a").waiting("main", "ImagePullBackOff", "Back-off pulling image").obj(),
		facts: all,
		want:  []string{"on node trn1-a: main ImagePullBackOff: Back-off pulling image"},
	}, {
		name:   "on a node, a failed prepare",
		pod:    newPod("claim").node("trn2-a").obj(),
		events: []corev1.Event{{Type: "Warning", Reason: "FailedPrepareDynamicResources", Message: "prepare failed"}},
		facts:  all,
		want:   []string{"on node trn2-a: FailedPrepareDynamicResources: prepare failed"},
	}, {
		name:  "not scheduled yet",
		pod:   newPod("new").obj(),
		facts: all,
		want:  []string{"not scheduled yet"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := ExplainPending(tc.pod, tc.events, tc.facts)
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("ExplainPending = %q\nwant it to contain %q", got, w)
				}
			}
		})
	}
}

func TestStatusWithoutALab(t *testing.T) {
	dir := t.TempDir()
	st, err := ReadStatus(context.Background(), StatusOptions{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if st.Running() {
		t.Errorf("Running() in an empty directory")
	}
	var out strings.Builder
	st.Write(&out)
	if want := "no lab runs in " + dir; !strings.Contains(out.String(), want) {
		t.Errorf("status:\n%s\nwant %q", out.String(), want)
	}

	// A lab killed with SIGKILL: its processes still run, its own is gone.
	recordSleep(t, dir, "kube-apiserver")
	if st, err = ReadStatus(context.Background(), StatusOptions{Dir: dir}); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	st.Write(&out)
	if st.Running() || !strings.Contains(out.String(), "1 processes of a lab that did not stop still run (kube-apiserver): `make lab-down` stops them") {
		t.Errorf("status with processes left behind (running %v):\n%s", st.Running(), out.String())
	}

	// A lab that is starting runs, but is not ready.
	startFakeLab(t, dir, nil)
	if st, err = ReadStatus(context.Background(), StatusOptions{Dir: dir}); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	st.Write(&out)
	if st.Running() || !strings.Contains(out.String(), "a lab is starting in "+dir) {
		t.Errorf("status of a starting lab (running %v):\n%s", st.Running(), out.String())
	}
}

// TestStatusOfARunningLab: the nodes (those the autoscaler launched too), the components as
// they run, the kubeconfig, and why each pending pod waits.
func TestStatusOfARunningLab(t *testing.T) {
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	startFakeLab(t, dir, &ReadyInfo{Kubeconfig: kubeconfig, Kubectl: filepath.Join(dir, "bin", "kubectl"), StartedIn: "7.7s",
		Components: []string{ComponentDevicePlugin, ComponentDRADriver, ComponentExtender}})
	for _, name := range []string{"etcd", "kube-apiserver", ComponentDevicePlugin + "-inf2-a", ComponentDevicePlugin + "-neuron-inf1-6xlarge-1",
		ComponentDRADriver + "-trn2-a", ComponentExtender, CustomSchedulerName} {
		recordSleep(t, dir, name)
	}
	node := func(name, typ, mode, providerID string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			"node.kubernetes.io/instance-type": typ, "kube-neuron.io/allocation-mode": mode, LabKubeletLabel: KubeletSimulated}},
			Spec:   corev1.NodeSpec{ProviderID: providerID},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	}
	big := newPod("big").neuron(4).tolerateNeuron().unschedulable("0/3 nodes are available: 3 Insufficient aws.amazon.com/neuron.")
	running := newPod("runs").node("inf2-a")
	running.Status.Phase = corev1.PodRunning
	client := fake.NewClientset(node("inf2-a", "inf2.48xlarge", ModeDevicePlugin, ""), node("trn2-a", "trn2.48xlarge", ModeDRA, ""),
		node("neuron-inf1-6xlarge-1", "inf1.6xlarge", ModeDevicePlugin, LocalProviderIDPrefix+"neuron-inf1-6xlarge-1"),
		big.obj(), running.obj())
	st, err := ReadStatus(context.Background(), StatusOptions{Dir: dir, Client: client})
	if err != nil {
		t.Fatal(err)
	}
	if !st.Running() {
		t.Fatalf("not running: %+v", st)
	}
	var out strings.Builder
	st.Write(&out)
	for _, want := range []string{
		"a lab runs in " + dir,
		"kubeconfig: " + kubeconfig,
		"nodes (3):",
		"neuron-inf1-6xlarge-1  inf1.6xlarge   device-plugin  simulated kubelet  Ready  (launched by the autoscaler)\n",
		"trn2-a                 trn2.48xlarge  dra",
		"neuron-device-plugin       host processes for inf2-a, neuron-inf1-6xlarge-1",
		"neuron-dra-driver          a host process for trn2-a\n",
		"neuron-scheduler-extender  a host process, with my-scheduler",
		"left out (COMPONENTS, neuron-lab --components): neuron-autoscaler",
		"control plane: etcd, kube-apiserver",
		"pending pods (1), and why each waits:\n  default/big: no node takes it: 0/3 nodes are available: 3 Insufficient aws.amazon.com/neuron.",
		"\n      neuron-autoscaler, which launches nodes for pending pods, is left out",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status:\n%s\nwant it to contain %q", out.String(), want)
		}
	}
	if strings.Contains(out.String(), "default/runs") {
		t.Errorf("status lists a running pod as pending:\n%s", out.String())
	}
}

// TestStopLabSaysWhatItStopped: `neuron-lab down` says what it stopped, or that nothing ran.
func TestStopLabSaysWhatItStopped(t *testing.T) {
	dir := t.TempDir()
	st, err := StopLab(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Nothing() || st.String() != "no lab runs in "+dir+": nothing to stop" {
		t.Errorf("StopLab of an empty directory: %q (nothing: %v)", st, st.Nothing())
	}

	serve := startFakeLab(t, dir, &ReadyInfo{Nodes: []string{"inf2-a", "trn1-a"}, Components: []string{ComponentDevicePlugin, ComponentAutoscaler}})
	recordSleep(t, dir, ComponentDevicePlugin+"-trn1-a")
	adopted := recordSleep(t, dir, ComponentDevicePlugin+"-neuron-inf1-6xlarge-1")
	left := recordSleep(t, dir, "neuron-autoscaler")
	if st, err = StopLab(dir); err != nil {
		t.Fatal(err)
	}
	// The fake lab stops none of its processes: StopLab stops them after it.
	want := "stopped the lab in " + dir + " (pid " + strconv.Itoa(serve.Process.Pid) + "): nodes inf2-a, trn1-a, neuron-inf1-6xlarge-1; components neuron-device-plugin, neuron-autoscaler; the control plane" +
		"\nstopped 3 processes left behind: "
	if st.Nothing() || !strings.HasPrefix(st.String(), want) || !strings.Contains(st.String(), "neuron-autoscaler (pid "+strconv.Itoa(left.PID())+")") ||
		!strings.Contains(st.String(), "neuron-device-plugin-neuron-inf1-6xlarge-1 (pid "+strconv.Itoa(adopted.PID())+")") {
		t.Errorf("StopLab:\n%s\nwant it to start with\n%s", st, want)
	}
	if isLabServe(serve.Process.Pid) {
		t.Errorf("the lab's process still runs")
	}
	if st, _ = StopLab(dir); !st.Nothing() {
		t.Errorf("a second StopLab: %q, want nothing to stop", st)
	}
}

// TestChartSchedulerPodsWithoutASystemNodeFailAtOnce: a values file that gives the extender or
// my-scheduler replicas in a lab without real nodes makes pods no node will take; the chart's
// installation says why at once instead of waiting out its timeout. Other pending pods are
// waited for, and named with their reason when the time is up.
func TestChartSchedulerPodsWithoutASystemNodeFailAtOnce(t *testing.T) {
	const taintMsg = "0/3 nodes are available: 3 node(s) had untolerated taint(s)."
	sched := newPod("k8s-neuron-scheduler-abc").label("app.kubernetes.io/instance", ChartRelease).label("app.kubernetes.io/name", ComponentExtender).unschedulable(taintMsg)
	sched.Namespace = ChartNamespace
	l := &Lab{client: fake.NewClientset(sched.obj()), opts: Options{Components: DefaultComponents()}}
	begin := time.Now()
	err := l.waitForRelease(context.Background(), ChartRelease, time.Minute)
	if err == nil || time.Since(begin) > 10*time.Second {
		t.Fatalf("waitForRelease = %v after %v, want an error at once", err, time.Since(begin))
	}
	for _, want := range []string{"kube-system/k8s-neuron-scheduler-abc is Pending: a pod of the chart's neuron-scheduler-extender Deployment", "0 replicas", "lab-system"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("waitForRelease: %v\nwant %q", err, want)
		}
	}

	other := newPod("neuron-device-plugin-abc").label("app.kubernetes.io/instance", ChartRelease).unschedulable(taintMsg)
	l = &Lab{client: fake.NewClientset(other.obj()), opts: Options{Components: DefaultComponents()}}
	err = l.waitForRelease(context.Background(), ChartRelease, time.Second)
	if want := "default/neuron-device-plugin-abc is Pending: no node takes it: " + taintMsg; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("waitForRelease = %v, want %q", err, want)
	}
}
