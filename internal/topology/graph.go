package topology

import (
	"fmt"
	"slices"
)

// Graph is the link graph between the Neuron devices of one node, as the driver reports it in
// sysfs connected_devices, with its topology kind recognised.
type Graph struct {
	adj  [][]int
	kind Kind
	// order is the walk along the links for chain and ring (device ids in link order, starting
	// at device 0, first step to the lower-numbered neighbour); identity otherwise.
	order []int
	// pos is the inverse of order.
	pos []int
}

// Adjacency returns the connected_devices lists the Neuron driver reports for n devices linked
// as kind, in the driver's order (torus: up, left, down, right; chain and ring: next, previous).
func Adjacency(kind Kind, n int) ([][]int, error) {
	adj := make([][]int, n)
	switch kind {
	case KindSingle:
		if n != 1 {
			return nil, fmt.Errorf("topology single has 1 device, not %d", n)
		}
		adj[0] = []int{}
	case KindChain:
		if n < 2 {
			return nil, fmt.Errorf("topology chain needs at least 2 devices, not %d", n)
		}
		for i := range n {
			adj[i] = []int{}
			if i+1 < n {
				adj[i] = append(adj[i], i+1)
			}
			if i > 0 {
				adj[i] = append(adj[i], i-1)
			}
		}
	case KindRing:
		if n < 2 {
			return nil, fmt.Errorf("topology ring needs at least 2 devices, not %d", n)
		}
		for i := range n {
			next, prev := (i+1)%n, (i+n-1)%n
			adj[i] = []int{next}
			if prev != next {
				adj[i] = append(adj[i], prev)
			}
		}
	case KindTorus:
		if n != 16 {
			return nil, fmt.Errorf("topology torus is a 4x4 grid of 16 devices, not %d", n)
		}
		for i := range n {
			r, c := i/4, i%4
			adj[i] = []int{((r+3)%4)*4 + c, r*4 + (c+3)%4, ((r+1)%4)*4 + c, r*4 + (c+1)%4}
		}
	case KindSwitched:
		if n < 1 {
			return nil, fmt.Errorf("topology switched needs at least 1 device")
		}
		for i := range n {
			adj[i] = []int{}
			for j := range n {
				if j != i {
					adj[i] = append(adj[i], j)
				}
			}
		}
	default:
		return nil, fmt.Errorf("unknown topology kind %q (known: %v)", kind, Kinds)
	}
	return adj, nil
}

// NewGraph builds the graph from connectivity lists (adj[i] lists the devices linked to device i)
// and recognises its kind. Links must be symmetric, without self links or duplicates.
func NewGraph(adj [][]int) (*Graph, error) {
	n := len(adj)
	if n == 0 {
		return nil, fmt.Errorf("no devices")
	}
	set := make([]map[int]bool, n)
	for i, l := range adj {
		set[i] = map[int]bool{}
		for _, j := range l {
			if j < 0 || j >= n {
				return nil, fmt.Errorf("device %d lists device %d, which does not exist (the node has %d devices)", i, j, n)
			}
			if j == i {
				return nil, fmt.Errorf("device %d lists itself as connected", i)
			}
			if set[i][j] {
				return nil, fmt.Errorf("device %d lists device %d twice", i, j)
			}
			set[i][j] = true
		}
	}
	for i := range n {
		for j := range set[i] {
			if !set[j][i] {
				return nil, fmt.Errorf("device %d lists device %d as connected but device %d does not list device %d", i, j, j, i)
			}
		}
	}
	g := &Graph{adj: make([][]int, n)}
	for i, l := range adj {
		g.adj[i] = slices.Sorted(slices.Values(l))
	}
	g.kind = g.classify()
	if g.kind == "" {
		return nil, fmt.Errorf("the links of the %d devices form no known topology (single, chain, ring, 4x4 torus, switched)", n)
	}
	g.order = make([]int, n)
	for i := range g.order {
		g.order[i] = i
	}
	if g.kind == KindChain || g.kind == KindRing {
		g.order = g.walk()
	}
	g.pos = make([]int, n)
	for p, d := range g.order {
		g.pos[d] = p
	}
	return g, nil
}

// MustGraph returns the canonical graph of a kind; it panics on an impossible kind and size.
func MustGraph(kind Kind, n int) *Graph {
	adj, err := Adjacency(kind, n)
	if err != nil {
		panic(err)
	}
	g, err := NewGraph(adj)
	if err != nil {
		panic(err)
	}
	if g.kind != kind {
		panic(fmt.Sprintf("canonical %s graph of %d devices recognised as %s", kind, n, g.kind))
	}
	return g
}

func (g *Graph) classify() Kind {
	n := len(g.adj)
	if n == 1 {
		return KindSingle
	}
	degrees := map[int]int{}
	for _, l := range g.adj {
		degrees[len(l)]++
	}
	connected := g.connected()
	switch {
	case connected && degrees[1] == 2 && degrees[2] == n-2:
		return KindChain
	case connected && degrees[2] == n:
		return KindRing
	case n == 16 && degrees[4] == 16 && g.isTorus():
		return KindTorus
	case degrees[n-1] == n:
		return KindSwitched
	}
	return ""
}

func (g *Graph) connected() bool {
	seen := make([]bool, len(g.adj))
	stack := []int{0}
	seen[0] = true
	count := 1
	for len(stack) > 0 {
		i := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, j := range g.adj[i] {
			if !seen[j] {
				seen[j] = true
				count++
				stack = append(stack, j)
			}
		}
	}
	return count == len(g.adj)
}

func (g *Graph) isTorus() bool {
	want, _ := Adjacency(KindTorus, 16)
	for i := range 16 {
		if !slices.Equal(g.adj[i], slices.Sorted(slices.Values(want[i]))) {
			return false
		}
	}
	return true
}

// walk follows a chain or ring from its start: device 0 for a ring, the lowest-numbered end for
// a chain; from device 0 of a ring the first step goes to the lower-numbered neighbour.
func (g *Graph) walk() []int {
	n := len(g.adj)
	start := 0
	if g.kind == KindChain {
		start = -1
		for i, l := range g.adj {
			if len(l) == 1 && (start == -1 || i < start) {
				start = i
			}
		}
	}
	order := []int{start}
	prev, cur := -1, start
	for len(order) < n {
		next := -1
		for _, j := range g.adj[cur] { // sorted: the lower-numbered neighbour first
			if j != prev {
				next = j
				break
			}
		}
		order = append(order, next)
		prev, cur = cur, next
	}
	return order
}

// Kind returns the recognised topology kind.
func (g *Graph) Kind() Kind { return g.kind }

// Len returns the number of devices.
func (g *Graph) Len() int { return len(g.adj) }

// Neighbors returns the devices linked to device d, ascending.
func (g *Graph) Neighbors(d int) []int { return slices.Clone(g.adj[d]) }

// Order returns the devices in link order (chain, ring) or by id (other kinds).
func (g *Graph) Order() []int { return slices.Clone(g.order) }
