#!/usr/bin/env bash
# Installs the Debian packages real lab nodes need, when they are missing:
#   iptables        the kubelet's and kube-proxy's rules, inside each node's network namespace
#   libseccomp-dev  runc's seccomp support (cgo), with pkg-config to find it
# Everything else a real node runs is built from the Go module proxy (hack/node/build.sh,
# hack/build-tools.sh). Installing needs root and Debian's package archive; the script changes
# nothing when every package is there.
# Usage: hack/node/deps.sh [--check]   (--check: only report what is missing, exit 1 if any)
set -euo pipefail

packages=(iptables libseccomp-dev pkg-config)
missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "${1:-}" = "--check" ]; then
  echo "missing Debian packages for real lab nodes: ${missing[*]} (hack/node/deps.sh installs them)" >&2
  exit 1
fi
if [ "$(id -u)" != 0 ]; then
  echo "hack/node/deps.sh: real lab nodes need the Debian packages ${missing[*]}; install them as root" \
    "(apt-get install ${missing[*]}), or set KUBE_NEURON_REAL_NODES=0 to run without real nodes" >&2
  exit 1
fi
echo "hack/node/deps.sh: installing ${missing[*]} from Debian" >&2
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y --no-install-recommends "${missing[@]}" >&2; then
  apt-get update >&2
  apt-get install -y --no-install-recommends "${missing[@]}" >&2
fi
