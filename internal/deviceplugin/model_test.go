package deviceplugin

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/deviceplugin/ledger"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// TestKubeletModel drives the ledger the way a kubelet and the scheduler extender drive the
// plugin, in random orders, and checks what no pod may ever see:
//   - the kubelet finds too few ids for a pod whose record the extender placed on free hardware
//     ("Requested: 8, Available: 4", the e2e flake of chained swaps);
//   - Allocate refuses a pod with such a record;
//   - two live containers get the same core;
//   - the extender sees two records name the same core;
//   - once the plugin's informer has caught up and a refresh has run, a record that does not
//     name what its container got, or a waiting record on hardware someone else got.
//
// The model: a node of one of five shapes (trn1.32xlarge, inf2.48xlarge, trn2.48xlarge at LNC 1
// and 2, inf1.6xlarge); pods have one container or two, which ask through one pool, or, in mixed
// runs, through any of the three (a device taken through one pool is withdrawn from the others).
// The extender places each new pod best-fit on the hardware of the node's records and binds it
// (record written, pod created; the plugin's informer shows the pod at once or only at its next
// catch-up, and shows the plugin's own record writes only then). The kubelet admits waiting pods
// in any order, back to back: it takes ids from what the pool last reported healthy, asks
// GetPreferredAllocation and calls Allocate with the ids; the contents of each answer are what the
// container gets. The refresh an Allocate asks for runs at once or after further admissions, but
// before a pod finishes or the extender binds the next one (it runs within milliseconds); pods
// finish, and the plugin refreshes on that or not. The plugin's process restarts now and then
// (in memory it forgets everything; its checkpoint, CheckpointFile, keeps its answers), also
// between an Allocate and the refresh it asked for.
//
// Lagging runs let refreshes wait any number of steps. The extender can then place a pod on
// hardware a container runs on (that container ran on another pod's record, which went before a
// refresh saw the swap), and such a pod may be refused; no core may still be given twice, and
// records must still end up naming what their containers got.
//
// The API server, the informer and the kubelet are the model's own (ledgerWorld): the ledger
// answers, the model does the plugin's I/O in memory. TestPluginModel runs the same model
// against the whole plugin, with a fake clientset, for the I/O around the ledger.
//
// Each seed is a run of its own; a failure names the seed and the steps up to it. More seeds:
// KUBELET_MODEL_SEEDS=3000 go test -run 'TestKubeletModel$' ./internal/deviceplugin/ (about 3 min).
func TestKubeletModel(t *testing.T) {
	seeds := 500
	if raceEnabled {
		seeds = 100 // as make test runs it: about 15 s
	}
	runModel(t, seeds, newLedgerWorld)
}

// TestPluginModel runs the model of TestKubeletModel against the whole plugin: its informer
// lister, its fake API server, its PodResources client, its record patches and its checkpoint
// file. Fewer seeds: the decisions are TestKubeletModel's to cover.
func TestPluginModel(t *testing.T) {
	seeds := 20
	if raceEnabled {
		seeds = 5
	}
	runModel(t, seeds, newPluginWorld)
}

// runModel runs seeds runs of each kind (one pool or mixed, lagging or not) against the worlds
// newWorld makes.
func runModel(t *testing.T, seeds int, newWorld func(*kubeletModel) modelWorld) {
	if testing.Short() {
		seeds = max(seeds/5, 10)
	}
	if v := os.Getenv("KUBELET_MODEL_SEEDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("KUBELET_MODEL_SEEDS=%q: want a number of seeds", v)
		}
		seeds = n
	}
	for _, lagging := range []bool{false, true} {
		for _, pools := range [][]string{{topology.ResourceNeuron}, {topology.ResourceNeuronCore}, Resources} {
			name := strings.TrimPrefix(pools[0], "aws.amazon.com/")
			if len(pools) > 1 {
				name = "mixed"
			}
			if lagging {
				name += "/lagging"
			}
			t.Run(name, func(t *testing.T) {
				var admissions, refusals, multi int
				for seed := range uint64(seeds) {
					t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
						m := newKubeletModel(t, pools, seed, newWorld)
						m.lagging = lagging
						if err := m.run(80); err != nil {
							t.Fatalf("%v\nsteps:\n%s", err, strings.Join(m.trace, "\n"))
						}
						admissions, refusals, multi = admissions+m.admissions, refusals+m.refused, multi+m.multi
					})
				}
				// A model that refused most pods would check little. Lagging runs refuse some
				// (1 to 3 % of one pool's pods, 15 to 20 % of mixed pools', where a pool's stale
				// view still withdraws what another pool's pods released).
				t.Logf("%d pods admitted (%d of two containers), %d refused", admissions, multi, refusals)
				if admissions < 8*seeds || refusals*3 > admissions || multi*10 < admissions {
					t.Errorf("%d pods admitted and %d refused over %d runs: the model no longer exercises admission", admissions, refusals, seeds)
				}
			})
		}
	}
}

