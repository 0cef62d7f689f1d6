package deviceplugin

import (
	"context"
	"fmt"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/deviceplugin/ledger"
)

// writeFix sets one container entry of a pod's record, with a merge patch of the annotation
// keys that carries the pod's resourceVersion, so that a concurrent writer is never overwritten.
// The caller holds p.mu.
func (p *Plugin) writeFix(ctx context.Context, f ledger.Fix) error {
	pods := p.o.Client.CoreV1().Pods(f.Pod.Namespace)
	for attempt := 0; attempt < 5; attempt++ {
		pod, err := pods.Get(ctx, f.Pod.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if pod.UID != f.Key.UID {
			return nil
		}
		r, err := allocation.RecordOf(pod)
		if err != nil {
			return err
		}
		next, changed, err := ledger.ApplyFix(r, p.o.NodeName, f)
		if err != nil {
			return err
		}
		if !changed {
			p.ledger.Wrote(f, time.Now())
			return nil
		}
		anns := allocation.StringPtrs(next.Annotations())
		if _, ok := pod.Annotations[allocation.AllocTime]; !ok {
			now := strconv.FormatInt(time.Now().UnixNano(), 10)
			anns[allocation.AllocTime] = &now
		}
		patch := allocation.MergePatchWithVersion(anns, pod.ResourceVersion)
		_, err = pods.Patch(ctx, f.Pod.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "neuron-device-plugin"})
		if apierrors.IsConflict(err) {
			continue
		}
		if err == nil {
			klog.FromContext(ctx).V(2).Info("Allocation record updated", "pod", f.Pod, "container", f.Key.Container, "devices", f.Hardware.Devices, "cores", f.Hardware.Cores, "served", f.Served)
			p.ledger.Landed(f)
			p.ledger.Wrote(f, time.Now())
		}
		return err
	}
	return fmt.Errorf("pod %s changed five times while its allocation record was being updated", f.Pod)
}
