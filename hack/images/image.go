package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Users of the image configs: the base image has both (/etc/passwd, /etc/group).
const (
	rootUser    = "0:0"
	nonrootUser = "65532:65532"
)

// file is one entry of a layer's tarball.
type file struct {
	name     string // relative to /, without a leading slash; directories end in "/"
	mode     int64  // permission bits, and tar's c_ISVTX for the sticky bit
	uid, gid int
	content  []byte
	link     string // a hard link to this earlier entry (relative to /) instead of content
}

// layer writes files (sorted by name, every mtime set to created, owners numeric only) into a
// gzip-compressed tarball. Go's gzip writes no name and no mtime in its header, so the same
// files give the same bytes with the same Go toolchain.
func layer(files []file, created time.Time) (v1.Layer, error) {
	files = slices.Clone(files)
	slices.SortFunc(files, func(a, b file) int { return strings.Compare(a.name, b.name) })
	var buf bytes.Buffer
	gz, err := gzip.NewWriterLevel(&buf, gzip.DefaultCompression)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(gz)
	for _, f := range files {
		h := &tar.Header{
			Name:    f.name,
			Mode:    f.mode,
			Uid:     f.uid,
			Gid:     f.gid,
			ModTime: created,
			Format:  tar.FormatPAX,
		}
		switch {
		case strings.HasSuffix(f.name, "/"):
			h.Typeflag = tar.TypeDir
		case f.link != "":
			h.Typeflag = tar.TypeLink
			h.Linkname = f.link
		default:
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(f.content))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("tar header of %s: %w", f.name, err)
		}
		if _, err := tw.Write(f.content); err != nil {
			return nil, fmt.Errorf("tar content of %s: %w", f.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	// The opener returns gzip, which LayerFromOpener keeps as the compressed blob as it is.
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// baseFiles is the scratch-like base every image starts from: the users root (0) and nonroot
// (65532) with their groups and home directories, /tmp (1777), and an nsswitch.conf so that Go's
// resolver reads /etc/hosts before DNS. No shell, no libc, no CA certificates: the binaries are
// static Go programs, and none of them calls an HTTPS endpoint outside the cluster except the
// autoscaler, which carries its own roots (docs/images.md).
func baseFiles() []file {
	return []file{
		{name: "etc/", mode: 0o755},
		{name: "etc/passwd", mode: 0o644, content: []byte(
			"root:x:0:0:root:/root:/sbin/nologin\n" +
				"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{name: "etc/group", mode: 0o644, content: []byte(
			"root:x:0:\n" +
				"nonroot:x:65532:\n")},
		{name: "etc/nsswitch.conf", mode: 0o644, content: []byte("hosts: files dns\n")},
		{name: "home/", mode: 0o755},
		{name: "home/nonroot/", mode: 0o700, uid: 65532, gid: 65532},
		{name: "root/", mode: 0o700},
		{name: "tmp/", mode: 0o1777},
	}
}

// imageSpec is one platform's image of one component.
type imageSpec struct {
	name       string
	entrypoint string   // the binary's path, also the entrypoint
	aliases    []string // more paths of the binary (hard links)
	createdBy  string   // the history entry of the binary's layer
	user       string
	platform   v1.Platform
	binary     []byte
	labels     map[string]string
	created    time.Time
}

// image builds the OCI image of spec on top of base: two layers (the base, the binary and its
// aliases), the entrypoint, the user, and created, history and layer mtimes all at spec.created.
func image(base v1.Layer, spec imageSpec) (v1.Image, error) {
	// The binary's paths: the entrypoint and its aliases. layer sorts entries by name, and a hard
	// link must come after its target, so the first path in that order holds the content and the
	// others link to it.
	paths := []string{strings.TrimPrefix(spec.entrypoint, "/")}
	for _, a := range spec.aliases {
		paths = append(paths, strings.TrimPrefix(a, "/"))
	}
	slices.Sort(paths)
	var files []file
	dirs := map[string]bool{"etc": true, "home": true, "root": true, "tmp": true} // in the base layer
	for i, p := range paths {
		for d := path.Dir(p); d != "." && !dirs[d]; d = path.Dir(d) {
			dirs[d] = true
			files = append(files, file{name: d + "/", mode: 0o755})
		}
		f := file{name: p, mode: 0o755, content: spec.binary}
		if i > 0 {
			f = file{name: p, mode: 0o755, link: paths[0]}
		}
		files = append(files, f)
	}
	bin, err := layer(files, spec.created)
	if err != nil {
		return nil, err
	}
	created := v1.Time{Time: spec.created}
	img, err := mutate.Append(
		mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON),
		mutate.Addendum{Layer: base, History: v1.History{Created: created, CreatedBy: "kube-neuron base: /etc/passwd, /etc/group (root, nonroot 65532), /tmp", Comment: "hack/images"}},
		mutate.Addendum{Layer: bin, History: v1.History{Created: created, CreatedBy: spec.createdBy, Comment: "hack/images"}},
	)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture = spec.platform.Architecture
	cf.OS = spec.platform.OS
	cf.Variant = spec.platform.Variant
	cf.Created = created
	cf.Config = v1.Config{
		Entrypoint: []string{spec.entrypoint},
		User:       spec.user,
		WorkingDir: "/",
		Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		Labels:     spec.labels,
	}
	return mutate.ConfigFile(img, cf)
}

// index puts the images of one component into an OCI image index, each with its platform.
// The descriptors carry no artifactType (go-containerregistry's mutate.AppendManifests adds the
// config media type there): skopeo 1.9 does not know the field, drops it and so pushes an index
// with another digest than the one `make images` printed.
func index(imgs []v1.Image) (v1.ImageIndex, error) {
	idx := &imageIndex{
		manifest: v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex},
		images:   map[v1.Hash]v1.Image{},
	}
	for _, img := range imgs {
		cf, err := img.ConfigFile()
		if err != nil {
			return nil, err
		}
		mt, err := img.MediaType()
		if err != nil {
			return nil, err
		}
		size, err := img.Size()
		if err != nil {
			return nil, err
		}
		digest, err := img.Digest()
		if err != nil {
			return nil, err
		}
		idx.manifest.Manifests = append(idx.manifest.Manifests, v1.Descriptor{
			MediaType: mt,
			Size:      size,
			Digest:    digest,
			Platform:  &v1.Platform{OS: cf.OS, Architecture: cf.Architecture, Variant: cf.Variant},
		})
		idx.images[digest] = img
	}
	raw, err := json.Marshal(idx.manifest)
	if err != nil {
		return nil, err
	}
	idx.raw = raw
	if idx.digest, _, err = v1.SHA256(bytes.NewReader(raw)); err != nil {
		return nil, err
	}
	return idx, nil
}

// imageIndex is an OCI image index of images in memory.
type imageIndex struct {
	manifest v1.IndexManifest
	raw      []byte
	digest   v1.Hash
	images   map[v1.Hash]v1.Image
}

var _ v1.ImageIndex = (*imageIndex)(nil)

func (i *imageIndex) MediaType() (types.MediaType, error) { return i.manifest.MediaType, nil }
func (i *imageIndex) Digest() (v1.Hash, error)            { return i.digest, nil }
func (i *imageIndex) Size() (int64, error)                { return int64(len(i.raw)), nil }
func (i *imageIndex) RawManifest() ([]byte, error)        { return i.raw, nil }
func (i *imageIndex) IndexManifest() (*v1.IndexManifest, error) {
	return i.manifest.DeepCopy(), nil
}

func (i *imageIndex) Image(h v1.Hash) (v1.Image, error) {
	img, ok := i.images[h]
	if !ok {
		return nil, fmt.Errorf("image index %s has no image %s", i.digest, h)
	}
	return img, nil
}

func (i *imageIndex) ImageIndex(h v1.Hash) (v1.ImageIndex, error) {
	return nil, fmt.Errorf("image index %s has no image index %s", i.digest, h)
}

// writeArchive writes idx as an OCI image layout in a tarball (what skopeo calls oci-archive):
// oci-layout, index.json with one entry (idx, named by annotations), and every blob once under
// blobs/sha256/; the entries sorted by name, each with mtime created.
func writeArchive(w io.Writer, idx v1.ImageIndex, annotations map[string]string, created time.Time) error {
	blobs := map[string][]byte{}
	add := func(h v1.Hash, b []byte) { blobs[path.Join("blobs", h.Algorithm, h.Hex)] = b }

	raw, err := idx.RawManifest()
	if err != nil {
		return err
	}
	digest, err := idx.Digest()
	if err != nil {
		return err
	}
	add(digest, raw)
	im, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	for _, d := range im.Manifests {
		img, err := idx.Image(d.Digest)
		if err != nil {
			return err
		}
		raw, err := img.RawManifest()
		if err != nil {
			return err
		}
		add(d.Digest, raw)
		cfgName, err := img.ConfigName()
		if err != nil {
			return err
		}
		cfg, err := img.RawConfigFile()
		if err != nil {
			return err
		}
		add(cfgName, cfg)
		layers, err := img.Layers()
		if err != nil {
			return err
		}
		for _, l := range layers {
			h, err := l.Digest()
			if err != nil {
				return err
			}
			rc, err := l.Compressed()
			if err != nil {
				return err
			}
			b, err := io.ReadAll(rc)
			rc.Close()
			if err != nil {
				return err
			}
			add(h, b)
		}
	}

	size, err := idx.Size()
	if err != nil {
		return err
	}
	top, err := json.Marshal(v1.IndexManifest{
		SchemaVersion: 2,
		MediaType:     types.OCIImageIndex,
		Manifests: []v1.Descriptor{{
			MediaType:   types.OCIImageIndex,
			Size:        size,
			Digest:      digest,
			Annotations: annotations,
		}},
	})
	if err != nil {
		return err
	}

	entries := []file{
		{name: "oci-layout", mode: 0o644, content: []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{name: "index.json", mode: 0o644, content: top},
		{name: "blobs/", mode: 0o755},
		{name: "blobs/sha256/", mode: 0o755},
	}
	for n, b := range blobs {
		entries = append(entries, file{name: n, mode: 0o644, content: b})
	}
	slices.SortFunc(entries, func(a, b file) int { return strings.Compare(a.name, b.name) })
	tw := tar.NewWriter(w)
	for _, f := range entries {
		h := &tar.Header{Name: f.name, Mode: f.mode, ModTime: created, Format: tar.FormatPAX}
		if strings.HasSuffix(f.name, "/") {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(f.content))
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := tw.Write(f.content); err != nil {
			return err
		}
	}
	return tw.Close()
}