// modelWorld is the plugin, or the ledger with the plugin's I/O done in memory, with the API
// server and the informer it reads. Pods are in namespace ns.
type modelWorld interface {
	// bind creates a pod bound to the node, with its record; shown says the informer shows it
	// at once (else at the next catchUp).
	bind(pod modelPod, shown bool) error
	// remove deletes a pod from the API server and the informer.
	remove(name string) error
	// catchUp lets the informer show the API server's pods.
	catchUp() error
	// records returns the API server's records, by pod name.
	records() (map[string]*allocation.Record, error)
	// restart ends the plugin's process and starts another, from the checkpoint.
	restart() error
	preferred(resource string, available []string, count int) []string
	allocate(resource string, ids []string) (topology.Allocation, error)
	// refresh runs the plugin's refresh with the kubelet's PodResources.
	refresh() error
	withdrawn(resource string) map[string]string
}

// modelPod is a pod the extender binds.
type modelPod struct {
	name      string
	created   int64 // unix seconds
	allocTime int64
	ctrs      []modelCtr
	record    *allocation.Record
}

// kubeletModel is one run: the world under test (the plugin or the ledger, with the API server
// and the informer) and the kubelet's state.
type kubeletModel struct {
	t     *testing.T
	rng   *rand.Rand
	w     modelWorld
	pools []string // the pools pods ask through: one, or all three (mixed)
	shape *topology.Shape

	next     int                            // pods created so far
	pods     map[string][]modelCtr          // pod name -> its containers
	admitted map[string][][]string          // pod name -> ids the kubelet holds for each container
	got      map[string]topology.Allocation // pod/container -> what it got
	view     map[string]map[string]bool     // pool -> ids it last reported withdrawn, as the kubelet sees them
	pending  bool                           // an Allocate or a pod's end asked for a refresh that has not run yet
	// lagging lets refreshes wait any number of steps (see TestKubeletModel).
	lagging    bool
	refused    int // admissions refused (lagging runs only)
	admissions int // admissions served
	multi      int // of which of pods with two containers
	trace      []string
}

// modelCtr is a container of a model pod: what it asks for through which pool.
type modelCtr struct {
	name, res string
	count     int
}

func newKubeletModel(t *testing.T, pools []string, seed uint64, newWorld func(*kubeletModel) modelWorld) *kubeletModel {
	// Each seed runs on one of these instance types: trees, rings and tori, 1 to 8 cores per device.
	types := []struct {
		name string
		lnc  int
	}{{"trn1.32xlarge", 0}, {"inf2.48xlarge", 0}, {"trn2.48xlarge", 1}, {"trn2.48xlarge", 2}, {"inf1.6xlarge", 0}}
	it := types[seed%uint64(len(types))]
	typ, ok := modelCatalog().Lookup(it.name)
	if !ok {
		t.Fatalf("instance type %s is not in the catalog", it.name)
	}
	shape, err := topology.NewShape(typ, it.lnc)
	if err != nil {
		t.Fatal(err)
	}
	m := &kubeletModel{
		t: t, rng: rand.New(rand.NewPCG(seed, 0x6b6e)), pools: pools, shape: shape,
		pods: map[string][]modelCtr{}, admitted: map[string][][]string{}, got: map[string]topology.Allocation{}, view: map[string]map[string]bool{},
	}
	m.w = newWorld(m)
	m.logf("%s at LNC %d: %d devices, %d cores", it.name, shape.LNC, shape.Devices(), shape.Cores())
	return m
}

// restart is the plugin's process ending (its answers and writes in memory are lost) and
// starting again: it reads its checkpoint, its informer lists the pods, it refreshes, then it
// serves.
func (m *kubeletModel) restart() error {
	if err := m.w.restart(); err != nil {
		return err
	}
	m.logf("the plugin restarts")
	if err := m.catchUp(); err != nil {
		return err
	}
	return m.refresh()
}

