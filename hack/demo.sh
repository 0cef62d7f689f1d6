#!/usr/bin/env bash
# The kube-neuron demo: the topology engine through kubectl-neuron. The lab (a real control
# plane with simulated Neuron nodes) will join it here.
set -euo pipefail
cd "$(dirname "$0")/.."
kn=bin/kubectl-neuron

if [ -t 1 ]; then bold=$'\033[1m' plain=$'\033[0m'; else bold="" plain=""; fi
step() { printf '\n%s== %s%s\n$ %s\n' "$bold" "$1" "$plain" "${*:2}"; "${@:2}"; }

step "The instance catalog" $kn catalog
step "4 connected devices on a trn1.32xlarge whose device 1 is in use: best fit stays in the used half" \
  $kn plan --instance-type trn1.32xlarge --request aws.amazon.com/neuron=4 --in-use-devices 1
step "9 cores on an inf1.6xlarge: cores 0-8 on devices 0, 1, 2 (the Neuron documentation's example)" \
  $kn plan --instance-type inf1.6xlarge --request aws.amazon.com/neuroncore=9 -o json
step "3 devices on an inf2.48xlarge ring with devices 2-9 in use: the ring wraps" \
  $kn plan --instance-type inf2.48xlarge --request aws.amazon.com/neuron=3 --in-use-devices 2-9
step "16 cores on a trn2.48xlarge at LNC 2 (4 logical cores per device)" \
  $kn plan --instance-type trn2.48xlarge --request aws.amazon.com/neuroncore=16
printf '\n%s== 7 devices on a trn1.32xlarge: refused with the Neuron message (exit 1)%s\n' "$bold" "$plain"
$kn plan --instance-type trn1.32xlarge --request aws.amazon.com/neuron=7 || echo "(exit $?)"
step "A partly used trn2.48xlarge" $kn topology --instance-type trn2.48xlarge --in-use-devices 0-3 --in-use-cores 17,18,40
step "An UltraServer node, a switched trn3 and an inf1 chain" \
  bash -c "$kn topology --instance-type trn2u.48xlarge --lnc 1 && $kn topology --instance-type trn3.48xlarge --in-use-devices 0,5 && $kn topology --instance-type inf1.6xlarge --in-use-cores 0-1"
step "Best-fit against first-fit on the same seeded streams (2,000 requests, 12 nodes, 90 % load)" \
  $kn simulate --compare --seeds 1-5
