//go:build e2e

package dra

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/test/e2e/framework"
)

// driverNamespace and driverServiceAccount are the chart's names for the DRA driver.
const (
	driverNamespace      = "neuron-dra-driver"
	driverServiceAccount = "neuron-dra-driver-sa"
)

// TestResourceSlicePolicy applies the chart's RBAC and ValidatingAdmissionPolicy of the seed 003
// install and checks them with the credentials a driver pod gets: a service account token bound
// to a pod on trn2-a may write trn2-a's ResourceSlices and no other node's.
func TestResourceSlicePolicy(t *testing.T) {
	ctx, _ := setup(t)
	applyChartRBACAndPolicy(t, ctx)
	admin := framework.L.Client()

	pod, err := admin.CoreV1().Pods(driverNamespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "driver-on-trn2-a", Namespace: driverNamespace},
		Spec: corev1.PodSpec{
			NodeName:           "trn2-a",
			ServiceAccountName: driverServiceAccount,
			Tolerations:        []corev1.Toleration{{Key: labels.NeuronTaintKey, Operator: corev1.TolerationOpExists}},
			Containers:         []corev1.Container{{Name: "driver", Image: "kube-neuron"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.CoreV1().Pods(driverNamespace).Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	})
	tok, err := admin.CoreV1().ServiceAccounts(driverNamespace).CreateToken(ctx, driverServiceAccount, &authenticationv1.TokenRequest{
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
	driver, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}

	slice := func(node string) *resourcev1.ResourceSlice {
		return &resourcev1.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "policy-test-" + node + "-"},
			Spec: resourcev1.ResourceSliceSpec{
				Driver:   "policy-test.neuron.aws.com",
				Pool:     resourcev1.ResourcePool{Name: node, ResourceSliceCount: 1},
				NodeName: ptr.To(node),
				Devices:  []resourcev1.Device{{Name: "d0"}},
			},
		}
	}
	// The policy becomes active a moment after it is created: retry until it denies.
	var denied error
	framework.WaitFor(t, ctx, 30*time.Second, "the policy to deny another node's ResourceSlice", func(ctx context.Context) (bool, string, error) {
		s, err := driver.ResourceV1().ResourceSlices().Create(ctx, slice("trn1-s"), metav1.CreateOptions{})
		if err == nil {
			_ = admin.ResourceV1().ResourceSlices().Delete(ctx, s.Name, metav1.DeleteOptions{})
			return false, "created", nil
		}
		denied = err
		return apierrors.IsInvalid(err) || apierrors.IsForbidden(err), err.Error(), nil
	})
	if want := "may only write the ResourceSlices of its own node, not those of node trn1-s"; !strings.Contains(denied.Error(), want) {
		t.Errorf("denial %q lacks %q", denied, want)
	}

	own, err := driver.ResourceV1().ResourceSlices().Create(ctx, slice("trn2-a"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the driver on trn2-a cannot write its own node's ResourceSlice: %v", err)
	}
	own.Spec.Devices = append(own.Spec.Devices, resourcev1.Device{Name: "d1"})
	if _, err := driver.ResourceV1().ResourceSlices().Update(ctx, own, metav1.UpdateOptions{}); err != nil {
		t.Errorf("update of its own slice: %v", err)
	}
	if err := driver.ResourceV1().ResourceSlices().Delete(ctx, own.Name, metav1.DeleteOptions{}); err != nil {
		t.Errorf("delete of its own slice: %v", err)
	}

	// Another node's slice, written by someone else, cannot be deleted or changed by the driver.
	other, err := admin.ResourceV1().ResourceSlices().Create(ctx, slice("trn1-s"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.ResourceV1().ResourceSlices().Delete(context.Background(), other.Name, metav1.DeleteOptions{})
	})
	if err := driver.ResourceV1().ResourceSlices().Delete(ctx, other.Name, metav1.DeleteOptions{}); err == nil {
		t.Error("the driver on trn2-a deleted trn1-s's ResourceSlice")
	}
	other.Spec.NodeName = ptr.To("trn2-a")
	if _, err := driver.ResourceV1().ResourceSlices().Update(ctx, other, metav1.UpdateOptions{}); err == nil {
		t.Error("the driver on trn2-a took over trn1-s's ResourceSlice")
	}

	// A token that names no node (not bound to a pod) is refused with its own message.
	plain, err := admin.CoreV1().ServiceAccounts(driverNamespace).CreateToken(ctx, driverServiceAccount, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg2 := rest.AnonymousClientConfig(framework.L.RESTConfig())
	cfg2.BearerToken = plain.Status.Token
	unbound, err := kubernetes.NewForConfig(cfg2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := unbound.ResourceV1().ResourceSlices().Create(ctx, slice("trn2-a"), metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "token names no node") {
		t.Errorf("a token without a node: %v", err)
	}
}

// applyChartRBACAndPolicy renders the chart as the seed 003 command installs it and applies its
// namespace, service account, RBAC and admission policy (not the DaemonSet: the lab runs the
// driver as host processes).
func applyChartRBACAndPolicy(t *testing.T, ctx context.Context) {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(root, "hack/helm/build.sh")).Output()
	if err != nil {
		t.Fatalf("building helm (hack/helm/build.sh): %v", err)
	}
	helm := strings.TrimSpace(string(out))
	rendered, err := exec.Command(helm, "template", "kube-neuron", filepath.Join(root, "deployments/helm/kube-neuron"), "--namespace", "kube-system",
		"--set", "image.localImages=true", "--set", "devicePlugin.enabled=false", "--set", "npd.enabled=false", "--set", "draDriver.enabled=true").Output()
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	keep := map[string]bool{"Namespace": true, "ServiceAccount": true, "ClusterRole": true, "ClusterRoleBinding": true,
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
	path := filepath.Join(t.TempDir(), "dra-rbac-policy.yaml")
	if err := os.WriteFile(path, []byte(strings.Join(docs, "\n---\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	framework.Apply(t, ctx, path, "kube-system")
}
