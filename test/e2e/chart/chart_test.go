//go:build e2e

package chart

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/kube-neuron/kube-neuron/test/e2e/framework"
)

const (
	release      = "kube-neuron"
	namespace    = "kube-system"
	fieldManager = "kube-neuron-chart-e2e"
)

// ec2 are the settings the autoscaler's ec2 provider requires.
var ec2 = []string{"autoscaler.enabled=true", "autoscaler.ec2.launchTemplate=lt-0123456789abcdef0",
	"autoscaler.ec2.subnets={subnet-0a1b,subnet-0c2d}", "autoscaler.ec2.clusterName=prod"}

// installs are the seed install commands (seeds 000, 001, 003, 004) and ours.
var installs = []struct {
	name string
	sets []string
}{
	{"seed 000: defaults, device plugin and node problem detector", nil},
	{"seed 000: device plugin only", []string{"npd.enabled=false"}},
	{"seeds 001, 004: scheduler extender with my-scheduler", []string{"scheduler.enabled=true", "npd.enabled=false"}},
	{"seeds 001, 004: scheduler extender with the default scheduler", []string{"scheduler.enabled=true", "scheduler.customScheduler.enabled=false", "scheduler.defaultScheduler.enabled=true", "npd.enabled=false"}},
	{"seed 003: DRA driver only", []string{"devicePlugin.enabled=false", "npd.enabled=false", "draDriver.enabled=true"}},
	{"autoscaler with the ec2 provider", append([]string{"npd.enabled=false"}, ec2...)},
	{"autoscaler with the local provider, one replica", []string{"autoscaler.enabled=true", "autoscaler.provider=local", "autoscaler.replicas=1"}},
	{"autoscaler with a catalog file: inline (the chart's ConfigMap), nodes named by instance id", append([]string{"npd.enabled=false", "autoscaler.ec2.nodeNameSource=instance-id",
		"--set-literal=autoscaler.catalog.inline=apiVersion: kube-neuron.io/v1\nkind: InstanceCatalog\ninstanceTypes:\n- name: trn2.48xlarge\n  priceUSDPerHour: 44.70\n"}, ec2...)},
	{"autoscaler with a catalog file: your ConfigMap", []string{"autoscaler.enabled=true", "autoscaler.provider=local", "autoscaler.catalog.configMapName=neuron-prices", "autoscaler.catalog.configMapKey=prices.yaml"}},
	{"device plugin and DRA driver on different nodes", []string{"draDriver.enabled=true", "devicePlugin.allowWithDRA=true"}},
	{"hardened: TLS from the chart's own cert-manager CA, admission policy, scrapers from one namespace", append([]string{
		"scheduler.enabled=true", "scheduler.tls.enabled=true", "scheduler.tls.certManager.enabled=true",
		"scheduler.admissionPolicy.enabled=true", "scheduler.customScheduler.replicas=2",
		`scheduler.networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.kubernetes\.io/metadata\.name=monitoring`,
		"draDriver.enabled=true", "devicePlugin.allowWithDRA=true"}, ec2...)},
	{"TLS from your ClusterIssuer", []string{"scheduler.enabled=true", "scheduler.tls.enabled=true", "scheduler.tls.certManager.enabled=true",
		"scheduler.tls.certManager.issuerRef.name=corp-ca", "scheduler.tls.certManager.issuerRef.kind=ClusterIssuer"}},
	{"default scheduler with TLS from your own Secrets and the control plane's CIDRs", []string{"scheduler.enabled=true", "scheduler.customScheduler.enabled=false",
		"scheduler.defaultScheduler.enabled=true", "scheduler.tls.generate=false", "scheduler.networkPolicy.controlPlaneCIDRs={10.0.0.0/24}"}},
	{"scheduler extender over plain HTTP", []string{"scheduler.enabled=true", "scheduler.tls.enabled=false", "npd.enabled=false"}},
	{"my-scheduler with the NeuronTopology plugin (neuron-kube-scheduler), two replicas, admission policy", []string{"scheduler.enabled=true",
		"scheduler.customScheduler.mode=plugin", "scheduler.customScheduler.replicas=2", "scheduler.admissionPolicy.enabled=true", "npd.enabled=false"}},
}

