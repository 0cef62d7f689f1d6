package lab

import (
	"encoding/base64"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

func TestLWSWebhookConfigs(t *testing.T) {
	objs, err := ReadObjects("testdata/lws-webhook-manifests.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ca := []byte("-----BEGIN CERTIFICATE-----\nlab\n-----END CERTIFICATE-----\n")
	if err := lwsWebhookConfigs(objs, "https://127.0.0.1:9443/", ca); err != nil {
		t.Fatal(err)
	}
	type want struct {
		url       string
		podFilter bool
	}
	wants := map[string]want{
		"mleaderworkerset.kb.io":  {"https://127.0.0.1:9443/mutate-leaderworkerset-x-k8s-io-v1-leaderworkerset", false},
		"mpod.kb.io":              {"https://127.0.0.1:9443/mutate--v1-pod", true},
		"vleaderworkerset.kb.io":  {"https://127.0.0.1:9443/validate-leaderworkerset-x-k8s-io-v1-leaderworkerset", false},
		"vpod.kb.io":              {"https://127.0.0.1:9443/validate--v1-pod", true},
		"vdisaggregatedset.kb.io": {"https://127.0.0.1:9443/validate-disaggregatedset-x-k8s-io-v1-disaggregatedset", false},
	}
	seen := map[string]bool{}
	for _, o := range objs {
		hooks, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
		for _, h := range hooks {
			hook := h.(map[string]any)
			name := hook["name"].(string)
			w, ok := wants[name]
			if !ok {
				t.Errorf("unexpected webhook %s", name)
				continue
			}
			seen[name] = true
			url, _, _ := unstructured.NestedString(hook, "clientConfig", "url")
			if url != w.url {
				t.Errorf("%s: url %q, want %q", name, url, w.url)
			}
			if _, found, _ := unstructured.NestedMap(hook, "clientConfig", "service"); found {
				t.Errorf("%s: clientConfig still names a service", name)
			}
			bundle, _, _ := unstructured.NestedString(hook, "clientConfig", "caBundle")
			if got, _ := base64.StdEncoding.DecodeString(bundle); string(got) != string(ca) {
				t.Errorf("%s: caBundle %q, want the lab CA", name, got)
			}
			sel, found, _ := unstructured.NestedSlice(hook, "objectSelector", "matchExpressions")
			if found != w.podFilter {
				t.Errorf("%s: objectSelector present %v, want %v", name, found, w.podFilter)
			}
			if found {
				data, _ := yaml.Marshal(sel)
				if !strings.Contains(string(data), LWSNameLabel) || !strings.Contains(string(data), "Exists") {
					t.Errorf("%s: objectSelector %s, want %s Exists", name, data, LWSNameLabel)
				}
			}
		}
	}
	if len(seen) != len(wants) {
		t.Errorf("webhooks seen %v, want %d of them", seen, len(wants))
	}
}

func TestLWSWebhookConfigsRejects(t *testing.T) {
	for name, doc := range map[string]string{
		"no path":     "apiVersion: admissionregistration.k8s.io/v1\nkind: MutatingWebhookConfiguration\nmetadata: {name: m}\nwebhooks:\n- name: a\n  clientConfig: {service: {name: s, namespace: n}}\n",
		"other kind":  "apiVersion: v1\nkind: Service\nmetadata: {name: s}\n",
		"no webhooks": "apiVersion: admissionregistration.k8s.io/v1\nkind: MutatingWebhookConfiguration\nmetadata: {name: m}\n",
	} {
		t.Run(name, func(t *testing.T) {
			o := &unstructured.Unstructured{}
			if err := yaml.Unmarshal([]byte(doc), &o.Object); err != nil {
				t.Fatal(err)
			}
			if err := lwsWebhookConfigs([]*unstructured.Unstructured{o}, "https://127.0.0.1:1", []byte("ca")); err == nil {
				t.Errorf("no error for %s", name)
			}
		})
	}
}

func TestLWSConfig(t *testing.T) {
	data, err := lwsConfig(9443, 8081, "/lab/lws/certs")
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		APIVersion     string `json:"apiVersion"`
		Kind           string `json:"kind"`
		LeaderElection struct {
			LeaderElect *bool `json:"leaderElect"`
		} `json:"leaderElection"`
		InternalCertManagement struct {
			Enable *bool `json:"enable"`
		} `json:"internalCertManagement"`
		Webhook struct {
			Host    string `json:"host"`
			Port    int    `json:"port"`
			CertDir string `json:"certDir"`
		} `json:"webhook"`
		Health struct {
			HealthProbeBindAddress string `json:"healthProbeBindAddress"`
		} `json:"health"`
		Metrics struct {
			BindAddress string `json:"bindAddress"`
		} `json:"metrics"`
	}
	if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	if cfg.APIVersion != "config.lws.x-k8s.io/v1alpha1" || cfg.Kind != "Configuration" {
		t.Errorf("type %s %s", cfg.APIVersion, cfg.Kind)
	}
	if cfg.LeaderElection.LeaderElect == nil || *cfg.LeaderElection.LeaderElect {
		t.Error("leader election not off")
	}
	if cfg.InternalCertManagement.Enable == nil || *cfg.InternalCertManagement.Enable {
		t.Error("internal certificate management not off")
	}
	if cfg.Webhook.Host != "127.0.0.1" || cfg.Webhook.Port != 9443 || cfg.Webhook.CertDir != "/lab/lws/certs" {
		t.Errorf("webhook %+v", cfg.Webhook)
	}
	if cfg.Health.HealthProbeBindAddress != "127.0.0.1:8081" || cfg.Metrics.BindAddress != "0" {
		t.Errorf("health %+v metrics %+v", cfg.Health, cfg.Metrics)
	}
}
