package topology

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

//go:embed catalog.yaml
var defaultCatalogYAML []byte

// CatalogAPIVersion and CatalogKind identify an instance catalog file.
const (
	CatalogAPIVersion = "kube-neuron.io/v1"
	CatalogKind       = "InstanceCatalog"
)

// Kind is the shape of the links between the Neuron devices of one node.
type Kind string

// Topology kinds.
const (
	KindSingle   Kind = "single"   // one device
	KindChain    Kind = "chain"    // a line without wrap-around (inf1.6xlarge)
	KindRing     Kind = "ring"     // a line with wrap-around (inf1.24xlarge, inf2)
	KindTorus    Kind = "torus"    // 4x4 2D torus, row-major (trn1.32xlarge, trn2.48xlarge)
	KindSwitched Kind = "switched" // all-to-all through a switch (trn3)
)

// Kinds lists every topology kind.
var Kinds = []Kind{KindSingle, KindChain, KindRing, KindTorus, KindSwitched}

// InstanceType is one entry of the catalog.
type InstanceType struct {
	Name                   string   `json:"name"`
	Family                 string   `json:"family"`
	Devices                int      `json:"devices"`
	PhysicalCoresPerDevice int      `json:"physicalCoresPerDevice"`
	DefaultLNC             int      `json:"defaultLNC"`
	LNCConfigurable        bool     `json:"lncConfigurable,omitempty"`
	DeviceMemoryGiB        int      `json:"deviceMemoryGiB"`
	Topology               Kind     `json:"topology"`
	VCPU                   int      `json:"vcpu"`
	MemoryGiB              int      `json:"memoryGiB"`
	PriceUSDPerHour        *float64 `json:"priceUSDPerHour,omitempty"`
	UltraServerNodes       int      `json:"ultraServerNodes,omitempty"`
	Assumed                []string `json:"assumed,omitempty"`
}

// LogicalCoresPerDevice is the number of NeuronCores per device that the node exposes at the
// given LNC (0 means the type's default).
func (t InstanceType) LogicalCoresPerDevice(lnc int) int {
	if lnc == 0 {
		lnc = t.DefaultLNC
	}
	return t.PhysicalCoresPerDevice / lnc
}

// PhysicalCores is the number of physical NeuronCores of a node of the type (what Karpenter
// counts as its neuroncores).
func (t InstanceType) PhysicalCores() int { return t.Devices * t.PhysicalCoresPerDevice }

// LogicalCores is the number of NeuronCores a node of the type exposes at the given LNC (0 means
// the type's default).
func (t InstanceType) LogicalCores(lnc int) int { return t.Devices * t.LogicalCoresPerDevice(lnc) }

// LogicalCoresOfPhysical is the number of logical NeuronCores that physical physical cores make
// at the given LNC (0 means the type's default), rounded up: at LNC 2, 5 physical cores are 3.
func (t InstanceType) LogicalCoresOfPhysical(physical, lnc int) int {
	if lnc == 0 {
		lnc = t.DefaultLNC
	}
	return (physical + lnc - 1) / lnc
}

// LNCOfCounts returns the LNC of a node of the type that advertises devices devices and cores
// NeuronCores (the device plugin's capacity): the physical cores per device over the logical
// ones. It returns 0, the type's default, when the counts do not tell: either is 0, or they do
// not divide. The result is not checked: CheckLNC (NewShape) says whether the type accepts it.
func (t InstanceType) LNCOfCounts(devices, cores int64) int {
	if devices <= 0 || cores <= 0 || cores%devices != 0 {
		return 0
	}
	cpd := cores / devices
	if cpd <= 0 || int64(t.PhysicalCoresPerDevice)%cpd != 0 {
		return 0
	}
	return int(int64(t.PhysicalCoresPerDevice) / cpd)
}

// PriceKnown reports whether the catalog has an on-demand price for the type.
func (t InstanceType) PriceKnown() bool { return t.PriceUSDPerHour != nil }