// TestSeedInstallsDryRun applies every object of every install to the API server with
// server-side apply and dryRun=All, strict field validation, in dependency order: the
// namespaces the chart creates, and stand-ins for cert-manager's CRDs (the lab has no
// cert-manager), are created for real first. Every object must be accepted.
func TestSeedInstallsDryRun(t *testing.T) {
	ctx := framework.Context(t)
	createCertManagerCRDs(t, ctx)
	a := newApplier(t)
	for _, install := range installs {
		t.Run(install.name, func(t *testing.T) {
			objs := framework.RenderChart(t, release, namespace, install.sets...)
			if len(objs) == 0 {
				t.Fatal("the chart rendered nothing")
			}
			kinds := map[string]int{}
			var failures []string
			// Namespaces for real: a namespaced object cannot be dry-run into a namespace that
			// does not exist.
			for _, o := range objs {
				if o.GetKind() == "Namespace" {
					if err := a.apply(ctx, o, false); err != nil {
						failures = append(failures, err.Error())
					}
				}
			}
			for _, o := range objs {
				kinds[o.GetKind()]++
				if err := a.apply(ctx, o, true); err != nil {
					failures = append(failures, err.Error())
				}
			}
			if len(failures) > 0 {
				t.Errorf("the API server refused %d of %d objects:\n  %s", len(failures), len(objs), strings.Join(failures, "\n  "))
			}
			t.Logf("%d objects accepted: %v", len(objs), kinds)
		})
	}
}

// TestDryRunRefusesBadObjects: the check is not vacuous: an unknown field and an invalid value
// in a rendered object are refused, with the object named.
func TestDryRunRefusesBadObjects(t *testing.T) {
	ctx := framework.Context(t)
	a := newApplier(t)
	var ds *unstructured.Unstructured
	for _, o := range framework.RenderChart(t, release, namespace, "npd.enabled=false") {
		if o.GetKind() == "DaemonSet" {
			ds = o
		}
	}
	if ds == nil {
		t.Fatal("no DaemonSet rendered")
	}
	unknown := ds.DeepCopy()
	if err := unstructured.SetNestedField(unknown.Object, "yes", "spec", "template", "spec", "bogusField"); err != nil {
		t.Fatal(err)
	}
	invalid := ds.DeepCopy()
	if err := unstructured.SetNestedField(invalid.Object, "Sometimes", "spec", "template", "spec", "restartPolicy"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		obj  *unstructured.Unstructured
		want string
	}{{unknown, "bogusField"}, {invalid, "restartPolicy"}} {
		err := a.apply(ctx, tc.obj, true)
		if err == nil || !strings.Contains(err.Error(), "DaemonSet kube-system/neuron-device-plugin: ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("dry-run of a DaemonSet with a bad %s: %v", tc.want, err)
		}
	}
}

// applier applies unstructured objects through a RESTMapper and the dynamic client.
type applier struct {
	mapper *restmapper.DeferredDiscoveryRESTMapper
	dyn    dynamic.Interface
}

func newApplier(t *testing.T) *applier {
	t.Helper()
	cfg := framework.L.RESTConfig()
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &applier{mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc)), dyn: dyn}
}

