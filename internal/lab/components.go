package lab

import (
	"fmt"
	"slices"
	"strings"
)

// DefaultComponents are what `neuron-lab up` and `make lab-up` run when no --components (or
// COMPONENTS) is given: every component the lab can run, the autoscaler too, so that a fleet
// without nodes (`nodes: []`) grows for pending pods.
func DefaultComponents() []string {
	return []string{ComponentDevicePlugin, ComponentDRADriver, ComponentExtender, ComponentAutoscaler}
}

// KnownComponents are every component the lab can run: DefaultComponents and
// ComponentKubeScheduler, the other way to run my-scheduler.
func KnownComponents() []string {
	return append(DefaultComponents(), ComponentKubeScheduler)
}

// CheckComponents checks that every name is a component the lab can run, and that at most one
// of them runs my-scheduler.
func CheckComponents(names []string) error {
	known := KnownComponents()
	for _, n := range names {
		if !slices.Contains(known, n) {
			return fmt.Errorf("unknown component %q: name them as a comma list of %s", n, strings.Join(known, ", "))
		}
	}
	return checkScheduling(names)
}

// checkScheduling refuses both ways of running my-scheduler at once.
func checkScheduling(names []string) error {
	if slices.Contains(names, ComponentExtender) && slices.Contains(names, ComponentKubeScheduler) {
		return fmt.Errorf("components %s and %s both run my-scheduler (the stock kube-scheduler with the extender, "+
			"or kube-scheduler with the NeuronTopology plugin): name one of them", ComponentExtender, ComponentKubeScheduler)
	}
	return nil
}
