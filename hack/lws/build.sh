#!/usr/bin/env bash
# Builds the LeaderWorkerSet controller (module sigs.k8s.io/lws, pinned by the `tool` directive of
# this module's go.mod) once into $(go env GOCACHE)/kube-neuron-tools/lws-<key>/, where <key> is
# the first 16 hex characters of the sha256 of go.mod, go.sum and this script, and copies next to
# it the manifests the lab installs, read from the same downloaded module:
#   <dir>/lws-controller           the manager (the module's cmd package: controllers and webhooks)
#   <dir>/crds/*.yaml              config/crd/bases (the LeaderWorkerSet and DisaggregatedSet CRDs)
#   <dir>/webhook/manifests.yaml   config/webhook/manifests.yaml (the webhook configurations)
# and prints <dir> on stdout. Later runs reuse it. The module has its own go.mod so the product
# module and hack/tools do not take on the controller's dependencies.
# Usage: hack/lws/build.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"

key=$(cat go.mod go.sum build.sh | sha256sum | cut -c1-16)
cache=${KUBE_NEURON_TOOLS_CACHE:-$(go env GOCACHE)/kube-neuron-tools}
dir="$cache/lws-$key"
if [ -x "$dir/lws-controller" ] && [ -f "$dir/webhook/manifests.yaml" ]; then
  echo "$dir"
  exit 0
fi
mkdir -p "$dir"

version=$(go list -m -f '{{.Version}}' sigs.k8s.io/lws)
src=$(go mod download -json "sigs.k8s.io/lws@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -d "$src/config/crd/bases" ] || { echo "hack/lws: no config/crd/bases in $src" >&2; exit 1; }

tmp=$(mktemp -d "$dir/build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/crds" "$tmp/webhook"
cp "$src"/config/crd/bases/*.yaml "$tmp/crds/"
cp "$src/config/webhook/manifests.yaml" "$tmp/webhook/"
chmod -R u+w "$tmp"

echo "hack/lws: building the LeaderWorkerSet controller $version into $dir (the first build takes a few minutes)" >&2
ldflags="-s -w -X sigs.k8s.io/lws/pkg/version.GitVersion=$version"
CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$tmp/lws-controller" sigs.k8s.io/lws/cmd

rm -rf "$dir/crds" "$dir/webhook"
mv "$tmp/crds" "$tmp/webhook" "$dir/"
mv -f "$tmp/lws-controller" "$dir/lws-controller"
echo "$dir"
