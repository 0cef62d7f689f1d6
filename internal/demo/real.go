package demo

import (
	"context"
	"fmt"
	"io"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/lab"
	"github.com/kube-neuron/kube-neuron/internal/lab/standin"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// realnodeOutput is what the stand-in workload of a container on a real node printed.
type realnodeOutput struct {
	env     map[string]string
	devices []string
	raw     string
}

// neuronEnv is the Neuron part of the printed environment.
func (o realnodeOutput) neuronEnv() map[string]string {
	env := map[string]string{}
	for k, v := range o.env {
		if strings.HasPrefix(k, "NEURON_") || strings.HasPrefix(k, "AWS_NEURON_") {
			env[k] = v
		}
	}
	return env
}

// printedOnRealNodes reads, for every container of the pods on the lab's real nodes, what it
// printed (kubectl logs), by "pod/container".
func printedOnRealNodes(ctx context.Context, l *lab.Lab, pods []corev1.Pod) map[string]realnodeOutput {
	out := map[string]realnodeOutput{}
	for _, p := range pods {
		if p.Spec.NodeName == "" || l.RealNode(p.Spec.NodeName) == nil || p.Status.Phase != corev1.PodRunning {
			continue
		}
		for _, c := range p.Spec.Containers {
			raw, err := l.Client().CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: c.Name}).DoRaw(ctx)
			if err != nil {
				continue
			}
			env, devices, ok := standin.Parse(string(raw))
			if ok {
				out[p.Name+"/"+c.Name] = realnodeOutput{env: env, devices: devices, raw: string(raw)}
			}
		}
	}
	return out
}

// realNodeAct shows, for each pod the extender placed on the real node, what the extender
// decided beside what the container printed.
func realNodeAct(ctx context.Context, out io.Writer, l *lab.Lab, pods []corev1.Pod, printed map[string]realnodeOutput) error {
	n, err := l.Client().CoreV1().Nodes().Get(ctx, RealNode, metav1.GetOptions{})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\n== On the real node %s (kubelet %s, %s): each pod's allocation record, and what its container printed\n",
		RealNode, n.Status.NodeInfo.KubeletVersion, n.Status.NodeInfo.ContainerRuntimeVersion)
	shown := 0
	for _, p := range pods {
		rec, err := allocation.RecordOf(&p)
		if err != nil || rec == nil || p.Spec.NodeName != RealNode {
			continue
		}
		for _, c := range rec.Containers {
			got, ok := printed[p.Name+"/"+c.Name]
			if !ok {
				continue
			}
			shown++
			fmt.Fprintf(out, "pod %s, container %s:\n  its allocation record: devices %s, cores %s\n  $ kubectl logs %s -c %s   (NEURON and device lines)\n",
				p.Name, c.Name, topology.FormatList(c.Devices), topology.FormatList(c.Cores), p.Name, c.Name)
			for line := range strings.SplitSeq(strings.TrimSpace(got.raw), "\n") {
				if strings.HasPrefix(line, "NEURON_") || strings.HasPrefix(line, "AWS_NEURON_") || strings.HasPrefix(line, "devices:") {
					fmt.Fprintf(out, "  %s\n", line)
				}
			}
		}
	}
	if shown == 0 {
		fmt.Fprintf(out, "no pod with a record runs on %s\n", RealNode)
	}
	return nil
}
