#!/usr/bin/env bash
# Makes everything real lab nodes need and prints the neuron-lab flags that name it:
#   --node-bin-dir DIR --images-dir DIR --lab-images-dir DIR
# It installs the Debian packages (hack/node/deps.sh, as root), builds containerd, runc, the CNI
# plugins and CoreDNS (hack/node/build.sh), the kubelet and kube-proxy (hack/build-tools.sh) and
# the images (hack/lab-images.sh); each step is cached and skipped once done.
# Usage: hack/real-nodes.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
"$here/node/deps.sh" >&2
"$here/build-tools.sh" kubelet kube-proxy >/dev/null
node=$("$here/node/build.sh")
read -r images lab < <("$here/lab-images.sh")
echo "--node-bin-dir $node --images-dir $images --lab-images-dir $lab"
