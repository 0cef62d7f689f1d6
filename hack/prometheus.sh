#!/usr/bin/env bash
# Fetches Debian's prometheus package (the pinned version below) once into
# $(go env GOCACHE)/kube-neuron-tools/prometheus-<version>/ and prints the path of the prometheus
# binary on stdout; promtool is next to it. Later runs reuse it and download nothing. The e2e test
# of the Grafana dashboard (test/e2e/deviceplugin/dashboard_test.go) runs this Prometheus against
# the lab's node agents. apt-get checks the package against the signed Debian archive index.
# Usage: hack/prometheus.sh
set -euo pipefail

# Debian bookworm's prometheus (bookworm/main, amd64 and arm64). PROMETHEUS_DEB_VERSION picks
# another version the machine's apt sources have.
version=${PROMETHEUS_DEB_VERSION:-2.42.0+ds-5+deb12u1}

cache=${KUBE_NEURON_TOOLS_CACHE:-$(go env GOCACHE)/kube-neuron-tools}
dir="$cache/prometheus-$version"
bin="$dir/prometheus"
if [ -x "$bin" ] && [ -x "$dir/promtool" ]; then
  echo "$bin"
  exit 0
fi
mkdir -p "$dir"

tmp=$(mktemp -d "$dir/fetch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "hack/prometheus: downloading Debian's prometheus $version into $dir (about 19 MB, once)" >&2
# A fresh machine may have no package lists yet: refresh them once, as hack/node/deps.sh does.
if ! (cd "$tmp" && apt-get download -q "prometheus=$version" >&2) &&
  ! { apt-get update -q >&2 && (cd "$tmp" && apt-get download -q "prometheus=$version" >&2); }; then
  echo "hack/prometheus: apt-get download prometheus=$version failed; run apt-get update, or set PROMETHEUS_DEB_VERSION to a version apt-cache policy prometheus lists" >&2
  exit 1
fi
dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/root"
for b in prometheus promtool; do
  [ -x "$tmp/root/usr/bin/$b" ] || { echo "hack/prometheus: the package has no usr/bin/$b" >&2; exit 1; }
done
"$tmp/root/usr/bin/prometheus" --version >&2
mv -f "$tmp/root/usr/bin/promtool" "$dir/promtool"
mv -f "$tmp/root/usr/bin/prometheus" "$bin"
echo "$bin"
