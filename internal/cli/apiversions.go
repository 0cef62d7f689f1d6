package cli

import "fmt"

// AssumedKubernetes is the cluster `kubectl-neuron check` assumes: a Kubernetes release that
// serves resource.k8s.io/v1 (1.34 and later) with its API server's default API versions.
const AssumedKubernetes = "1.34"

// servedAPIVersions are the apiVersions a Kubernetes 1.34 or later API server serves by default
// for the kinds check reads.
var servedAPIVersions = map[string]string{
	"List":                  "v1",
	"Pod":                   "v1",
	"PodTemplate":           "v1",
	"ReplicationController": "v1",
	"Deployment":            "apps/v1",
	"ReplicaSet":            "apps/v1",
	"StatefulSet":           "apps/v1",
	"DaemonSet":             "apps/v1",
	"Job":                   "batch/v1",
	"CronJob":               "batch/v1",
	"ResourceClaim":         "resource.k8s.io/v1",
	"ResourceClaimTemplate": "resource.k8s.io/v1",
	"DeviceClass":           "resource.k8s.io/v1",
}

// retiredAPIVersions say why an apiVersion that older manifests use is not served.
var retiredAPIVersions = map[string]string{
	"extensions/v1beta1": "Kubernetes 1.16 stopped serving it for workloads",
	"apps/v1beta1":       "Kubernetes 1.16 stopped serving it",
	"apps/v1beta2":       "Kubernetes 1.16 stopped serving it",
	"batch/v1beta1":      "Kubernetes 1.25 stopped serving it",
	"batch/v2alpha1":     "an alpha version that Kubernetes no longer serves",
	"resource.k8s.io/v1beta1": "beta versions of resource.k8s.io are served only when the API server enables them " +
		"(--runtime-config=resource.k8s.io/v1beta1=true), so kubectl apply fails with \"no matches for kind\"",
	"resource.k8s.io/v1beta2": "beta versions of resource.k8s.io are served only when the API server enables them " +
		"(--runtime-config=resource.k8s.io/v1beta2=true), so kubectl apply fails with \"no matches for kind\"",
	"resource.k8s.io/v1alpha2": "an alpha version of an earlier DRA design that Kubernetes no longer serves",
	"resource.k8s.io/v1alpha3": "an alpha version, served (if at all) only when the API server enables it",
}

// apiVersionProblem says what is wrong with the apiVersion of an object of a kind check reads,
// or "" when a Kubernetes 1.34 or later cluster serves it (or the kind is not one check reads).
func apiVersionProblem(apiVersion, kind string) string {
	want, known := servedAPIVersions[kind]
	if !known || apiVersion == want {
		return ""
	}
	if apiVersion == "" {
		return fmt.Sprintf("the %s has no apiVersion, and kubectl apply refuses it: add apiVersion: %s", kind, want)
	}
	msg := fmt.Sprintf("apiVersion %s is not served for %s by Kubernetes %s and later with the API server's default API versions (what check assumes)", apiVersion, kind, AssumedKubernetes)
	if why, ok := retiredAPIVersions[apiVersion]; ok {
		msg += ": " + why
	}
	msg += fmt.Sprintf(". Use apiVersion: %s", want)
	switch apiVersion {
	case "resource.k8s.io/v1beta1":
		msg += " (Kubernetes 1.34 and later serve it); in v1 a request's deviceClassName, selectors, allocationMode and count move under exactly"
	case "resource.k8s.io/v1beta2":
		msg += " (Kubernetes 1.34 and later serve it; its layout is v1beta2's)"
	}
	return msg
}
