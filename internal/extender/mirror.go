package extender

import (
	"context"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	klabels "github.com/kube-neuron/kube-neuron/internal/labels"
)

// Node annotations the published Neuron scheduler extension keeps, mirrored for people and
// tools that look for them. kube-neuron never reads them: usage always comes from pods.
const (
	DevUsageMapAnnotation  = allocation.DevUsageMap
	CoreUsageMapAnnotation = allocation.CoreUsageMap
)

// usageMap writes one boolean per id, comma separated, true for in use.
func usageMap(n int, used func(int) bool) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = "false"
		if used(i) {
			parts[i] = "true"
		}
	}
	return strings.Join(parts, ",")
}

// MirrorUsage writes NEURON_DEV_USAGE_MAP and NEURON_CORE_USAGE_MAP on every device-plugin Neuron
// node whose maps changed, every interval until ctx ends.
func (e *Extender) MirrorUsage(ctx context.Context, interval time.Duration) {
	logger := klog.FromContext(ctx)
	<-e.synced
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		nodes, _ := e.nodes.List(labels.Everything())
		for _, node := range nodes {
			if node.Labels[klabels.AllocationMode] == klabels.AllocationModeDRA || !allocation.IsNeuronNode(e.o.Catalog, node) {
				continue
			}
			if err := e.mirrorNode(ctx, node); err != nil {
				logger.V(2).Info("Mirroring the usage maps failed", "node", node.Name, "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (e *Extender) mirrorNode(ctx context.Context, node *corev1.Node) error {
	shape, err := allocation.ShapeOfNode(e.o.Catalog, node)
	if err != nil {
		return err
	}
	u, err := e.scores.nodeUsage(ctx, shape, node.Name, "")
	if err != nil {
		return nil // records are being corrected: mirror them once they settle
	}
	devs := usageMap(shape.Devices(), func(d int) bool { return !u.DeviceFree(d) })
	cores := usageMap(shape.Cores(), func(c int) bool { return !u.CoreFree(c) })
	// The digest marks the maps as written by kube-neuron, so that uninstalling (kubectl-neuron
	// cleanup) removes them and only them.
	digest := allocation.UsageMapsDigest(devs, cores)
	if node.Annotations[DevUsageMapAnnotation] == devs && node.Annotations[CoreUsageMapAnnotation] == cores && node.Annotations[allocation.UsageMapsMirror] == digest {
		return nil
	}
	patch := allocation.MergePatch(map[string]*string{DevUsageMapAnnotation: &devs, CoreUsageMapAnnotation: &cores, allocation.UsageMapsMirror: &digest})
	_, err = e.o.Client.CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, patch, metavOptions())
	return err
}

func metavOptions() metav1.PatchOptions {
	return metav1.PatchOptions{FieldManager: "neuron-scheduler-extender"}
}