func (m *kubeletModel) logf(format string, args ...any) {
	m.trace = append(m.trace, fmt.Sprintf("%3d. ", len(m.trace)+1)+fmt.Sprintf(format, args...))
}

func (m *kubeletModel) run(steps int) error {
	for range steps {
		var err error
		switch n := m.rng.IntN(40); {
		case n < 16:
			err = m.bindNewPod()
		case n < 32:
			err = m.admit()
		case n < 36:
			err = m.finish()
		case n < 39:
			err = m.catchUp()
		default:
			err = m.restart()
		}
		if err != nil {
			return err
		}
		if err := m.checkDisjoint(); err != nil {
			return err
		}
	}
	// Settle: the informer catches up, a refresh runs, and every waiting pod is admitted.
	if err := m.catchUp(); err != nil {
		return err
	}
	if err := m.refresh(); err != nil {
		return err
	}
	if err := m.catchUp(); err != nil {
		return err
	}
	if err := m.checkSettled(); err != nil {
		return err
	}
	for m.waiting() != "" {
		if err := m.admitPod(m.waiting()); err != nil {
			return err
		}
		if err := m.refresh(); err != nil {
			return err
		}
		if err := m.catchUp(); err != nil {
			return err
		}
	}
	return m.checkSettled()
}

// records returns the record entries of the live pods' containers (pod/container), from the
// API server.
func (m *kubeletModel) records() map[string]allocation.Container {
	recs, err := m.w.records()
	if err != nil {
		m.t.Fatal(err)
	}
	out := map[string]allocation.Container{}
	for name, r := range recs {
		if r == nil || len(r.Containers) != len(m.pods[name]) {
			m.t.Fatalf("pod %s: record %+v; want an entry for each of its containers %+v", name, r, m.pods[name])
		}
		for _, c := range r.Containers {
			out[name+"/"+c.Name] = c
		}
	}
	return out
}

// bindNewPod is the extender: it places a pod of one container, or of two (through pools of
// their own), best-fit on the hardware no record names, writes the record and creates the pod,
// bound to the node. The plugin's informer shows the new pod at once, or only at its next
// catch-up.
func (m *kubeletModel) bindNewPod() error {
	if err := m.settle(); err != nil {
		return err
	}
	busy := map[int]string{}
	for key, c := range m.records() {
		hw, err := c.Hardware(m.shape)
		if err != nil {
			return err
		}
		for _, core := range hw.Cores {
			if o, ok := busy[core]; ok && !m.lagging {
				// A lagging run may see this for a while: a pod that ran on another pod's record
				// finished before a refresh fixed the records, and the extender placed a new
				// pod on what the record of the one that runs still says is free.
				return fmt.Errorf("the records of %s and %s both name core %d", o, key, core)
			}
			busy[core] = key
		}
	}
	m.next++
	name := fmt.Sprintf("p%02d", m.next)
	n := 1
	if m.rng.IntN(3) == 0 {
		n = 2
	}
	var ctrs []modelCtr
	r := &allocation.Record{Node: node}
	var placed []string
	for i := range n {
		res := m.pools[m.rng.IntN(len(m.pools))]
		unit, _ := topology.UnitOf(res)
		sizes := m.shape.DeviceSizes()
		if unit == topology.UnitCore {
			sizes = m.shape.CoreSizes()
		}
		// Up to half the node, so that several pods share it.
		limit := m.shape.Devices() / 2
		if unit == topology.UnitCore {
			limit = m.shape.Cores() / 2
		}
		sizes = slices.DeleteFunc(slices.Clone(sizes), func(n int) bool { return n > limit })
		count := sizes[m.rng.IntN(len(sizes))]
		u := topology.NewUsage(m.shape)
		if err := u.MarkCores(slices.Collect(maps.Keys(busy))); err != nil {
			return err
		}
		fit, err := topology.BestFit.Place(u, topology.Request{Unit: unit, Count: count})
		if err != nil {
			m.logf("no room for %s (%d %s)", name, count, res)
			return nil
		}
		c := allocation.Container{Name: fmt.Sprintf("c%d", i), Resource: res, Devices: fit.Devices}
		if unit == topology.UnitCore {
			c.Devices, c.Cores = nil, fit.Cores
		}
		for _, core := range fit.Cores {
			busy[core] = name
		}
		r.Containers = append(r.Containers, c)
		ctrs = append(ctrs, modelCtr{name: c.Name, res: res, count: count})
		placed = append(placed, fmt.Sprintf("%s %d %s on devices %v cores %v", c.Name, count, strings.TrimPrefix(res, "aws.amazon.com/"), fit.Devices, fit.Cores))
	}
	shown := m.rng.IntN(3) != 0
	if err := m.w.bind(modelPod{name: name, created: int64(m.next), allocTime: int64(m.next), ctrs: ctrs, record: r}, shown); err != nil {
		return err
	}
	m.pods[name] = ctrs
	m.logf("extender binds %s: %s", name, strings.Join(placed, "; "))
	if !shown {
		m.logf("  (the plugin's informer does not show %s yet)", name)
	}
	return nil
}

