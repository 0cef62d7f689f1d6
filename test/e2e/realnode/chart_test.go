//go:build e2e

package realnode

import (
	"context"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-neuron/kube-neuron/internal/lab"
	"github.com/kube-neuron/kube-neuron/test/e2e/framework"
)

// TestRealNodes: the fleet's real nodes are Ready with the pinned kubelet and containerd; the
// simulated one beside them stays the simulator's.
func TestRealNodes(t *testing.T) {
	ctx := framework.Context(t)
	nodes, err := framework.L.Client().CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, n := range nodes.Items {
		seen[n.Name] = true
		info := n.Status.NodeInfo
		switch n.Labels[lab.LabKubeletLabel] {
		case lab.KubeletReal:
			if info.KubeletVersion != "v1.36.3" || !strings.HasPrefix(info.ContainerRuntimeVersion, "containerd://2.") {
				t.Errorf("real node %s runs kubelet %s and %s, want v1.36.3 and containerd 2", n.Name, info.KubeletVersion, info.ContainerRuntimeVersion)
			}
		case lab.KubeletSimulated:
			if n.Name != simNode {
				t.Errorf("node %s is simulated", n.Name)
			}
		default:
			t.Errorf("node %s has no %s label", n.Name, lab.LabKubeletLabel)
		}
	}
	for _, name := range []string{inf2Node, trn1Node, trn2Node, simNode, lab.SystemNodeName} {
		if !seen[name] {
			t.Errorf("node %s is missing", name)
		}
	}
	if n := len(framework.L.RealNodes()); n < 4 {
		t.Errorf("%d real nodes, want at least 4 at once", n)
	}
}

// TestChartRunsOnRealNodes: helm installed the chart; its DaemonSets run on the real Neuron
// nodes of their mode, and only there (not on the simulated node, nor the system node); the
// extender and my-scheduler run on the system node; every component under its own
// ServiceAccount. The device plugin's first real run failed here: `make mountpoint
// "/dev/termination-log": read-only file system` (the chart mounted the host's /dev at /dev).
func TestChartRunsOnRealNodes(t *testing.T) {
	ctx := framework.Context(t)
	pods, err := framework.L.Client().CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + lab.ChartRelease})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{ // service account -> the nodes its pods run on
		"neuron-device-plugin": {inf2Node, trn1Node},
		"neuron-dra-driver-sa": {trn2Node},
		"k8s-neuron-scheduler": {lab.SystemNodeName},
		"my-scheduler":         {lab.SystemNodeName},
	}
	got := map[string][]string{}
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodRunning || !ready(&p) {
			t.Errorf("pod %s/%s on %s is not running and ready: %s", p.Namespace, p.Name, p.Spec.NodeName, framework.DescribePod(ctx, &p))
		}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.RestartCount != 0 {
				t.Errorf("pod %s/%s container %s restarted %d times", p.Namespace, p.Name, cs.Name, cs.RestartCount)
			}
		}
		got[p.Spec.ServiceAccountName] = append(got[p.Spec.ServiceAccountName], p.Spec.NodeName)
	}
	for sa, nodes := range want {
		g := slices.Sorted(slices.Values(got[sa]))
		if !slices.Equal(g, nodes) {
			t.Errorf("pods of ServiceAccount %s run on %v, want %v", sa, g, nodes)
		}
	}
	// The helm release is there for helm list, upgrade and uninstall.
	helm, err := framework.HelmPath()
	if err != nil {
		t.Fatal(err)
	}
	out, err := framework.L.Helm(ctx, helm, "list", "--namespace", lab.ChartNamespace, "--output", "json")
	if err != nil || !strings.Contains(out, `"name":"kube-neuron"`) || !strings.Contains(out, `"status":"deployed"`) {
		t.Errorf("helm list: %v\n%s", err, out)
	}
}

// TestClusterDNSAndServices: the lab's CoreDNS answers for the cluster's Services and for nothing
// outside the cluster (it has no upstream, so no query reaches the host's resolver), and
// my-scheduler, a pod on a real node, reaches the extender by its Service's name through
// CoreDNS and kube-proxy.
func TestClusterDNSAndServices(t *testing.T) {
	ctx := framework.Context(t)
	dns, err := framework.L.Client().CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
	if err != nil || len(dns.Items) != 1 || dns.Items[0].Status.PodIP == "" {
		t.Fatalf("CoreDNS pods: %v %+v", err, dns)
	}
	network := framework.L.ControlPlane().Network()
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return network.Dial(ctx, "udp", net.JoinHostPort(dns.Items[0].Status.PodIP, "53"))
	}}
	addrs, err := r.LookupHost(ctx, "k8s-neuron-scheduler.kube-system.svc.cluster.local")
	svc, serr := framework.L.Client().CoreV1().Services("kube-system").Get(ctx, "k8s-neuron-scheduler", metav1.GetOptions{})
	if err != nil || serr != nil || !slices.Equal(addrs, []string{svc.Spec.ClusterIP}) {
		t.Errorf("k8s-neuron-scheduler.kube-system.svc.cluster.local = %v, %v; want the Service's %v (%v)", addrs, err, svc.Spec.ClusterIP, serr)
	}
	if addrs, err := r.LookupHost(ctx, "example.com"); err == nil {
		t.Errorf("example.com resolved to %v: the lab's DNS must not answer for names outside the cluster", addrs)
	}

	ns := newNamespace(t, ctx)
	framework.Apply(t, ctx, "examples/extender/trn1-four-devices.yaml", ns)
	pod := framework.WaitForPod(t, ctx, ns, "trn1-four-devices", corev1.PodRunning, 90*time.Second)
	if pod.Spec.SchedulerName != "my-scheduler" || pod.Spec.NodeName != trn1Node {
		t.Errorf("pod placed by %s on %s, want my-scheduler on %s", pod.Spec.SchedulerName, pod.Spec.NodeName, trn1Node)
	}
	deletePod(t, ctx, ns, pod.Name)
}
