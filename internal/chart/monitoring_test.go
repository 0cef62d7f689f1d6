package chart

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kube-neuron/kube-neuron/internal/nodemetrics"
)

// dashboardObject is the Grafana dashboard's ConfigMap, rendered once when a node agent is.
const dashboardObject = "ConfigMap kube-system/kube-neuron-dashboard"

// podMonitorCapability makes helm template see the Prometheus Operator's PodMonitor CRD.
const podMonitorCapability = "--api-versions=monitoring.coreos.com/v1/PodMonitor"

func init() {
	// The Prometheus Operator's types are not a dependency: podMonitor lists the fields the
	// chart may set (strict decoding rejects any other).
	newTypes["monitoring.coreos.com/v1 PodMonitor"] = func() any { return &podMonitor{} }
}

// podMonitor is a monitoring.coreos.com/v1 PodMonitor with the fields the chart may set (the
// operator's documented names).
type podMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		NamespaceSelector struct {
			MatchNames []string `json:"matchNames"`
		} `json:"namespaceSelector"`
		Selector            metav1.LabelSelector `json:"selector"`
		PodMetricsEndpoints []struct {
			Port          string `json:"port"`
			Path          string `json:"path"`
			Scheme        string `json:"scheme"`
			Interval      string `json:"interval,omitempty"`
			ScrapeTimeout string `json:"scrapeTimeout,omitempty"`
			Relabelings   []struct {
				SourceLabels []string `json:"sourceLabels,omitempty"`
				TargetLabel  string   `json:"targetLabel,omitempty"`
				Action       string   `json:"action,omitempty"`
				Regex        string   `json:"regex,omitempty"`
			} `json:"relabelings"`
		} `json:"podMetricsEndpoints"`
	} `json:"spec"`
}

// agentPods returns the node agents' pod templates and namespaces that m renders.
func agentPods(m manifest) map[string]*appsv1.DaemonSet {
	out := map[string]*appsv1.DaemonSet{}
	for _, key := range []struct{ name, ns, ds string }{
		{"neuron-device-plugin", "", "neuron-device-plugin"},
		{"neuron-dra-driver", "neuron-dra-driver", "neuron-dra-driver-kubelet-plugin"},
	} {
		for _, o := range m {
			if ds, ok := o.Obj.(*appsv1.DaemonSet); ok && o.Name == key.ds {
				out[key.name] = ds
			}
		}
	}
	return out
}

func containerPort(t *testing.T, ds *appsv1.DaemonSet, name string) int32 {
	t.Helper()
	for _, c := range ds.Spec.Template.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == name {
				return p.ContainerPort
			}
		}
	}
	t.Fatalf("DaemonSet %s/%s has no container port %q", ds.Namespace, ds.Name, name)
	return 0
}

