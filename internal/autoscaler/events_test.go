package autoscaler

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/kube-neuron/kube-neuron/internal/autoscaler/plan"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestControllerOneEventPerDecision: a pod gets one NotTriggerScaleUp event for the round's
// decision, whatever the number of its problems; the same decision is not told again within
// eventInterval; a changed one is told at once, also when it changes back to an earlier one.
func TestControllerOneEventPerDecision(t *testing.T) {
	e := newEnv(t, pendingPod(testPod("p").Neuron(1).Tolerations()))
	c, rec := e.controller()
	both := "Warning NotTriggerScaleUp 2 problems: (1) " + msgToleration + "; (2) " + plan.MessageDevicePluginRequired
	tolerationOnly := "Warning NotTriggerScaleUp " + msgToleration
	steps := []struct {
		name      string
		change    func()
		advance   time.Duration
		want      []string
		decisions float64 // decisions_total{NotTriggerScaleUp} so far: one per pod and round
	}{
		{name: "two problems, one event", want: []string{both}, decisions: 1},
		{name: "the same decision again", advance: time.Second, decisions: 2},
		{name: "the same decision a minute later", advance: time.Minute, decisions: 3},
		{name: "the device plugin is installed: the decision changes", change: func() { e.setDaemonSet(t, c, true) }, want: []string{tolerationOnly}, decisions: 4},
		{name: "it is removed: the earlier decision is told again", change: func() { e.setDaemonSet(t, c, false) }, want: []string{both}, decisions: 5},
		{name: "unchanged", decisions: 6},
		{name: "unchanged for five minutes", advance: eventInterval, want: []string{both}, decisions: 7},
	}
	for _, s := range steps {
		if s.change != nil {
			s.change()
		}
		e.clock.Add(s.advance)
		round(t, c)
		if got := events(rec); !slices.Equal(got, s.want) {
			t.Errorf("%s: events\n%q\nwant\n%q", s.name, got, s.want)
		}
		if n := metricValue(t, c.metrics.decisions.WithLabelValues(plan.ReasonNotTriggerScaleUp)); n != s.decisions {
			t.Errorf("%s: decisions{NotTriggerScaleUp} %v, want %v", s.name, n, s.decisions)
		}
	}
}

// setDaemonSet creates or deletes the device plugin DaemonSet and waits until the controller's
// cache shows it.
func (e *env) setDaemonSet(t *testing.T, c *Controller, present bool) {
	t.Helper()
	ds := devicePlugin.DeepCopy()
	api := e.client.AppsV1().DaemonSets(ds.Namespace)
	var err error
	if present {
		_, err = api.Create(context.Background(), ds, metav1.CreateOptions{})
	} else {
		err = api.Delete(context.Background(), ds.Name, metav1.DeleteOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		_, err := c.daemons.DaemonSets(ds.Namespace).Get(ds.Name)
		return (err == nil) == present
	})
}
