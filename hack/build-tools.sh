#!/usr/bin/env bash
# Builds the pinned tools of hack/tools (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl, kubelet and kube-proxy for real lab nodes, staticcheck) into a cache
# directory keyed by the tools module's go.sum, so a clean clone on the same machine reuses what
# was built before.
# Usage: hack/build-tools.sh [tool ...]   (prints the bin directory on stdout)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/tools"

KUBE_VERSION=v1.36.3
key=$(cat go.mod go.sum "$here/build-tools.sh" | sha256sum | cut -c1-16)
cache=${KUBE_NEURON_TOOLS_CACHE:-$(go env GOCACHE)/kube-neuron-tools}
bin="$cache/$key/bin"
mkdir -p "$bin"

declare -A pkgs=(
  [etcd]=go.etcd.io/etcd/server/v3
  [kube-apiserver]=k8s.io/kubernetes/cmd/kube-apiserver
  [kube-controller-manager]=k8s.io/kubernetes/cmd/kube-controller-manager
  [kube-scheduler]=k8s.io/kubernetes/cmd/kube-scheduler
  [kubectl]=k8s.io/kubernetes/cmd/kubectl
  [kubelet]=k8s.io/kubernetes/cmd/kubelet
  [kube-proxy]=k8s.io/kubernetes/cmd/kube-proxy
  [staticcheck]=honnef.co/go/tools/cmd/staticcheck
)
want=("$@")
[ ${#want[@]} -gt 0 ] || want=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy staticcheck)

ldflags=""
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $p.gitVersion=$KUBE_VERSION -X $p.gitMajor=1 -X $p.gitMinor=36 -X $p.gitTreeState=clean"
done

for t in "${want[@]}"; do
  pkg=${pkgs[$t]:-}
  [ -n "$pkg" ] || { echo "build-tools: unknown tool $t (known: ${!pkgs[*]})" >&2; exit 2; }
  if [ -x "$bin/$t" ]; then continue; fi
  echo "build-tools: building $t ($pkg); the first build of the Kubernetes binaries takes several minutes" >&2
  CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w $ldflags" -o "$bin/$t.tmp" "$pkg"
  mv "$bin/$t.tmp" "$bin/$t"
done
echo "$bin"