// apply server-side applies obj (dryRun=All when dryRun) and says which object the server
// refused and why.
func (a *applier) apply(ctx context.Context, obj *unstructured.Unstructured, dryRun bool) error {
	gvk := obj.GroupVersionKind()
	what := fmt.Sprintf("%s %s", gvk.Kind, obj.GetName())
	if obj.GetNamespace() != "" {
		what = fmt.Sprintf("%s %s/%s", gvk.Kind, obj.GetNamespace(), obj.GetName())
	}
	mapping, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return fmt.Errorf("%s: %s is not served by the API server: %v", what, gvk.GroupVersion(), err)
	}
	ri := a.dyn.Resource(mapping.Resource)
	var r dynamic.ResourceInterface = ri
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		if obj.GetNamespace() == "" {
			return fmt.Errorf("%s: a namespaced object without a namespace (helm template sets none for objects of the release namespace: the chart must)", what)
		}
		r = ri.Namespace(obj.GetNamespace())
	} else if obj.GetNamespace() != "" {
		return fmt.Errorf("%s: a cluster-scoped object with a namespace", what)
	}
	data, err := obj.MarshalJSON()
	if err != nil {
		return err
	}
	opts := metav1.PatchOptions{FieldManager: fieldManager, Force: ptr.To(true), FieldValidation: "Strict"}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	if _, err := r.Patch(ctx, obj.GetName(), types.ApplyPatchType, data, opts); err != nil {
		return fmt.Errorf("%s: %v", what, err)
	}
	return nil
}

