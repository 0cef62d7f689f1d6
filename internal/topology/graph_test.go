package topology

import (
	"slices"
	"strings"
	"testing"
)

func TestTorusAdjacencyMatchesNeuronLs(t *testing.T) {
	// neuron-ls --topology on trn1.32xlarge and trn2n.48xlarge (DESIGN section 3).
	want := [][]int{
		{12, 3, 4, 1}, {13, 0, 5, 2}, {14, 1, 6, 3}, {15, 2, 7, 0},
		{0, 7, 8, 5}, {1, 4, 9, 6}, {2, 5, 10, 7}, {3, 6, 11, 4},
		{4, 11, 12, 9}, {5, 8, 13, 10}, {6, 9, 14, 11}, {7, 10, 15, 8},
		{8, 15, 0, 13}, {9, 12, 1, 14}, {10, 13, 2, 15}, {11, 14, 3, 12},
	}
	got, err := Adjacency(KindTorus, 16)
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if !slices.Equal(got[i], want[i]) {
			t.Errorf("device %d: %v, want %v", i, got[i], want[i])
		}
	}
}

func TestChainAdjacencyMatchesNeuronLs(t *testing.T) {
	// neuron-ls on inf1.6xlarge: 0:[1], 1:[2,0], 2:[3,1], 3:[2].
	got, _ := Adjacency(KindChain, 4)
	want := [][]int{{1}, {2, 0}, {3, 1}, {2}}
	for i := range want {
		if !slices.Equal(got[i], want[i]) {
			t.Errorf("device %d: %v, want %v", i, got[i], want[i])
		}
	}
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		kind Kind
		n    int
	}{{KindSingle, 1}, {KindChain, 2}, {KindChain, 4}, {KindRing, 3}, {KindRing, 6}, {KindRing, 12}, {KindRing, 16}, {KindTorus, 16}, {KindSwitched, 4}, {KindSwitched, 16}} {
		g := MustGraph(tc.kind, tc.n)
		if g.Kind() != tc.kind || g.Len() != tc.n {
			t.Errorf("%s/%d recognised as %s/%d", tc.kind, tc.n, g.Kind(), g.Len())
		}
	}
	// A ring whose links are numbered out of order: the order follows the links.
	g, err := NewGraph([][]int{{2, 3}, {3, 2}, {0, 1}, {1, 0}})
	if err != nil {
		t.Fatal(err)
	}
	if g.Kind() != KindRing || !slices.Equal(g.Order(), []int{0, 2, 1, 3}) {
		t.Errorf("kind %s order %v, want ring [0 2 1 3]", g.Kind(), g.Order())
	}
	if !slices.Equal(g.Neighbors(0), []int{2, 3}) {
		t.Errorf("neighbours of 0: %v", g.Neighbors(0))
	}
}

func TestNewGraphErrors(t *testing.T) {
	for _, tc := range []struct {
		adj  [][]int
		want string
	}{
		{nil, "no devices"},
		{[][]int{{1}, {}}, "does not list device 0"},
		{[][]int{{0}}, "lists itself"},
		{[][]int{{1, 1}, {0}}, "twice"},
		{[][]int{{5}, {0}}, "does not exist"},
		{[][]int{{1}, {0}, {3}, {2}}, "no known topology"},
	} {
		if _, err := NewGraph(tc.adj); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want %q", tc.adj, err, tc.want)
		}
	}
}

func TestShapeRejectsMismatchedGraph(t *testing.T) {
	it, _ := DefaultCatalog().Lookup("trn1.32xlarge")
	if _, err := NewShapeWithGraph(it, 0, MustGraph(KindSwitched, 16)); err == nil || !strings.Contains(err.Error(), "links form a switched") {
		t.Errorf("got %v", err)
	}
	if _, err := NewShapeWithGraph(it, 0, MustGraph(KindRing, 12)); err == nil || !strings.Contains(err.Error(), "reports 12") {
		t.Errorf("got %v", err)
	}
}

func TestGridPosition(t *testing.T) {
	trn, _ := DefaultCatalog().Get("trn2.48xlarge")
	s, err := NewShape(trn, 0)
	if err != nil {
		t.Fatal(err)
	}
	if r, c, ok := s.GridPosition(6); !ok || r != 1 || c != 2 {
		t.Errorf("GridPosition(6) = %d, %d, %v; want 1, 2, true", r, c, ok)
	}
	// Grid neighbours are linked: the row and column differ by one, wrapping.
	for _, n := range s.Graph().Neighbors(5) {
		r, c, _ := s.GridPosition(n)
		if dr, dc := (r-1+4)%4, (c-1+4)%4; !(dr == 0 && (dc == 1 || dc == 3)) && !(dc == 0 && (dr == 1 || dr == 3)) {
			t.Errorf("neighbour %d of device 5 at %d,%d is not next to 1,1", n, r, c)
		}
	}
	inf, _ := DefaultCatalog().Get("inf2.48xlarge")
	if s, _ := NewShape(inf, 0); s != nil {
		if _, _, ok := s.GridPosition(0); ok {
			t.Error("a ring has no grid")
		}
	}
}