// waiting returns a bound pod the kubelet has not admitted, at random, or "".
func (m *kubeletModel) waiting() string {
	var names []string
	for name := range m.pods {
		if _, ok := m.admitted[name]; !ok {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return ""
	}
	slices.Sort(names)
	return names[m.rng.IntN(len(names))]
}

// admit admits a waiting pod, and then, more often than not, lets the plugin refresh.
func (m *kubeletModel) admit() error {
	name := m.waiting()
	if name == "" {
		return nil
	}
	if err := m.admitPod(name); err != nil {
		return err
	}
	m.pending = true
	if m.rng.IntN(2) == 0 {
		return m.refresh()
	}
	return nil
}

// settle runs the refresh an Allocate or a pod's end asked for, if it has not run yet. Refreshes
// run within milliseconds of the request: the kubelet may admit the next pods before (it admits
// pods back to back), but a pod does not finish, nor does the extender see it go and place
// another, before.
func (m *kubeletModel) settle() error {
	if m.pending && !m.lagging {
		return m.refresh()
	}
	return nil
}

// admitPod is the kubelet's device manager admitting one pod, container by container: the
// healthy ids of the container's pool that it does not hold (for another container, or for an
// earlier one of this pod), the plugin's preferred set among them if it is one, and Allocate
// with those ids. A container it cannot serve fails the pod.
func (m *kubeletModel) admitPod(name string) error {
	held := map[string]map[string]bool{} // pool -> ids
	hold := func(res string, ids []string) {
		if held[res] == nil {
			held[res] = map[string]bool{}
		}
		for _, id := range ids {
			held[res][id] = true
		}
	}
	for other, ctrIDs := range m.admitted {
		for i, ids := range ctrIDs {
			hold(m.pods[other][i].res, ids)
		}
	}
	var all [][]string
	got := map[string]topology.Allocation{}
	for _, c := range m.pods[name] {
		var available []string
		for _, id := range ledger.PoolIDs(m.shape, c.res) {
			if !held[c.res][id] && !m.view[c.res][id] {
				available = append(available, id)
			}
		}
		if len(available) < c.count {
			return m.refuse(name, fmt.Errorf("the kubelet cannot admit %s container %s: Requested: %d, Available: %d (ids %v; withdrawn %v; held %v)",
				name, c.name, c.count, len(available), available, sortedKeys(m.view[c.res]), sortedKeys(held[c.res])))
		}
		ids := m.w.preferred(c.res, available, c.count)
		if len(ids) != c.count || slices.ContainsFunc(ids, func(id string) bool { return !slices.Contains(available, id) }) {
			ids = available[:c.count] // the kubelet ignores a preference it cannot take
		}
		hw, err := m.w.allocate(c.res, ids)
		if err != nil {
			return m.refuse(name, fmt.Errorf("Allocate for %s container %s (ids %v): %v", name, c.name, ids, err))
		}
		hold(c.res, ids)
		all = append(all, ids)
		got[name+"/"+c.name] = hw
		m.logf("kubelet admits %s container %s with %s ids %v: gets devices %v cores %v", name, c.name, strings.TrimPrefix(c.res, "aws.amazon.com/"), ids, hw.Devices, hw.Cores)
	}
	m.admitted[name] = all
	maps.Copy(m.got, got)
	m.admissions++
	if len(all) > 1 {
		m.multi++
	}
	return nil
}

// refuse fails the admission of a pod. Only a lagging run tolerates it: the kubelet fails the
// pod, which is then deleted.
func (m *kubeletModel) refuse(name string, err error) error {
	if !m.lagging {
		return err
	}
	m.logf("refused: %v", err)
	m.refused++
	return m.remove(name)
}

// kubelet is what the kubelet's PodResources API shows: a container's ids in any order.
func (m *kubeletModel) kubelet() []ledger.Admitted {
	var out []ledger.Admitted
	for _, name := range sortedKeys(m.admitted) {
		for i, ids := range m.admitted[name] {
			c := m.pods[name][i]
			shuffled := make([]string, len(ids))
			for k, j := range m.rng.Perm(len(ids)) {
				shuffled[k] = ids[j]
			}
			out = append(out, ledger.Admitted{Pod: ledger.PodKey{Namespace: "ns", Name: name}, Container: c.name, Resource: c.res, IDs: shuffled})
		}
	}
	return out
}

// refresh is the plugin's refresh with the kubelet's PodResources, after which the kubelet sees
// the pool's new health.
func (m *kubeletModel) refresh() error {
	if err := m.w.refresh(); err != nil {
		return err
	}
	m.pending = false
	var views []string
	for _, res := range m.pools {
		w := m.w.withdrawn(res)
		m.view[res] = map[string]bool{}
		for id := range w {
			m.view[res][id] = true
		}
		views = append(views, fmt.Sprintf("%s %v", strings.TrimPrefix(res, "aws.amazon.com/"), sortedKeys(m.view[res])))
	}
	m.logf("refresh: withdrawn %s", strings.Join(views, ", "))
	return nil
}

// finish ends a running pod: the kubelet releases its ids and the pod is deleted.
func (m *kubeletModel) finish() error {
	if err := m.settle(); err != nil {
		return err
	}
	names := sortedKeys(m.admitted)
	if len(names) == 0 {
		return nil
	}
	name := names[m.rng.IntN(len(names))]
	if err := m.remove(name); err != nil {
		return err
	}
	m.logf("%s finishes", name)
	// The plugin refreshes on the informer's event: before the extender places the next pod
	// (which sees the same event and then schedules and binds), not always before the kubelet
	// admits pods bound earlier.
	m.pending = true
	if m.rng.IntN(2) == 0 {
		return m.refresh()
	}
	return nil
}

// remove deletes a pod: the kubelet releases its ids, the API server and the informer drop it.
func (m *kubeletModel) remove(name string) error {
	if err := m.w.remove(name); err != nil {
		return err
	}
	for _, c := range m.pods[name] {
		delete(m.got, name+"/"+c.name)
	}
	delete(m.admitted, name)
	delete(m.pods, name)
	return nil
}

// catchUp lets the plugin's informer show the API server's pods.
func (m *kubeletModel) catchUp() error {
	if err := m.w.catchUp(); err != nil {
		return err
	}
	m.logf("informer catches up")
	return nil
}

// checkDisjoint: no core is in two live containers.
func (m *kubeletModel) checkDisjoint() error {
	owner := map[int]string{}
	for _, name := range sortedKeys(m.got) {
		for _, c := range m.got[name].Cores {
			if o, ok := owner[c]; ok {
				return fmt.Errorf("core %d is in both %s and %s", c, o, name)
			}
			owner[c] = name
		}
	}
	return nil
}

// checkSettled: every running container's record entry names what it got, served, and (unless
// the run lags) no waiting entry names hardware a running container got.
func (m *kubeletModel) checkSettled() error {
	recs := m.records()
	owner := map[int]string{}
	for name, hw := range m.got {
		c := recs[name]
		if !c.Served || !ledger.SameHardware(m.shape, c, hw) {
			return fmt.Errorf("settled: %s got devices %v cores %v, its record says devices %v cores %v served %v", name, hw.Devices, hw.Cores, c.Devices, c.Cores, c.Served)
		}
		for _, core := range hw.Cores {
			owner[core] = name
		}
	}
	for name, c := range recs {
		if _, ok := m.got[name]; ok || m.lagging {
			// A lagging run may have let the extender place a pod on hardware a container
			// runs on: its Allocate call is refused.
			continue
		}
		hw, err := c.Hardware(m.shape)
		if err != nil {
			return err
		}
		for _, core := range hw.Cores {
			if o, ok := owner[core]; ok {
				return fmt.Errorf("settled: waiting %s's record names core %d, which %s got", name, core, o)
			}
		}
	}
	return nil
}

// modelCatalog is the built-in catalog, read once for all runs.
var modelCatalog = sync.OnceValue(topology.DefaultCatalog)

func sortedKeys[V any](m map[string]V) []string {
	keys := slices.Collect(maps.Keys(m))
	ledger.SortIDs(keys)
	return keys
}
