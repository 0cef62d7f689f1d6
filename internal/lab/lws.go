package lab

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"
)

// The LeaderWorkerSet controller (sigs.k8s.io/lws) as a lab component: hack/lws/build.sh builds
// its manager and copies its CRDs and webhook configurations from the same module into one
// directory (Options.LWSDir). The lab runs the manager as a host process against its API server,
// with the manager's own certificate management off: the webhooks serve on 127.0.0.1 with a
// certificate of the lab's CA, and the webhook configurations call them by URL.
const (
	// LWSName is the manager's process name (its log is logs/lws-controller.log).
	LWSName = "lws-controller"
	// LWSGroup is the API group of LeaderWorkerSet.
	LWSGroup = "leaderworkerset.x-k8s.io"
	// LWSNameLabel, LWSGroupIndexLabel and LWSWorkerIndexLabel are the labels the controller and
	// its pod webhook put on every pod of a LeaderWorkerSet.
	LWSNameLabel        = "leaderworkerset.sigs.k8s.io/name"
	LWSGroupIndexLabel  = "leaderworkerset.sigs.k8s.io/group-index"
	LWSWorkerIndexLabel = "leaderworkerset.sigs.k8s.io/worker-index"
	// LWSExclusiveTopologyAnnotation asks for one group per domain of the topology key it names:
	// the pod webhook gives the leader a required pod affinity and anti-affinity on that key, and
	// the controller creates the workers once the leader is scheduled, with a node selector for
	// the leader's domain.
	LWSExclusiveTopologyAnnotation = "leaderworkerset.sigs.k8s.io/exclusive-topology"
)

// LWSResource is the LeaderWorkerSet resource.
var LWSResource = schema.GroupVersionResource{Group: LWSGroup, Version: "v1", Resource: "leaderworkersets"}

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// lwsReadyTimeout bounds each readiness wait of the controller.
const lwsReadyTimeout = 60 * time.Second

// lwsConfig is the manager's configuration file (config.lws.x-k8s.io/v1alpha1 Configuration):
// no leader election, no internal certificate management (which would sign for a Service DNS
// name and rewrite the webhook configurations), webhooks on 127.0.0.1:webhookPort with the
// certificate in certDir (tls.crt, tls.key), health probes on 127.0.0.1:probePort, no metrics.
func lwsConfig(webhookPort, probePort int, certDir string) ([]byte, error) {
	return yaml.Marshal(map[string]any{
		"apiVersion":             "config.lws.x-k8s.io/v1alpha1",
		"kind":                   "Configuration",
		"leaderElection":         map[string]any{"leaderElect": false},
		"internalCertManagement": map[string]any{"enable": false},
		"webhook":                map[string]any{"host": "127.0.0.1", "port": webhookPort, "certDir": certDir},
		"health":                 map[string]any{"healthProbeBindAddress": "127.0.0.1:" + strconv.Itoa(probePort)},
		"metrics":                map[string]any{"bindAddress": "0"},
	})
}

// lwsWebhookConfigs rewrites the module's webhook configurations (config/webhook/manifests.yaml)
// for the lab: each webhook's clientConfig becomes url baseURL+<its service path> with caBundle,
// and the webhooks on pods get the object selector the module's kustomize patches add
// (config/webhook/{mutating,validating}-patch.yaml), so that only a LeaderWorkerSet's pods
// (label LWSNameLabel) go through them.
func lwsWebhookConfigs(objs []*unstructured.Unstructured, baseURL string, caBundle []byte) error {
	n := 0
	for _, o := range objs {
		if o.GetAPIVersion() != "admissionregistration.k8s.io/v1" ||
			(o.GetKind() != "MutatingWebhookConfiguration" && o.GetKind() != "ValidatingWebhookConfiguration") {
			return fmt.Errorf("unexpected %s %s in the webhook manifests", o.GetKind(), o.GetName())
		}
		hooks, _, err := unstructured.NestedSlice(o.Object, "webhooks")
		if err != nil {
			return fmt.Errorf("%s %s: %w", o.GetKind(), o.GetName(), err)
		}
		for i, h := range hooks {
			hook, ok := h.(map[string]any)
			if !ok {
				return fmt.Errorf("%s %s: webhook %d is not an object", o.GetKind(), o.GetName(), i)
			}
			path, _, _ := unstructured.NestedString(hook, "clientConfig", "service", "path")
			if path == "" {
				return fmt.Errorf("%s %s: webhook %v has no clientConfig.service.path", o.GetKind(), o.GetName(), hook["name"])
			}
			hook["clientConfig"] = map[string]any{
				"url":      strings.TrimSuffix(baseURL, "/") + path,
				"caBundle": base64.StdEncoding.EncodeToString(caBundle),
			}
			if onPods(hook) {
				hook["objectSelector"] = map[string]any{"matchExpressions": []any{
					map[string]any{"key": LWSNameLabel, "operator": "Exists"},
				}}
			}
			hooks[i] = hook
			n++
		}
		if err := unstructured.SetNestedSlice(o.Object, hooks, "webhooks"); err != nil {
			return err
		}
	}
	if n == 0 {
		return errors.New("the webhook manifests define no webhook")
	}
	return nil
}

