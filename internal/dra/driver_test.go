package dra

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/kube-neuron/kube-neuron/internal/neuron"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

type driverEnv struct {
	sysfs, cdiDir, pluginsDir string
}

func newTestDriver(t testing.TB, env *driverEnv) *Driver {
	t.Helper()
	if env.sysfs == "" {
		it, _ := topology.DefaultCatalog().Get("trn2.48xlarge")
		sim, err := neuron.Simulate(neuron.SimOptions{Root: t.TempDir(), InstanceType: it, EFA: true})
		if err != nil {
			t.Fatal(err)
		}
		env.sysfs, env.cdiDir, env.pluginsDir = sim.Root(), t.TempDir(), t.TempDir()
	}
	d, err := New(t.Context(), Options{NodeName: "trn2-a", Client: fake.NewClientset(), SysfsRoot: env.sysfs, CDIRoot: env.cdiDir, PluginsDir: env.pluginsDir})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func prepareOne(t *testing.T, d *Driver, c *resourceapi.ResourceClaim) kubeletplugin.PrepareResult {
	t.Helper()
	out, err := d.PrepareResourceClaims(t.Context(), []*resourceapi.ResourceClaim{c})
	if err != nil {
		t.Fatal(err)
	}
	r, ok := out[c.UID]
	if !ok {
		t.Fatalf("no result for claim %s", c.Name)
	}
	return r
}

func unprepare(t *testing.T, d *Driver, c *resourceapi.ResourceClaim) {
	t.Helper()
	out, err := d.UnprepareResourceClaims(t.Context(), []kubeletplugin.NamespacedObject{{NamespacedName: types.NamespacedName{Namespace: c.Namespace, Name: c.Name}, UID: c.UID}})
	if err != nil || out[c.UID] != nil {
		t.Fatalf("unprepare %s: %v, %v", c.Name, err, out[c.UID])
	}
}

// resolve reads the CDI specs as a container runtime does and returns the env and device nodes
// the ids give.
func resolve(t *testing.T, dir string, ids []string) (map[string]string, []string) {
	t.Helper()
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	var nodes []string
	for _, id := range ids {
		dev := cache.GetDevice(id)
		if dev == nil {
			t.Fatalf("CDI device %s not found (errors %v)", id, cache.GetErrors())
		}
		for _, e := range append(dev.ContainerEdits.Env, dev.GetSpec().ContainerEdits.Env...) {
			k, v, _ := strings.Cut(e, "=")
			env[k] = v
		}
		for _, n := range dev.ContainerEdits.DeviceNodes {
			nodes = append(nodes, n.Path)
		}
	}
	return env, nodes
}

func TestPrepareUnprepare(t *testing.T) {
	env := &driverEnv{}
	d := newTestDriver(t, env)
	c := testClaim("a").Device("neurons", "trn2-a", "neurondevice2", "neurondevice3").Config(`{"apiVersion":"neuron.aws.com/v1","kind":"NeuronConfig","logicalNeuronCore":1}`).Obj()
	r := prepareOne(t, d, c)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	if len(r.Devices) != 2 || r.Devices[0].DeviceName != "neurondevice2" || r.Devices[0].PoolName != "trn2-a" || r.Devices[0].Requests[0] != "neurons" {
		t.Fatalf("devices %+v", r.Devices)
	}
	var ids []string
	for _, dev := range r.Devices {
		ids = append(ids, dev.CDIDeviceIDs...)
	}
	gotEnv, nodes := resolve(t, env.cdiDir, ids)
	if gotEnv[EnvVisibleCores] != "16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31" || gotEnv[EnvLNC] != "1" {
		t.Errorf("env through CDI %v", gotEnv)
	}
	if strings.Join(nodes, ",") != "/dev/neuron2,/dev/neuron3" {
		t.Errorf("device nodes %v", nodes)
	}

	// A retry gives the same answer and writes nothing new.
	r2 := prepareOne(t, d, c)
	if r2.Err != nil || len(r2.Devices) != 2 || r2.Devices[1].CDIDeviceIDs[0] != r.Devices[1].CDIDeviceIDs[0] {
		t.Fatalf("retry: %+v", r2)
	}

	// Another claim for device 3 is refused: never two claims on one device.
	other := testClaim("b").Device("neurons", "trn2-a", "neurondevice3", "neurondevice4").Obj()
	if r := prepareOne(t, d, other); r.Err == nil || !strings.Contains(r.Err.Error(), "neuron device 3 is already prepared for claim ml/a") {
		t.Fatalf("conflicting claim: %v", r.Err)
	}

	// A restarted driver reads the checkpoint: same answer, same refusal.
	d2 := newTestDriver(t, env)
	if r3 := prepareOne(t, d2, c); r3.Err != nil || r3.Devices[0].CDIDeviceIDs[0] != r.Devices[0].CDIDeviceIDs[0] {
		t.Fatalf("after restart: %+v", r3)
	}
	if r := prepareOne(t, d2, other); r.Err == nil {
		t.Fatal("after restart the conflicting claim was prepared")
	}

	// The CDI spec went missing (a cleaned /var/run/cdi): a retry writes it again.
	specs, _ := filepath.Glob(filepath.Join(env.cdiDir, "*.json"))
	if len(specs) != 1 {
		t.Fatalf("CDI specs %v, want one", specs)
	}
	_ = os.Remove(specs[0])
	if r := prepareOne(t, d2, c); r.Err != nil {
		t.Fatal(r.Err)
	}
	if _, err := os.Stat(specs[0]); err != nil {
		t.Fatalf("spec not rewritten: %v", err)
	}

	// Unprepare removes the spec and frees the devices; twice is fine.
	unprepare(t, d2, c)
	unprepare(t, d2, c)
	if specs, _ := filepath.Glob(filepath.Join(env.cdiDir, "*")); len(specs) != 0 {
		t.Errorf("CDI specs left after unprepare: %v", specs)
	}
	if r := prepareOne(t, d2, other); r.Err != nil {
		t.Fatalf("freed device not preparable: %v", r.Err)
	}
	// A restart after unprepare does not bring the claim back.
	d3 := newTestDriver(t, env)
	if _, ok := d3.checkpoint.Claims[string(c.UID)]; ok {
		t.Error("unprepared claim still in the checkpoint")
	}
	if _, ok := d3.checkpoint.Claims[string(other.UID)]; !ok {
		t.Error("prepared claim lost from the checkpoint")
	}
}

func TestPrepareFailureKeepsNothing(t *testing.T) {
	env := &driverEnv{}
	d := newTestDriver(t, env)
	bad := testClaim("bad").Device("n", "trn2-a", "neurondevice0").Config(`{"apiVersion":"neuron.aws.com/v1","kind":"NeuronConfig","logicalNeuronCore":3}`).Obj()
	good := testClaim("good").Device("n", "trn2-a", "neurondevice1").Obj()
	out, err := d.PrepareResourceClaims(t.Context(), []*resourceapi.ResourceClaim{bad, good})
	if err != nil {
		t.Fatal(err)
	}
	if out[bad.UID].Err == nil || out[good.UID].Err != nil {
		t.Fatalf("results %+v", out)
	}
	if len(d.checkpoint.Claims) != 1 {
		t.Errorf("checkpoint holds %d claims, want the good one", len(d.checkpoint.Claims))
	}
	// The bad claim holds nothing: device 0 can be prepared for another claim.
	if r := prepareOne(t, d, testClaim("c").Device("n", "trn2-a", "neurondevice0").Obj()); r.Err != nil {
		t.Fatal(r.Err)
	}
}

func TestCheckpointSaveFailureUndoes(t *testing.T) {
	env := &driverEnv{}
	d := newTestDriver(t, env)
	// A data directory that reads (no checkpoint yet) but takes no new file, even from root.
	d.dataDir = "/proc/self"
	c := testClaim("a").Device("n", "trn2-a", "neurondevice0").Obj()
	if r := prepareOne(t, d, c); r.Err == nil || !strings.Contains(r.Err.Error(), "writing the checkpoint") {
		t.Fatalf("prepare with an unwritable checkpoint: %v", r.Err)
	}
	if len(d.checkpoint.Claims) != 0 {
		t.Error("claim kept in memory though not recorded")
	}
	if specs, _ := filepath.Glob(filepath.Join(env.cdiDir, "*")); len(specs) != 0 {
		t.Errorf("CDI spec left behind: %v", specs)
	}
}

func TestCorruptCheckpointRefusesToStart(t *testing.T) {
	env := &driverEnv{}
	newTestDriver(t, env)
	dir := filepath.Join(env.pluginsDir, DriverName)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, CheckpointFile), []byte(`{"version":"neuron.aws.com/checkpoint/v1","claims":{`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := New(t.Context(), Options{NodeName: "trn2-a", Client: fake.NewClientset(), SysfsRoot: env.sysfs, CDIRoot: env.cdiDir, PluginsDir: env.pluginsDir})
	if err == nil || !strings.Contains(err.Error(), "is unreadable") || !strings.Contains(err.Error(), "move the file aside") {
		t.Fatalf("corrupt checkpoint: %v", err)
	}
}

// TestTwoInstancesShareTheCheckpoint plays a rolling update: two driver instances on one node,
// the kubelet calling either (the helper serialises their calls). Each sees what the other
// prepared, so neither gives a device twice and either can unprepare.
func TestTwoInstancesShareTheCheckpoint(t *testing.T) {
	env := &driverEnv{}
	oldPod := newTestDriver(t, env)
	newPod := newTestDriver(t, env)
	a := testClaim("a").Device("n", "trn2-a", "neurondevice0", "neurondevice1").Obj()
	if r := prepareOne(t, oldPod, a); r.Err != nil {
		t.Fatal(r.Err)
	}
	b := testClaim("b").Device("n", "trn2-a", "neurondevice1").Obj()
	if r := prepareOne(t, newPod, b); r.Err == nil {
		t.Fatal("the new instance prepared a device the old one had given to another claim")
	}
	c := testClaim("c").Device("n", "trn2-a", "neurondevice2").Obj()
	if r := prepareOne(t, newPod, c); r.Err != nil {
		t.Fatal(r.Err)
	}
	// The old instance's next save must not drop c; the new one unprepares a.
	d := testClaim("d").Device("n", "trn2-a", "neurondevice3").Obj()
	if r := prepareOne(t, oldPod, d); r.Err != nil {
		t.Fatal(r.Err)
	}
	unprepare(t, newPod, a)
	if specs := cdiSpecs(t, env, string(a.UID)); len(specs) != 0 {
		t.Errorf("CDI spec of a left: %v", specs)
	}
	final, err := LoadCheckpoint(filepath.Join(env.pluginsDir, DriverName))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for uid := range final.Claims {
		got = append(got, uid)
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{"uid-c", "uid-d"}) {
		t.Errorf("checkpoint holds %v, want uid-c and uid-d", got)
	}
}

func cdiSpecs(t *testing.T, env *driverEnv, uid string) []string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(env.cdiDir, "*"+uid+"*"))
	return m
}
