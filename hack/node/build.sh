#!/usr/bin/env bash
# Builds what a real lab node runs besides the kubelet: containerd v2 (with ctr and the runc
# shim), runc, the CNI plugins and CoreDNS, each from the Go module proxy at the versions below
# (`go install module/pkg@version`: the module's own go.mod and go.sum, checked against the Go
# checksum database). The binaries land once in a cache directory keyed by this script, so a
# clean clone on the same machine reuses them. The kubelet and kube-proxy come from
# hack/build-tools.sh, with the control plane.
#
# runc is built with cgo and seccomp; its C library comes from Debian (hack/node/deps.sh
# installs libseccomp-dev and pkg-config). Debian's own containerd (1.6) has no CDI and its
# crun does not run on cgroup v1 hybrid machines, so containerd and runc are built here.
#
# Usage: hack/node/build.sh   (prints the bin directory on stdout)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

CONTAINERD_VERSION=v2.4.2
RUNC_VERSION=v1.4.3
CNI_PLUGINS_VERSION=v1.10.0
COREDNS_VERSION=v1.15.0

key=$(cat "$here/build.sh" | sha256sum | cut -c1-16)
cache=${KUBE_NEURON_TOOLS_CACHE:-$(go env GOCACHE)/kube-neuron-tools}
bin="$cache/node-$key/bin"
mkdir -p "$bin"

# build NAME CGO LDFLAGS TAGS PACKAGE@VERSION: go install into a temporary GOBIN, then move the
# binary into place, so an interrupted build leaves nothing that looks finished.
build() {
  local name=$1 cgo=$2 ldflags=$3 tags=$4 pkg=$5
  [ -x "$bin/$name" ] && return 0
  echo "hack/node: building $name ($pkg)" >&2
  local tmp
  tmp=$(mktemp -d "$bin/.build.XXXXXX")
  if ! GOBIN="$tmp" CGO_ENABLED=$cgo GOFLAGS= go install -trimpath -tags "$tags" -ldflags "-s -w $ldflags" "$pkg" >&2; then
    rm -rf "$tmp"
    return 1
  fi
  mv "$tmp/$(basename "${pkg%@*}")" "$bin/$name"
  rm -rf "$tmp"
}

cd "$here"
ctd=github.com/containerd/containerd/v2
ctd_ld="-X $ctd/version.Version=${CONTAINERD_VERSION#v} -X $ctd/version.Revision=module-proxy"
ctd_tags="no_btrfs no_devmapper no_zfs no_aufs"
build containerd 0 "$ctd_ld" "$ctd_tags" "$ctd/cmd/containerd@$CONTAINERD_VERSION"
build containerd-shim-runc-v2 0 "$ctd_ld" "$ctd_tags" "$ctd/cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION"
build ctr 0 "$ctd_ld" "$ctd_tags" "$ctd/cmd/ctr@$CONTAINERD_VERSION"

if ! pkg-config --exists libseccomp 2>/dev/null; then
  echo "hack/node: runc needs libseccomp-dev and pkg-config: run hack/node/deps.sh (as root)" >&2
  exit 1
fi
build runc 1 "-X main.version=${RUNC_VERSION#v} -X main.gitCommit=module-proxy" "seccomp urfave_cli_no_docs" \
  "github.com/opencontainers/runc@$RUNC_VERSION"

for p in main/bridge main/loopback ipam/host-local meta/portmap; do
  build "$(basename $p)" 0 "" "" "github.com/containernetworking/plugins/plugins/$p@$CNI_PLUGINS_VERSION"
done

build coredns 0 "-X github.com/coredns/coredns/coremain.GitCommit=module-proxy" "" \
  "github.com/coredns/coredns@$COREDNS_VERSION"

echo "$bin"
