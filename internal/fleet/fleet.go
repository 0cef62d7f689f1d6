// Package fleet replays a seeded stream of Neuron requests over a fleet of nodes with one
// placement policy, to compare policies on fragmentation. A request goes to the node the
// policy's node score picks among those that can serve it: under best-fit the highest
// topology.Fit.Score (ties to the first node in fleet order), under first-fit the first node in
// fleet order that fits.
package fleet

import (
	"container/heap"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// NodeSpec is a group of identical nodes.
type NodeSpec struct {
	InstanceType string
	Count        int
	LNC          int // 0: the catalog default
}

// DefaultFleet is the fleet of `kubectl-neuron simulate`.
var DefaultFleet = []NodeSpec{
	{InstanceType: "inf2.48xlarge", Count: 4},
	{InstanceType: "trn1.32xlarge", Count: 4},
	{InstanceType: "trn2.48xlarge", Count: 4},
}

// SizeWeight is a request size and its relative weight in the stream.
type SizeWeight struct{ Size, Weight int }

// Options describe one run.
type Options struct {
	Policy   topology.Policy
	Seed     uint64
	Requests int     // number of requests in the stream
	Load     float64 // offered load as a fraction of the fleet's devices
	Fleet    []NodeSpec
	Catalog  *topology.Catalog
	// DeviceSizes and CoreSizes are the request size distributions; half the requests ask for
	// devices, half for cores.
	DeviceSizes []SizeWeight
	CoreSizes   []SizeWeight
}

// Defaults returns the options of `kubectl-neuron simulate`: 2,000 requests at 90 % offered
// load on DefaultFleet; device requests of 1, 2, 4, 8, 16 with weights 8, 4, 4, 2, 1 and core
// requests of 1, 2, 4, 8 equally likely.
func Defaults(p topology.Policy, seed uint64) Options {
	return Options{
		Policy: p, Seed: seed, Requests: 2000, Load: 0.9, Fleet: DefaultFleet,
		Catalog:     topology.DefaultCatalog(),
		DeviceSizes: []SizeWeight{{1, 8}, {2, 4}, {4, 4}, {8, 2}, {16, 1}},
		CoreSizes:   []SizeWeight{{1, 1}, {2, 1}, {4, 1}, {8, 1}},
	}
}

// Result is what a run reports. Field names are the JSON contract of `kubectl-neuron simulate`.
type Result struct {
	Policy   topology.Policy `json:"policy"`
	Seed     uint64          `json:"seed"`
	Requests int             `json:"requests"`
	Placed   int             `json:"placed"`
	// FragmentationFailures counts refused requests for which some node whose type accepts the
	// size had at least that many free devices (device requests) or cores (core requests).
	FragmentationFailures int `json:"fragmentationFailures"`
	// AllocationRatioAtFirstFailure is the fraction of the fleet's capacity (cores in use over
	// all cores) allocated when the first fragmentation failure happened; null if none did.
	AllocationRatioAtFirstFailure *float64 `json:"allocationRatioAtFirstFailure"`
	// MeanFragmentationRatio is the mean, over the arrivals, of the share of the fleet's free
	// devices that lie outside each node's largest free valid device set.
	MeanFragmentationRatio float64 `json:"meanFragmentationRatio"`
}

// Request is one request of the stream.
type Request struct {
	topology.Request
	Arrival, Hold float64
}

// Stream returns the request stream for the options: it depends only on the seed, the sizes,
// the load and the fleet, never on the policy, so both policies see the same stream.
func Stream(o Options, fleetDevices, fleetCores int) []Request {
	rng := rand.New(rand.NewPCG(o.Seed, 0x6b756265_6e657572)) // "kubeneur"
	coresPerDevice := float64(fleetCores) / float64(fleetDevices)
	meanDevices := 0.5*mean(o.DeviceSizes) + 0.5*mean(o.CoreSizes)/coresPerDevice
	// Arrivals at rate 1: offered load = mean hold * mean devices per request.
	meanHold := o.Load * float64(fleetDevices) / meanDevices
	out := make([]Request, o.Requests)
	t := 0.0
	for i := range out {
		t += rng.ExpFloat64()
		r := topology.Request{Unit: topology.UnitDevice, Count: pick(rng, o.DeviceSizes)}
		if rng.IntN(2) == 1 {
			r = topology.Request{Unit: topology.UnitCore, Count: pick(rng, o.CoreSizes)}
		}
		out[i] = Request{Request: r, Arrival: t, Hold: rng.ExpFloat64() * meanHold}
	}
	return out
}

func mean(ws []SizeWeight) float64 {
	sum, total := 0.0, 0.0
	for _, w := range ws {
		sum += float64(w.Size * w.Weight)
		total += float64(w.Weight)
	}
	return sum / total
}

func pick(rng *rand.Rand, ws []SizeWeight) int {
	total := 0
	for _, w := range ws {
		total += w.Weight
	}
	n := rng.IntN(total)
	for _, w := range ws {
		if n < w.Weight {
			return w.Size
		}
		n -= w.Weight
	}
	return ws[len(ws)-1].Size
}

type node struct {
	usage *topology.Usage
}

type lease struct {
	end   float64
	seq   int
	node  int
	alloc topology.Allocation
}

type leases []lease

func (h leases) Len() int { return len(h) }
func (h leases) Less(i, j int) bool {
	if h[i].end != h[j].end {
		return h[i].end < h[j].end
	}
	return h[i].seq < h[j].seq
}
func (h leases) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *leases) Push(x any)   { *h = append(*h, x.(lease)) }
func (h *leases) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// Run replays the stream and reports what happened.
func Run(o Options) (Result, error) {
	if o.Requests < 1 || o.Load <= 0 || len(o.Fleet) == 0 {
		return Result{}, fmt.Errorf("a simulation needs at least one request, a positive load and a fleet")
	}
	var nodes []*node
	devices, cores := 0, 0
	for _, spec := range o.Fleet {
		it, err := o.Catalog.Get(spec.InstanceType)
		if err != nil {
			return Result{}, err
		}
		shape, err := topology.NewShape(it, spec.LNC)
		if err != nil {
			return Result{}, err
		}
		for range spec.Count {
			nodes = append(nodes, &node{usage: topology.NewUsage(shape)})
			devices += shape.Devices()
			cores += shape.Cores()
		}
	}
	res := Result{Policy: o.Policy, Seed: o.Seed, Requests: o.Requests}
	var active leases
	fragSum := 0.0
	for i, r := range Stream(o, devices, cores) {
		for len(active) > 0 && active[0].end <= r.Arrival {
			l := heap.Pop(&active).(lease)
			if err := nodes[l.node].usage.Release(l.alloc); err != nil {
				return Result{}, fmt.Errorf("request %d: release: %w", l.seq, err)
			}
		}
		fragSum += fragmentation(nodes)
		best, bestFit := -1, topology.Fit{}
		for n, nd := range nodes {
			fit, err := o.Policy.Place(nd.usage, r.Request)
			if err != nil {
				var ie *topology.InsufficientError
				var ue *topology.UnsupportedCountError
				if errors.As(err, &ie) || errors.As(err, &ue) {
					continue
				}
				return Result{}, err
			}
			if best < 0 || fit.Score > bestFit.Score {
				best, bestFit = n, fit
			}
			if o.Policy == topology.FirstFit {
				break
			}
		}
		if best < 0 {
			if fragmented(nodes, r.Request) {
				res.FragmentationFailures++
				if res.AllocationRatioAtFirstFailure == nil {
					ratio := allocated(nodes)
					res.AllocationRatioAtFirstFailure = &ratio
				}
			}
			continue
		}
		if err := nodes[best].usage.Allocate(bestFit.Allocation); err != nil {
			return Result{}, fmt.Errorf("request %d: %w", i, err)
		}
		res.Placed++
		heap.Push(&active, lease{end: r.Arrival + r.Hold, seq: i, node: best, alloc: bestFit.Allocation})
	}
	res.MeanFragmentationRatio = round(fragSum/float64(o.Requests), 4)
	if res.AllocationRatioAtFirstFailure != nil {
		v := round(*res.AllocationRatioAtFirstFailure, 4)
		res.AllocationRatioAtFirstFailure = &v
	}
	return res, nil
}

