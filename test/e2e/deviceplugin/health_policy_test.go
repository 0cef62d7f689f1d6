//go:build e2e

package deviceplugin

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/kube-neuron/kube-neuron/internal/deviceplugin"
	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/test/e2e/framework"
)

// TestHealthNodeStatusPolicy applies the chart's device plugin RBAC and ValidatingAdmissionPolicy
// and checks them with the credentials a plugin pod on trn1-c gets: it may set trn1-c's
// NeuronDevicesHealthy, not another node's, nor trn1-c's other conditions or allocatable.
func TestHealthNodeStatusPolicy(t *testing.T) {
	ctx := framework.Context(t)
	applyDevicePluginPolicy(t, ctx)
	admin := framework.L.Client()
	const ns, sa, node, other = "kube-system", "neuron-device-plugin", "trn1-c", "trn1-a"

	pod, err := admin.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "device-plugin-on-" + node, Namespace: ns},
		Spec: corev1.PodSpec{
			NodeName: node, ServiceAccountName: sa,
			Tolerations: []corev1.Toleration{{Key: labels.NeuronTaintKey, Operator: corev1.TolerationOpExists}},
			Containers:  []corev1.Container{{Name: "plugin", Image: "kube-neuron"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.CoreV1().Pods(ns).Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	})
	tok, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: ptr.To[int64](600),
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.AnonymousClientConfig(framework.L.RESTConfig())
	cfg.BearerToken = tok.Status.Token
	plugin, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The running plugins own the condition on both nodes (a write to other may pass before the
	// policy is active): put back what they wrote.
	for _, n := range []string{node, other} {
		before, err := admin.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range before.Status.Conditions {
			if c.Type == deviceplugin.NodeCondition {
				t.Cleanup(func() {
					_, _ = admin.CoreV1().Nodes().PatchStatus(context.Background(), n, conditionPatch(t, c))
				})
			}
		}
	}

	ours := corev1.NodeCondition{Type: deviceplugin.NodeCondition, Status: corev1.ConditionTrue, Reason: deviceplugin.ConditionReasonHealthy, Message: "policy test"}
	framework.WaitFor(t, ctx, 30*time.Second, "the policy to deny another node's status", func(ctx context.Context) (bool, string, error) {
		_, err := plugin.CoreV1().Nodes().PatchStatus(ctx, other, conditionPatch(t, ours))
		if err == nil {
			return false, "allowed", nil
		}
		return (apierrors.IsInvalid(err) || apierrors.IsForbidden(err)) && strings.Contains(err.Error(), "may only write the status of its own node"), err.Error(), nil
	})
	if _, err := plugin.CoreV1().Nodes().PatchStatus(ctx, node, conditionPatch(t, ours)); err != nil {
		t.Errorf("setting %s on its own node: %v", deviceplugin.NodeCondition, err)
	}
	for name, patch := range map[string][]byte{
		"its node's Ready condition": conditionPatch(t, corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "PolicyTest"}),
		"its node's allocatable":     []byte(`{"status":{"allocatable":{"aws.amazon.com/neuron":"1"}}}`),
	} {
		_, err := plugin.CoreV1().Nodes().PatchStatus(ctx, node, patch)
		if err == nil || !(apierrors.IsInvalid(err) || apierrors.IsForbidden(err)) || !strings.Contains(err.Error(), "may only change the node condition NeuronDevicesHealthy") {
			t.Errorf("changing %s: %v, want a denial by the policy", name, err)
		}
	}
}

func conditionPatch(t *testing.T, c corev1.NodeCondition) []byte {
	b, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{c}}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// applyDevicePluginPolicy applies the chart's device plugin service account, RBAC and policy.
func applyDevicePluginPolicy(t *testing.T, ctx context.Context) {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(root, "hack/helm/build.sh")).Output()
	if err != nil {
		t.Fatalf("building helm (hack/helm/build.sh): %v", err)
	}
	rendered, err := exec.Command(strings.TrimSpace(string(out)), "template", "kube-neuron", filepath.Join(root, "deployments/helm/kube-neuron"), "--namespace", "kube-system",
		"--set", "image.localImages=true", "--set", "npd.enabled=false").Output()
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	keep := map[string]bool{"ServiceAccount": true, "ClusterRole": true, "ClusterRoleBinding": true,
		"ValidatingAdmissionPolicy": true, "ValidatingAdmissionPolicyBinding": true}
	var docs []string
	for _, doc := range strings.Split(string(rendered), "\n---") {
		var meta struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatal(err)
		}
		if keep[meta.Kind] {
			docs = append(docs, doc)
		}
	}
	if len(docs) != len(keep) {
		t.Fatalf("the chart rendered %d of the %d kinds %v", len(docs), len(keep), keep)
	}
	path := filepath.Join(t.TempDir(), "device-plugin-rbac-policy.yaml")
	if err := os.WriteFile(path, []byte(strings.Join(docs, "\n---\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	framework.Apply(t, ctx, path, "kube-system")
}
