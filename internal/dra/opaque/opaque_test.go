package opaque

import (
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"

	apiv1 "github.com/kube-neuron/kube-neuron/api/neuron.aws.com/v1"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

func config(params string, requests ...string) resourceapi.DeviceAllocationConfiguration {
	return resourceapi.DeviceAllocationConfiguration{Source: resourceapi.AllocationConfigSourceClaim, Requests: requests,
		DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
			Driver: apiv1.DriverName, Parameters: runtime.RawExtension{Raw: []byte(params)},
		}}}
}

// TestValidateNew: the checks the driver makes when it prepares a claim, on a new node of a type.
func TestValidateNew(t *testing.T) {
	const (
		lnc1 = `{"apiVersion":"neuron.aws.com/v1","kind":"NeuronConfig","logicalNeuronCore":1}`
		lnc2 = `{"apiVersion":"neuron.aws.com/v1","kind":"NeuronConfig","logicalNeuronCore":2}`
		us2  = `{"apiVersion":"neuron.aws.com/v1","kind":"UltraServerConfig","ultraserverMode":2}`
		us5  = `{"apiVersion":"neuron.aws.com/v1","kind":"UltraServerConfig","ultraserverMode":5}`
	)
	cat := topology.DefaultCatalog()
	for _, tc := range []struct {
		name     string
		configs  []resourceapi.DeviceAllocationConfiguration
		requests []string
		typ      string
		err      string // "" for none
	}{
		{name: "no config", requests: []string{"n"}, typ: "trn1.2xlarge"},
		{name: "LNC on trn1.2xlarge", configs: []resourceapi.DeviceAllocationConfiguration{config(lnc1)}, requests: []string{"n"}, typ: "trn1.2xlarge",
			err: "LNC value is not configurable for instance type trn1.2xlarge"},
		{name: "LNC on trn2", configs: []resourceapi.DeviceAllocationConfiguration{config(lnc1)}, requests: []string{"n"}, typ: "trn2.48xlarge"},
		{name: "a config for another request", configs: []resourceapi.DeviceAllocationConfiguration{config(lnc1, "other")}, requests: []string{"n"}, typ: "trn1.2xlarge"},
		{name: "a config for the parent of a subrequest", configs: []resourceapi.DeviceAllocationConfiguration{config(lnc1, "n")}, requests: []string{"n/a"}, typ: "inf2.xlarge",
			err: "LNC value is not configurable for instance type inf2.xlarge"},
		{name: "the later config wins", configs: []resourceapi.DeviceAllocationConfiguration{config(lnc2), config(lnc1)}, requests: []string{"n"}, typ: "trn2.48xlarge"},
		{name: "two LNC values", configs: []resourceapi.DeviceAllocationConfiguration{config(lnc1, "a"), config(lnc2, "b")}, requests: []string{"a", "b"}, typ: "trn2.48xlarge",
			err: "the claim's configs ask for logicalNeuronCore 1 and 2"},
		{name: "mode 2 on a new trn2u node: its 2-node group is taken to be reported", configs: []resourceapi.DeviceAllocationConfiguration{config(us2)}, requests: []string{"n"}, typ: "trn2u.48xlarge"},
		{name: "UltraServerConfig outside an UltraServer", configs: []resourceapi.DeviceAllocationConfiguration{config(us2)}, requests: []string{"n"}, typ: "trn2.48xlarge",
			err: "UltraServerConfig needs a node of a Trn2 UltraServer (trn2u.48xlarge), but a new node is a trn2.48xlarge outside any UltraServer"},
		{name: "an invalid mode", configs: []resourceapi.DeviceAllocationConfiguration{config(us5)}, requests: []string{"n"}, typ: "trn2u.48xlarge",
			err: "opaque config 0 (from the claim): ultraserverMode 5 is not allowed in UltraServerConfig: use 1, 2 or 4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			typ, ok := cat.Lookup(tc.typ)
			if !ok {
				t.Fatalf("%s is not in the catalog", tc.typ)
			}
			s, err := Resolve(tc.configs, tc.requests)
			if err == nil {
				err = s.ValidateNew(typ)
			}
			switch {
			case tc.err == "" && err != nil:
				t.Errorf("error %q, want none", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("error %v, want %q", err, tc.err)
			}
		})
	}
}
