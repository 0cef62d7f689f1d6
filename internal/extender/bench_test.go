package extender

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
	"k8s.io/utils/ptr"

	"github.com/go-logr/logr"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/testkit"
)

var benchSizes = []int{1000, 5000}

// benchFleet returns n nodes, trn1.32xlarge and inf2.48xlarge alternating, half of each type
// partly used (devices 0-3 held by a pod with a record), and the names of the nodes. free[i]
// is how many 4-device pods node i still takes: 4 on an empty trn1 (four free aligned blocks),
// 3 on a partly used trn1 or an empty inf2, 2 on a partly used inf2 (devices 4-11 of the ring).
func benchFleet(n int) (objs []runtime.Object, names []string, free []int) {
	for i := range n {
		name := fmt.Sprintf("node-%05d", i)
		names = append(names, name)
		typ, slots := trn1, 4
		if i%2 == 1 {
			typ, slots = inf2, 3
		}
		objs = append(objs, testkit.MakeNode().Name(name).InstanceType(typ).Obj())
		if (i/2)%2 == 0 {
			objs = append(objs, testkit.MakePod().Name("holder-"+name).Neuron(4).Record(recordOn(name, 0, 1, 2, 3)).AllocTime(1).Obj())
			slots--
		}
		free = append(free, slots)
	}
	return objs, names, free
}

// BenchmarkFilter places a 4-device pod on every node. cache=cold empties the placement cache
// before each call (every node is planned: the first pod of a shape, or every node changed);
// cache=warm is the backlog case, the same shape again with nothing changed since.
func BenchmarkFilter(b *testing.B) {
	for _, n := range benchSizes {
		for _, warm := range []bool{false, true} {
			name := fmt.Sprintf("nodes=%d/cache=cold", n)
			if warm {
				name = fmt.Sprintf("nodes=%d/cache=warm", n)
			}
			b.Run(name, func(b *testing.B) {
				objs, names, _ := benchFleet(n)
				e, _, ctx := startQuietExtender(b, true, objs...)
				pod := testkit.MakePod().Name("p").Neuron(4).Obj()
				if passed, failed, unresolvable := e.Filter(ctx, pod, names); len(passed) != n {
					b.Fatalf("%d of %d nodes passed (failed %d, unresolvable %d)", len(passed), n, len(failed), len(unresolvable))
				}
				b.ReportAllocs()
				for b.Loop() {
					if !warm {
						e.scores.placements.reset()
					}
					e.Filter(ctx, pod, names)
				}
				b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "nodes/s")
			})
		}
	}
}

func BenchmarkPrioritize(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			objs, names, _ := benchFleet(n)
			e, _, ctx := startQuietExtender(b, true, objs...)
			pod := testkit.MakePod().Name("p").Neuron(4).Obj()
			if scores := e.Prioritize(ctx, pod, names); scores[0] <= scores[2] {
				b.Fatalf("the partly used %s scores %d, the empty %s %d", names[0], scores[0], names[2], scores[2])
			}
			b.ReportAllocs()
			for b.Loop() {
				e.Prioritize(ctx, pod, names)
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "nodes/s")
		})
	}
}

// BenchmarkBind binds b.N fresh 4-device pods, each to the next node with free devices. The pods
// exist before the extender starts (creating them while it watches would flood the fake
// clientset's 100-event watch buffer). Every 32 binds, with the timer stopped, the benchmark
// lets the pod informer catch up for the same reason; when the fleet is full it deletes the
// pods it bound, also with the timer stopped.
func BenchmarkBind(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) { benchBind(b, n, fake.NewClientset) })
	}
}

// BenchmarkBindSimpleClientset is BenchmarkBind on the fake clientset without field
// management: NewClientset's tracker builds a REST mapper on every write, which is most of
// BenchmarkBind's time; this one shows the extender's own cost better.
func BenchmarkBindSimpleClientset(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			// The older fake has no field management, so the extender's own cost shows.
			benchBind(b, n, fake.NewSimpleClientset)
		})
	}
}

