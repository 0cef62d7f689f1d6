//go:build e2e

package deviceplugin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-neuron/kube-neuron/test/e2e/framework"
)

// TestDashboard: a real Prometheus (Debian's package, hack/prometheus.sh) scrapes every node
// agent of the lab, whose pods hold devices and cores, and every query of the chart's Grafana
// dashboard returns data: with the node, namespace and pod variables at All, and at one pod.
// The lab's nodes here run the device plugin; the DRA driver exports the same metrics.
func TestDashboard(t *testing.T) {
	ctx := framework.Context(t)
	ns := framework.CreateNamespace(t, ctx)
	// A pod with devices and a pod of two containers with cores, on two instance families.
	pods := []podSpec{
		{name: "dash-devices", node: "inf2-a", containers: []ctr{{"main", neuronRes, 2}}},
		{name: "dash-cores", node: "trn2-a", containers: []ctr{{"server", coreRes, 2}, {"sidecar", coreRes, 1}}},
	}
	for _, p := range pods {
		createPod(t, ctx, ns, p)
	}
	t.Cleanup(func() { deletePods(t, ns, pods) })
	for _, p := range pods {
		pod := framework.WaitForPod(t, ctx, ns, p.name, corev1.PodRunning, 60*time.Second)
		runExecutions(t, pod)
	}

	var targets []string
	for _, n := range framework.L.Nodes() {
		addr := framework.L.MetricsAddress(n.Name)
		if addr == "" {
			t.Fatalf("node %s: the lab knows no metrics address of its agent", n.Name)
		}
		targets = append(targets, addr)
	}
	prom := startPrometheus(t, ctx, targets)
	framework.WaitFor(t, ctx, 60*time.Second, fmt.Sprintf("Prometheus to scrape the %d node agents", len(targets)), func(ctx context.Context) (bool, string, error) {
		res, err := prom.query(ctx, `up == 1`)
		if err != nil {
			return false, err.Error(), nil
		}
		return len(res) == len(targets), fmt.Sprintf("%d of %d targets up: %v", len(res), len(targets), res), nil
	})

	// Every agent has read its node's counters at least once.
	framework.WaitFor(t, ctx, 60*time.Second, fmt.Sprintf("core series from the %d nodes", len(targets)), func(ctx context.Context) (bool, string, error) {
		res, err := prom.query(ctx, `count by (node) (neuron_core_memory_used_bytes)`)
		if err != nil {
			return false, err.Error(), nil
		}
		return len(res) == len(targets), fmt.Sprintf("core series from %d nodes: %v", len(res), res), nil
	})

	queries := dashboardQueries(t)
	for _, v := range []struct {
		name string
		vars map[string]string
	}{
		{"all", map[string]string{"node": ".*", "namespace": ".*", "pod": ".*"}},
		{"one pod", map[string]string{"node": "trn2-a", "namespace": ns, "pod": "dash-cores"}},
	} {
		t.Run(v.name, func(t *testing.T) {
			results := runQueries(t, ctx, prom, queries, v.vars)
			var nodes []string
			for _, n := range framework.L.Nodes() {
				nodes = append(nodes, n.Name)
			}
			want := map[string][]string{"node": nodes, "namespace": {ns}, "pod": {"dash-cores", "dash-devices"}}
			if v.name == "one pod" {
				want = map[string][]string{"node": {"trn2-a"}, "namespace": {ns}, "pod": {"dash-cores"}}
			}
			for i, q := range queries {
				if q.label == "" || len(results[i]) == 0 {
					continue
				}
				var values []string
				for _, s := range results[i] {
					if val := s.Metric[q.label]; val != "" && !slices.Contains(values, val) {
						values = append(values, val)
					}
				}
				for _, w := range want[q.label] {
					if !slices.Contains(values, w) {
						t.Errorf("%s lists %s values %v, without %s", q.where, q.label, values, w)
					}
				}
			}
		})
	}
}

