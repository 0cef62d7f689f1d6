package demo

import (
	"fmt"
	"io"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-neuron/kube-neuron/internal/cli"
	"github.com/kube-neuron/kube-neuron/internal/lab"
)

// maxExplained bounds how many pending pods the demo explains.
const maxExplained = 2

// topAct shows kubectl-neuron top: the node agents' metrics, read through the API server's pod
// proxy. Only the real node's agents run as pods; the simulated nodes' agents are host
// processes, which top does not see.
func topAct(out io.Writer, l *lab.Lab) {
	for _, args := range [][]string{{"top", "pods", "-A"}, {"top", "nodes"}} {
		fmt.Fprintf(out, "\n== $ kubectl-neuron %s   (the real node's agents' metrics, through the pod proxy; the lab makes held cores look busy)\n", strings.Join(args, " "))
		runCLI(out, l, args)
	}
}

// explainAct runs kubectl-neuron explain on the first pods the scheduler could not place.
func explainAct(out io.Writer, l *lab.Lab, pods []corev1.Pod) {
	n := 0
	for _, p := range pods {
		if p.Status.Phase != corev1.PodPending || !unschedulable(p) || n == maxExplained {
			continue
		}
		n++
		fmt.Fprintf(out, "\n== $ kubectl-neuron explain pod %s -n %s\n", p.Name, p.Namespace)
		runCLI(out, l, []string{"explain", "pod", p.Name, "-n", p.Namespace})
	}
}

// runCLI runs kubectl-neuron against the lab and says so when it fails: the demo goes on.
func runCLI(out io.Writer, l *lab.Lab, args []string) {
	var stderr strings.Builder
	if code := cli.Main(append(args, "--kubeconfig", l.Kubeconfig()), out, &stderr); code != 0 {
		fmt.Fprintf(out, "kubectl-neuron %s failed (exit %d): %s\n", args[0], code, stderr.String())
	} else if stderr.Len() > 0 {
		fmt.Fprint(out, stderr.String())
	}
}
