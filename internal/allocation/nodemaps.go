package allocation

import (
	"crypto/sha256"
	"encoding/hex"
)

// Node annotations of the published Neuron scheduler extension: its usage maps, one boolean per
// device or core ("true": in use), comma separated. kube-neuron never reads them (usage comes
// from pods; these go stale); the scheduler extender writes them, computed from pods, only with
// --mirror-usage-annotations.
const (
	DevUsageMap  = "NEURON_DEV_USAGE_MAP"
	CoreUsageMap = "NEURON_CORE_USAGE_MAP"
	// UsageMapsMirror is written by the extender's mirror in the same patch as the maps: the
	// UsageMapsDigest of the values it wrote. A node whose maps still have that digest holds maps
	// kube-neuron wrote, which `kubectl-neuron cleanup` removes; maps written by anyone else (the
	// published extension) are left alone.
	UsageMapsMirror = "kube-neuron.io/usage-maps-mirror"
)

// UsageMapsDigest identifies a pair of usage map values: the first 16 hex characters of the
// sha256 of the device map, a newline and the core map.
func UsageMapsDigest(devMap, coreMap string) string {
	sum := sha256.Sum256([]byte(devMap + "\n" + coreMap))
	return hex.EncodeToString(sum[:8])
}