// onPods says whether a webhook's rules select core pods.
func onPods(hook map[string]any) bool {
	rules, _, _ := unstructured.NestedSlice(hook, "rules")
	for _, r := range rules {
		rule, _ := r.(map[string]any)
		groups, _, _ := unstructured.NestedStringSlice(rule, "apiGroups")
		resources, _, _ := unstructured.NestedStringSlice(rule, "resources")
		for _, g := range groups {
			for _, res := range resources {
				if g == "" && res == "pods" {
					return true
				}
			}
		}
	}
	return false
}

// startLWS installs the CRDs of dir/crds, starts the manager of dir, registers its webhooks and
// returns once a LeaderWorkerSet created with dry run passes them (the mutating webhook's
// defaults show in the answer).
func (l *Lab) startLWS(ctx context.Context, dir string) error {
	logger := klog.FromContext(ctx)
	begin := time.Now()
	if dir == "" {
		return errors.New("LeaderWorkerSet controller: Options.LWSDir is empty: set it to the directory hack/lws/build.sh prints")
	}
	bin := filepath.Join(dir, LWSName)
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("LeaderWorkerSet controller: %w (hack/lws/build.sh builds it and prints the directory)", err)
	}
	if l.cp.Network() != nil {
		return errors.New("LeaderWorkerSet controller: not supported in a lab with real nodes (the API server runs in the lab's network namespace and would not reach the webhooks on the host's 127.0.0.1)")
	}
	cfg := l.cp.RESTConfig()
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}

	// CRDs, Established before the manager starts (its informers need them).
	crds, err := filepath.Glob(filepath.Join(dir, "crds", "*.yaml"))
	if err != nil || len(crds) == 0 {
		return fmt.Errorf("LeaderWorkerSet controller: no CRDs in %s/crds (run hack/lws/build.sh again): %v", dir, err)
	}
	var names []string
	for _, f := range crds {
		objs, err := ApplyFile(ctx, cfg, "kube-neuron-lab", f, "")
		if err != nil {
			return fmt.Errorf("LeaderWorkerSet CRDs: %w", err)
		}
		for _, o := range objs {
			names = append(names, o.GetName())
		}
	}
	for _, name := range names {
		if err := waitCRDEstablished(ctx, dyn, name); err != nil {
			return err
		}
	}

	// Serving certificate of the lab CA for 127.0.0.1, where the controller-runtime webhook
	// server looks for it (tls.crt and tls.key in its cert dir).
	pki := l.cp.PKI()
	crt, key, err := pki.IssueServingCert("lws-webhook", nil, []net.IP{net.ParseIP("127.0.0.1")})
	if err != nil {
		return err
	}
	certDir := filepath.Join(l.cp.Dir(), "lws", "certs")
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return err
	}
	for src, dst := range map[string]string{crt: "tls.crt", key: "tls.key"} {
		data, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		if err := writeFile0600(filepath.Join(certDir, dst), data); err != nil {
			return err
		}
	}
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	webhookPort, probePort := ports[0], ports[1]
	config, err := lwsConfig(webhookPort, probePort, certDir)
	if err != nil {
		return err
	}
	configPath := filepath.Join(l.cp.Dir(), "lws", "config.yaml")
	if err := writeFile0600(configPath, config); err != nil {
		return err
	}

	p, err := StartProcess(ProcessOptions{
		Name:    LWSName,
		Path:    bin,
		Args:    []string{"--config=" + configPath, "--zap-log-level=" + strconv.Itoa(max(l.opts.Verbosity/2, 1))},
		Env:     []string{"KUBECONFIG=" + l.cp.Kubeconfig()},
		LogPath: l.cp.LogPath(LWSName),
	})
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.lws = p
	l.mu.Unlock()
	if err := AddToState(l.cp.Dir(), p, StopOrderComponent); err != nil {
		return err
	}
	if err := waitReady(ctx, p, "/readyz", func(ctx context.Context) error {
		return httpGetOK(ctx, &http.Client{Timeout: 2 * time.Second}, "http://127.0.0.1:"+strconv.Itoa(probePort)+"/readyz", "ok")
	}); err != nil {
		return err
	}

	// The webhook server completes a TLS handshake with the lab's certificate for 127.0.0.1 (a
	// handshake only: an HTTP request without an AdmissionReview would log an error).
	caPEM, err := os.ReadFile(pki.CACert)
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	webhookAddr := "127.0.0.1:" + strconv.Itoa(webhookPort)
	baseURL := "https://" + webhookAddr
	if err := waitReady(ctx, p, "the webhook server's TLS handshake", func(ctx context.Context) error {
		d := &tls.Dialer{Config: &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}}
		conn, err := d.DialContext(ctx, "tcp", webhookAddr)
		if err != nil {
			return err
		}
		return conn.Close()
	}); err != nil {
		return err
	}

	// The webhook configurations, by URL, written where the logs are for troubleshooting.
	objs, err := ReadObjects(filepath.Join(dir, "webhook", "manifests.yaml"))
	if err != nil {
		return err
	}
	if err := lwsWebhookConfigs(objs, baseURL, caPEM); err != nil {
		return fmt.Errorf("LeaderWorkerSet webhook configurations: %w", err)
	}
	var docs []string
	for _, o := range objs {
		data, err := yaml.Marshal(o.Object)
		if err != nil {
			return err
		}
		docs = append(docs, string(data))
	}
	hooksPath := filepath.Join(l.cp.Dir(), "lws", "webhooks.yaml")
	if err := writeFile0600(hooksPath, []byte(strings.Join(docs, "---\n"))); err != nil {
		return err
	}
	if _, err := ApplyFile(ctx, cfg, "kube-neuron-lab", hooksPath, ""); err != nil {
		return fmt.Errorf("LeaderWorkerSet webhook configurations: %w", err)
	}

	// The API server calls the webhooks once it has seen the configurations: a dry-run create
	// passes both LeaderWorkerSet webhooks and comes back with the mutating one's defaults.
	if err := waitReady(ctx, p, "the LeaderWorkerSet webhooks through the API server", func(ctx context.Context) error {
		return lwsDryRun(ctx, dyn)
	}); err != nil {
		return err
	}
	logger.V(1).Info("LeaderWorkerSet controller ready", "webhooks", baseURL, "log", p.LogPath(),
		"duration", time.Since(begin).Round(time.Millisecond))
	return nil
}