// TestPodMonitor: the PodMonitor exists when the cluster serves the CRD (auto) or when forced,
// and selects exactly the node agents' pods, in their namespaces, on their metrics port.
func TestPodMonitor(t *testing.T) {
	t.Parallel()
	dra := []string{"devicePlugin.enabled=false", "draDriver.enabled=true"}
	both := []string{"draDriver.enabled=true", "devicePlugin.allowWithDRA=true"}
	for _, tc := range []struct {
		name   string
		sets   []string
		want   bool
		agents []string // the app.kubernetes.io/name of the pods it selects
	}{
		{name: "auto without the CRD", want: false},
		{name: "auto with the CRD", sets: []string{podMonitorCapability}, want: true, agents: []string{"neuron-device-plugin"}},
		{name: "false with the CRD", sets: []string{podMonitorCapability, "monitoring.podMonitor.enabled=false"}, want: false},
		{name: "true without the CRD", sets: []string{"monitoring.podMonitor.enabled=true"}, want: true, agents: []string{"neuron-device-plugin"}},
		{name: "DRA driver", sets: append([]string{podMonitorCapability}, dra...), want: true, agents: []string{"neuron-dra-driver"}},
		{name: "both agents", sets: append([]string{podMonitorCapability}, both...), want: true, agents: []string{"neuron-device-plugin", "neuron-dra-driver"}},
		{name: "no agent", sets: []string{"monitoring.podMonitor.enabled=true", "devicePlugin.enabled=false"}, want: false},
		{name: "values", sets: []string{podMonitorCapability, "monitoring.podMonitor.interval=15s", "monitoring.podMonitor.scrapeTimeout=10s",
			"monitoring.podMonitor.labels.release=kube-prometheus-stack", "monitoring.podMonitor.namespace=monitoring", "devicePlugin.namespace=neuron"},
			want: true, agents: []string{"neuron-device-plugin"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := render(t, tc.sets...)
			var pms []*podMonitor
			for _, o := range m {
				if pm, ok := o.Obj.(*podMonitor); ok {
					pms = append(pms, pm)
				}
			}
			if !tc.want {
				if len(pms) != 0 {
					t.Fatalf("rendered a PodMonitor: %v", m.names())
				}
				return
			}
			if len(pms) != 1 {
				t.Fatalf("%d PodMonitors, want 1: %v", len(pms), m.names())
			}
			pm := pms[0]
			wantNS, wantInterval := releaseNS, "30s"
			if slices.Contains(tc.sets, "monitoring.podMonitor.namespace=monitoring") {
				wantNS, wantInterval = "monitoring", "15s"
				if pm.Labels["release"] != "kube-prometheus-stack" {
					t.Errorf("labels %v lack release=kube-prometheus-stack", pm.Labels)
				}
			}
			if pm.Name != "kube-neuron-node-agents" || pm.Namespace != wantNS {
				t.Errorf("PodMonitor %s/%s, want %s/kube-neuron-node-agents", pm.Namespace, pm.Name, wantNS)
			}
			if len(pm.Spec.PodMetricsEndpoints) != 1 {
				t.Fatalf("endpoints %+v, want one", pm.Spec.PodMetricsEndpoints)
			}
			ep := pm.Spec.PodMetricsEndpoints[0]
			if ep.Port != "metrics" || ep.Path != "/metrics" || ep.Scheme != "http" || ep.Interval != wantInterval {
				t.Errorf("endpoint %+v, want port metrics, /metrics over http every %s", ep, wantInterval)
			}
			// The agents' series have namespace, pod and container labels of their own: the
			// target's must not stay, or Prometheus renames the agents' to exported_*.
			var dropped bool
			for _, r := range ep.Relabelings {
				if r.Action == "labeldrop" {
					re := regexp.MustCompile("^(?:" + r.Regex + ")$")
					dropped = re.MatchString("namespace") && re.MatchString("pod") && re.MatchString("container") && !re.MatchString("node")
				}
			}
			if !dropped {
				t.Errorf("relabelings %+v do not drop the target's namespace, pod and container labels (and keep node)", ep.Relabelings)
			}

			sel, err := metav1.LabelSelectorAsSelector(&pm.Spec.Selector)
			if err != nil {
				t.Fatal(err)
			}
			var selected []string
			for name, ds := range agentPods(m) {
				if sel.Matches(labels.Set(ds.Spec.Template.Labels)) && slices.Contains(pm.Spec.NamespaceSelector.MatchNames, ds.Namespace) {
					selected = append(selected, name)
					containerPort(t, ds, "metrics")
				}
			}
			slices.Sort(selected)
			if !slices.Equal(selected, tc.agents) {
				t.Errorf("selects the pods of %v, want %v", selected, tc.agents)
			}
			// Nothing else of the release: a pod of the same instance and another name.
			if sel.Matches(labels.Set{"app.kubernetes.io/name": "neuron-scheduler-extender", "app.kubernetes.io/instance": release}) {
				t.Error("selects the scheduler extender's pods")
			}
			if sel.Matches(labels.Set{"app.kubernetes.io/name": "neuron-device-plugin", "app.kubernetes.io/instance": "other"}) {
				t.Error("selects another release's device plugin")
			}
		})
	}
}

