package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	apiv1 "github.com/kube-neuron/kube-neuron/api/neuron.aws.com/v1"
	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

func neuronNode(name, instanceType, mode string, devices, cores int64) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{labels.InstanceType: instanceType}}}
	if mode != "" {
		n.Labels[labels.AllocationMode] = mode
	}
	if devices > 0 {
		n.Status.Capacity = corev1.ResourceList{
			topology.ResourceNeuron:     *resource.NewQuantity(devices, resource.DecimalSI),
			topology.ResourceNeuronCore: *resource.NewQuantity(cores, resource.DecimalSI),
		}
	}
	return n
}

func recordPod(ns, name string, phase corev1.PodPhase, allocTime string, r allocation.Record) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name), Annotations: r.Annotations()},
		Spec:       corev1.PodSpec{NodeName: r.Node},
		Status:     corev1.PodStatus{Phase: phase},
	}
	if allocTime != "" {
		p.Annotations[allocation.AllocTime] = allocTime
	}
	return p
}

func deviceClaim(ns, name, node, pod string, devices ...string) *resourcev1.ResourceClaim {
	c := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	var results []resourcev1.DeviceRequestAllocationResult
	for _, d := range devices {
		results = append(results, resourcev1.DeviceRequestAllocationResult{Request: "neuron", Driver: DRADriver, Pool: node, Device: d})
	}
	c.Status.Allocation = &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{Results: results}}
	if pod != "" {
		c.Status.ReservedFor = []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: pod, UID: types.UID("uid-" + pod)}}
	}
	return c
}

// cluster is a trn1.32xlarge device-plugin node with two pods (4 devices 0-3; 2 cores 8-9) and a
// terminated one, a trn2.48xlarge DRA node at LNC 2 with a claim on neurondevice4..7, and a
// node that is not a Neuron node.
func cluster() []runtime.Object {
	return []runtime.Object{
		neuronNode("trn1-a", "trn1.32xlarge", labels.AllocationModeDevicePlugin, 16, 32),
		neuronNode("trn2-a", "trn2.48xlarge", labels.AllocationModeDRA, 16, 64),
		neuronNode("cpu-a", "m5.large", "", 0, 0),
		recordPod("default", "train", corev1.PodRunning, "1", allocation.Record{Node: "trn1-a", Containers: []allocation.Container{
			{Name: "main", Resource: topology.ResourceNeuron, Devices: []int{0, 1, 2, 3}, Cores: ids(0, 7), Served: true}}}),
		recordPod("ml", "infer", corev1.PodPending, "2", allocation.Record{Node: "trn1-a", Containers: []allocation.Container{
			{Name: "c", Resource: topology.ResourceNeuronCore, Devices: []int{4}, Cores: []int{8, 9}}}}),
		recordPod("default", "done", corev1.PodSucceeded, "0", allocation.Record{Node: "trn1-a", Containers: []allocation.Container{
			{Name: "main", Resource: topology.ResourceNeuron, Devices: []int{10, 11}, Cores: ids(20, 23), Served: true}}}),
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "plain"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}},
		deviceClaim("ml", "big", "trn2-a", "trainer", "neurondevice4", "neurondevice5", "neurondevice6", "neurondevice7"),
		&resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "pending"}},
	}
}

func runNodesOn(t *testing.T, objects []runtime.Object, no nodesOptions) (stdout, stderr string, err error) {
	t.Helper()
	return runNodesWith(t, fake.NewClientset(objects...), no)
}

func runNodesWith(t *testing.T, client *fake.Clientset, no nodesOptions) (stdout, stderr string, err error) {
	t.Helper()
	if no.output == "" {
		no.output = "table"
	}
	var out, errOut bytes.Buffer
	err = runNodes(context.Background(), client, topology.DefaultCatalog(), &no, &out, &errOut)
	for _, line := range strings.Split(out.String()+errOut.String(), "\n") {
		if strings.TrimRight(line, " \t") != line {
			t.Errorf("line with trailing spaces: %q", line)
		}
	}
	return out.String(), errOut.String(), err
}

func exitCode(err error) int {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return -1
}

