package topology

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDefaultCatalog(t *testing.T) {
	c := DefaultCatalog()
	want := []string{"inf1.xlarge", "inf1.2xlarge", "inf1.6xlarge", "inf1.24xlarge", "inf2.xlarge", "inf2.8xlarge",
		"inf2.24xlarge", "inf2.48xlarge", "trn1.2xlarge", "trn1.32xlarge", "trn1n.32xlarge", "trn2.3xlarge",
		"trn2.48xlarge", "trn2u.48xlarge", "trn3.48xlarge"}
	if len(c.Names()) != len(want) {
		t.Errorf("catalog has %v, want %v", c.Names(), want)
	}
	for _, name := range want {
		it, ok := c.Lookup(name)
		if !ok {
			t.Errorf("%s missing", name)
			continue
		}
		if err := it.validate(); err != nil {
			t.Error(err)
		}
	}
	trn1, _ := c.Lookup("trn1.32xlarge")
	if trn1.Devices != 16 || trn1.Topology != KindTorus || trn1.LogicalCoresPerDevice(0) != 2 || *trn1.PriceUSDPerHour != 21.50 {
		t.Errorf("trn1.32xlarge = %+v", trn1)
	}
	trn2, _ := c.Lookup("trn2.48xlarge")
	if trn2.PriceKnown() {
		t.Errorf("trn2.48xlarge has price %v; its price is unknown and must stay unknown", *trn2.PriceUSDPerHour)
	}
	if trn2.LogicalCoresPerDevice(0) != 4 || trn2.DeviceMemoryGiB != 96 || !trn2.LNCConfigurable {
		t.Errorf("trn2.48xlarge = %+v", trn2)
	}
	for _, name := range []string{"trn2.3xlarge", "trn2.48xlarge", "trn2u.48xlarge", "trn3.48xlarge"} {
		if it, _ := c.Lookup(name); it.PriceKnown() {
			t.Errorf("%s: price must be unknown", name)
		}
	}
	inf16, _ := c.Lookup("inf1.6xlarge")
	if inf16.Topology != KindChain {
		t.Errorf("inf1.6xlarge topology %s, want chain (neuron-ls shows no wrap-around)", inf16.Topology)
	}
	if us, _ := c.Lookup("trn2u.48xlarge"); us.UltraServerNodes != 4 {
		t.Errorf("trn2u.48xlarge UltraServer nodes = %d, want 4", us.UltraServerNodes)
	}
}