// dashboard is the part of a Grafana dashboard the tests read.
type dashboard struct {
	Title      string `json:"title"`
	UID        string `json:"uid"`
	Templating struct {
		List []struct {
			Name     string `json:"name"`
			Type     string `json:"type"`
			AllValue string `json:"allValue"`
			Query    any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		Type    string `json:"type"`
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

// exportedMetrics returns the names of the metric families the node agents' collector
// describes (internal/nodemetrics: the device plugin and the DRA driver export the same).
func exportedMetrics(t *testing.T) []string {
	t.Helper()
	ch := make(chan *prometheus.Desc)
	go func() {
		nodemetrics.NewCollector(func() nodemetrics.Snapshot { return nodemetrics.Snapshot{} }, nil).Describe(ch)
		close(ch)
	}()
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	var names []string
	for d := range ch {
		m := fqName.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("no fqName in %s", d)
		}
		names = append(names, m[1])
	}
	if len(names) == 0 {
		t.Fatal("the node agents' collector describes no metric")
	}
	return names
}

// TestDashboard: the ConfigMap carries the sidecar's label and the dashboard file, valid JSON,
// whose every query names only metrics the node agents export, and shows utilisation, memory,
// errors, health, power and free blocks per node and per pod.
func TestDashboard(t *testing.T) {
	t.Parallel()
	file, err := os.ReadFile(filepath.Join(chartDir, "files", "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	m := render(t)
	cm := get[corev1.ConfigMap](t, m, "ConfigMap", releaseNS, "kube-neuron-dashboard")
	if cm.Labels["grafana_dashboard"] != "1" {
		t.Errorf("labels %v lack grafana_dashboard: \"1\"", cm.Labels)
	}
	data, ok := cm.Data["kube-neuron.json"]
	if !ok || data != strings.TrimSpace(string(file)) {
		t.Fatalf("data[kube-neuron.json] is not files/grafana-dashboard.json (keys %v)", sortedKeys(anyMap(cm.Data)))
	}
	var d dashboard
	if err := json.Unmarshal([]byte(data), &d); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("dashboard uid %q, title %q", d.UID, d.Title)
	}

	exported := exportedMetrics(t)
	queries := dashboardQueries(t, []byte(data))
	used := map[string]bool{}
	for _, q := range queries {
		names, err := metricNames(q.Expr)
		if err != nil {
			t.Errorf("%s: %v", q, err)
			continue
		}
		if len(names) == 0 {
			t.Errorf("%s names no metric", q)
		}
		for _, n := range names {
			if !slices.Contains(exported, n) {
				t.Errorf("%s names %s, which no node agent exports", q, n)
			}
			used[n] = true
			if q.PerPod {
				used["pod:"+n] = true
			}
		}
	}
	// What the dashboard is for: per node and per pod utilisation and memory, errors, health,
	// power, free aligned blocks.
	for _, n := range []string{
		"neuron_core_utilization_ratio", "neuron_core_memory_used_bytes", "neuron_device_ecc_errors_total",
		"neuron_device_healthy", "neuron_device_power_utilization_ratio", "neuron_node_free_blocks",
		"pod:neuron_core_utilization_ratio", "pod:neuron_core_memory_used_bytes",
	} {
		if !used[n] {
			t.Errorf("no query of the dashboard shows %s", n)
		}
	}
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
		if v.Type == "query" && v.AllValue != ".*" {
			t.Errorf("variable %s: allValue %q, want .* (the queries match it with =~)", v.Name, v.AllValue)
		}
	}
	for _, v := range []string{"datasource", "node", "namespace", "pod"} {
		if !vars[v] {
			t.Errorf("no template variable %s", v)
		}
	}

	// The sidecar's label is a value; the dashboard goes with the agents.
	m = render(t, "monitoring.dashboard.labels.grafana_dashboard=null", "monitoring.dashboard.labels.dashboards=neuron",
		"monitoring.dashboard.namespace=monitoring", "monitoring.dashboard.annotations.grafana_folder=Neuron")
	cm = get[corev1.ConfigMap](t, m, "ConfigMap", "monitoring", "kube-neuron-dashboard")
	if _, ok := cm.Labels["grafana_dashboard"]; ok || cm.Labels["dashboards"] != "neuron" || cm.Annotations["grafana_folder"] != "Neuron" {
		t.Errorf("labels %v, annotations %v", cm.Labels, cm.Annotations)
	}
	for _, sets := range [][]string{{"monitoring.dashboard.enabled=false"}, {"devicePlugin.enabled=false"}} {
		if slices.Contains(render(t, sets...).names(), dashboardObject) {
			t.Errorf("%v: the dashboard is rendered", sets)
		}
	}
}

func anyMap(m map[string]string) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		out[k] = v
	}
	return out
}