// CheckLNC returns an error when lnc is not a value the instance type accepts. lnc 0 is the default.
func (t InstanceType) CheckLNC(lnc int) error {
	if lnc == 0 || lnc == t.DefaultLNC {
		return nil
	}
	if !t.LNCConfigurable {
		return fmt.Errorf("LNC value is not configurable for instance type %s", t.Name)
	}
	if lnc != 1 && lnc != 2 {
		return fmt.Errorf("LNC value %d is not valid for instance type %s: use 1 or 2", lnc, t.Name)
	}
	if t.PhysicalCoresPerDevice%lnc != 0 {
		return fmt.Errorf("LNC value %d does not divide the %d physical cores per device of instance type %s", lnc, t.PhysicalCoresPerDevice, t.Name)
	}
	return nil
}

// deepCopy returns a copy that shares no pointer or slice with t, so decoding into it cannot
// change t.
func (t InstanceType) deepCopy() InstanceType {
	if t.PriceUSDPerHour != nil {
		p := *t.PriceUSDPerHour
		t.PriceUSDPerHour = &p
	}
	t.Assumed = slices.Clone(t.Assumed)
	return t
}

func (t InstanceType) validate() error {
	var errs []string
	add := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	if t.Name == "" {
		add("name is empty")
	}
	if t.Family == "" {
		add("family is empty")
	}
	if t.Devices < 1 {
		add("devices must be at least 1, got %d", t.Devices)
	}
	if t.PhysicalCoresPerDevice < 1 || t.PhysicalCoresPerDevice > 64 {
		add("physicalCoresPerDevice must be between 1 and 64, got %d", t.PhysicalCoresPerDevice)
	}
	if t.DefaultLNC != 1 && t.DefaultLNC != 2 {
		add("defaultLNC must be 1 or 2, got %d", t.DefaultLNC)
	} else if t.PhysicalCoresPerDevice%t.DefaultLNC != 0 {
		add("defaultLNC %d does not divide physicalCoresPerDevice %d", t.DefaultLNC, t.PhysicalCoresPerDevice)
	}
	if t.DeviceMemoryGiB < 0 || t.VCPU < 0 || t.MemoryGiB < 0 || t.UltraServerNodes < 0 {
		add("deviceMemoryGiB, vcpu, memoryGiB and ultraServerNodes must not be negative")
	}
	if t.PriceUSDPerHour != nil && *t.PriceUSDPerHour < 0 {
		add("priceUSDPerHour must not be negative, got %v (leave it out when the price is unknown)", *t.PriceUSDPerHour)
	}
	switch t.Topology {
	case KindSingle:
		if t.Devices != 1 {
			add("topology single needs exactly 1 device, got %d", t.Devices)
		}
	case KindChain, KindRing:
		if t.Devices < 2 {
			add("topology %s needs at least 2 devices, got %d", t.Topology, t.Devices)
		}
	case KindTorus:
		if t.Devices != 16 {
			add("topology torus is the 4x4 torus and needs exactly 16 devices, got %d", t.Devices)
		}
	case KindSwitched:
	default:
		add("topology %q is not one of %v", t.Topology, Kinds)
	}
	if len(errs) > 0 {
		return fmt.Errorf("instance type %q: %s", t.Name, strings.Join(errs, "; "))
	}
	return nil
}

// Catalog is a set of instance types, looked up by name.
type Catalog struct {
	types map[string]InstanceType
}

// catalogFile is the on-disk form of a catalog. Mode "extend" (the default) merges the file into
// the catalog it is loaded on: fields given for an existing name override that entry's fields,
// new names are added. Mode "replace" starts from an empty catalog.
type catalogFile struct {
	APIVersion    string            `json:"apiVersion"`
	Kind          string            `json:"kind"`
	Mode          string            `json:"mode,omitempty"`
	InstanceTypes []json.RawMessage `json:"instanceTypes"`
}

// DefaultCatalog returns the catalog embedded in the binary.
func DefaultCatalog() *Catalog {
	c, err := (&Catalog{types: map[string]InstanceType{}}).Apply(defaultCatalogYAML)
	if err != nil {
		panic(fmt.Sprintf("embedded catalog is invalid: %v", err))
	}
	return c
}

