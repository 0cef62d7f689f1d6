package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"log"
	"maps"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

var testPlatforms = []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64"}}

// fakeAssemble writes the archives of every component from fake binaries (their content names
// component and platform) into a new directory, as `make images` does after go build.
func fakeAssemble(t *testing.T, created time.Time) (options, []result) {
	t.Helper()
	bins := t.TempDir()
	dirs := map[string]string{}
	for _, p := range testPlatforms {
		dir := filepath.Join(bins, p.OS+"_"+p.Architecture)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, c := range components {
			if err := os.WriteFile(filepath.Join(dir, c.name), []byte("binary "+c.name+" for "+p.String()), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		dirs[p.String()] = dir
	}
	o := options{
		out:        t.TempDir(),
		platforms:  testPlatforms,
		components: components,
		version:    "1.2.3",
		revision:   "0123456789abcdef0123456789abcdef01234567",
		created:    created,
		log:        io.Discard,
	}
	results, err := assemble(o, dirs)
	if err != nil {
		t.Fatalf("assemble: %v", err)
	}
	return o, results
}

// TestAssembleIsReproducible checks that the same binaries and time give byte-identical
// archives, and that the time is what changes them.
func TestAssembleIsReproducible(t *testing.T) {
	t.Parallel()
	created := time.Unix(1700000000, 0).UTC()
	_, a := fakeAssemble(t, created)
	_, b := fakeAssemble(t, created)
	_, later := fakeAssemble(t, created.Add(time.Second))
	for i := range a {
		if a[i].digest != b[i].digest {
			t.Errorf("%s: index digest %s, then %s", a[i].name, a[i].digest, b[i].digest)
		}
		if !bytes.Equal(readFile(t, a[i].path), readFile(t, b[i].path)) {
			t.Errorf("%s: the two archives differ", a[i].name)
		}
		if a[i].digest == later[i].digest {
			t.Errorf("%s: SOURCE_DATE_EPOCH one second later gives the same digest %s", a[i].name, a[i].digest)
		}
	}
}

// TestArchive reads each archive as an OCI image layout (as skopeo and crane do) and checks the
// images: platforms, user, entrypoint, labels, times, and every file of both layers.
func TestArchive(t *testing.T) {
	t.Parallel()
	created := time.Unix(1700000000, 0).UTC()
	o, results := fakeAssemble(t, created)
	wantUser := map[string]string{
		"neuron-device-plugin":      "0:0",
		"neuron-scheduler-extender": "65532:65532",
		"neuron-dra-driver":         "0:0",
		"neuron-autoscaler":         "65532:65532",
		"neuron-kube-scheduler":     "65532:65532",
	}
	if got, want := slices.Sorted(slices.Values(componentNames(components))), slices.Sorted(maps.Keys(wantUser)); !slices.Equal(got, want) {
		t.Fatalf("components %q, want %q", got, want)
	}
	for _, r := range results {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			if r.path != filepath.Join(o.out, r.name+".tar") {
				t.Errorf("path %s", r.path)
			}
			entries := tarEntries(t, readFile(t, r.path))
			names := slices.Collect(maps.Keys(entries))
			for _, n := range []string{"oci-layout", "index.json", "blobs/", "blobs/sha256/"} {
				if _, ok := entries[n]; !ok {
					t.Errorf("archive has no %s: %q", n, names)
				}
			}

			dir := untar(t, readFile(t, r.path))
			l, err := layout.ImageIndexFromPath(dir)
			if err != nil {
				t.Fatalf("OCI layout: %v", err)
			}
			top, err := l.IndexManifest()
			if err != nil {
				t.Fatal(err)
			}
			if len(top.Manifests) != 1 {
				t.Fatalf("index.json has %d entries, want 1", len(top.Manifests))
			}
			d := top.Manifests[0]
			wantAnn := map[string]string{
				"org.opencontainers.image.ref.name": "1.2.3",
				"io.containerd.image.name":          "docker.io/library/" + r.name + ":1.2.3",
			}
			if d.MediaType != types.OCIImageIndex || d.Digest != r.digest || !maps.Equal(d.Annotations, wantAnn) {
				t.Errorf("index.json entry %+v, want an OCI index %s with annotations %v", d, r.digest, wantAnn)
			}
			idx, err := l.ImageIndex(d.Digest)
			if err != nil {
				t.Fatal(err)
			}
			im, err := idx.IndexManifest()
			if err != nil {
				t.Fatal(err)
			}
			var platforms []string
			for _, m := range im.Manifests {
				platforms = append(platforms, m.Platform.String())
				if m.MediaType != types.OCIManifestSchema1 || m.ArtifactType != "" {
					t.Errorf("%s: descriptor media type %s artifactType %q, want an OCI manifest and no artifactType (skopeo 1.9 drops it)", m.Platform, m.MediaType, m.ArtifactType)
				}
				img, err := idx.Image(m.Digest)
				if err != nil {
					t.Fatal(err)
				}
				checkImage(t, img, r.name, wantUser[r.name], *m.Platform, created)
			}
			if want := []string{"linux/amd64", "linux/arm64"}; !slices.Equal(platforms, want) {
				t.Errorf("platforms %q, want %q", platforms, want)
			}
		})
	}
}

