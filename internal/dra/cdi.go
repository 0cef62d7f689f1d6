package dra

import (
	"fmt"
	"slices"
	"sort"

	"tags.cncf.io/container-device-interface/pkg/cdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// CDI kind of the driver's devices: vendor k8s.neuron.aws.com, class neuron.
const (
	cdiVendor = "k8s." + DriverName
	cdiClass  = "neuron"
	cdiKind   = cdiVendor + "/" + cdiClass
)

// cdiSpec is the CDI spec of one prepared claim: one CDI device per allocated device, holding
// its device nodes (/dev/neuronN), and the claim's environment as spec-wide edits, which the
// runtime applies to every container that gets one of the spec's devices. Device names carry
// the claim UID, so that a runtime's cached spec never matches another claim.
func cdiSpec(uid string, p *Plan) (*cdispec.Spec, [][]string, error) {
	spec := &cdispec.Spec{Kind: cdiKind}
	ids := make([][]string, len(p.Devices))
	for i, d := range p.Devices {
		name := uid + "-" + d.Device
		dev := cdispec.Device{Name: name}
		for _, idx := range d.Indexes {
			dev.ContainerEdits.DeviceNodes = append(dev.ContainerEdits.DeviceNodes, &cdispec.DeviceNode{Path: fmt.Sprintf("/dev/neuron%d", idx)})
		}
		spec.Devices = append(spec.Devices, dev)
		ids[i] = []string{cdiKind + "=" + name}
	}
	keys := make([]string, 0, len(p.Env))
	for k := range p.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		spec.ContainerEdits.Env = append(spec.ContainerEdits.Env, k+"="+p.Env[k])
	}
	v, err := cdispec.MinimumRequiredVersion(spec)
	if err != nil {
		return nil, nil, fmt.Errorf("CDI spec of claim %s: %w", uid, err)
	}
	spec.Version = v
	return spec, ids, nil
}

// cdiSpecName is the file name of a claim's CDI spec (vendor-class_uid.json, the transient spec
// convention).
func cdiSpecName(uid string) string {
	return cdi.GenerateTransientSpecName(cdiVendor, cdiClass, uid) + ".json"
}

// cdiWriter writes and removes the claims' spec files in one directory.
type cdiWriter struct {
	cache *cdi.Cache
}

func newCDIWriter(dir string) (*cdiWriter, error) {
	c, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		return nil, fmt.Errorf("CDI directory %s: %w", dir, err)
	}
	return &cdiWriter{cache: c}, nil
}

func (w *cdiWriter) write(uid string, p *Plan) (name string, ids [][]string, err error) {
	spec, ids, err := cdiSpec(uid, p)
	if err != nil {
		return "", nil, err
	}
	name = cdiSpecName(uid)
	if err := w.cache.WriteSpec(spec, name); err != nil {
		return "", nil, fmt.Errorf("writing CDI spec %s: %w", name, err)
	}
	return name, ids, nil
}

func (w *cdiWriter) remove(name string) error {
	if err := w.cache.RemoveSpec(name); err != nil {
		return fmt.Errorf("removing CDI spec %s: %w", name, err)
	}
	return nil
}

// sameIDs reports whether two CDI id lists are equal.
func sameIDs(a, b [][]string) bool {
	return slices.EqualFunc(a, b, slices.Equal)
}
