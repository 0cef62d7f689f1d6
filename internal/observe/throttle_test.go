package observe

import (
	"testing"
	"time"
)

func TestThrottleIsDueOnceAMinute(t *testing.T) {
	var th Throttle
	t0 := time.Unix(1_800_000_000, 0)
	for _, step := range []struct {
		key  string
		at   time.Duration
		want bool
	}{
		{"a", 0, true},
		{"a", 30 * time.Second, false},
		{"b", 30 * time.Second, true},
		{"a", time.Minute, false},
		{"a", time.Minute + time.Millisecond, true},
		{"a", 90 * time.Second, false},
	} {
		if got := th.Due(step.key, t0.Add(step.at)); got != step.want {
			t.Errorf("Due(%s) at %v = %v, want %v", step.key, step.at, got, step.want)
		}
	}
	th.Due("c", t0.Add(20*time.Minute))
	if len(th.sent) != 1 {
		t.Errorf("after 20 minutes %d keys are remembered, want only the new one", len(th.sent))
	}
}