func checkImage(t *testing.T, img v1.Image, component, user string, p v1.Platform, created time.Time) {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != p.OS || cf.Architecture != p.Architecture {
		t.Errorf("%s: config platform %s/%s", p, cf.OS, cf.Architecture)
	}
	if !slices.Equal(cf.Config.Entrypoint, []string{"/" + component}) || cf.Config.User != user || len(cf.Config.Cmd) != 0 {
		t.Errorf("%s: entrypoint %q cmd %q user %q, want [/%s] no cmd %q", p, cf.Config.Entrypoint, cf.Config.Cmd, cf.Config.User, component, user)
	}
	if !cf.Created.Time.Equal(created) {
		t.Errorf("%s: created %s, want %s", p, cf.Created.Time, created)
	}
	for _, h := range cf.History {
		if !h.Created.Time.Equal(created) {
			t.Errorf("%s: history %q created %s, want %s", p, h.CreatedBy, h.Created.Time, created)
		}
	}
	wantLabels := map[string]string{
		"org.opencontainers.image.title":    component,
		"org.opencontainers.image.version":  "1.2.3",
		"org.opencontainers.image.revision": "0123456789abcdef0123456789abcdef01234567",
		"org.opencontainers.image.source":   "https://github.com/kube-neuron/kube-neuron",
		"org.opencontainers.image.licenses": "Apache-2.0",
	}
	if !maps.Equal(cf.Config.Labels, wantLabels) {
		t.Errorf("%s: labels %v, want %v", p, cf.Config.Labels, wantLabels)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.MediaType != types.OCIManifestSchema1 || m.Config.MediaType != types.OCIConfigJSON {
		t.Errorf("%s: manifest %s config %s, want OCI", p, m.MediaType, m.Config.MediaType)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 2 {
		t.Fatalf("%s: %d layers, want the base and the binary", p, len(layers))
	}
	for _, l := range layers {
		if mt, _ := l.MediaType(); mt != types.OCILayer {
			t.Errorf("%s: layer media type %s", p, mt)
		}
	}

	type want struct {
		mode     int64
		uid, gid int
		content  string // checked when not empty
	}
	base := layerEntries(t, layers[0])
	wantBase := map[string]want{
		"etc/":              {mode: 0o755},
		"etc/passwd":        {mode: 0o644, content: "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"},
		"etc/group":         {mode: 0o644, content: "root:x:0:\nnonroot:x:65532:\n"},
		"etc/nsswitch.conf": {mode: 0o644, content: "hosts: files dns\n"},
		"home/":             {mode: 0o755},
		"home/nonroot/":     {mode: 0o700, uid: 65532, gid: 65532},
		"root/":             {mode: 0o700},
		"tmp/":              {mode: 0o1777},
	}
	bin := layerEntries(t, layers[1])
	wantBin := map[string]want{component: {mode: 0o755, content: "binary " + component + " for " + p.String()}}
	for _, tc := range []struct {
		got  map[string]tarEntry
		want map[string]want
	}{{base, wantBase}, {bin, wantBin}} {
		if got, want := slices.Sorted(maps.Keys(tc.got)), slices.Sorted(maps.Keys(tc.want)); !slices.Equal(got, want) {
			t.Errorf("%s: layer files %q, want %q", p, got, want)
		}
		for n, w := range tc.want {
			e := tc.got[n]
			if e.hdr == nil {
				continue
			}
			if e.hdr.Mode != w.mode || e.hdr.Uid != w.uid || e.hdr.Gid != w.gid || (w.content != "" && e.content != w.content) {
				t.Errorf("%s: %s mode %o owner %d:%d content %q, want %o %d:%d %q", p, n, e.hdr.Mode, e.hdr.Uid, e.hdr.Gid, e.content, w.mode, w.uid, w.gid, w.content)
			}
		}
	}
}

// TestPushLikeCrane pushes each archive to a registry the way `crane push <dir> <ref>` does
// after `tar -xf`, pulls it back by tag and compares the digests.
func TestPushLikeCrane(t *testing.T) {
	t.Parallel()
	_, results := fakeAssemble(t, time.Unix(1700000000, 0).UTC())
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		dir := untar(t, readFile(t, r.path))
		// crane push's loadImage: one entry in index.json, an index, pushed whole.
		l, err := layout.ImageIndexFromPath(dir)
		if err != nil {
			t.Fatal(err)
		}
		top, err := l.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		if len(top.Manifests) != 1 || !top.Manifests[0].MediaType.IsIndex() {
			t.Fatalf("%s: index.json %+v, want one index", r.name, top.Manifests)
		}
		idx, err := l.ImageIndex(top.Manifests[0].Digest)
		if err != nil {
			t.Fatal(err)
		}
		ref, err := name.ParseReference(u.Host + "/kube-neuron/" + r.name + ":1.2.3")
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.WriteIndex(ref, idx); err != nil {
			t.Fatalf("push %s: %v", ref, err)
		}
		pulled, err := remote.Index(ref)
		if err != nil {
			t.Fatalf("pull %s: %v", ref, err)
		}
		if d, err := pulled.Digest(); err != nil || d != r.digest {
			t.Errorf("pulled %s: digest %s (%v), want %s", ref, d, err, r.digest)
		}
		for _, p := range testPlatforms {
			img, err := remote.Image(ref, remote.WithPlatform(p))
			if err != nil {
				t.Fatalf("pull %s for %s: %v", ref, p, err)
			}
			if cf, err := img.ConfigFile(); err != nil || cf.Architecture != p.Architecture {
				t.Errorf("pull %s for %s: config %+v (%v)", ref, p, cf, err)
			}
		}
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type tarEntry struct {
	hdr     *tar.Header
	content string
}

// tarEntries reads a tarball and checks what every tarball of these images must be: entries in
// sorted order, each once, with one mtime and no owner names.
func tarEntries(t *testing.T, b []byte) map[string]tarEntry {
	t.Helper()
	entries := map[string]tarEntry{}
	tr := tar.NewReader(bytes.NewReader(b))
	var prev string
	var mtime time.Time
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		content, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if h.Name <= prev {
			t.Errorf("tar entry %s after %s: not sorted", h.Name, prev)
		}
		prev = h.Name
		if mtime.IsZero() {
			mtime = h.ModTime
		} else if !h.ModTime.Equal(mtime) {
			t.Errorf("tar entry %s: mtime %s, the others %s", h.Name, h.ModTime, mtime)
		}
		if h.Uname != "" || h.Gname != "" || strings.HasPrefix(h.Name, "/") {
			t.Errorf("tar entry %s: owner %q:%q", h.Name, h.Uname, h.Gname)
		}
		entries[h.Name] = tarEntry{hdr: h, content: string(content)}
	}
	return entries
}

func layerEntries(t *testing.T, l v1.Layer) map[string]tarEntry {
	t.Helper()
	rc, err := l.Compressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	zr, err := gzip.NewReader(rc)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return tarEntries(t, b)
}

// untar extracts an archive into a new directory.
func untar(t *testing.T, b []byte) string {
	t.Helper()
	dir := t.TempDir()
	for n, e := range tarEntries(t, b) {
		p := filepath.Join(dir, filepath.FromSlash(n))
		if e.hdr.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(e.content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
