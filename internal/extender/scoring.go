package extender

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/labels"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// scorer places pods on nodes for filter and prioritize, and derives the usage bind decisions
// plan on: decisions of the topology engine (allocation.Plan) over each node's usage, with the
// caches that spare deriving and placing again what did not change. Each cache keeps its own
// lock.
type scorer struct {
	policy topology.Policy
	now    func() time.Time
	pods   cache.Indexer // the pod informer's, set before the extender serves
	shapes *nodeShapes
	usage  *usageCache
	// memo keeps filter's scores for prioritize; placements and wholeScores spare placing again.
	memo       scoreMemo
	placements placementCache
	// wholeScores caches wholeScore: shape and allocation.PlacementKey -> the score on the empty node.
	wholeScores sync.Map
	// betweenReads, when set, runs between the two reads of usageOf; tests use it to deliver an
	// informer event there.
	betweenReads func()
}

func newScorer(o Options) *scorer {
	return &scorer{policy: o.Policy, now: o.Now, shapes: newNodeShapes(o.Catalog), usage: newUsageCache()}
}

// byRecordNode indexes the pods by the node their allocation record names.
const byRecordNode = "recordNode"

// indexers are the pod informer's indexes the scorer reads.
func (s *scorer) indexers() cache.Indexers {
	return cache.Indexers{byNominatedNode: nominatedNodeIndex, byRecordNode: func(obj any) ([]string, error) {
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return nil, nil
		}
		r, err := s.usage.records.RecordOf(pod)
		if err != nil || r == nil {
			return nil, nil
		}
		return []string{r.Node}, nil
	}}
}

// nodeUsage derives the node's usage from the pods whose record names it, leaving out the pod
// being scheduled (its own record, if any, must not block it). The result must not be changed.
// Filter and prioritize may use the cached usage: client-go updates the indexer before it runs
// the handler that invalidates the cache, so the cache can lag the indexer for a moment, which
// only costs a bind that no longer fits. The bind decision (freshUsage) always derives it again.
//
// While records on the node overlap (see allocation.OverlapError), for allocation.OverlapSettle
// from when this replica first saw it the node is refused (the error says why).
func (s *scorer) nodeUsage(ctx context.Context, shape *topology.Shape, node string, except types.UID) (*topology.Usage, error) {
	return s.usageOf(ctx, shape, node, except, false)
}

// freshUsage is nodeUsage derived from the indexer now, for bind decisions.
func (s *scorer) freshUsage(ctx context.Context, shape *topology.Shape, node string, except types.UID) (*topology.Usage, error) {
	return s.usageOf(ctx, shape, node, except, true)
}

func (s *scorer) usageOf(ctx context.Context, shape *topology.Shape, node string, except types.UID, fresh bool) (*topology.Usage, error) {
	// This replica's recent decisions first, the indexer second: the informer drops a decision
	// from recent only after its indexer holds the pod's record, so whatever is not in this
	// snapshot of recent is in the indexer read below. (Read the other way round, a decision
	// whose record arrived in between was in neither, and its devices were given again.)
	snap := s.usage.snapshot(node, except)
	if s.betweenReads != nil {
		s.betweenReads()
	}
	objs, _ := s.pods.ByIndex(byRecordNode, node)
	pods, exceptListed := podsExcept(objs, except)
	// The cached usage counts every pod on the node: it serves only a pod that is not among them.
	reusable := !exceptListed && !snap.exceptRecent
	if !fresh && reusable && snap.has && snap.cached.gen == snap.gen && snap.cached.shape == shape {
		return snap.cached.usage, nil
	}
	u, overlap, err := s.derive(ctx, shape, node, pods)
	if err != nil {
		return u, err
	}
	addRecent(ctx, u, shape, snap.recent)
	if !fresh && reusable && !overlap {
		s.usage.keep(node, snap.gen, shape, u)
	}
	return u, nil
}

// podsExcept returns the pods of objs but the one with uid except, and whether it was there.
func podsExcept(objs []any, except types.UID) (pods []*corev1.Pod, found bool) {
	pods = make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		if p := o.(*corev1.Pod); p.UID != except {
			pods = append(pods, p)
		} else {
			found = true
		}
	}
	return pods, found
}

