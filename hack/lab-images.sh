#!/usr/bin/env bash
# Builds the images real lab nodes pull from the lab's registry, once per source tree:
#   bin/images/<component>.tar      the components (make images PLATFORMS=linux/amd64)
#   bin/images/lab/<image>.tar      pause, stand-in, kube-scheduler (my-scheduler), coredns
# A stamp of the sources the images come from (bin/images/.lab-key) skips the build when
# nothing changed. Prints "<components dir> <lab images dir>" on stdout.
# Usage: hack/lab-images.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
out="$repo/bin/images"
lab="$out/lab"

tools=$("$here/build-tools.sh" kube-scheduler)
node=$("$here/node/build.sh")
platform=linux/$(go env GOARCH)

# What the images are made of: the product's Go sources, neuron-kube-scheduler's module
# (scheduler/), the image builder, the prebuilt binaries and the chart's appVersion (the tag).
key=$(
  cd "$repo"
  {
    git ls-files -s -- go.mod go.sum cmd internal api scheduler test/images hack/images deployments/helm/kube-neuron/Chart.yaml 2>/dev/null
    git diff HEAD -- go.mod go.sum cmd internal api scheduler test/images hack/images deployments/helm/kube-neuron/Chart.yaml 2>/dev/null
    git ls-files --others --exclude-standard -- cmd internal api scheduler test/images hack/images 2>/dev/null | xargs -r sha256sum
    echo "$tools $node $platform"
  } | sha256sum | cut -c1-16
)
if [ -f "$out/.lab-key" ] && [ "$(cat "$out/.lab-key")" = "$key" ]; then
  echo "$out $lab"
  exit 0
fi
rm -f "$out/.lab-key"
echo "hack/lab-images.sh: building the lab's images ($platform)" >&2
(cd "$repo/hack/images" && go run . -repo ../.. -platforms "$platform" -out "$out" >&2)
(cd "$repo/hack/images" && go run . -repo ../.. -lab -platforms "$platform" -out "$lab" \
  -prebuilt "kube-scheduler=$tools/kube-scheduler@v1.36.3" \
  -prebuilt "coredns=$node/coredns@$("$node/coredns" -version 2>/dev/null | sed -n 's/^CoreDNS-\(.*\)$/v\1/p' | head -1)" >&2)
echo "$key" > "$out/.lab-key"
echo "$out $lab"
