package framework

import "sync"

var lwsOnce = sync.OnceValues(func() (string, error) { return builtBy("KUBE_NEURON_LWS_DIR", "lws") })

// LWSDir returns the directory of the LeaderWorkerSet controller and its manifests
// ($KUBE_NEURON_LWS_DIR, or what hack/lws/build.sh prints; it builds them the first time).
// MainOptions calls it for a lab with Options.LWS and no LWSDir.
func LWSDir() (string, error) { return lwsOnce() }
