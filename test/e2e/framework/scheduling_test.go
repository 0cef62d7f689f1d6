package framework

import (
	"slices"
	"strings"
	"testing"

	"github.com/kube-neuron/kube-neuron/internal/lab"
)

// TestScheduling: KUBE_NEURON_SCHEDULING chooses what runs my-scheduler, extender by default;
// plugin swaps the extender for neuron-kube-scheduler; anything else is refused with the choices.
func TestScheduling(t *testing.T) {
	asked := []string{lab.ComponentDevicePlugin, lab.ComponentExtender, lab.ComponentAutoscaler}
	for _, tc := range []struct {
		env, want  string
		components []string
	}{
		{"", SchedulingExtender, asked},
		{"extender", SchedulingExtender, asked},
		{"plugin", SchedulingPlugin, []string{lab.ComponentDevicePlugin, lab.ComponentKubeScheduler, lab.ComponentAutoscaler}},
	} {
		t.Setenv(SchedulingEnv, tc.env)
		if got := Scheduling(); got != tc.want {
			t.Errorf("%s=%q: Scheduling() = %q, want %q", SchedulingEnv, tc.env, got, tc.want)
		}
		if got := schedulingComponents(Scheduling(), asked); !slices.Equal(got, tc.components) {
			t.Errorf("%s=%q: components %v, want %v", SchedulingEnv, tc.env, got, tc.components)
		}
	}
	if !slices.Equal(asked, []string{lab.ComponentDevicePlugin, lab.ComponentExtender, lab.ComponentAutoscaler}) {
		t.Errorf("schedulingComponents changed its argument: %v", asked)
	}
	t.Setenv(SchedulingEnv, "plugins")
	_, err := scheduling()
	if err == nil || !strings.Contains(err.Error(), `"plugins"`) || !strings.Contains(err.Error(), "extender") || !strings.Contains(err.Error(), "plugin (") {
		t.Errorf("scheduling() with a misspelt mode: %v, want an error naming it and the choices", err)
	}
}