func round(v float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}

// fragmented reports whether some node whose type accepts the request's size had enough free
// devices or cores for it.
func fragmented(nodes []*node, r topology.Request) bool {
	for _, nd := range nodes {
		u := nd.usage
		if u.Shape().Validate(r) != nil {
			continue
		}
		if r.Unit == topology.UnitDevice && u.FreeDeviceCount() >= r.Count ||
			r.Unit == topology.UnitCore && u.FreeCoreCount() >= r.Count {
			return true
		}
	}
	return false
}

// allocated is the fraction of the fleet's cores in use.
func allocated(nodes []*node) float64 {
	used, total := 0, 0
	for _, nd := range nodes {
		total += nd.usage.Shape().Cores()
		used += nd.usage.Shape().Cores() - nd.usage.FreeCoreCount()
	}
	return float64(used) / float64(total)
}

// fragmentation is the share of the fleet's free devices outside each node's largest free valid
// device set.
func fragmentation(nodes []*node) float64 {
	free, stranded := 0, 0
	for _, nd := range nodes {
		f := nd.usage.FreeDeviceCount()
		if f == 0 {
			continue
		}
		free += f
		stranded += f - LargestFreeSet(nd.usage)
	}
	if free == 0 {
		return 0
	}
	return float64(stranded) / float64(free)
}

// LargestFreeSet is the largest device count the node could give one container now.
func LargestFreeSet(u *topology.Usage) int {
	sizes := u.Shape().DeviceSizes()
	for i := len(sizes) - 1; i >= 0; i-- {
		if sizes[i] > u.FreeDeviceCount() {
			continue
		}
		if _, err := topology.FirstFit.Place(u, topology.Request{Unit: topology.UnitDevice, Count: sizes[i]}); err == nil {
			return sizes[i]
		}
	}
	return 0
}