// runQueries runs every query, with the variables expanded, until each has returned data or
// a deadline has passed (rates need two samples in their window), and reports each query that
// Prometheus refused or that returned no data. It returns each query's last result.
func runQueries(t *testing.T, ctx context.Context, prom *prometheus, queries []dashboardQuery, vars map[string]string) [][]series {
	t.Helper()
	results := make([][]series, len(queries))
	pending := map[int]string{}
	for i, q := range queries {
		pending[i] = q.expand(t, vars)
	}
	deadline := time.Now().Add(45 * time.Second)
	for len(pending) > 0 && time.Now().Before(deadline) && ctx.Err() == nil {
		for i, expr := range pending {
			var res []series
			var err error
			if queries[i].instant {
				res, err = prom.query(ctx, expr)
			} else {
				res, err = prom.queryRange(ctx, expr, 30*time.Second)
			}
			if err != nil {
				t.Errorf("%s: %v", queries[i].where, err)
				delete(pending, i)
				continue
			}
			if len(res) > 0 {
				results[i] = res
				delete(pending, i)
			}
		}
		if len(pending) > 0 {
			time.Sleep(500 * time.Millisecond)
		}
	}
	// Once all have data, the same queries again: the series each shows now, as a panel would.
	for i, q := range queries {
		if _, ok := pending[i]; ok || ctx.Err() != nil {
			continue
		}
		var err error
		if q.instant {
			results[i], err = prom.query(ctx, q.expand(t, vars))
		} else {
			results[i], err = prom.queryRange(ctx, q.expand(t, vars), 30*time.Second)
		}
		if err != nil {
			t.Errorf("%s: %v", q.where, err)
		}
	}
	for i, q := range queries {
		status := fmt.Sprintf("%d series", len(results[i]))
		if expr, ok := pending[i]; ok {
			t.Errorf("%s returned no data within 45s: %s", q.where, expr)
			status = "NO DATA"
		}
		t.Logf("%-9s %s: %s", status, q.where, q.expand(t, vars))
	}
	return results
}