// dashboardQuery is one PromQL expression of the dashboard: a panel's target, or the series
// query of a template variable (label_values(<expr>, <label>)).
type dashboardQuery struct {
	Where  string
	Expr   string
	Label  string // for a variable: the label whose values it lists
	PerPod bool   // filters on the pod variable
}

func (q dashboardQuery) String() string { return fmt.Sprintf("%s: %s", q.Where, q.Expr) }

var labelValues = regexp.MustCompile(`^label_values\((.*),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)$`)

// dashboardQueries returns every query of the dashboard JSON.
func dashboardQueries(t *testing.T, data []byte) []dashboardQuery {
	t.Helper()
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	var qs []dashboardQuery
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q string
		switch x := v.Query.(type) {
		case string:
			q = x
		case map[string]any:
			q, _ = x["query"].(string)
		}
		sub := labelValues.FindStringSubmatch(q)
		if sub == nil {
			t.Errorf("variable %s: query %q is not label_values(<series>, <label>)", v.Name, q)
			continue
		}
		qs = append(qs, dashboardQuery{Where: "variable " + v.Name, Expr: sub[1], Label: sub[2], PerPod: strings.Contains(sub[1], "$pod")})
	}
	for _, p := range d.Panels {
		for i, tg := range p.Targets {
			if tg.Expr == "" {
				t.Errorf("panel %q target %d has no expr", p.Title, i)
				continue
			}
			qs = append(qs, dashboardQuery{Where: fmt.Sprintf("panel %q target %d", p.Title, i), Expr: tg.Expr, PerPod: strings.Contains(tg.Expr, "$pod")})
		}
	}
	if len(qs) == 0 {
		t.Fatal("the dashboard has no query")
	}
	return qs
}

// PromQL words that are not metric names when they stand alone (keywords, aggregation operators).
var promqlWords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"bool": true, "offset": true, "and": true, "or": true, "unless": true, "atan2": true, "inf": true, "nan": true,
	"sum": true, "avg": true, "min": true, "max": true, "count": true, "stddev": true, "stdvar": true, "topk": true,
	"bottomk": true, "quantile": true, "count_values": true, "group": true,
}

// metricNames returns the metric names a PromQL expression selects: the identifiers outside
// label matchers, ranges, strings and grouping lists that are neither keywords nor function
// calls. A selector by __name__ is an error: the test could not see its metric.
func metricNames(expr string) ([]string, error) {
	var names []string
	isStart := func(c byte) bool { return c == '_' || c == ':' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') }
	isPart := func(c byte) bool { return isStart(c) || (c >= '0' && c <= '9') }
	skipSpace := func(i int) int {
		for i < len(expr) && strings.ContainsRune(" \t\n\r", rune(expr[i])) {
			i++
		}
		return i
	}
	// closing returns the index after the bracket that closes expr[i], skipping strings.
	closing := func(i int, open, close byte) (int, error) {
		depth := 0
		for j := i; j < len(expr); j++ {
			switch c := expr[j]; c {
			case '"', '\'', '`':
				k := j + 1
				for k < len(expr) && expr[k] != c {
					if expr[k] == '\\' && c != '`' {
						k++
					}
					k++
				}
				if k >= len(expr) {
					return 0, fmt.Errorf("unterminated string at %d", j)
				}
				j = k
			case open:
				depth++
			case close:
				depth--
				if depth == 0 {
					return j + 1, nil
				}
			}
		}
		return 0, fmt.Errorf("unclosed %c at %d", open, i)
	}
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == '{':
			end, err := closing(i, '{', '}')
			if err != nil {
				return nil, err
			}
			if strings.Contains(expr[i:end], "__name__") {
				return nil, fmt.Errorf("a selector by __name__: %s", expr[i:end])
			}
			i = end
		case c == '[':
			end, err := closing(i, '[', ']')
			if err != nil {
				return nil, err
			}
			i = end
		case c == '"' || c == '\'' || c == '`':
			return nil, fmt.Errorf("a string outside a label matcher at %d", i)
		case c >= '0' && c <= '9' || c == '.':
			for i < len(expr) && (isPart(expr[i]) || expr[i] == '.') {
				i++
			}
		case c == '$':
			return nil, fmt.Errorf("a variable outside a label matcher or range at %d", i)
		case isStart(c):
			j := i
			for j < len(expr) && isPart(expr[j]) {
				j++
			}
			word, next := expr[i:j], skipSpace(j)
			switch {
			case word == "by" || word == "without" || word == "on" || word == "ignoring" || word == "group_left" || word == "group_right":
				if next < len(expr) && expr[next] == '(' {
					end, err := closing(next, '(', ')')
					if err != nil {
						return nil, err
					}
					j = end
				}
			case promqlWords[word]:
			case next < len(expr) && expr[next] == '(': // a function
			default:
				if !slices.Contains(names, word) {
					names = append(names, word)
				}
			}
			i = j
		default:
			i++
		}
	}
	return names, nil
}

