package plan

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"

	"github.com/kube-neuron/kube-neuron/internal/testkit"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// draMix are the claim specs the dra stream of BenchmarkPlan draws pods from, each as likely as the others: the
// seeds' templates (connected-device constraints, whole trn2 nodes, one device, all devices with
// an opaque LNC config), plain count claims that select other types, a firstAvailable claim,
// and a claim no type can serve (more devices than a trn1.32xlarge has).
func draMix(b *testing.B) []resourcev1.ResourceClaimSpec {
	out := []resourcev1.ResourceClaimSpec{
		seedTemplate(b, "1x4-connected-neurons.yaml"),
		seedTemplate(b, "l-trn2.yaml"),
		seedTemplate(b, "xl-trn2.yaml"),
		seedTemplate(b, "single-neuron-device.yaml"),
		seedTemplate(b, "all-neurons-lnc-1.yaml"),
	}
	for _, c := range []struct {
		typ    string
		counts []int64
	}{
		{"inf2.48xlarge", []int64{1, 2, 4, 6, 12}},
		{"trn1.32xlarge", []int64{1, 2, 4, 8, 16}},
		{"inf2.xlarge", []int64{1}},
		{"trn1.32xlarge", []int64{20}},
	} {
		for _, n := range c.counts {
			out = append(out, countSpec(n, instanceTypeIs(c.typ)))
		}
	}
	fa := resourcev1.DeviceRequest{Name: "neurons", FirstAvailable: []resourcev1.DeviceSubRequest{
		{Name: "whole", DeviceClassName: DeviceClass, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 16, Selectors: instanceTypeIs("trn1.32xlarge")},
		{Name: "quarter", DeviceClassName: DeviceClass, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 4, Selectors: instanceTypeIs("trn1.32xlarge")},
	}}
	return append(out, resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{fa}}})
}

func instanceTypeIs(typ string) []resourcev1.DeviceSelector {
	return []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
		Expression: fmt.Sprintf("device.attributes['%s'].instanceType == '%s'", DeviceClass, typ)}}}
}

// countSpec is a claim for n devices of the driver's class with the selectors.
func countSpec(n int64, sel []resourcev1.DeviceSelector) resourcev1.ResourceClaimSpec {
	return resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "neurons", Exactly: &resourcev1.ExactDeviceRequest{
		DeviceClassName: DeviceClass, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: n, Selectors: sel}}}}}
}

// draBatch draws n pending DRA pods from draMix, as the controller gives them to the planner
// (their ResourceClaims from the templates, their requests resolved by the same DeviceTemplates
// the planner places them with).
func draBatch(b *testing.B, n int) ([]PodDemand, Options) {
	specs := draMix(b)
	r := rand.New(rand.NewPCG(1, 2))
	ts := NewDeviceTemplates(nil, nil, nil)
	var pending []PodDemand
	for i := range n {
		spec := specs[r.IntN(len(specs))]
		pod := testkit.MakePod().Name(fmt.Sprintf("p%d", i)).TolerateNeuron().Obj()
		d := NewPodDemand(pod, ts.Resolve(ctxBG, DRARequestsOf(spec)))
		d.Claims = []*resourcev1.ResourceClaim{ClaimFromTemplate(pod.Namespace, pod.Name, "neurons", spec)}
		pending = append(pending, d)
	}
	return pending, Options{Catalog: topology.DefaultCatalog(), Devices: ts}
}

// benchBatch draws n pending pods with randomDemand (device, core and DRA requests, selectors
// and affinities on types and families) from the seed.
func benchBatch(n int, seed uint64) ([]PodDemand, Options) {
	r := rand.New(rand.NewPCG(seed, uint64(n)))
	types := topology.DefaultCatalog().Types()
	var pending []PodDemand
	for i := range n {
		pending = append(pending, randomDemand(r, fmt.Sprintf("p%d", i), types))
	}
	return pending, Options{Catalog: topology.DefaultCatalog()}
}

// benchRow is one row of the table BenchmarkPlan prints.
type benchRow struct {
	stream        string
	pods          int
	podsPerSecond float64
	optimum       string // plan/optimum: worst and mean over the seeds, or why not
	bound         string // plan/bound
}

// exactSeeds are the batches of each small size compared with the optimum, and exactWork bounds
// the exact search on each (steps: sets listed plus search nodes).
const (
	exactSeeds = 5
	exactWork  = 400_000
)