// runExecutions records, on the simulated hardware, ten successful executions on every
// physical core of the NeuronCores the pod's containers hold, as its workload would.
func runExecutions(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	shape := shapeOf(t, pod.Spec.NodeName)
	if shape.LNC < 1 {
		t.Fatalf("node %s: LNC %d", pod.Spec.NodeName, shape.LNC)
	}
	hw := framework.L.Simulator().Node(pod.Spec.NodeName).Hardware()
	for name, held := range running(t, pod) {
		if len(held[1]) == 0 {
			t.Fatalf("pod %s container %s holds no core", pod.Name, name)
		}
		for _, c := range held[1] {
			first := (c % shape.CoresPerDevice) * shape.LNC
			for k := first; k < first+shape.LNC; k++ {
				if err := hw.AddExecutions(shape.DeviceOf(c), k, "success", 10); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// deletePods deletes the pods and waits until they are gone, so that the next test finds the
// nodes' devices free.
func deletePods(t *testing.T, ns string, pods []podSpec) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	zero := int64(0)
	for _, p := range pods {
		if err := framework.L.Client().CoreV1().Pods(ns).Delete(ctx, p.name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting pod %s: %v", p.name, err)
		}
	}
	for _, p := range pods {
		framework.WaitFor(t, ctx, 60*time.Second, "pod "+p.name+" to be gone", func(ctx context.Context) (bool, string, error) {
			_, err := framework.L.Client().CoreV1().Pods(ns).Get(ctx, p.name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), fmt.Sprint(err), nil
		})
	}
}

// dashboardQuery is one query of the dashboard: a panel target, or the series selector of a
// template variable (label_values(<series>, <label>)).
type dashboardQuery struct {
	where, expr, label string
	instant            bool
}

var (
	labelValues = regexp.MustCompile(`^label_values\((.*),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)$`)
	variable    = regexp.MustCompile(`\$(\{[a-zA-Z_][a-zA-Z0-9_]*\}|[a-zA-Z_][a-zA-Z0-9_]*)`)
)

// expand replaces the dashboard's variables as Grafana would: the template variables by the
// given values, the interval variables by windows that hold a few of the 1 s scrapes.
func (q dashboardQuery) expand(t *testing.T, vars map[string]string) string {
	t.Helper()
	var unknown []string
	out := variable.ReplaceAllStringFunc(q.expr, func(m string) string {
		name := strings.Trim(m, "${}")
		switch name {
		case "__rate_interval", "__interval", "__range":
			return "15s"
		}
		if v, ok := vars[name]; ok {
			return v
		}
		unknown = append(unknown, m)
		return m
	})
	if len(unknown) > 0 {
		t.Fatalf("%s uses variables %v the test does not know", q.where, unknown)
	}
	return out
}

// dashboardQueries reads every query of the chart's dashboard file.
func dashboardQueries(t *testing.T) []dashboardQuery {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repo(t), framework.Chart, "files", "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"` // a string, or {"query": ...}
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr    string `json:"expr"`
				Instant bool   `json:"instant"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	var qs []dashboardQuery
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			t.Fatalf("variable %s: query %s: %v", v.Name, v.Query, err)
		}
		m := labelValues.FindStringSubmatch(q.Query)
		if m == nil {
			t.Fatalf("variable %s: query %q is not label_values(<series>, <label>)", v.Name, q.Query)
		}
		qs = append(qs, dashboardQuery{where: "variable " + v.Name, expr: m[1], label: m[2], instant: true})
	}
	for _, p := range d.Panels {
		for i, tg := range p.Targets {
			qs = append(qs, dashboardQuery{where: fmt.Sprintf("panel %q query %c", p.Title, 'A'+i), expr: tg.Expr, instant: tg.Instant})
		}
	}
	if len(qs) < 10 {
		t.Fatalf("the dashboard has %d queries", len(qs))
	}
	return qs
}

// prometheus is a Prometheus server the test started, on loopback.
type prometheus struct{ url string }

// series is one element of a query's result.
type series struct {
	Metric map[string]string `json:"metric"`
}

// startPrometheus runs Debian's Prometheus (hack/prometheus.sh fetches it once) scraping the
// targets every second, with its storage in a temporary directory, and waits until it is ready.
func startPrometheus(t *testing.T, ctx context.Context, targets []string) *prometheus {
	t.Helper()
	bin := prometheusBinary(t)
	dir := t.TempDir()
	quoted := make([]string, len(targets))
	for i, tg := range targets {
		quoted[i] = fmt.Sprintf("%q", tg)
	}
	config := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: kube-neuron-node-agents
    static_configs:
      - targets: [%s]
`, strings.Join(quoted, ", "))
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeAddress(t)
	log, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin,
		"--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		"--web.console.templates="+filepath.Join(dir, "consoles"),
		"--web.console.libraries="+filepath.Join(dir, "console_libraries"),
		"--log.level=warn",
	)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		_ = log.Close()
		if t.Failed() {
			out, _ := os.ReadFile(log.Name())
			t.Logf("prometheus log:\n%s", out)
		}
	})
	p := &prometheus{url: "http://" + addr}
	framework.WaitFor(t, ctx, 30*time.Second, "Prometheus to be ready at "+addr, func(ctx context.Context) (bool, string, error) {
		select {
		case <-exited:
			out, _ := os.ReadFile(log.Name())
			return false, "", fmt.Errorf("prometheus exited: %s", out)
		default:
		}
		resp, err := http.Get(p.url + "/-/ready")
		if err != nil {
			return false, err.Error(), nil
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status, nil
	})
	return p
}

// prometheusBinary returns $KUBE_NEURON_PROMETHEUS, or what hack/prometheus.sh prints (it
// fetches Debian's package the first time).
func prometheusBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("KUBE_NEURON_PROMETHEUS"); p != "" {
		return p
	}
	var stderr bytes.Buffer
	cmd := exec.Command(filepath.Join(repo(t), "hack", "prometheus.sh"))
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hack/prometheus.sh: %v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1]
}

func freeAddress(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// query runs an instant query.
func (p *prometheus) query(ctx context.Context, expr string) ([]series, error) {
	return p.get(ctx, "/api/v1/query", url.Values{"query": {expr}})
}

// queryRange runs a range query over the last d, step 1 s, as a Grafana panel does.
func (p *prometheus) queryRange(ctx context.Context, expr string, d time.Duration) ([]series, error) {
	end := time.Now()
	return p.get(ctx, "/api/v1/query_range", url.Values{
		"query": {expr},
		"start": {fmt.Sprint(end.Add(-d).Unix())},
		"end":   {fmt.Sprint(end.Unix())},
		"step":  {"1"},
	})
}

func (p *prometheus) get(ctx context.Context, path string, params url.Values) ([]series, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url+path+"?"+params.Encode(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []series `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("%s %s: %s: %w", path, params.Get("query"), body, err)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("%s %s: %s", path, params.Get("query"), r.Error)
	}
	return r.Data.Result, nil
}