// TestMetricNames: the extraction the dashboard test relies on finds the metrics and only them.
func TestMetricNames(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`neuron_node_devices`, []string{"neuron_node_devices"}},
		{`sum by (node, state) (neuron_node_devices{node=~"$node"})`, []string{"neuron_node_devices"}},
		{`max by (node) (rate(neuron_fake_total{pod="a{b}", c='by (x)'}[$__rate_interval] offset 5m))`, []string{"neuron_fake_total"}},
		{`sum(a_total) / on (node) group_left (instance_type) max without (pod) (b_bytes) > bool 0.5e3`, []string{"a_total", "b_bytes"}},
		{`count by (node) (x == 0) or vector(0)`, []string{"x"}},
		{`histogram_quantile(0.9, sum by (le) (rate(h_bucket[5m])))`, []string{"h_bucket"}},
	} {
		got, err := metricNames(tc.expr)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("metricNames(%q) = %q, %v; want %q", tc.expr, got, err, tc.want)
		}
	}
	for _, bad := range []string{`{__name__="neuron_node_devices"}`, `sum(x{a="b"`, `x{a="b}`} {
		if got, err := metricNames(bad); err == nil {
			t.Errorf("metricNames(%q) = %q, want an error", bad, got)
		}
	}
}

// TestMetricsNetworkPolicy: each node agent's metrics port admits the monitoring peers and the
// API server's CIDRs only; every other port of its pods stays open as before.
func TestMetricsNetworkPolicy(t *testing.T) {
	t.Parallel()
	monitoringNS := networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "monitoring"}}}
	apiServer := networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/16"}}
	prom := networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "prometheus"}}}
	both := []string{"draDriver.enabled=true", "devicePlugin.allowWithDRA=true"}
	for _, tc := range []struct {
		name string
		sets []string
		// the peers admitted to the metrics port; nil: the port admits no pod.
		want []networkingv1.NetworkPolicyPeer
	}{
		{name: "defaults", sets: both, want: []networkingv1.NetworkPolicyPeer{monitoringNS}},
		{name: "API server", sets: append([]string{"monitoring.networkPolicy.apiServerCIDRs[0]=10.0.0.0/16"}, both...), want: []networkingv1.NetworkPolicyPeer{monitoringNS, apiServer}},
		{name: "own peers", sets: append([]string{`--set-json=monitoring.networkPolicy.from=[{"podSelector":{"matchLabels":{"app":"prometheus"}}}]`}, both...), want: []networkingv1.NetworkPolicyPeer{prom}},
		{name: "nobody", sets: append([]string{"--set-json=monitoring.networkPolicy.from=[]"}, both...), want: nil},
		{name: "other ports", sets: append([]string{"devicePlugin.metricsPort=9000", "draDriver.metricsPort=9001", "draDriver.healthcheckPort=50000", "devicePlugin.namespace=neuron"}, both...), want: []networkingv1.NetworkPolicyPeer{monitoringNS}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := render(t, tc.sets...)
			agents := agentPods(m)
			if len(agents) != 2 {
				t.Fatalf("agents %v", m.names())
			}
			for name, ds := range agents {
				np := get[networkingv1.NetworkPolicy](t, m, "NetworkPolicy", ds.Namespace, name+"-metrics")
				sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
				if err != nil {
					t.Fatal(err)
				}
				if !sel.Matches(labels.Set(ds.Spec.Template.Labels)) {
					t.Errorf("%s: policy selector %v does not select the pods (%v)", name, sel, ds.Spec.Template.Labels)
				}
				if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
					t.Errorf("%s: policyTypes %v, want Ingress only (egress as before)", name, np.Spec.PolicyTypes)
				}
				// Each TCP port of the pods: who may reach it.
				admitted := map[int32][]networkingv1.NetworkPolicyPeer{}
				open := map[int32]bool{}
				for _, rule := range np.Spec.Ingress {
					if len(rule.Ports) == 0 {
						t.Errorf("%s: a rule without ports admits every port: %+v", name, rule)
					}
					for _, p := range rule.Ports {
						if p.Port == nil || p.EndPort != nil || (p.Protocol != nil && *p.Protocol != corev1.ProtocolTCP) {
							t.Errorf("%s: port %+v, want single TCP ports", name, p)
							continue
						}
						port := p.Port.IntVal
						if len(rule.From) == 0 {
							open[port] = true
						}
						admitted[port] = append(admitted[port], rule.From...)
					}
				}
				metrics := containerPort(t, ds, "metrics")
				if open[metrics] {
					t.Errorf("%s: the metrics port %d admits every source", name, metrics)
				}
				if got := admitted[metrics]; !equalPeers(got, tc.want) {
					t.Errorf("%s: the metrics port %d admits %s, want %s", name, metrics, peers(got), peers(tc.want))
				}
				for _, c := range ds.Spec.Template.Spec.Containers {
					for _, p := range c.Ports {
						if p.ContainerPort != metrics && !open[p.ContainerPort] {
							t.Errorf("%s: port %s (%d) is no longer open to every source", name, p.Name, p.ContainerPort)
						}
					}
				}
				for port := range admitted {
					if port != metrics && !slices.ContainsFunc(ds.Spec.Template.Spec.Containers, func(c corev1.Container) bool {
						return slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.ContainerPort == port })
					}) {
						t.Errorf("%s: the policy names port %d, which the pods do not have", name, port)
					}
				}
			}
		})
	}
	for _, sets := range [][]string{{"monitoring.networkPolicy.enabled=false"}, {"devicePlugin.enabled=false"}} {
		for _, n := range render(t, sets...).names() {
			if strings.HasPrefix(n, "NetworkPolicy ") {
				t.Errorf("%v: rendered %s", sets, n)
			}
		}
	}
}