// BenchmarkPlan plans batches of pending pods with nothing launching and reports planning speed
// (pods/s; Karpenter's published simulation runs at roughly 700 to 1,300 pods/s) and how far the
// plan's price is from the cheapest fleet:
//
//   - requests/pods=10, 20, 40: exactSeeds batches of randomDemand pods each, against the exact
//     optimum (exactCost, checked against the exhaustive oracle in TestExactCostMatchesOracle):
//     cost/optimum is the worst ratio of the USD prices over the batches whose plan uses as
//     many unplaced pods and unknown-price nodes as the optimum (the ranking's first terms); a
//     batch whose search ran out of work is counted apart, not compared.
//   - requests/pods=100, 1000, 10000 (randomDemand pods) and dra/pods=... (draMix pods): the
//     price of the plan's new priced nodes against configBound for the pods on them (cost/bound).
//
// It prints one table of all rows to stderr at the end.
func BenchmarkPlan(b *testing.B) {
	var rows []benchRow
	for _, n := range []int{10, 20, 40} {
		b.Run(fmt.Sprintf("requests/pods=%d", n), func(b *testing.B) {
			var batches [][]PodDemand
			var opts []Options
			for seed := range uint64(exactSeeds) {
				p, o := benchBatch(n, seed)
				batches, opts = append(batches, p), append(opts, o)
			}
			plans := make([]ScaleUp, exactSeeds)
			decisions := make([][]Decision, exactSeeds)
			for b.Loop() {
				for k := range batches {
					plans[k], decisions[k] = Plan(batches[k], nil, opts[k])
				}
			}
			row := benchRow{stream: "requests", pods: n, podsPerSecond: float64(n*exactSeeds) * float64(b.N) / b.Elapsed().Seconds()}
			worst, sum, compared, unknown, notExact := 0.0, 0.0, 0, 0, 0
			var notes []string
			for k := range batches {
				got := planCost(plans[k], decisions[k])
				opt, exact := exactCost(batches[k], opts[k], exactWork)
				switch {
				case !exact:
					notExact++
					notes = append(notes, fmt.Sprintf("seed %d: search out of work, plan %+v, best found %+v", k, got, opt))
				case got.compare(opt) < 0:
					b.Fatalf("seed %d: the plan %+v is cheaper than the optimum %+v", k, got, opt)
				case got.unplaced != opt.unplaced || got.unknown != opt.unknown:
					unknown++
					notes = append(notes, fmt.Sprintf("seed %d: plan %+v, optimum %+v", k, got, opt))
				case opt.usd > 0:
					ratio := got.usd / opt.usd
					worst, sum, compared = max(worst, ratio), sum+ratio, compared+1
				}
			}
			if compared > 0 {
				b.ReportMetric(worst, "cost/optimum")
			}
			var parts []string
			if compared > 0 {
				parts = append(parts, fmt.Sprintf("%.3f worst, %.3f mean (%d batches)", worst, sum/float64(compared), compared))
			}
			if unknown > 0 {
				parts = append(parts, fmt.Sprintf("%d with more unplaced pods or unknown-price nodes", unknown))
			}
			if notExact > 0 {
				parts = append(parts, fmt.Sprintf("%d unsolved within %d steps", notExact, exactWork))
			}
			row.optimum = strings.Join(parts, "; ")
			for _, note := range notes {
				b.Log(note)
			}
			b.ReportMetric(row.podsPerSecond, "pods/s")
			rows = append(rows, row)
		})
	}
	for _, stream := range []string{"requests", "dra"} {
		for _, n := range []int{100, 1000, 10000} {
			b.Run(fmt.Sprintf("%s/pods=%d", stream, n), func(b *testing.B) {
				var pending []PodDemand
				var opts Options
				if stream == "dra" {
					pending, opts = draBatch(b, n)
				} else {
					pending, opts = benchBatch(n, 1)
				}
				var plan ScaleUp
				var decisions []Decision
				for b.Loop() {
					plan, decisions = Plan(pending, nil, opts)
				}
				if stream == "dra" { // every pod is planned but the ones that ask for more devices than any type has
					for i, d := range decisions {
						if hopeless := pending[i].DRA[0].Count > 16; d.Warning() != hopeless {
							b.Fatalf("pod %s (%d devices) refused: %v (%s)", d.Pod, pending[i].DRA[0].Count, d.Warning(), d.Message)
						}
					}
				}
				row := benchRow{stream: stream, pods: n, podsPerSecond: float64(n) * float64(b.N) / b.Elapsed().Seconds()}
				b.ReportMetric(row.podsPerSecond, "pods/s")
				if lb := configBound(newPricedPods(plan, pending), opts); lb > 0 {
					b.ReportMetric(plan.CostUSDPerHour/lb, "cost/bound")
					row.bound = fmt.Sprintf("%.3f", plan.CostUSDPerHour/lb)
				}
				rows = append(rows, row)
			})
		}
	}
	var out strings.Builder
	fmt.Fprintf(&out, "\n%-9s %7s %12s  %-58s %s\n", "stream", "pods", "pods/s", "cost/optimum", "cost/bound")
	for _, r := range rows {
		fmt.Fprintf(&out, "%-9s %7d %12.0f  %-58s %s\n", r.stream, r.pods, r.podsPerSecond, cmp.Or(r.optimum, "-"), cmp.Or(r.bound, "-"))
	}
	fmt.Fprint(os.Stderr, out.String())
}
