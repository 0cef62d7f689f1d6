package dra

import (
	"fmt"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
)

// BenchmarkPrepareClaim measures what NodePrepareResources and NodeUnprepareResources cost the
// driver per claim (the gRPC and kubelet sides excluded): plan, conflict check, the CDI spec
// written, the checkpoint written and synced, and the same undone.
func BenchmarkPrepareClaim(b *testing.B) {
	for _, tc := range []struct {
		name    string
		devices int
		config  string
	}{
		{"1-device", 1, ""},
		{"4-devices", 4, ""},
		{"16-devices-lnc1", 16, `{"apiVersion":"neuron.aws.com/v1","kind":"NeuronConfig","logicalNeuronCore":1}`},
	} {
		b.Run(tc.name, func(b *testing.B) {
			env := &driverEnv{}
			d := newTestDriver(b, env)
			var names []string
			for i := range tc.devices {
				names = append(names, DeviceName(i))
			}
			i := 0
			var prepare time.Duration
			for b.Loop() {
				cb := testClaim(fmt.Sprintf("c%d", i)).Device("neurons", "trn2-a", names...)
				if tc.config != "" {
					cb.Config(tc.config)
				}
				c := cb.Obj()
				i++
				start := time.Now()
				out, err := d.PrepareResourceClaims(b.Context(), []*resourceapi.ResourceClaim{c})
				prepare += time.Since(start)
				if err != nil || out[c.UID].Err != nil {
					b.Fatal(err, out[c.UID].Err)
				}
				un, err := d.UnprepareResourceClaims(b.Context(), []kubeletplugin.NamespacedObject{{NamespacedName: types.NamespacedName{Namespace: c.Namespace, Name: c.Name}, UID: c.UID}})
				if err != nil || un[c.UID] != nil {
					b.Fatal(err, un[c.UID])
				}
			}
			b.ReportMetric(float64(prepare.Microseconds())/float64(i), "prepare-µs/claim")
		})
	}
}
