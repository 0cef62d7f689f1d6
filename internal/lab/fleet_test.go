package lab

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kube-neuron/kube-neuron/internal/autoscaler/local"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

func TestFleetExpand(t *testing.T) {
	doc := `nodes:
- {name: trn1-a, instanceType: trn1.32xlarge, mode: device-plugin}
- {name: trn2-a, instanceType: trn2.48xlarge, mode: dra, lnc: 1, driverVersion: 2.26.5.0}
- {name: us, instanceType: trn2u.48xlarge, mode: dra, count: 4, ultraserver: us-1}
- {name: inf, instanceType: inf2.xlarge, kubelet: real}
`
	f, err := ParseFleet([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	specs, err := f.Expand(topology.DefaultCatalog())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range specs {
		names = append(names, s.Name)
	}
	if got := strings.Join(names, " "); got != "trn1-a trn2-a us-0 us-1 us-2 us-3 inf" {
		t.Fatalf("names %s", got)
	}
	if specs[0].Mode != ModeDevicePlugin || specs[0].LNC != 1 || specs[0].DriverVersion != DefaultDriverVersion {
		t.Errorf("defaults: %+v", specs[0])
	}
	if specs[1].LNC != 1 || specs[1].Mode != ModeDRA {
		t.Errorf("trn2-a: %+v", specs[1])
	}
	if specs[6].Mode != ModeDevicePlugin {
		t.Errorf("mode default: %s", specs[6].Mode)
	}
	if specs[0].Kubelet != KubeletSimulated || specs[6].Kubelet != KubeletReal || !HasRealNodes(specs) || HasRealNodes(specs[:6]) {
		t.Errorf("kubelets: %s (default), %s (real)", specs[0].Kubelet, specs[6].Kubelet)
	}
	server := specs[2].UltraServer.ServerID4
	for i, s := range specs[2:6] {
		if s.UltraServer == nil || s.UltraServer.ServerID4 != server || s.UltraServer.NodeID4 != i || s.UltraServer.NodeID2 != i%2 {
			t.Errorf("%s: UltraServer %+v", s.Name, s.UltraServer)
		}
	}
	if specs[2].UltraServer.ServerID2 == specs[4].UltraServer.ServerID2 || specs[2].UltraServer.ServerID2 != specs[3].UltraServer.ServerID2 {
		t.Error("server-id-2 must pair nodes 0-1 and 2-3")
	}
	if specs[0].UltraServer != nil {
		t.Error("a trn1 node has an UltraServer")
	}
}

func TestFleetErrors(t *testing.T) {
	cat := topology.DefaultCatalog()
	for _, tc := range []struct{ doc, want string }{
		{"nodes:\n- {name: a, instanceType: trn1.32xlarge, gpus: 1}\n", `unknown field "gpus"`},
		{"node: []\n", `unknown field "node"`},
		{"nodes:\n- {instanceType: trn1.32xlarge}\n", "name is required"},
		{"nodes:\n- {name: a, instanceType: p5.48xlarge}\n", "is not in the catalog"},
		{"nodes:\n- {name: a, instanceType: trn1.32xlarge, mode: kubelet}\n", `mode "kubelet"`},
		{"nodes:\n- {name: a, instanceType: trn1.32xlarge, lnc: 2}\n", "LNC value is not configurable for instance type trn1.32xlarge"},
		{"nodes:\n- {name: a, instanceType: trn1.32xlarge, ultraserver: u}\n", "only for UltraServer instance types"},
		{"nodes:\n- {name: u, instanceType: trn2u.48xlarge, count: 5, ultraserver: u}\n", "at most 4"},
		{"nodes:\n- {name: a, instanceType: trn1.32xlarge}\n- {name: a, instanceType: inf2.xlarge}\n", "used twice"},
		{"nodes:\n- {name: A_1, instanceType: trn1.32xlarge}\n", "not valid"},
		{"nodes: [", "not valid YAML"},
		{"nodes:\n- {name: a, instanceType: trn1.32xlarge, kubelet: kind}\n", `kubelet "kind": use simulated or real`},
		{"nodes:\n- {name: lab-system, instanceType: trn1.32xlarge}\n", "is the lab's own"},
	} {
		f, err := ParseFleet([]byte(tc.doc))
		if err == nil {
			_, err = f.Expand(cat)
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.doc, err, tc.want)
		}
	}
	for _, doc := range []string{"nodes: []\n", "", "# nothing\n"} {
		f, err := ParseFleet([]byte(doc))
		if err != nil {
			t.Errorf("%q: %v", doc, err)
			continue
		}
		if specs, err := f.Expand(cat); err != nil || len(specs) != 0 {
			t.Errorf("%q: %v %v", doc, specs, err)
		}
	}
}

func FuzzParseFleet(f *testing.F) {
	f.Add([]byte("nodes:\n- {name: a, instanceType: trn1.32xlarge, count: 2}\n"))
	f.Add([]byte("nodes: []"))
	f.Add([]byte("{\"nodes\": [{\"name\": \"us\", \"instanceType\": \"trn2u.48xlarge\", \"ultraserver\": \"x\"}]}"))
	cat := topology.DefaultCatalog()
	f.Fuzz(func(t *testing.T, data []byte) {
		fl, err := ParseFleet(data)
		if err != nil {
			return
		}
		if len(fl.Nodes) > 50 {
			return
		}
		for _, e := range fl.Nodes {
			if e.Count > 100 {
				return
			}
		}
		specs, err := fl.Expand(cat)
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, s := range specs {
			if seen[s.Name] || validNodeName(s.Name) != "" {
				t.Fatalf("invalid or duplicate node %q accepted", s.Name)
			}
			seen[s.Name] = true
		}
	})
}

func TestFleetReservations(t *testing.T) {
	cat := topology.DefaultCatalog()
	f, err := ParseFleet([]byte(`nodes: []
reservations:
- {id: cr-lab-1, instanceType: trn1.32xlarge, count: 2}
- {id: cr-lab-2, instanceType: trn1.32xlarge, count: 1, endTime: "2026-11-27T02:00:00+01:00"}
`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Expand(cat); err != nil {
		t.Fatal(err)
	}
	if len(f.Reservations) != 2 || f.Reservations[0] != (FleetReservation{ID: "cr-lab-1", InstanceType: "trn1.32xlarge", Count: 2}) {
		t.Fatalf("reservations %+v", f.Reservations)
	}
	for _, tc := range []struct{ doc, want string }{
		{"reservations:\n- {id: a, instanceType: trn1.32xlarge, count: 1, az: x}\n", `unknown field "az"`},
		{"reservations:\n- {instanceType: trn1.32xlarge, count: 1}\n", "reservations[0]: id is required"},
		{"reservations:\n- {id: a, instanceType: p5.48xlarge, count: 1}\n", `reservations[0] (a): instance type "p5.48xlarge" is not in the catalog`},
		{"reservations:\n- {id: a, instanceType: trn1.32xlarge}\n", "reservations[0] (a): count 0: a reservation holds at least 1 instance"},
		{"reservations:\n- {id: a, instanceType: trn1.32xlarge, count: -1}\n", "count -1"},
		{"reservations:\n- {id: a, instanceType: trn1.32xlarge, count: 1, endTime: soon}\n", `reservations[0] (a): endTime "soon" is not an RFC 3339 time`},
		{"reservations:\n- {id: a, instanceType: trn1.32xlarge, count: 1}\n- {id: a, instanceType: inf2.xlarge, count: 1}\n", "reservations[1] (a): id a is used twice"},
	} {
		f, err := ParseFleet([]byte(tc.doc))
		if err == nil {
			_, err = f.Expand(cat)
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.doc, err, tc.want)
		}
	}
}

// TestReservationArgs: the lab writes the reservations to a file the local provider reads, and
// passes it by its flag; without reservations, no flag.
func TestReservationArgs(t *testing.T) {
	dir := t.TempDir()
	if args, err := reservationArgs(dir, nil); err != nil || len(args) != 0 {
		t.Errorf("no reservations: %v, %v", args, err)
	}
	rs := []FleetReservation{
		{ID: "cr-lab-1", InstanceType: "trn1.32xlarge", Count: 2},
		{ID: "cr-lab-2", InstanceType: "inf2.48xlarge", Count: 1, EndTime: "2026-11-27T02:00:00+01:00"},
	}
	args, err := reservationArgs(dir, rs)
	path := filepath.Join(dir, ReservationsFile)
	if err != nil || len(args) != 1 || args[0] != "--local-reservations="+path {
		t.Fatalf("args %v, %v", args, err)
	}
	got, err := local.LoadReservations(path)
	if err != nil {
		t.Fatal(err)
	}
	want := []local.Reservation{
		{ID: "cr-lab-1", InstanceType: "trn1.32xlarge", Count: 2},
		{ID: "cr-lab-2", InstanceType: "inf2.48xlarge", Count: 1, End: time.Date(2026, 11, 27, 1, 0, 0, 0, time.UTC)},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the provider read %+v, want %+v", got, want)
	}
}