// derive computes the node's usage from the records of pods. overlap reports records that
// overlap; within allocation.OverlapSettle of seeing that first, err refuses the node.
func (s *scorer) derive(ctx context.Context, shape *topology.Shape, node string, pods []*corev1.Pod) (u *topology.Usage, overlap bool, err error) {
	u, _, problems := allocation.NodeUsageWith(shape, node, pods, s.usage.records.RecordOf)
	var overlapErr error
	for _, err := range problems {
		if errors.As(err, new(*allocation.OverlapError)) {
			overlapErr = err
		}
	}
	if unsettled := s.usage.overlaps.Settling(node, overlapErr != nil, s.now()); unsettled {
		return u, true, fmt.Errorf("the allocation records on node %s overlap (%v): the device plugin is correcting them; the node takes pods again once it is done", node, overlapErr)
	}
	for _, err := range problems {
		klog.FromContext(ctx).Error(err, "Ignoring an allocation record", "node", node)
	}
	return u, overlapErr != nil, nil
}

// addRecent counts this replica's recent decisions in u, those the informer does not show yet.
func addRecent(ctx context.Context, u *topology.Usage, shape *topology.Shape, recent []recentBind) {
	for _, rb := range recent {
		for _, ctr := range rb.record.Containers {
			hw, err := ctr.Hardware(shape)
			if err == nil {
				err = u.Allocate(hw)
			}
			if err != nil {
				// The informer already shows this pod (its record is in u): nothing to add.
				klog.FromContext(ctx).V(6).Info("Recent bind already counted", "pod", rb.pod, "err", err)
			}
		}
	}
}

// plan chooses the devices of the requests on u with the extender's policy.
func (s *scorer) plan(u *topology.Usage, reqs []allocation.Request) ([]allocation.Container, float64, error) {
	return allocation.Plan(u, reqs, s.policy)
}

// place returns the node's usage generation and the extender score of the pod's requests on the
// node, or why they do not fit, from the cache when nothing changed on the node since.
func (s *scorer) place(ctx context.Context, shape *topology.Shape, node string, uid types.UID, reqs []allocation.Request, key string) (uint64, int64, error) {
	gen, recent := s.usage.generationFor(node, uid)
	cacheable := key != "" && !recent // a recent decision for this pod counts in the usage: leave it out
	if cacheable {
		if p, ok := s.placements.get(node, gen, shape, key); ok {
			return gen, p.score, p.err
		}
	}
	u, err := s.nodeUsage(ctx, shape, node, uid)
	if err != nil {
		return gen, 0, err
	}
	_, fit, err := s.plan(u, reqs)
	score := allocation.Tenths(fit)
	if cacheable {
		s.placements.put(node, gen, shape, key, placement{score: score, err: err})
	}
	return gen, score, err
}

// placed is the outcome of placing a pod on one node: the node's usage generation it was
// computed at and the score, or why the pod does not fit (unknown: the node's shape).
type placed struct {
	gen     uint64
	score   int64
	err     error
	unknown bool
}

// placeAll is place for each of the nodes, with the locks taken once per call rather than once
// per node: filter asks for hundreds of nodes for every pod, and in a backlog almost every
// answer comes from the placement cache.
//
// On a node that pods are nominated to (placeBesideNominated), the pod must also fit beside the
// room they hold; that is worked out each time, never cached.
func (s *scorer) placeAll(ctx context.Context, names []string, pod *corev1.Pod, reqs []allocation.Request, key string) []placed {
	out := make([]placed, len(names))
	shapes, errs := s.shapes.all(names)
	for i, err := range errs {
		if err != nil {
			out[i] = placed{err: err, unknown: true}
		}
	}
	hit := s.fromPlacements(names, shapes, pod.UID, key, out)
	for i, name := range names {
		if shapes[i] != nil && !hit[i] {
			out[i].gen, out[i].score, out[i].err = s.place(ctx, shapes[i], name, pod.UID, reqs, key)
		}
	}
	if nominated := s.nominatedNodes(); nominated != nil {
		for i, name := range names {
			if out[i].err == nil && shapes[i] != nil && nominated[name] {
				if score, applies, err := s.placeBesideNominated(ctx, shapes[i], name, pod, reqs); applies {
					out[i].score, out[i].err = score, err
				}
			}
		}
	}
	return out
}

// fromPlacements fills out from the placement cache where it holds the answer at the node's
// current generation, and reports which it filled.
func (s *scorer) fromPlacements(names []string, shapes []*topology.Shape, uid types.UID, key string, out []placed) []bool {
	hit := make([]bool, len(names))
	if key == "" {
		return hit
	}
	gens, recent := s.usage.generations(names, shapes, uid)
	s.placements.mu.Lock()
	defer s.placements.mu.Unlock()
	for i, name := range names {
		if shapes[i] == nil {
			continue
		}
		out[i].gen = gens[i]
		if recent[i] {
			continue
		}
		if p, ok := s.placements.getLocked(name, gens[i], shapes[i], key); ok {
			out[i].score, out[i].err, hit[i] = p.score, p.err, true
		}
	}
	return hit
}

