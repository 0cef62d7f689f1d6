package v1

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Names of the driver, the API group and its version.
const (
	DriverName = "neuron.aws.com"
	GroupName  = "neuron.aws.com"
	Version    = "v1"
)

// The apiVersions Decode accepts. All three decode to the same Go types: APIVersion is current,
// the two beta spellings are the ones the published Neuron DRA examples use.
const (
	APIVersion             = GroupName + "/" + Version
	APIVersionBeta         = GroupName + "/v1alphav1"
	APIVersionResourceBeta = "resource." + GroupName + "/v1alphav1"
)

// The kinds Decode knows.
const (
	NeuronConfigKind      = "NeuronConfig"
	UltraServerConfigKind = "UltraServerConfig"
)

// Field names and allowed values, as the messages spell them.
const (
	fieldAPIVersion          = "apiVersion"
	fieldKind                = "kind"
	fieldLogicalNeuronCore   = "logicalNeuronCore"
	fieldUltraserverMode     = "ultraserverMode"
	allowedLogicalNeuronCore = "1 or 2"
	allowedUltraserverMode   = "1, 2 or 4"
)

// APIVersions returns the accepted apiVersions, current first.
func APIVersions() []string {
	return []string{APIVersion, APIVersionBeta, APIVersionResourceBeta}
}

// Kinds returns the kinds Decode knows.
func Kinds() []string {
	return []string{NeuronConfigKind, UltraServerConfigKind}
}

// Config is a decoded opaque configuration: *NeuronConfig or *UltraServerConfig. Consumers tell
// them apart with a type switch.
type Config interface {
	// Validate reports a value the driver cannot apply on any node.
	Validate() error
}

var (
	_ Config = (*NeuronConfig)(nil)
	_ Config = (*UltraServerConfig)(nil)
)

// NeuronConfig sets the logical NeuronCore size (LNC) of the devices of the requests it applies
// to: 1 exposes every physical core, 2 pairs them. Whether the node's instance type lets LNC be
// configured at all is the driver's decision on the node, not Validate's.
type NeuronConfig struct {
	metav1.TypeMeta `json:",inline"`
	// LogicalNeuronCore is 1 or 2.
	LogicalNeuronCore int `json:"logicalNeuronCore"`
}

// Validate reports a logicalNeuronCore other than 1 or 2.
func (c *NeuronConfig) Validate() error {
	if c.LogicalNeuronCore != 1 && c.LogicalNeuronCore != 2 {
		return fmt.Errorf("%s %d is not allowed in %s: use %s", fieldLogicalNeuronCore, c.LogicalNeuronCore, NeuronConfigKind, allowedLogicalNeuronCore)
	}
	return nil
}

// UltraServerConfig declares how many nodes of a trn2u UltraServer the workload spans: 1, 2 or
// 4. The driver hands it to the Neuron runtime and collectives in the container.
type UltraServerConfig struct {
	metav1.TypeMeta `json:",inline"`
	// UltraserverMode is 1, 2 or 4.
	UltraserverMode int `json:"ultraserverMode"`
}

// Validate reports an ultraserverMode other than 1, 2 or 4.
func (c *UltraServerConfig) Validate() error {
	switch c.UltraserverMode {
	case 1, 2, 4:
		return nil
	}
	return fmt.Errorf("%s %d is not allowed in %s: use %s", fieldUltraserverMode, c.UltraserverMode, UltraServerConfigKind, allowedUltraserverMode)
}
