#!/usr/bin/env bash
# Builds the pinned helm binary of this tools module (the `tool` directive in go.mod) once into
# $(go env GOCACHE)/kube-neuron-tools/helm-<key>/helm, where <key> is the first 16 hex characters
# of the sha256 of go.mod and go.sum, and prints the binary's path on stdout. Later runs reuse it.
# The product module never imports helm: this module exists so it does not have to.
# Usage: hack/helm/build.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"

key=$(cat go.mod go.sum | sha256sum | cut -c1-16)
cache=${KUBE_NEURON_TOOLS_CACHE:-$(go env GOCACHE)/kube-neuron-tools}
dir="$cache/helm-$key"
bin="$dir/helm"
if [ -x "$bin" ]; then
  echo "$bin"
  exit 0
fi
mkdir -p "$dir"

# The same ldflags as helm's own Makefile: the release version, and the Kubernetes version that
# `helm template` and `helm lint` assume (.Capabilities.KubeVersion), from the client-go it uses.
helm_version=$(go list -m -f '{{.Version}}' helm.sh/helm/v3)
client_go=$(go list -m -f '{{.Version}}' k8s.io/client-go)   # v0.MINOR.PATCH
kube_minor=$(echo "$client_go" | cut -d. -f2)
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$helm_version -X helm.sh/helm/v3/internal/version.metadata="
for p in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
  ldflags+=" -X $p.k8sVersionMajor=1 -X $p.k8sVersionMinor=$kube_minor"
done

echo "hack/helm: building helm $helm_version into $dir (the first build takes a few minutes)" >&2
tmp=$(mktemp "$dir/helm.tmp.XXXXXX")
trap 'rm -f "$tmp"' EXIT
CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$tmp" helm.sh/helm/v3/cmd/helm
mv -f "$tmp" "$bin"
trap - EXIT
echo "$bin"