func equalPeers(a, b []networkingv1.NetworkPolicyPeer) bool { return peers(a) == peers(b) }

func peers(p []networkingv1.NetworkPolicyPeer) string {
	b, _ := json.Marshal(p)
	return string(b)
}

// TestMonitoringNotes: NOTES.txt says what the monitoring values rendered.
func TestMonitoringNotes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		sets      []string
		want, not []string
	}{
		{name: "defaults", want: []string{
			"* Metrics of the node agents (per device and core, with the pod that holds it; docs/metrics.md): Grafana dashboard ConfigMap kube-neuron-dashboard in kube-system, metrics ports open only to monitoring.networkPolicy.from (enforced when the network plugin enforces NetworkPolicies).",
		}, not: []string{"PodMonitor", "the API server"}},
		{name: "everything", sets: []string{podMonitorCapability, "monitoring.networkPolicy.apiServerCIDRs[0]=10.0.0.0/16"}, want: []string{
			"PodMonitor kube-neuron-node-agents in kube-system, Grafana dashboard",
			"open only to monitoring.networkPolicy.from and the API server (enforced",
		}},
		{name: "nothing", sets: []string{"monitoring.dashboard.enabled=false", "monitoring.networkPolicy.enabled=false"}, want: []string{
			"docs/metrics.md): metrics ports open to every source (plain HTTP).",
		}, not: []string{"dashboard"}},
		{name: "no agent", sets: []string{"devicePlugin.enabled=false"}, not: []string{"Metrics of the node agents"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			notes := renderNotes(t, tc.sets...)
			for _, s := range tc.want {
				if !strings.Contains(notes, s) {
					t.Errorf("NOTES.txt lacks %q:\n%s", s, notes)
				}
			}
			for _, s := range tc.not {
				if strings.Contains(notes, s) {
					t.Errorf("NOTES.txt has %q:\n%s", s, notes)
				}
			}
		})
	}
}
