package chart

import (
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

const devicePluginPolicy = "neuron-device-plugin-node-status-policy"

// TestDevicePluginNodeStatusPolicy: the device plugin may patch nodes/status, and the policy
// keeps its service account to its own node and the condition NeuronDevicesHealthy.
func TestDevicePluginNodeStatusPolicy(t *testing.T) {
	t.Parallel()
	m := render(t)
	role := get[rbacv1.ClusterRole](t, m, "ClusterRole", "", "neuron-device-plugin")
	if !slices.ContainsFunc(role.Rules, func(r rbacv1.PolicyRule) bool {
		return slices.Equal(r.Resources, []string{"nodes/status"}) && slices.Equal(r.Verbs, []string{"patch"})
	}) {
		t.Errorf("ClusterRole neuron-device-plugin lacks patch on nodes/status: %+v", role.Rules)
	}
	spec := get[admissionregistrationv1.ValidatingAdmissionPolicy](t, m, "ValidatingAdmissionPolicy", "", devicePluginPolicy).Spec
	rules := spec.MatchConstraints.ResourceRules
	if len(rules) != 1 || !slices.Equal(rules[0].Resources, []string{"nodes/status"}) ||
		!slices.Equal(rules[0].Operations, []admissionregistrationv1.OperationType{admissionregistrationv1.Update}) {
		t.Errorf("matchConstraints = %+v, want UPDATE of nodes/status", spec.MatchConstraints)
	}
	ds := get[appsv1.DaemonSet](t, m, "DaemonSet", "kube-system", "neuron-device-plugin")
	user := "system:serviceaccount:kube-system:" + ds.Spec.Template.Spec.ServiceAccountName
	if len(spec.MatchConditions) != 1 || spec.MatchConditions[0].Expression != `request.userInfo.username == "`+user+`"` {
		t.Errorf("matchConditions = %+v, want the DaemonSet's service account %s", spec.MatchConditions, user)
	}
	var all []string
	for _, v := range spec.Validations {
		all = append(all, v.Expression)
	}
	joined := strings.Join(all, "\n")
	for _, want := range []string{"variables.userNodeName == object.metadata.name", "variables.otherConditions == variables.oldOtherConditions", "object.status.?allocatable == oldObject.status.?allocatable"} {
		if !strings.Contains(joined, want) {
			t.Errorf("validations lack %q:\n%s", want, joined)
		}
	}
	if spec.FailurePolicy == nil || *spec.FailurePolicy != admissionregistrationv1.Fail {
		t.Errorf("failurePolicy %v, want Fail", spec.FailurePolicy)
	}
	b := get[admissionregistrationv1.ValidatingAdmissionPolicyBinding](t, m, "ValidatingAdmissionPolicyBinding", "", devicePluginPolicy+"-binding")
	if b.Spec.PolicyName != devicePluginPolicy || !slices.Equal(b.Spec.ValidationActions, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}) {
		t.Errorf("binding = %+v", b.Spec)
	}

	off := render(t, "devicePlugin.validatingAdmissionPolicy=false")
	if slices.ContainsFunc(off.names(), func(s string) bool { return strings.Contains(s, devicePluginPolicy) }) {
		t.Errorf("devicePlugin.validatingAdmissionPolicy=false still renders the policy: %q", off.names())
	}
}
