// Package chart holds the tests of the Helm chart in deployments/helm/kube-neuron. They render
// the chart with a real helm binary, built from the pinned tools module in hack/helm (the product
// module never imports helm), and decode what it renders into the Kubernetes API types.
//
// Set KUBE_NEURON_HELM to a helm binary to skip the build; otherwise the tests run
// hack/helm/build.sh, which builds helm once (a few minutes) and reuses it afterwards.
package chart