func TestCatalogApply(t *testing.T) {
	base := DefaultCatalog()
	tests := []struct {
		name    string
		doc     string
		wantErr string
		check   func(t *testing.T, c *Catalog)
	}{
		{
			name: "extend sets a price and adds a type",
			doc: `apiVersion: kube-neuron.io/v1
kind: InstanceCatalog
instanceTypes:
- name: trn2.48xlarge
  priceUSDPerHour: 44.70
- {name: trn2n.48xlarge, family: trn2n, devices: 16, physicalCoresPerDevice: 8, defaultLNC: 2, lncConfigurable: true, deviceMemoryGiB: 96, topology: torus, vcpu: 192, memoryGiB: 2048}
`,
			check: func(t *testing.T, c *Catalog) {
				it, _ := c.Lookup("trn2.48xlarge")
				if !it.PriceKnown() || *it.PriceUSDPerHour != 44.70 || it.Devices != 16 {
					t.Errorf("trn2.48xlarge after override: %+v", it)
				}
				if _, ok := c.Lookup("trn2n.48xlarge"); !ok {
					t.Error("trn2n.48xlarge not added")
				}
				if _, ok := c.Lookup("inf2.xlarge"); !ok {
					t.Error("extend dropped the default types")
				}
				if it, _ := base.Lookup("trn2.48xlarge"); it.PriceKnown() {
					t.Error("Apply modified the catalog it was called on")
				}
			},
		},
		{
			name: "replace",
			doc: `{"apiVersion": "kube-neuron.io/v1", "kind": "InstanceCatalog", "mode": "replace", "instanceTypes": [
  {"name": "x.big", "family": "x", "devices": 4, "physicalCoresPerDevice": 2, "defaultLNC": 1, "deviceMemoryGiB": 1, "topology": "ring", "vcpu": 1, "memoryGiB": 1}]}`,
			check: func(t *testing.T, c *Catalog) {
				if names := c.Names(); len(names) != 1 || names[0] != "x.big" {
					t.Errorf("names = %v", names)
				}
			},
		},
		{name: "unknown field", doc: "apiVersion: kube-neuron.io/v1\nkind: InstanceCatalog\ninstanceTypes:\n- {name: trn1.32xlarge, prise: 3}\n", wantErr: `unknown field "prise"`},
		{name: "wrong kind", doc: "apiVersion: v1\nkind: ConfigMap\n", wantErr: "want apiVersion kube-neuron.io/v1, kind InstanceCatalog"},
		{name: "not yaml", doc: "apiVersion: [", wantErr: "not valid YAML"},
		{name: "negative price", doc: "apiVersion: kube-neuron.io/v1\nkind: InstanceCatalog\ninstanceTypes:\n- {name: trn1.32xlarge, priceUSDPerHour: -1}\n", wantErr: "leave it out when the price is unknown"},
		{name: "torus with 8 devices", doc: "apiVersion: kube-neuron.io/v1\nkind: InstanceCatalog\ninstanceTypes:\n- {name: trn1.32xlarge, devices: 8}\n", wantErr: "needs exactly 16 devices"},
		{name: "new type missing fields", doc: "apiVersion: kube-neuron.io/v1\nkind: InstanceCatalog\ninstanceTypes:\n- {name: y.small}\n", wantErr: "family is empty"},
		{name: "duplicate", doc: "apiVersion: kube-neuron.io/v1\nkind: InstanceCatalog\ninstanceTypes:\n- {name: trn1.32xlarge}\n- {name: trn1.32xlarge}\n", wantErr: "listed twice"},
		{name: "no name", doc: "apiVersion: kube-neuron.io/v1\nkind: InstanceCatalog\ninstanceTypes:\n- {devices: 2}\n", wantErr: "needs a name"},
		{name: "bad mode", doc: "apiVersion: kube-neuron.io/v1\nkind: InstanceCatalog\nmode: merge\n", wantErr: `mode "merge"`},
		{name: "bad lnc", doc: "apiVersion: kube-neuron.io/v1\nkind: InstanceCatalog\ninstanceTypes:\n- {name: inf1.xlarge, defaultLNC: 3}\n", wantErr: "defaultLNC must be 1 or 2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := base.Apply([]byte(tc.doc))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c)
		})
	}
}

func TestLoadCatalogFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "prices.yaml")
	if err := os.WriteFile(p, []byte("apiVersion: kube-neuron.io/v1\nkind: InstanceCatalog\ninstanceTypes:\n- {name: trn3.48xlarge, priceUSDPerHour: 60}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := LoadCatalog(p)
	if err != nil {
		t.Fatal(err)
	}
	if it, _ := c.Lookup("trn3.48xlarge"); !it.PriceKnown() || *it.PriceUSDPerHour != 60 {
		t.Errorf("trn3.48xlarge = %+v", it)
	}
	if _, err := LoadCatalog(filepath.Join(t.TempDir(), "missing.yaml")); err == nil || !strings.Contains(err.Error(), "reading catalog file") {
		t.Errorf("missing file: %v", err)
	}
	if _, err := c.Get("p5.48xlarge"); err == nil || !strings.Contains(err.Error(), "is not in the catalog") {
		t.Errorf("Get unknown: %v", err)
	}
}

func FuzzCatalogApply(f *testing.F) {
	f.Add([]byte(defaultCatalogYAML))
	f.Add([]byte("apiVersion: kube-neuron.io/v1\nkind: InstanceCatalog\nmode: replace\ninstanceTypes:\n- {name: a, family: a, devices: 16, physicalCoresPerDevice: 2, defaultLNC: 2, topology: torus}\n"))
	f.Add([]byte("{}"))
	base := DefaultCatalog()
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := base.Apply(data)
		if err != nil {
			return
		}
		for _, it := range c.Types() {
			if err := it.validate(); err != nil {
				t.Fatalf("Apply accepted an invalid type: %v", err)
			}
			if _, err := NewShape(it, 0); err != nil {
				t.Fatalf("Apply accepted %s but NewShape fails: %v", it.Name, err)
			}
		}
	})
}

