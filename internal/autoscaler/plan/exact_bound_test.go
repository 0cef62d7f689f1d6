package plan

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestExactCostMatchesOracle: on batches the exhaustive oracle takes, the exact search finds the
// oracle's cost, and says it is exact.
func TestExactCostMatchesOracle(t *testing.T) {
	for seed := range uint64(80) {
		r := rand.New(rand.NewPCG(seed, 41))
		pending, opts := smallBatch(t, r, maxOraclePods)
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			opt := optimalFleet(pending, opts)
			got, exact := exactCost(pending, opts, 1_000_000)
			if !exact || got.compare(opt.cost) != 0 {
				t.Errorf("%d pods: the exact search finds %+v (exact %v), the oracle %s at %+v", len(pending), got, exact, fleetString(pending, opt), opt.cost)
			}
		})
	}
}

// TestConfigBound: the bound is never above what the optimum's priced nodes cost for the pods on
// them (it is a lower bound), never below the old per-pod bound for the same pods, and tighter
// than it on most batches.
func TestConfigBound(t *testing.T) {
	tighter, batches := 0, 0
	for seed := range uint64(80) {
		r := rand.New(rand.NewPCG(seed, 43))
		pending, opts := smallBatch(t, r, maxOraclePods)
		opt := optimalFleet(pending, opts)
		up := ScaleUp{}
		usd := 0.0
		for _, n := range opt.nodes {
			np := NodePlan{InstanceType: n.typ}
			for _, i := range n.pods {
				np.Pods = append(np.Pods, Placement{Pod: pending[i].Key()})
			}
			if n.typ.PriceKnown() && n.typ.UltraServerNodes == 0 {
				usd += *n.typ.PriceUSDPerHour
			}
			up.Nodes = append(up.Nodes, np)
		}
		pods := newPricedPods(up, pending)
		if len(pods) == 0 {
			continue
		}
		batches++
		bound := configBound(pods, opts)
		old := lowerBound(up, pending, opts.Catalog.Types())
		if bound > usd+1e-9 {
			t.Errorf("seed %d: the bound %.4f is above the optimum's %.4f: %s", seed, bound, usd, fleetString(pending, opt))
		}
		if bound < old-1e-9 {
			t.Errorf("seed %d: the bound %.4f is below the old bound %.4f", seed, bound, old)
		}
		if bound > old*1.01 {
			tighter++
		}
	}
	t.Logf("the bound is tighter than the old one on %d of %d batches", tighter, batches)
	if tighter < batches/2 {
		t.Errorf("the bound is tighter than the old one on only %d of %d batches", tighter, batches)
	}
}