func benchBind(b *testing.B, n int, newClient func(...runtime.Object) *fake.Clientset) {
	objs, names, free := benchFleet(n)
	pods := make([]*corev1.Pod, b.N)
	for i := range pods {
		pods[i] = testkit.MakePod().Name(fmt.Sprintf("bench-%d", i)).Neuron(4).Obj()
		objs = append(objs, pods[i])
	}
	e, client, ctx := startExtenderWith(b, klog.NewContext(context.Background(), logr.Discard()), newClient(objs...), true)
	left := append([]int(nil), free...)
	node := 0
	var bound []*corev1.Pod

	// catchUp waits until the informer has seen the last write of the benchmark.
	catchUp := func(last *corev1.Pod, deleted bool) {
		waitEvery(b, 100*time.Microsecond, 30*time.Second, "the informer to see pod "+last.Name, func() bool {
			obj, ok, _ := e.pods.GetStore().GetByKey(last.Namespace + "/" + last.Name)
			if deleted || !ok {
				return deleted && !ok
			}
			r, _ := allocation.RecordOf(obj.(*corev1.Pod))
			return r != nil
		})
	}
	recycle := func() {
		for i, p := range bound {
			if err := client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
				b.Fatal(err)
			}
			if i%32 == 31 || i == len(bound)-1 {
				catchUp(p, true)
			}
		}
		bound = bound[:0]
		copy(left, free)
	}

	b.ReportAllocs()
	b.ResetTimer()
	for i, p := range pods {
		for tries := 0; left[node] == 0; tries++ {
			node = (node + 1) % n
			if tries == n {
				b.StopTimer()
				recycle()
				b.StartTimer()
			}
		}
		if err := e.Bind(ctx, p.Namespace, p.Name, p.UID, names[node]); err != nil {
			b.Fatalf("bind %d to %s: %v", i, names[node], err)
		}
		left[node]--
		bound = append(bound, p)
		node = (node + 1) % n
		if i%32 == 31 {
			b.StopTimer()
			catchUp(p, false)
			client.ClearActions() // the fake clientset records every call
			b.StartTimer()
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "binds/s")
}

// BenchmarkSchedulingCycle is what a scheduling cycle asks of the extender, per pod of a
// backlog: filter with 250 candidate nodes, then prioritize with the nodes filter passed, for a
// new pod each time (as the scheduler sends it, the placement cache warm). decode-only is the
// do-nothing extender's share: both requests decoded with encoding/json, the names echoed.
func BenchmarkSchedulingCycle(b *testing.B) {
	objs, names, _ := benchFleet(250)
	e, _, ctx := startQuietExtender(b, true, objs...)
	const pods = 64
	bodies := make([][]byte, pods)
	for i := range bodies {
		pod := schedulerPod()
		pod.Name, pod.UID = fmt.Sprintf("bench-%05d", i), types.UID(fmt.Sprintf("5f0c6a4e-3a52-4d2f-9a53-8f1e2d3c%04d", i))
		bodies[i] = mustJSON(b, &extenderv1.ExtenderArgs{Pod: pod, NodeNames: &names})
	}
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var args extenderv1.ExtenderArgs
		if err := json.NewDecoder(r.Body).Decode(&args); err != nil {
			b.Fatal(err)
		}
		if r.URL.Path == "/filter" {
			_ = json.NewEncoder(w).Encode(&extenderv1.ExtenderFilterResult{NodeNames: args.NodeNames})
			return
		}
		_ = json.NewEncoder(w).Encode(&extenderv1.HostPriorityList{})
	})
	for _, tc := range []struct {
		name string
		h    http.Handler
	}{
		{"handler=decode-only", echo},
		{"handler=ours", e.Handler(ctx)},
	} {
		serve := func(path string, body []byte) []byte {
			w := httptest.NewRecorder()
			tc.h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body)))
			if w.Code != http.StatusOK {
				b.Fatalf("%s: %d %s", path, w.Code, w.Body)
			}
			return w.Body.Bytes()
		}
		// Prioritize is sent the nodes filter passed.
		prio := make([][]byte, pods)
		for i, body := range bodies {
			var res extenderv1.ExtenderFilterResult
			var args extenderv1.ExtenderArgs
			if err := json.Unmarshal(serve("/filter", body), &res); err != nil || res.NodeNames == nil {
				b.Fatalf("filter answered %v, %v", res, err)
			}
			if err := json.Unmarshal(body, &args); err != nil {
				b.Fatal(err)
			}
			args.NodeNames = res.NodeNames
			prio[i] = mustJSON(b, &args)
		}
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				serve("/filter", bodies[i%pods])
				serve("/prioritize", prio[i%pods])
				i++
			}
		})
	}
}

