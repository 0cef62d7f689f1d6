package framework

import (
	"context"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	apiv1 "github.com/kube-neuron/kube-neuron/api/neuron.aws.com/v1"
)

// EnsureDeviceClass creates the DeviceClass neuron.aws.com the chart ships, unless it exists.
func EnsureDeviceClass(t *testing.T, ctx context.Context) {
	t.Helper()
	dc := &resourcev1.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: apiv1.DriverName},
		Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{
			CEL: &resourcev1.CELDeviceSelector{Expression: `device.driver == "` + apiv1.DriverName + `"`},
		}}},
	}
	if _, err := L.Client().ResourceV1().DeviceClasses().Create(ctx, dc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}
