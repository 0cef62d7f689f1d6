package dra

import (
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/kube-neuron/kube-neuron/internal/neuron"
)

func TestPlanClaim(t *testing.T) {
	trn2 := testNode(t, "trn2-a", "trn2.48xlarge", 0, nil)
	trn1 := testNode(t, "trn1-s", "trn1.2xlarge", 0, nil)
	inf2 := testNode(t, "inf2-a", "inf2.48xlarge", 0, nil)
	us := testNode(t, "us-1", "trn2u.48xlarge", 0, &neuron.UltraServer{ServerID4: "00000000000000a4", ServerID2: "00000000000000b2", NodeID4: 3, NodeID2: 1, Mode: "X4,X2H"})
	usNo2 := testNode(t, "us-2", "trn2u.48xlarge", 0, &neuron.UltraServer{ServerID4: "00000000000000a4", NodeID4: 1, NodeID2: -1})

	lnc1 := `{"apiVersion":"neuron.aws.com/v1alphav1","kind":"NeuronConfig","logicalNeuronCore":1}`
	lnc2 := `{"apiVersion":"neuron.aws.com/v1","kind":"NeuronConfig","logicalNeuronCore":2}`
	us4 := `{"apiVersion":"neuron.aws.com/v1alphav1","kind":"UltraServerConfig","ultraserverMode":4}`

	for _, tc := range []struct {
		name    string
		info    NodeInfo
		claim   *resourceapi.ResourceClaim
		env     map[string]string
		indexes []int
		err     string
	}{
		{
			name:    "four devices at the default LNC 2",
			info:    trn2,
			claim:   testClaim("c").Device("neurons", "trn2-a", "neurondevice5", "neurondevice4", "neurondevice7", "neurondevice6").Obj(),
			env:     map[string]string{EnvVisibleCores: "16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31", EnvVisibleDevices: "4,5,6,7"},
			indexes: []int{4, 5, 6, 7},
		},
		{
			name:    "LNC 1 on trn2 (beta apiVersion)",
			info:    trn2,
			claim:   testClaim("c").Device("neurons", "trn2-a", "neurondevice1").Config(lnc1, "neurons").Obj(),
			env:     map[string]string{EnvVisibleCores: "8,9,10,11,12,13,14,15", EnvVisibleDevices: "1", EnvLNC: "1"},
			indexes: []int{1},
		},
		{
			name:  "LNC on trn1.2xlarge: the seed's message",
			info:  trn1,
			claim: testClaim("c").Device("neurons", "trn1-s", "neurondevice0").Config(`{"apiVersion":"neuron.aws.com/v1","kind":"NeuronConfig","logicalNeuronCore":1}`, "neurons").Obj(),
			err:   "error applying config: LNC value is not configurable for instance type trn1.2xlarge",
		},
		{
			name:  "LNC on inf2",
			info:  inf2,
			claim: testClaim("c").Device("neurons", "inf2-a", "neurondevice0").Config(lnc2).Obj(),
			err:   "LNC value is not configurable for instance type inf2.48xlarge",
		},
		{
			name:    "a config for one request sets the LNC of the whole claim",
			info:    trn2,
			claim:   testClaim("c").Device("a", "trn2-a", "neurondevice0").Device("b", "trn2-a", "neurondevice1").Config(lnc1, "b").Obj(),
			err:     "",
			env:     map[string]string{EnvVisibleCores: "0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15", EnvVisibleDevices: "0,1", EnvLNC: "1"},
			indexes: []int{0, 1},
		},
		{
			name:  "two LNCs in one claim",
			info:  trn2,
			claim: testClaim("c").Device("a", "trn2-a", "neurondevice0").Device("b", "trn2-a", "neurondevice1").Config(lnc1, "a").Config(lnc2, "b").Obj(),
			err:   "ask for logicalNeuronCore 1 and 2",
		},
		{
			name:    "claim config overrides the class config",
			info:    trn2,
			claim:   testClaim("c").config(DriverName, resourceapi.AllocationConfigSourceClass, lnc2).Device("n", "trn2-a", "neurondevice0").Config(lnc1).Obj(),
			env:     map[string]string{EnvVisibleCores: "0,1,2,3,4,5,6,7", EnvVisibleDevices: "0", EnvLNC: "1"},
			indexes: []int{0},
		},
		{
			name:    "another driver's config is not ours to read",
			info:    trn2,
			claim:   testClaim("c").config("efa.amazonaws.com", resourceapi.AllocationConfigSourceClaim, `{"whatever":true}`).Device("n", "trn2-a", "neurondevice0").Obj(),
			env:     map[string]string{EnvVisibleCores: "0,1,2,3", EnvVisibleDevices: "0"},
			indexes: []int{0},
		},
		{
			name:  "unknown kind",
			info:  trn2,
			claim: testClaim("c").Device("n", "trn2-a", "neurondevice0").Config(`{"apiVersion":"neuron.aws.com/v1","kind":"GPUConfig"}`).Obj(),
			err:   "error applying config: opaque config 0 (from the claim): ",
		},
		{
			name:  "unknown field",
			info:  trn2,
			claim: testClaim("c").Device("n", "trn2-a", "neurondevice0").Config(`{"apiVersion":"neuron.aws.com/v1","kind":"NeuronConfig","logicalNeuronCores":1}`).Obj(),
			err:   "logicalNeuronCores",
		},
		{
			name:    "UltraServer node device with mode 4",
			info:    us,
			claim:   testClaim("c").Device("neurons", "us-1", NodeDeviceName).Config(us4, "neurons").Obj(),
			env:     map[string]string{EnvVisibleCores: "0-63", EnvVisibleDevices: "0-15", EnvUltraServerMode: "1", EnvUltraServerServerID: "00000000000000a4", EnvUltraServerNodeID: "3"},
			indexes: []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
		},
		{
			name:    "UltraServer mode 2 uses the 2-node group",
			info:    us,
			claim:   testClaim("c").Device("neurons", "us-1", NodeDeviceName).Config(`{"apiVersion":"neuron.aws.com/v1","kind":"UltraServerConfig","ultraserverMode":2}`).Obj(),
			env:     map[string]string{EnvVisibleCores: "0-63", EnvVisibleDevices: "0-15", EnvUltraServerMode: "2", EnvUltraServerServerID: "00000000000000b2", EnvUltraServerNodeID: "1"},
			indexes: []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
		},
		{
			name:  "UltraServer mode 2 without a 2-node group",
			info:  usNo2,
			claim: testClaim("c").Device("neurons", "us-2", NodeDeviceName).Config(`{"apiVersion":"neuron.aws.com/v1","kind":"UltraServerConfig","ultraserverMode":2}`).Obj(),
			err:   "ultraserverMode 2 needs the node's 2-node group",
		},
		{
			name:  "an invalid ultraserverMode",
			info:  us,
			claim: testClaim("c").Device("neurons", "us-1", NodeDeviceName).Config(`{"apiVersion":"neuron.aws.com/v1","kind":"UltraServerConfig","ultraserverMode":3}`).Obj(),
			err:   "error applying config: opaque config 0 (from the claim): ultraserverMode 3 is not allowed in UltraServerConfig: use 1, 2 or 4",
		},
		{
			name:  "UltraServerConfig outside an UltraServer",
			info:  trn2,
			claim: testClaim("c").Device("n", "trn2-a", "neurondevice0").Config(us4).Obj(),
			err:   "UltraServerConfig needs a node of a Trn2 UltraServer",
		},
		{
			name:  "node device on a node outside an UltraServer",
			info:  trn2,
			claim: testClaim("c").Device("n", "trn2-a", NodeDeviceName).Obj(),
			err:   "is not part of an UltraServer",
		},
		{
			name:  "device of another pool",
			info:  trn2,
			claim: testClaim("c").Device("n", "trn2-b", "neurondevice0").Obj(),
			err:   "allocated from pool trn2-b, but this is node trn2-a",
		},
		{
			name:  "device the node does not have",
			info:  trn1,
			claim: testClaim("c").Device("n", "trn1-s", "neurondevice1").Obj(),
			err:   "is not a device of node trn1-s, which has neurondevice0 to neurondevice0",
		},
		{
			name:  "no device of ours",
			info:  trn2,
			claim: &resourceapi.ResourceClaim{Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{}}},
			err:   "has no device of driver neuron.aws.com",
		},
		{
			name:  "not allocated",
			info:  trn2,
			claim: &resourceapi.ResourceClaim{},
			err:   "is not allocated",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := PlanClaim(tc.info, tc.claim)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tc.env {
				if strings.Contains(v, "-") {
					v = expandRange(t, v)
				}
				if p.Env[k] != v {
					t.Errorf("env %s = %q, want %q", k, p.Env[k], v)
				}
			}
			if len(p.Env) != len(tc.env) {
				t.Errorf("env %v has other keys than %v", p.Env, tc.env)
			}
			if got := p.Indexes(); !equalInts(got, tc.indexes) {
				t.Errorf("indexes %v, want %v", got, tc.indexes)
			}
		})
	}
}

func expandRange(t *testing.T, r string) string {
	var lo, hi int
	if _, err := fmtSscanf(r, &lo, &hi); err != nil {
		t.Fatal(err)
	}
	var parts []string
	for i := lo; i <= hi; i++ {
		parts = append(parts, itoa(i))
	}
	return strings.Join(parts, ",")
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