func TestNodesTable(t *testing.T) {
	stdout, stderr, err := runNodesOn(t, cluster(), nodesOptions{})
	if err != nil || stderr != "" {
		t.Fatalf("err %v, stderr %q", err, stderr)
	}
	for _, want := range []string{
		"NAME    INSTANCE TYPE  MODE           LNC  DEVICES  CORES\n",
		"trn1-a  trn1.32xlarge  device-plugin  1    5/16     10/32\n",
		"trn2-a  trn2.48xlarge  dra            2    4/16     16/64\n",
		"node trn1-a (device-plugin)\ntrn1.32xlarge: 16 devices, 4x4 2D torus, 2 cores per device (LNC 1)\n",
		" 0[aa]-- 1[aa]-- 2[aa]-- 3[aa]--(row wraps)\n",
		" 4[bb]-- 5[..]-- 6[..]-- 7[..]--(row wraps)\n",
		"10[..]--11[..]",
		"  a = default/train (container main, 4 devices: 0-3)\n  b = ml/infer (container c, 2 cores: 8,9)\n",
		"  free devices: 5-15; free cores: 22 of 32\n",
		"node trn2-a (dra)\ntrn2.48xlarge: 16 devices, 4x4 2D torus, 4 cores per device (LNC 2)\n",
		" 4[aaaa]-- 5[aaaa]-- 6[aaaa]-- 7[aaaa]--(row wraps)\n",
		"  a = ml/trainer (claim big, 4 devices: 4-7)\n",
		"a-z, A-Z core held by the pod of that letter",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	if strings.Contains(stdout, "cpu-a") {
		t.Errorf("a node that is not a Neuron node is listed:\n%s", stdout)
	}
	if strings.Contains(stdout, "done") {
		t.Errorf("a terminated pod is listed:\n%s", stdout)
	}
}

func TestNodesWideAndNoMap(t *testing.T) {
	stdout, _, err := runNodesOn(t, cluster(), nodesOptions{output: "wide", noMap: true, node: "trn1-a"})
	if err != nil {
		t.Fatal(err)
	}
	want := "NAME    INSTANCE TYPE  MODE           LNC  DEVICES  CORES  USED DEVICES  USED CORES  HOLDERS\n" +
		"trn1-a  trn1.32xlarge  device-plugin  1    5/16     10/32  0-4           0-9         2\n"
	if stdout != want {
		t.Errorf("got:\n%s\nwant:\n%s", stdout, want)
	}
}

func TestNodesJSON(t *testing.T) {
	stdout, stderr, err := runNodesOn(t, cluster(), nodesOptions{output: "json"})
	if err != nil || stderr != "" {
		t.Fatalf("err %v, stderr %q", err, stderr)
	}
	if strings.Contains(stdout, "null") {
		t.Errorf("null in the JSON:\n%s", stdout)
	}
	var got []NodeReport
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatal(err)
	}
	want := []NodeReport{
		{Name: "trn1-a", InstanceType: "trn1.32xlarge", Mode: "device-plugin", LNC: 1,
			Devices: IDUsage{Total: 16, Used: ids(0, 4), Free: ids(5, 15)},
			Cores:   IDUsage{Total: 32, Used: ids(0, 9), Free: ids(10, 31)},
			Holders: []NodeHolder{
				{Pod: "train", Namespace: "default", Container: "main", Resource: topology.ResourceNeuron, Devices: ids(0, 3), Cores: ids(0, 7)},
				{Pod: "infer", Namespace: "ml", Container: "c", Resource: topology.ResourceNeuronCore, Devices: []int{4}, Cores: []int{8, 9}},
			}},
		{Name: "trn2-a", InstanceType: "trn2.48xlarge", Mode: "dra", LNC: 2,
			Devices: IDUsage{Total: 16, Used: ids(4, 7), Free: append(ids(0, 3), ids(8, 15)...)},
			Cores:   IDUsage{Total: 64, Used: ids(16, 31), Free: append(ids(0, 15), ids(32, 63)...)},
			Holders: []NodeHolder{
				{Pod: "trainer", Namespace: "ml", Container: "", Resource: DRADriver, Claim: "big", Devices: ids(4, 7), Cores: ids(16, 31)},
			}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	again, _ := json.MarshalIndent(got, "", "  ")
	if string(again)+"\n" != stdout {
		t.Errorf("does not round-trip:\n%s\n%s", again, stdout)
	}

	// An idle node: empty lists, never null.
	stdout, _, err = runNodesOn(t, []runtime.Object{neuronNode("inf2-a", "inf2.48xlarge", "", 12, 24)}, nodesOptions{output: "json"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stdout, "null") || !strings.Contains(stdout, `"holders": []`) || !strings.Contains(stdout, `"used": []`) {
		t.Errorf("idle node:\n%s", stdout)
	}
}

func TestNodesOverlapWarns(t *testing.T) {
	objects := append(cluster(),
		recordPod("default", "late", corev1.PodRunning, "9", allocation.Record{Node: "trn1-a", Containers: []allocation.Container{
			{Name: "x", Resource: topology.ResourceNeuron, Devices: []int{2, 3}, Cores: ids(4, 7)}}}),
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "broken", Annotations: map[string]string{allocation.Annotation: "{"}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning}},
		deviceClaim("ml", "clash", "trn2-a", "", "neurondevice7", "neurondevice8"),
		deviceClaim("ml", "odd", "trn2-a", "", "core3"),
		deviceClaim("ml", "other-driver", "trn2-a", "", "neurondevice0"),
	)
	// other-driver is not ours.
	objects[len(objects)-1].(*resourcev1.ResourceClaim).Status.Allocation.Devices.Results[0].Driver = "gpu.example.com"
	stdout, stderr, err := runNodesOn(t, objects, nodesOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"warning: node trn1-a: pod default/late container x: devices 2,3 are already in use, wholly or partly: not counted\n",
		"warning: pod default/broken: annotation kube-neuron.io/allocation is not a valid allocation record",
		"warning: node trn2-a: ResourceClaim ml/clash: devices 7 are already in use, wholly or partly: not counted\n",
		`warning: ResourceClaim ml/odd: device "core3" of node trn2-a is neither neurondeviceN nor neuronnode: not counted`,
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if strings.Count(stderr, "\n") != 4 {
		t.Errorf("want 4 warnings:\n%s", stderr)
	}
	if !strings.Contains(stdout, "trn1-a  trn1.32xlarge  device-plugin  1    5/16     10/32\n") ||
		!strings.Contains(stdout, "trn2-a  trn2.48xlarge  dra            2    4/16     16/64\n") {
		t.Errorf("the overlapping records must not count:\n%s", stdout)
	}
}

func TestNodesErrors(t *testing.T) {
	_, _, err := runNodesOn(t, cluster(), nodesOptions{node: "missing"})
	if exitCode(err) != ExitNoNodes || !strings.Contains(err.Error(), `node "missing" not found`) {
		t.Errorf("--node missing: %v (exit %d)", err, exitCode(err))
	}
	_, _, err = runNodesOn(t, cluster(), nodesOptions{node: "cpu-a"})
	if exitCode(err) != ExitNoNodes || !strings.Contains(err.Error(), "node cpu-a is not a Neuron node") {
		t.Errorf("--node cpu-a: %v", err)
	}
	_, _, err = runNodesOn(t, []runtime.Object{neuronNode("cpu-a", "m5.large", "", 0, 0)}, nodesOptions{})
	if exitCode(err) != ExitNoNodes || !strings.Contains(err.Error(), "the cluster has no Neuron node") {
		t.Errorf("no Neuron node: %v", err)
	}

	client := fake.NewClientset(cluster()...)
	client.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New("no"))
	})
	_, _, err = runNodesWith(t, client, nodesOptions{})
	if exitCode(err) != ExitCluster || !strings.Contains(err.Error(), "cannot list pods in all namespaces") || !strings.Contains(err.Error(), "permission") {
		t.Errorf("forbidden: %v", err)
	}
}