// certManagerCRDs stand in for cert-manager's: the same group, version, kinds and scope, and no
// schema of the spec (the unit tests decode the chart's Certificates and Issuers strictly into
// cert-manager's documented fields).
const certManagerCRDs = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: certificates.cert-manager.io}
spec:
  group: cert-manager.io
  scope: Namespaced
  names: {kind: Certificate, listKind: CertificateList, plural: certificates, singular: certificate}
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: issuers.cert-manager.io}
spec:
  group: cert-manager.io
  scope: Namespaced
  names: {kind: Issuer, listKind: IssuerList, plural: issuers, singular: issuer}
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
`

func createCertManagerCRDs(t *testing.T, ctx context.Context) {
	t.Helper()
	a := newApplier(t)
	for _, doc := range strings.Split(certManagerCRDs, "---\n") {
		obj := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &obj.Object); err != nil {
			t.Fatal(err)
		}
		if err := a.apply(ctx, obj, false); err != nil {
			t.Fatal(err)
		}
	}
	framework.WaitFor(t, ctx, 30*time.Second, "cert-manager.io/v1 to be served", func(ctx context.Context) (bool, string, error) {
		list, err := framework.L.Client().Discovery().ServerResourcesForGroupVersion("cert-manager.io/v1")
		if err != nil {
			return false, err.Error(), nil
		}
		return len(list.APIResources) >= 2, fmt.Sprintf("%d resources", len(list.APIResources)), nil
	})
}

// TestContradictionsRefused: helm template refuses values that cannot work together, before
// anything reaches the API server (internal/chart's TestEveryContradictionIsRefused checks
// every one of the chart's refusals and their whole messages).
func TestContradictionsRefused(t *testing.T) {
	for _, tc := range []struct {
		sets []string
		want string
	}{
		{[]string{"draDriver.enabled=true"}, "a node must run the device plugin or the DRA driver, never both"},
		{[]string{"scheduler.enabled=true", "scheduler.defaultScheduler.enabled=true"}, "the scheduler extender registers with one scheduler"},
		{[]string{"scheduler.admissionPolicy.enabled=true"}, "my-scheduler is not installed"},
		{[]string{"scheduler.enabled=true", "scheduler.tls.enabled=false", "scheduler.tls.certManager.enabled=true"}, "scheduler.tls.enabled is false"},
		{[]string{"scheduler.enabled=true", "scheduler.customScheduler.mode=plugin", "scheduler.defaultScheduler.enabled=true"}, "would both place Neuron pods on the same nodes"},
	} {
		out, err := framework.HelmTemplate(t, release, namespace, tc.sets...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: rendered %d bytes, error %v; want a refusal with %q", tc.sets, len(out), err, tc.want)
		}
	}
}

// TestAdmissionPolicySetsSchedulerName applies the chart's MutatingAdmissionPolicy for real and
// creates pods with dryRun=All (admission runs, nothing is stored): a Neuron pod without
// schedulerName gets my-scheduler, every other pod keeps its scheduler.
func TestAdmissionPolicySetsSchedulerName(t *testing.T) {
	ctx := framework.Context(t)
	a := newApplier(t)
	var policyObjs []*unstructured.Unstructured
	for _, o := range framework.RenderChart(t, release, namespace, "scheduler.enabled=true", "scheduler.admissionPolicy.enabled=true") {
		if strings.HasPrefix(o.GetKind(), "MutatingAdmissionPolicy") {
			policyObjs = append(policyObjs, o)
		}
	}
	if len(policyObjs) != 2 {
		t.Fatalf("rendered %d MutatingAdmissionPolicy objects, want the policy and its binding", len(policyObjs))
	}
	for _, o := range policyObjs {
		if err := a.apply(ctx, o, false); err != nil {
			t.Fatalf("%v (admissionregistration.k8s.io/v1 MutatingAdmissionPolicy is GA and on by default from Kubernetes 1.36)", err)
		}
	}
	t.Cleanup(func() {
		for _, o := range policyObjs {
			gvk := o.GroupVersionKind()
			if m, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err == nil {
				_ = a.dyn.Resource(m.Resource).Delete(context.Background(), o.GetName(), metav1.DeleteOptions{})
			}
		}
	})

	neuron := func(res string, n int64) corev1.ResourceList {
		return corev1.ResourceList{corev1.ResourceName(res): *resourceQuantity(n)}
	}
	pod := func(name, scheduler string, init bool, limits corev1.ResourceList) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault},
			Spec:       corev1.PodSpec{SchedulerName: scheduler, Containers: []corev1.Container{{Name: "main", Image: "x"}}},
		}
		c := corev1.Container{Name: "main", Image: "x", Resources: corev1.ResourceRequirements{Limits: limits}}
		if init {
			p.Spec.InitContainers = []corev1.Container{{Name: "warm", Image: "x", Resources: c.Resources}}
		} else {
			p.Spec.Containers = []corev1.Container{c}
		}
		return p
	}
	created := func(ctx context.Context, p *corev1.Pod) (string, error) {
		got, err := framework.L.Client().CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return "", err
		}
		return got.Spec.SchedulerName, nil
	}
	// The API server loads a new policy within seconds.
	framework.WaitFor(t, ctx, 60*time.Second, "the policy to set schedulerName on a Neuron pod", func(ctx context.Context) (bool, string, error) {
		got, err := created(ctx, pod("probe", "", false, neuron("aws.amazon.com/neuron", 4)))
		if err != nil {
			return false, err.Error(), nil
		}
		return got == "my-scheduler", "schedulerName " + got, nil
	})
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want string
	}{
		{"neuron devices, no schedulerName", pod("devices", "", false, neuron("aws.amazon.com/neuron", 4)), "my-scheduler"},
		{"neurondevice, default-scheduler named", pod("alias", "default-scheduler", false, neuron("aws.amazon.com/neurondevice", 2)), "my-scheduler"},
		{"neuroncore in an init container", pod("init", "", true, neuron("aws.amazon.com/neuroncore", 2)), "my-scheduler"},
		{"another scheduler is kept", pod("volcano", "volcano", false, neuron("aws.amazon.com/neuron", 1)), "volcano"},
		{"no Neuron resource", pod("plain", "", false, corev1.ResourceList{corev1.ResourceCPU: *resourceQuantity(1)}), "default-scheduler"},
		{"no resources at all", pod("bare", "", false, nil), "default-scheduler"},
	} {
		got, err := created(ctx, tc.pod)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if got != tc.want {
			t.Errorf("%s: schedulerName %q, want %q", tc.name, got, tc.want)
		}
	}
}

func resourceQuantity(n int64) *resource.Quantity { return resource.NewQuantity(n, resource.DecimalSI) }
