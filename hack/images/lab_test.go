package main

import (
	"archive/tar"
	"slices"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// TestLabImageAliases: the stand-in's image holds its binary once, at the first of its paths in
// tar order, and hard links to it at the others, the entrypoint included; a prebuilt binary lands
// at its entrypoint with its user.
func TestLabImageAliases(t *testing.T) {
	t.Parallel()
	created := time.Unix(1700000000, 0).UTC()
	base, err := layer(baseFiles(), created)
	if err != nil {
		t.Fatal(err)
	}
	p := v1.Platform{OS: "linux", Architecture: "amd64"}
	for _, c := range labComponents {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			img, err := image(base, imageSpec{name: c.name, entrypoint: c.entry(), aliases: c.aliases, createdBy: "test", user: c.user, platform: p, binary: []byte("binary " + c.name), created: created})
			if err != nil {
				t.Fatal(err)
			}
			layers, err := img.Layers()
			if err != nil || len(layers) != 2 {
				t.Fatalf("layers %d, %v", len(layers), err)
			}
			entries := layerEntries(t, layers[1])
			paths := []string{c.entry()[1:]}
			for _, a := range c.aliases {
				paths = append(paths, a[1:])
			}
			slices.Sort(paths)
			for i, path := range paths {
				e, ok := entries[path]
				switch {
				case !ok:
					t.Errorf("no %s in the layer", path)
				case i == 0 && (e.hdr.Typeflag != tar.TypeReg || e.content != "binary "+c.name):
					t.Errorf("%s: type %c, %q, want the binary", path, e.hdr.Typeflag, e.content)
				case i > 0 && (e.hdr.Typeflag != tar.TypeLink || e.hdr.Linkname != paths[0]):
					t.Errorf("%s: type %c link %q, want a hard link to %s", path, e.hdr.Typeflag, e.hdr.Linkname, paths[0])
				}
			}
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(cf.Config.Entrypoint, []string{c.entry()}) || cf.Config.User != c.user {
				t.Errorf("entrypoint %v user %s, want %s %s", cf.Config.Entrypoint, cf.Config.User, c.entry(), c.user)
			}
		})
	}
}

func TestPrebuiltFlags(t *testing.T) {
	t.Parallel()
	o := options{components: labComponents}
	if err := o.setPrebuilt([]string{"kube-scheduler=/bin/ks@v1.36.3"}); err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(o.components, func(c component) bool { return c.name == "kube-scheduler" })
	if ref, tag := o.components[i].reference("0.1.0"); ref != "registry.k8s.io/kube-scheduler" || tag != "v1.36.3" || o.prebuilt["kube-scheduler"] != "/bin/ks" {
		t.Errorf("kube-scheduler: %s:%s from %s", ref, tag, o.prebuilt["kube-scheduler"])
	}
	for _, bad := range []string{"kube-scheduler=/bin/ks", "pause=/bin/p@1", "=x@y"} {
		if err := (&options{components: labComponents}).setPrebuilt([]string{bad}); err == nil {
			t.Errorf("-prebuilt %s: accepted", bad)
		}
	}
}
