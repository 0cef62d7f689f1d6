//go:build e2e

package benchutil

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/kube-neuron/kube-neuron/internal/lab"
	"github.com/kube-neuron/kube-neuron/internal/labels"
)

const (
	// Namespace holds every backlog; StartLab creates it.
	Namespace = "bench"
	// RunLabel marks a backlog's pods with the name of the run, which is also the name of the
	// scheduler under test.
	RunLabel = "kube-neuron.io/bench-run"
	// StallTimeout fails a run when no pod was bound for this long.
	StallTimeout = 2 * time.Minute
)

// BacklogPod is pod i of the backlog of scheduler sched: named <sched>-<i, five digits>, in
// Namespace with RunLabel, deleted at once, tolerating the Neuron taint, one container "main"
// without resources (the benchmark adds its request).
func BacklogPod(sched string, i int) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%05d", sched, i), Namespace: Namespace, Labels: map[string]string{RunLabel: sched}},
		Spec: corev1.PodSpec{
			SchedulerName:                 sched,
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Tolerations:                   []corev1.Toleration{{Key: labels.NeuronTaintKey, Operator: corev1.TolerationOpEqual, Value: labels.NeuronTaintValue, Effect: corev1.TaintEffectNoSchedule}},
			Containers:                    []corev1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
}

// CreateBacklog creates pods BacklogPod(sched, 0..n-1), each changed by edit, 8 at a time.
func CreateBacklog(ctx context.Context, client kubernetes.Interface, sched string, n int, edit func(*corev1.Pod)) error {
	return Parallel(n, 8, func(i int) error {
		pod := BacklogPod(sched, i)
		edit(pod)
		_, err := client.CoreV1().Pods(Namespace).Create(ctx, pod, metav1.CreateOptions{})
		return err
	})
}

// RunPods selects the pods of scheduler sched's backlog.
func RunPods(sched string) metav1.ListOptions {
	return metav1.ListOptions{LabelSelector: RunLabel + "=" + sched}
}

// DeletePods deletes the backlog of sched at once (no kubelet finishes a graceful deletion) and
// waits until its pods are gone.
func DeletePods(ctx context.Context, client kubernetes.Interface, sched string) error {
	if err := client.CoreV1().Pods(Namespace).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, RunPods(sched)); err != nil {
		return fmt.Errorf("deleting the pods of %s: %w", sched, err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		l, err := client.CoreV1().Pods(Namespace).List(ctx, RunPods(sched))
		if err == nil && len(l.Items) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			left := -1
			if err == nil {
				left = len(l.Items)
			}
			return fmt.Errorf("the pods of %s are not gone after 2 minutes (%d left, %v)", sched, left, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Rate is a drain rate: pods bound per second between the first and the last binding.
func Rate(pods int, drain time.Duration) float64 {
	if drain <= 0 {
		return 0
	}
	return float64(pods-1) / drain.Seconds()
}

// Binding is when the watch first saw a pod bound, and to which node.
type Binding struct {
	At   time.Time
	Node string
}

// BindWatch timestamps the first time each pod of a backlog is seen bound.
type BindWatch struct {
	want int
	mu   sync.Mutex
	seen map[string]Binding
	done chan struct{}
}

// WatchBindings watches the backlog of scheduler sched, which must hold want pods already.
// The watch runs until ctx ends.
func WatchBindings(ctx context.Context, client kubernetes.Interface, sched string, want int) (*BindWatch, error) {
	w := &BindWatch{want: want, seen: map[string]Binding{}, done: make(chan struct{})}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = RunPods(sched).LabelSelector }))
	inf := factory.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    w.observe,
		UpdateFunc: func(_, obj any) { w.observe(obj) },
	}); err != nil {
		return nil, err
	}
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return nil, fmt.Errorf("the %v cache of the binding watch did not sync", typ)
		}
	}
	if n := len(inf.GetStore().List()); n != want {
		return nil, fmt.Errorf("the backlog has %d pods, want %d", n, want)
	}
	return w, nil
}

func (w *BindWatch) observe(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.Spec.NodeName == "" {
		return
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.seen[pod.Name]; ok {
		return
	}
	w.seen[pod.Name] = Binding{At: now, Node: pod.Spec.NodeName}
	if len(w.seen) == w.want {
		close(w.done)
	}
}

// Wait returns the first and last binding time once every pod is bound; it fails when no pod
// was bound for StallTimeout, with the tail of the scheduler's log schedLog.
func (w *BindWatch) Wait(ctx context.Context, schedLog string) (first, last time.Time, err error) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	progress, count := time.Now(), 0
	for {
		select {
		case <-w.done:
			w.mu.Lock()
			defer w.mu.Unlock()
			for _, b := range w.seen {
				if first.IsZero() || b.At.Before(first) {
					first = b.At
				}
				if b.At.After(last) {
					last = b.At
				}
			}
			return first, last, nil
		case <-ctx.Done():
			return first, last, ctx.Err()
		case <-tick.C:
			w.mu.Lock()
			n := len(w.seen)
			w.mu.Unlock()
			if n != count {
				progress, count = time.Now(), n
			} else if time.Since(progress) > StallTimeout {
				return first, last, fmt.Errorf("only %d of %d pods bound, none for %v; scheduler log %s:\n%s",
					n, w.want, StallTimeout, schedLog, lab.LogTail(schedLog, 30))
			}
		}
	}
}

// Bindings returns every binding seen, by pod name.
func (w *BindWatch) Bindings() map[string]Binding {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]Binding, len(w.seen))
	for k, v := range w.seen {
		out[k] = v
	}
	return out
}
