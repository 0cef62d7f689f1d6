// Package plugin is the NeuronTopology kube-scheduler framework plugin.
package plugin

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime"
	fwk "k8s.io/kube-scheduler/framework"
)

// Name is the plugin's name in a KubeSchedulerConfiguration.
const Name = "NeuronTopology"

// Plugin is the NeuronTopology plugin.
type Plugin struct{ h fwk.Handle }

// New builds the plugin.
func New(_ context.Context, _ runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	return &Plugin{h: h}, nil
}

// Name returns the plugin's name.
func (p *Plugin) Name() string { return Name }