func TestApplyDoesNotChangeItsBase(t *testing.T) {
	base := DefaultCatalog()
	if _, err := base.Apply([]byte("apiVersion: kube-neuron.io/v1\nkind: InstanceCatalog\ninstanceTypes:\n- {name: trn1.32xlarge, priceUSDPerHour: 1, assumed: [x]}\n")); err != nil {
		t.Fatal(err)
	}
	if it, _ := base.Lookup("trn1.32xlarge"); *it.PriceUSDPerHour != 21.50 || len(it.Assumed) != 0 {
		t.Errorf("base catalog changed: %+v", it)
	}
}

// TestSageMakerNamesAreTheirBaseType: a SageMaker HyperPod node's instance type label is the EC2
// type with "ml." in front; it has that type's hardware.
func TestSageMakerNamesAreTheirBaseType(t *testing.T) {
	c := DefaultCatalog()
	got, err := c.Get("ml.trn1.32xlarge")
	if err != nil || got.Name != "trn1.32xlarge" {
		t.Fatalf("Get(ml.trn1.32xlarge) = %q, %v; want trn1.32xlarge", got.Name, err)
	}
	for _, name := range []string{"ml.", "ml.trn9.xlarge", "mltrn1.32xlarge"} {
		if _, ok := c.Lookup(name); ok {
			t.Errorf("Lookup(%q) found a type", name)
		}
	}
}

func TestInstanceTypeCoreCounts(t *testing.T) {
	c := DefaultCatalog()
	tests := []struct {
		typ                  string
		lnc                  int
		physical, logical    int
		physicalIn, logicals int // LogicalCoresOfPhysical(physicalIn, lnc) = logicals
	}{
		{"trn2.48xlarge", 0, 128, 64, 96, 48},
		{"trn2.48xlarge", 2, 128, 64, 5, 3}, // rounded up
		{"trn2.48xlarge", 1, 128, 128, 96, 96},
		{"trn2.3xlarge", 0, 8, 4, 8, 4},
		{"trn1.32xlarge", 0, 32, 32, 7, 7},
		{"inf1.24xlarge", 0, 64, 64, 64, 64},
	}
	for _, tc := range tests {
		it, err := c.Get(tc.typ)
		if err != nil {
			t.Fatal(err)
		}
		if got := it.PhysicalCores(); got != tc.physical {
			t.Errorf("%s: PhysicalCores = %d, want %d", tc.typ, got, tc.physical)
		}
		if got := it.LogicalCores(tc.lnc); got != tc.logical {
			t.Errorf("%s: LogicalCores(%d) = %d, want %d", tc.typ, tc.lnc, got, tc.logical)
		}
		if got := it.LogicalCoresOfPhysical(tc.physicalIn, tc.lnc); got != tc.logicals {
			t.Errorf("%s: LogicalCoresOfPhysical(%d, %d) = %d, want %d", tc.typ, tc.physicalIn, tc.lnc, got, tc.logicals)
		}
	}
}

func TestLNCOfCounts(t *testing.T) {
	c := DefaultCatalog()
	tests := []struct {
		typ            string
		devices, cores int64
		want           int
	}{
		{"trn2.48xlarge", 16, 64, 2},
		{"trn2.48xlarge", 16, 128, 1},
		{"trn2.48xlarge", 15, 60, 2}, // a device withdrawn: the ratio still tells
		{"trn2.48xlarge", 0, 0, 0},   // nothing advertised: the default
		{"trn2.48xlarge", 16, 0, 0},
		{"trn2.48xlarge", 0, 64, 0},
		{"trn2.48xlarge", 16, 40, 0},  // does not divide
		{"trn2.48xlarge", 16, 48, 0},  // 3 cores a device do not divide 8
		{"trn2.48xlarge", 16, 32, 4},  // divides: NewShape refuses LNC 4
		{"trn2.48xlarge", 16, -16, 0}, // nonsense
		{"trn1.32xlarge", 16, 32, 1},
		{"inf1.6xlarge", 4, 16, 1},
	}
	for _, tc := range tests {
		it, err := c.Get(tc.typ)
		if err != nil {
			t.Fatal(err)
		}
		if got := it.LNCOfCounts(tc.devices, tc.cores); got != tc.want {
			t.Errorf("%s: LNCOfCounts(%d, %d) = %d, want %d", tc.typ, tc.devices, tc.cores, got, tc.want)
		}
	}
}