func TestNodesDRANotServed(t *testing.T) {
	client := fake.NewClientset(cluster()...)
	client.PrependReactor("list", "resourceclaims", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewNotFound(schema.GroupResource{Group: "resource.k8s.io", Resource: "resourceclaims"}, "")
	})
	stdout, stderr, err := runNodesWith(t, client, nodesOptions{noMap: true})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr, "does not serve resource.k8s.io/v1") {
		t.Errorf("stderr %q", stderr)
	}
	if !strings.Contains(stdout, "trn2-a  trn2.48xlarge  dra            2    0/16     0/64\n") {
		t.Errorf("stdout:\n%s", stdout)
	}
}

func TestDrawTopologyWithHolders(t *testing.T) {
	s, err := topology.NewShape(mustType(t, "inf2.48xlarge"), 0)
	if err != nil {
		t.Fatal(err)
	}
	u := topology.NewUsage(s)
	if err := u.MarkDevices([]int{11}); err != nil {
		t.Fatal(err)
	}
	if err := u.MarkCores([]int{1}); err != nil {
		t.Fatal(err)
	}
	got := DrawTopologyWithHolders(u, map[int]rune{22: 'a', 23: 'a'})
	if !strings.Contains(got, " 0[.#]--") || !strings.Contains(got, "11[aa]--(back to 0)") {
		t.Errorf("map:\n%s", got)
	}
	if DrawTopologyWithHolders(u, nil) != DrawTopology(u, topology.Allocation{}) {
		t.Error("without holders it must be DrawTopology")
	}
}

