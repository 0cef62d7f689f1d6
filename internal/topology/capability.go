package topology

// BlockCount is one entry of a node's capability: how many disjoint free connected sets of
// Devices whole devices the node could still give.
type BlockCount struct {
	Devices int // set size, one the instance type accepts for a device request
	Count   int // disjoint free sets of that size
}

// FreeBlocks returns the node's capability over whole devices, as the placement engine counts
// it to rank placements: for each device-set size the instance type accepts, largest first,
// how many disjoint valid sets of that size are free now (free ring or chain segments cut into
// sets of that size, free aligned torus blocks, free devices on a switched or single-device
// node). Partly used devices count as used. The counts of different sizes overlap: a free
// 4-device block also counts as two 2-device blocks.
func (u *Usage) FreeBlocks() []BlockCount {
	e := getEvaluator(u)
	defer putEvaluator(e)
	out := make([]BlockCount, len(u.shape.deviceSizes))
	for i := range out {
		out[i] = BlockCount{Devices: e.sizes[i], Count: e.before[i]}
	}
	return out
}
