#!/usr/bin/env bash
# Builds neuron-kube-scheduler (kube-scheduler v1.36.3 with the NeuronTopology plugin, the module
# in scheduler/) into a cache directory keyed by its sources and the engine's (internal/), so a
# clean clone on the same machine reuses it. RACE=1 builds it with the race detector (the e2e
# tests do; the first such build compiles the scheduler's whole dependency tree again).
# Usage: [RACE=1] hack/build-scheduler.sh   (prints the directory holding neuron-kube-scheduler)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
cd "$repo"

KUBE_VERSION=v1.36.3
race=${RACE:-0}
key=$(
  {
    find scheduler internal -name '*.go' ! -name '*_test.go' -type f | LC_ALL=C sort | xargs sha256sum
    sha256sum go.mod go.sum scheduler/go.mod scheduler/go.sum internal/topology/catalog.yaml "$here/build-scheduler.sh"
    go env GOVERSION GOARCH
    echo "race=$race"
  } | sha256sum | cut -c1-16
)
cache=${KUBE_NEURON_TOOLS_CACHE:-$(go env GOCACHE)/kube-neuron-tools}
flavour=neuron-kube-scheduler$([ "$race" = 1 ] && echo .race || true)
bin="$cache/$flavour-$key"
if [ -x "$bin/neuron-kube-scheduler" ]; then
  echo "$bin"
  exit 0
fi
mkdir -p "$bin"
ldflags=""
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $p.gitVersion=$KUBE_VERSION -X $p.gitMajor=1 -X $p.gitMinor=36 -X $p.gitTreeState=clean"
done
flags=(-trimpath -ldflags "-s -w $ldflags")
if [ "$race" = 1 ]; then
  flags=(-race -ldflags "$ldflags")
  echo "build-scheduler: building neuron-kube-scheduler with -race (the first build compiles the kube-scheduler tree with the race detector: several minutes)" >&2
else
  echo "build-scheduler: building neuron-kube-scheduler" >&2
fi
cd scheduler
CGO_ENABLED=$race GOFLAGS=-mod=mod go build "${flags[@]}" -o "$bin/neuron-kube-scheduler.tmp" ./cmd/neuron-kube-scheduler
mv "$bin/neuron-kube-scheduler.tmp" "$bin/neuron-kube-scheduler"
# Older builds of the same flavour are of other source trees (other worktrees share the cache):
# keep the three newest.
ls -1dt "$cache/$flavour"-* 2>/dev/null | tail -n +4 | xargs -r rm -rf
echo "$bin"
