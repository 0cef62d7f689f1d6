package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/common/expfmt"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The node agents top reads: the pods of the device plugin and the DRA driver, by their
// app.kubernetes.io/name label, on their container port named metrics.
const (
	agentNameLabel   = "app.kubernetes.io/name"
	agentPortName    = "metrics"
	agentParallel    = 8        // agents read at once
	maxMetricsBytes  = 32 << 20 // an agent's answer larger than this is refused
	defaultAgentWait = 10 * time.Second
)

var agentNames = []string{"neuron-device-plugin", "neuron-dra-driver"}

// agentPod is a node agent's pod and its metrics port.
type agentPod struct {
	Namespace, Name, Node string
	Port                  int32
}

func (a agentPod) String() string {
	return fmt.Sprintf("%s/%s (node %s)", a.Namespace, a.Name, a.Node)
}

// metricsFetcher reads a node agent's /metrics. The command reads them through the API
// server's pod proxy; tests give a fake.
type metricsFetcher interface {
	fetchMetrics(ctx context.Context, a agentPod) ([]byte, error)
}

// proxyFetcher reads /metrics through the API server:
// GET /api/v1/namespaces/NS/pods/NAME:PORT/proxy/metrics.
type proxyFetcher struct{ client kubernetes.Interface }

var _ metricsFetcher = proxyFetcher{}

func (p proxyFetcher) fetchMetrics(ctx context.Context, a agentPod) ([]byte, error) {
	body, err := p.client.CoreV1().RESTClient().Get().
		Namespace(a.Namespace).Resource("pods").SubResource("proxy").
		Name(a.Name+":"+strconv.Itoa(int(a.Port))).Suffix("metrics").
		SetHeader("Accept", string(expfmt.NewFormat(expfmt.TypeTextPlain))).
		Stream(ctx)
	if err != nil {
		return nil, err
	}
	defer body.Close()
	data, err := io.ReadAll(io.LimitReader(body, maxMetricsBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxMetricsBytes {
		return nil, fmt.Errorf("the answer is larger than %d MiB", maxMetricsBytes>>20)
	}
	return data, nil
}

// findAgents lists the node agents' pods in namespaces (all when empty). A pod that is not
// running or has no metrics port is a warning.
func findAgents(ctx context.Context, client kubernetes.Interface, namespaces []string, warn func(string, ...any)) ([]agentPod, error) {
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	selector := fmt.Sprintf("%s in (%s)", agentNameLabel, strings.Join(agentNames, ","))
	var agents []agentPod
	for _, ns := range namespaces {
		opts := metav1.ListOptions{LabelSelector: selector, Limit: nodesPageSize}
		for {
			list, err := client.CoreV1().Pods(ns).List(ctx, opts)
			if err != nil {
				return nil, agentListErr(ns, err)
			}
			for i := range list.Items {
				if a, ok := agentOf(&list.Items[i], warn); ok {
					agents = append(agents, a)
				}
			}
			if list.Continue == "" {
				break
			}
			opts.Continue = list.Continue
		}
	}
	slices.SortFunc(agents, func(a, b agentPod) int {
		return strings.Compare(a.Node+"/"+a.Namespace+"/"+a.Name, b.Node+"/"+b.Namespace+"/"+b.Name)
	})
	return agents, nil
}

func agentOf(pod *corev1.Pod, warn func(string, ...any)) (agentPod, bool) {
	a := agentPod{Namespace: pod.Namespace, Name: pod.Name, Node: cmp.Or(pod.Spec.NodeName, "none")}
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == agentPortName && a.Port == 0 {
				a.Port = p.ContainerPort
			}
		}
	}
	switch {
	case pod.DeletionTimestamp != nil:
		return a, false // a DaemonSet replaces it: its successor is read
	case a.Port == 0:
		warn("node agent %s has no container port named %q: its node is not shown (is the chart older than this kubectl-neuron?)", a, agentPortName)
		return a, false
	case pod.Status.Phase != corev1.PodRunning || pod.Status.PodIP == "":
		warn("node agent %s is %s: its node is not shown (kubectl describe pod -n %s %s)", a, cmp.Or(string(pod.Status.Phase), "not running"), a.Namespace, a.Name)
		return a, false
	}
	return a, true
}

func agentListErr(ns string, err error) error {
	where := "namespace " + ns
	if ns == metav1.NamespaceAll {
		where = "all namespaces"
	}
	hint := "check that the cluster is reachable (kubectl get pods -A) with the kubeconfig you mean (--kubeconfig, --context, $KUBECONFIG)"
	switch {
	case apierrors.IsForbidden(err):
		hint = "your user may not list pods there: name the agents' namespaces with --agent-namespace (the chart's device plugin runs in kube-system, its DRA driver in neuron-dra-driver), or ask for list on pods"
	case apierrors.IsUnauthorized(err):
		hint = "your credentials were refused: log in again or check the kubeconfig's user"
	}
	return &exitError{code: ExitCluster, err: fmt.Errorf("cannot list the node agents' pods in %s: %w: %s", where, err, hint)}
}

// agentResult is one agent's answer, or why there is none.
type agentResult struct {
	data []byte
	err  error
}

// fetchAll reads every agent, at most agentParallel at once, each within timeout.
func fetchAll(ctx context.Context, f metricsFetcher, agents []agentPod, timeout time.Duration) []agentResult {
	results := make([]agentResult, len(agents))
	slots := make(chan struct{}, agentParallel)
	var wg sync.WaitGroup
	for i, a := range agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			slots <- struct{}{}
			defer func() { <-slots }()
			actx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			data, err := f.fetchMetrics(actx, a)
			if err == nil && actx.Err() != nil {
				err = actx.Err()
			}
			results[i] = agentResult{data: data, err: err}
		}()
	}
	wg.Wait()
	return results
}

// agentHint says what to check when an agent's metrics cannot be read.
func agentHint(a agentPod, err error) string {
	switch {
	case apierrors.IsForbidden(err):
		return fmt.Sprintf("your user needs get on pods/proxy in namespace %s (kubectl auth can-i get pods/proxy -n %s; see docs/kubectl-neuron.md, top)", a.Namespace, a.Namespace)
	case apierrors.IsUnauthorized(err):
		return "your credentials were refused: log in again or check the kubeconfig's user"
	case apierrors.IsNotFound(err):
		return "the pod is gone or does not serve /metrics on that port: run the command again"
	case errors.Is(err, context.DeadlineExceeded) || apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) ||
		apierrors.IsServiceUnavailable(err) || apierrors.IsInternalError(err) || apierrors.IsUnexpectedServerError(err):
		return fmt.Sprintf("the API server could not reach the pod's port %d: a NetworkPolicy on it must admit the API server (chart value monitoring.networkPolicy.apiServerCIDRs), and the pod must be ready", a.Port)
	}
	return "check the pod (kubectl logs -n " + a.Namespace + " " + a.Name + ")"
}