func mustType(t *testing.T, name string) topology.InstanceType {
	t.Helper()
	it, err := topology.DefaultCatalog().Get(name)
	if err != nil {
		t.Fatal(err)
	}
	return it
}

func TestNodesCommandFlags(t *testing.T) {
	dir := t.TempDir()
	unreachable := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(unreachable, []byte(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:1"}
users:
- name: u
  user: {token: t}
contexts:
- name: ctx
  context: {cluster: c, user: u}
current-context: ctx
`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", unreachable)
	for _, tc := range []struct {
		name     string
		args     []string
		wantCode int
		want     string
	}{
		{"bad output", []string{"nodes", "-o", "xml"}, ExitUsage, `output format "xml" is not supported`},
		{"names and a selector", []string{"nodes", "x", "-l", "a=b"}, ExitUsage, "name nodes or give a selector (-l), not both"},
		{"bad selector", []string{"nodes", "-l", "a in (b"}, ExitUsage, `-l "a in (b": `},
		{"a name", []string{"nodes", "x"}, ExitCluster, "cannot get node x: "},
		{"missing kubeconfig", []string{"nodes", "--kubeconfig", filepath.Join(dir, "nope")}, ExitUsage, "--kubeconfig: stat"},
		{"missing context", []string{"nodes", "--context", "nope"}, ExitUsage, `--context "nope": the kubeconfig has no such context`},
		{"unreachable via $KUBECONFIG", []string{"nodes"}, ExitCluster, "cannot list nodes: "},
		{"unreachable via --kubeconfig", []string{"nodes", "--kubeconfig", unreachable, "--context", "ctx", "--node", "n"}, ExitCluster, "cannot get node n: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := run(t, tc.args...)
			if code != tc.wantCode || !strings.Contains(stderr, tc.want) || stdout != "" {
				t.Errorf("exit %d (want %d), stdout %q, stderr %q (want %q)", code, tc.wantCode, stdout, stderr, tc.want)
			}
		})
	}
}

func TestNodesUltraServerNodeDevice(t *testing.T) {
	objs := []runtime.Object{
		neuronNode("us-0", "trn2u.48xlarge", labels.AllocationModeDRA, 16, 64),
		deviceClaim("ml", "whole", "us-0", "vllm-0", apiv1.NodeDeviceName),
	}
	stdout, stderr, err := runNodesOn(t, objs, nodesOptions{output: "json"})
	if err != nil || stderr != "" {
		t.Fatalf("err %v, stderr %q", err, stderr)
	}
	var got []NodeReport
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !reflect.DeepEqual(got[0].Devices.Used, ids(0, 15)) || len(got[0].Holders) != 1 || got[0].Holders[0].Claim != "whole" {
		t.Errorf("the node device holds every device of the node: %+v", got)
	}
}