// waitCRDEstablished polls a CRD until its Established condition is True.
func waitCRDEstablished(ctx context.Context, dyn dynamic.Interface, name string) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, pollInterval, lwsReadyTimeout, true, func(ctx context.Context) (bool, error) {
		crd, err := dyn.Resource(crdResource).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
		for _, c := range conds {
			cond, _ := c.(map[string]any)
			if cond["type"] == "Established" && cond["status"] == "True" {
				return true, nil
			}
		}
		last = fmt.Sprintf("conditions %v", conds)
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("CRD %s not Established after %v (last: %s): %w", name, lwsReadyTimeout, last, err)
	}
	return nil
}

// lwsDryRun creates a LeaderWorkerSet with dry run and checks that the mutating webhook set
// spec.networkConfig.subdomainPolicy (a default only the webhook gives).
func lwsDryRun(ctx context.Context, dyn dynamic.Interface) error {
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": LWSGroup + "/v1",
		"kind":       "LeaderWorkerSet",
		"metadata":   map[string]any{"name": "lab-webhook-probe", "namespace": metav1.NamespaceDefault},
		"spec": map[string]any{
			"leaderWorkerTemplate": map[string]any{
				"size": int64(1),
				"workerTemplate": map[string]any{"spec": map[string]any{"containers": []any{
					map[string]any{"name": "c", "image": "probe"},
				}}},
			},
		},
	}}
	got, err := dyn.Resource(LWSResource).Namespace(metav1.NamespaceDefault).Create(ctx, obj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		return err
	}
	if p, _, _ := unstructured.NestedString(got.Object, "spec", "networkConfig", "subdomainPolicy"); p == "" {
		return errors.New("dry-run LeaderWorkerSet came back without spec.networkConfig.subdomainPolicy: the mutating webhook was not called")
	}
	return nil
}

// stopLWS stops the LeaderWorkerSet controller if it runs. Its webhook configurations stay: they
// go with the lab's API server.
func (l *Lab) stopLWS() error { return l.stopSlot(&l.lws) }

// LWS returns the running LeaderWorkerSet controller process, nil when none runs.
func (l *Lab) LWS() *Process {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lws
}