// schedulerPod is a one-core pod as the kube-scheduler sends it: defaulted by the API server,
// with the service account volume and the default tolerations.
func schedulerPod() *corev1.Pod {
	pod := testkit.MakePod().Name("bench-00042").NeuronCores(1).Obj()
	pod.UID, pod.ResourceVersion, pod.CreationTimestamp = "5f0c6a4e-3a52-4d2f-9a53-8f1e2d3c4b5a", "123456", metav1.Now()
	pod.Labels = map[string]string{"kube-neuron.io/bench-run": "ours"}
	pod.Spec.SchedulerName, pod.Spec.RestartPolicy, pod.Spec.DNSPolicy = "my-scheduler", corev1.RestartPolicyAlways, corev1.DNSClusterFirst
	pod.Spec.ServiceAccountName, pod.Spec.TerminationGracePeriodSeconds = "default", ptr.To[int64](30)
	pod.Spec.SecurityContext, pod.Spec.EnableServiceLinks, pod.Spec.Priority = &corev1.PodSecurityContext{}, ptr.To(true), ptr.To[int32](0)
	pod.Spec.PreemptionPolicy = ptr.To(corev1.PreemptLowerPriority)
	pod.Spec.Tolerations = []corev1.Toleration{
		{Key: "aws.amazon.com/neuron", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
		{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
	}
	pod.Spec.Volumes = []corev1.Volume{{Name: "kube-api-access-abcde", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		DefaultMode: ptr.To[int32](420),
		Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](3607)}},
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}, Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
		},
	}}}}
	c := &pod.Spec.Containers[0]
	c.Image, c.ImagePullPolicy, c.TerminationMessagePath, c.TerminationMessagePolicy = "registry.k8s.io/pause:3.10", corev1.PullIfNotPresent, "/dev/termination-log", corev1.TerminationMessageReadFile
	c.VolumeMounts = []corev1.VolumeMount{{Name: "kube-api-access-abcde", ReadOnly: true, MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"}}
	pod.Status = corev1.PodStatus{Phase: corev1.PodPending, QOSClass: corev1.PodQOSBestEffort}
	return pod
}

// BenchmarkDecodeArgs decodes a filter request (the pod and 250 node names) with encoding/json
// into extenderv1.ExtenderArgs, as the handlers did, and with decodeArgs, with and without the
// names interned.
func BenchmarkDecodeArgs(b *testing.B) {
	names := make([]string, 250)
	known := map[string]string{}
	for i := range names {
		names[i] = fmt.Sprintf("bench-node-%04d", i)
		known[names[i]] = names[i]
	}
	body := mustJSON(b, &extenderv1.ExtenderArgs{Pod: schedulerPod(), NodeNames: &names})
	intern := func(b []byte) (string, bool) { s, ok := known[string(b)]; return s, ok }
	for _, tc := range []struct {
		name   string
		decode func() error
	}{
		{"encoding/json", func() error { var a extenderv1.ExtenderArgs; return json.Unmarshal(body, &a) }},
		{"decodeArgs", func() error { _, err := decodeArgs(body, reuse{}); return err }},
		{"decodeArgs-interned", func() error { _, err := decodeArgs(body, reuse{intern: intern}); return err }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if err := tc.decode(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