// LoadCatalog returns the default catalog with the given files applied in order.
func LoadCatalog(paths ...string) (*Catalog, error) {
	c := DefaultCatalog()
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("reading catalog file: %w", err)
		}
		if c, err = c.Apply(data); err != nil {
			return nil, fmt.Errorf("catalog file %s: %w", p, err)
		}
	}
	return c, nil
}

// Apply returns a new catalog: c with the YAML or JSON catalog document data applied.
// Unknown fields are errors; c is never modified.
func (c *Catalog) Apply(data []byte) (*Catalog, error) {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("not valid YAML: %w", err)
	}
	var f catalogFile
	if err := strictUnmarshal(js, &f); err != nil {
		return nil, fmt.Errorf("not a valid InstanceCatalog: %w", err)
	}
	if f.APIVersion != CatalogAPIVersion || f.Kind != CatalogKind {
		return nil, fmt.Errorf("apiVersion %q kind %q: want apiVersion %s, kind %s", f.APIVersion, f.Kind, CatalogAPIVersion, CatalogKind)
	}
	out := &Catalog{types: map[string]InstanceType{}}
	switch f.Mode {
	case "", "extend":
		for k, v := range c.types {
			out.types[k] = v
		}
	case "replace":
	default:
		return nil, fmt.Errorf("mode %q: use extend (the default) or replace", f.Mode)
	}
	seen := map[string]bool{}
	for i, raw := range f.InstanceTypes {
		var head struct {
			Name string `json:"name"`
		}
		if err := json.Unmarshal(raw, &head); err != nil || head.Name == "" {
			return nil, fmt.Errorf("instanceTypes[%d]: every entry needs a name", i)
		}
		if seen[head.Name] {
			return nil, fmt.Errorf("instanceTypes[%d]: %s is listed twice", i, head.Name)
		}
		seen[head.Name] = true
		t := out.types[head.Name].deepCopy() // start from the existing entry: the file overrides fields
		if err := strictUnmarshal(raw, &t); err != nil {
			return nil, fmt.Errorf("instanceTypes[%d] (%s): %w", i, head.Name, err)
		}
		if err := t.validate(); err != nil {
			return nil, err
		}
		out.types[t.Name] = t
	}
	return out, nil
}

func strictUnmarshal(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("unexpected data after the document")
	}
	return nil
}

// Lookup returns the instance type with the given name.
func (c *Catalog) Lookup(name string) (InstanceType, bool) {
	t, ok := c.types[BaseInstanceType(name)]
	return t, ok
}

// SageMakerPrefix starts the instance type names of SageMaker HyperPod nodes
// (node.kubernetes.io/instance-type ml.trn1.32xlarge): the EC2 type behind the prefix.
const SageMakerPrefix = "ml."

// BaseInstanceType returns the EC2 instance type of a node's instance type label: name without
// SageMakerPrefix. Such a node has the hardware of its base type, and every part of kube-neuron
// treats it as that type.
func BaseInstanceType(name string) string {
	if base, ok := strings.CutPrefix(name, SageMakerPrefix); ok && base != "" {
		return base
	}
	return name
}

// Get is Lookup with an error that lists the known types.
func (c *Catalog) Get(name string) (InstanceType, error) {
	if t, ok := c.Lookup(name); ok {
		return t, nil
	}
	return InstanceType{}, fmt.Errorf("instance type %q is not in the catalog (known: %s); add it with a catalog file", name, strings.Join(c.Names(), ", "))
}

// Names returns the instance type names in catalog order.
func (c *Catalog) Names() []string {
	var names []string
	for _, t := range c.Types() {
		names = append(names, t.Name)
	}
	return names
}

// Types returns every instance type, ordered by family, then devices, then vCPU, then name.
func (c *Catalog) Types() []InstanceType {
	out := make([]InstanceType, 0, len(c.types))
	for _, t := range c.types {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Family != b.Family {
			return a.Family < b.Family
		}
		if a.Devices != b.Devices {
			return a.Devices < b.Devices
		}
		if a.VCPU != b.VCPU {
			return a.VCPU < b.VCPU
		}
		return a.Name < b.Name
	})
	return out
}
