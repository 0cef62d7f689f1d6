package extender

import (
	"maps"
	"slices"
	"testing"
)

func TestKeepOnly(t *testing.T) {
	kept, failed := keepOnly([]string{"a", "b", "c"}, "b", "why")
	if !slices.Equal(kept, []string{"b"}) || !maps.Equal(failed, map[string]string{"a": "why", "c": "why"}) {
		t.Errorf("kept %v, failed %v", kept, failed)
	}
	if kept, failed := keepOnly([]string{"a"}, "b", "why"); len(kept) != 0 || failed["a"] != "why" {
		t.Errorf("a node not among the names: kept %v, failed %v", kept, failed)
	}
}