// filter places the pod on the nodes: those it fits (passed), why it fails the others (failed,
// or unresolvable when preemption cannot help), and the message of a request no node's instance
// type supports (unsupported, "" for none). It keeps the scores for prioritize.
func (s *scorer) filter(ctx context.Context, pod *corev1.Pod, reqs []allocation.Request, names []string) (passed []string, failed, unresolvable map[string]string, unsupported string) {
	failed, unresolvable = map[string]string{}, map[string]string{}
	passed = make([]string, 0, len(names))
	gens, scores := make([]uint64, 0, len(names)), make([]int64, 0, len(names))
	for i, r := range s.placeAll(ctx, names, pod, reqs, allocation.PlacementKey(pod, reqs)) {
		name := names[i]
		switch {
		case r.err == nil:
			passed = append(passed, name)
			gens, scores = append(gens, r.gen), append(scores, r.score)
		case r.unknown || Unresolvable(r.err):
			unresolvable[name] = r.err.Error()
			if !r.unknown {
				unsupported = unresolvable[name]
			}
		default:
			failed[name] = r.err.Error()
		}
	}
	s.memo.put(pod.UID, memoEntry{nodes: passed, gens: gens, scores: scores}, s.now())
	return passed, failed, unresolvable, unsupported
}

// prioritize scores the nodes, in the order of names (0 where the pod does not fit), and returns
// the best score the pod would get on a whole node (one with nothing on it) of one of the
// nodes' shapes, or -1 when it fits none: see relativeScores. Where filter placed the pod and
// nothing changed on the node since, its score is filter's.
func (s *scorer) prioritize(ctx context.Context, pod *corev1.Pod, names []string) ([]int64, int64) {
	out := make([]int64, len(names))
	reqs := allocation.PodRequests(pod)
	if len(reqs) == 0 {
		return out, -1
	}
	key := allocation.PlacementKey(pod, reqs)
	memo := s.memo.take(pod.UID)
	gens := s.usage.generationsOf(names)
	var miss []string
	var missAt []int
	for i, name := range names {
		// The scheduler sends the nodes filter passed, in filter's order: the memo's next node
		// is this one, unless the scheduler dropped or reordered some.
		if j, ok := memo.find(name); ok && memo.gens[j] == gens[i] {
			out[i] = memo.scores[j] // filter placed the pod on this node, and nothing changed since
			continue
		}
		miss, missAt = append(miss, name), append(missAt, i)
	}
	for k, r := range s.placeAll(ctx, miss, pod, reqs, key) {
		if r.err == nil {
			out[missAt[k]] = r.score
		}
	}
	preferPlanned(pod, names, out)
	return out, s.wholeNodeScore(names, reqs, key)
}

// wholeNodeScore is the best score the requests get on a whole node of one of the shapes of
// names, or -1 when they fit none.
func (s *scorer) wholeNodeScore(names []string, reqs []allocation.Request, key string) int64 {
	best := int64(-1)
	for _, shape := range s.shapes.distinct(names) {
		best = max(best, s.wholeScore(shape, reqs, key))
	}
	return best
}

// wholeScore is the score of the requests on an empty node of the shape, -1 when they do not
// fit there.
func (s *scorer) wholeScore(shape *topology.Shape, reqs []allocation.Request, key string) int64 {
	type wholeKey struct {
		shape *topology.Shape
		key   string
	}
	if key != "" {
		if v, ok := s.wholeScores.Load(wholeKey{shape, key}); ok {
			return v.(int64)
		}
	}
	score := int64(-1)
	if _, fit, err := s.plan(topology.NewUsage(shape), reqs); err == nil {
		score = allocation.Tenths(fit)
	}
	if key != "" {
		s.wholeScores.Store(wholeKey{shape, key}, score)
	}
	return score
}

// preferPlanned ranks the node neuron-autoscaler launched for the pod (labels.PlannedNodeAnnotation)
// first among those the pod passed: the planner packed that node for it, and a pod that took
// tighter room elsewhere would leave it part empty and displace the pod that room was planned
// for. (The scheduler tries a nominated node first, but it clears the nomination whenever it
// fails to place the pod, as while the node held pods off.)
func preferPlanned(pod *corev1.Pod, names []string, scores []int64) {
	planned := pod.Annotations[labels.PlannedNodeAnnotation]
	i := slices.Index(names, planned)
	if planned == "" || i < 0 {
		return
	}
	for j := range scores {
		scores[j] = min(scores[j], extenderv1.MaxExtenderPriority-1)
	}
	scores[i] = extenderv1.MaxExtenderPriority
}
