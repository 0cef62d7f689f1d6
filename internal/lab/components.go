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

// CheckComponents checks that every name is a component the lab can run.
func CheckComponents(names []string) error {
	known := DefaultComponents()
	for _, n := range names {
		if !slices.Contains(known, n) {
			return fmt.Errorf("unknown component %q: name them as a comma list of %s", n, strings.Join(known, ", "))
		}
	}
	return nil
}
