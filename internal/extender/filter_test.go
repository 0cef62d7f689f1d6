package extender

import (
	"maps"
	"slices"
	"testing"
	"time"
)

func TestWarningsAreDueOnceAMinute(t *testing.T) {
	var w warnings
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
		if got := w.due(step.key, t0.Add(step.at)); got != step.want {
			t.Errorf("due(%s) at %v = %v, want %v", step.key, step.at, got, step.want)
		}
	}
	w.due("c", t0.Add(20*time.Minute))
	if len(w.sent) != 1 {
		t.Errorf("after 20 minutes %d messages are remembered, want only the new one", len(w.sent))
	}
}

func TestKeepOnly(t *testing.T) {
	kept, failed := keepOnly([]string{"a", "b", "c"}, "b", "why")
	if !slices.Equal(kept, []string{"b"}) || !maps.Equal(failed, map[string]string{"a": "why", "c": "why"}) {
		t.Errorf("kept %v, failed %v", kept, failed)
	}
	if kept, failed := keepOnly([]string{"a"}, "b", "why"); len(kept) != 0 || failed["a"] != "why" {
		t.Errorf("a node not among the names: kept %v, failed %v", kept, failed)
	}
}
