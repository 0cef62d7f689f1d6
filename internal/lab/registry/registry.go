// Package registry is the lab's image registry: a read-only OCI distribution endpoint (the pull
// half of the distribution API) that serves images from OCI image layout archives (the
// <name>.tar files `make images` writes) so that real lab nodes pull every image from the lab
// and no pull leaves the machine. A repository the registry does not know gets the fallback
// image, whatever its tag: the lab's stand-in workload runs wherever a manifest names busybox,
// ubuntu or an ML framework image.
package registry

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"
)

// Media types of manifests and indexes (OCI and Docker).
const (
	MediaTypeOCIIndex    = "application/vnd.oci.image.index.v1+json"
	MediaTypeOCIManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaTypeDockerList  = "application/vnd.docker.distribution.manifest.list.v2+json"
	mediaTypeDockerImage = "application/vnd.docker.distribution.manifest.v2+json"
)

// Image is one archive the registry serves, under a repository path such as
// library/neuron-device-plugin or kube-scheduler (the path of a pull, without the registry
// host: docker.io/library/busybox pulls library/busybox).
type Image struct {
	Repository string
	// Archive is a tarball of an OCI image layout: index.json, whose entries are tagged with the
	// annotation org.opencontainers.image.ref.name, and blobs/sha256/<hex>.
	Archive string
}

// Registry serves Images. It is an http.Handler; it is safe for concurrent use.
type Registry struct {
	repos    map[string]*archive
	fallback *archive
	modTime  time.Time
	// files of the archives, closed by Close.
	mu    sync.Mutex
	files []*os.File
}

// archive is one loaded OCI layout: where each blob lies in the tarball, the tags of its
// index.json, and the media type of every manifest and index in it.
type archive struct {
	file  *os.File
	blobs map[string]span   // "sha256:<hex>" -> bytes in file
	tags  map[string]string // tag -> digest
	media map[string]string // digest -> media type, for manifests and indexes
}

type span struct{ off, size int64 }

// New loads the archives. fallback (an archive, or "") is served for every repository that no
// Image names.
func New(images []Image, fallback string) (*Registry, error) {
	r := &Registry{repos: map[string]*archive{}, modTime: time.Unix(0, 0)}
	for _, img := range images {
		if !validRepository(img.Repository) {
			r.Close()
			return nil, fmt.Errorf("image %s: %q is not a repository path (lower-case components separated by '/')", img.Archive, img.Repository)
		}
		if _, dup := r.repos[img.Repository]; dup {
			r.Close()
			return nil, fmt.Errorf("repository %s is given twice", img.Repository)
		}
		a, err := r.load(img.Archive)
		if err != nil {
			r.Close()
			return nil, err
		}
		r.repos[img.Repository] = a
	}
	if fallback != "" {
		a, err := r.load(fallback)
		if err != nil {
			r.Close()
			return nil, err
		}
		r.fallback = a
	}
	return r, nil
}

// Close closes the archives.
func (r *Registry) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, f := range r.files {
		f.Close()
	}
	r.files = nil
}

func (r *Registry) load(path string) (*archive, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("image archive: %w (run make images PLATFORMS=linux/amd64)", err)
	}
	r.mu.Lock()
	r.files = append(r.files, f)
	r.mu.Unlock()
	a, err := readArchive(f)
	if err != nil {
		return nil, fmt.Errorf("image archive %s: %w", path, err)
	}
	return a, nil
}

// Tag returns the tag of an image archive (the first in the order of its tags).
func Tag(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("image archive: %w (run make images PLATFORMS=linux/amd64)", err)
	}
	defer f.Close()
	a, err := readArchive(f)
	if err != nil {
		return "", fmt.Errorf("image archive %s: %w", path, err)
	}
	return firstKey(a.tags), nil
}

// ociIndex is the part of an OCI index or manifest the registry reads.
type ociIndex struct {
	MediaType   string       `json:"mediaType"`
	Manifests   []descriptor `json:"manifests"`
	Config      *descriptor  `json:"config"`
	Layers      []descriptor `json:"layers"`
	Annotations map[string]string
}

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Annotations map[string]string `json:"annotations"`
}

var digestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// readArchive indexes an OCI layout tarball: where every blob is, the tags of index.json and the
// media types of the manifests and indexes it reaches.
func readArchive(f *os.File) (*archive, error) {
	a := &archive{file: f, blobs: map[string]span{}, tags: map[string]string{}, media: map[string]string{}}
	var index []byte
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("not a tarball of an OCI image layout: %w", err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		name := strings.TrimPrefix(h.Name, "./")
		if name == "index.json" {
			if index, err = io.ReadAll(io.LimitReader(tr, 1<<20)); err != nil {
				return nil, err
			}
			continue
		}
		hex, ok := strings.CutPrefix(name, "blobs/sha256/")
		if !ok || !digestRE.MatchString("sha256:"+hex) {
			continue
		}
		// With an *os.File, tar seeks past data it does not read: the file's offset now is where
		// this entry's data begins.
		off, err := f.Seek(0, io.SeekCurrent)
		if err != nil {
			return nil, err
		}
		a.blobs["sha256:"+hex] = span{off: off, size: h.Size}
	}
	if index == nil {
		return nil, errors.New("no index.json: not an OCI image layout (make images writes one per image)")
	}
	var top ociIndex
	if err := json.Unmarshal(index, &top); err != nil {
		return nil, fmt.Errorf("index.json: %w", err)
	}
	for _, d := range top.Manifests {
		if tag := d.Annotations["org.opencontainers.image.ref.name"]; tag != "" {
			a.tags[tag] = d.Digest
		}
		if err := a.walk(d, 0); err != nil {
			return nil, err
		}
	}
	if len(a.tags) == 0 {
		return nil, errors.New("index.json tags no image (annotation org.opencontainers.image.ref.name)")
	}
	return a, nil
}

// walk records the media type of d and of the manifests an index d lists.
func (a *archive) walk(d descriptor, depth int) error {
	if depth > 4 {
		return errors.New("indexes nested too deep")
	}
	if _, ok := a.blobs[d.Digest]; !ok {
		return fmt.Errorf("%s is listed but not in blobs/", d.Digest)
	}
	a.media[d.Digest] = d.MediaType
	if d.MediaType != MediaTypeOCIIndex && d.MediaType != mediaTypeDockerList {
		return nil
	}
	data, err := a.read(d.Digest)
	if err != nil {
		return err
	}
	var idx ociIndex
	if err := json.Unmarshal(data, &idx); err != nil {
		return fmt.Errorf("index %s: %w", d.Digest, err)
	}
	for _, m := range idx.Manifests {
		if err := a.walk(m, depth+1); err != nil {
			return err
		}
	}
	return nil
}

func (a *archive) read(digest string) ([]byte, error) {
	s := a.blobs[digest]
	if s.size > 4<<20 {
		return nil, fmt.Errorf("manifest %s is larger than 4 MiB", digest)
	}
	buf := make([]byte, s.size)
	_, err := a.file.ReadAt(buf, s.off)
	return buf, err
}

// request is a parsed distribution API path.
type request struct {
	repo, kind, ref string // kind: "manifests" or "blobs"; ref: a tag or a digest
}

var (
	repoRE = regexp.MustCompile(`^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$`)
	tagRE  = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)
)

func validRepository(s string) bool { return len(s) <= 255 && repoRE.MatchString(s) }

// parsePath splits /v2/<repo>/(manifests|blobs)/<ref>; ok is false for anything else.
func parsePath(path string) (request, bool) {
	rest, ok := strings.CutPrefix(path, "/v2/")
	if !ok {
		return request{}, false
	}
	for _, kind := range []string{"manifests", "blobs"} {
		i := strings.LastIndex(rest, "/"+kind+"/")
		if i <= 0 {
			continue
		}
		req := request{repo: rest[:i], kind: kind, ref: rest[i+len(kind)+2:]}
		if !validRepository(req.repo) {
			return request{}, false
		}
		if digestRE.MatchString(req.ref) || kind == "manifests" && tagRE.MatchString(req.ref) {
			return req, true
		}
		return request{}, false
	}
	return request{}, false
}

// ServeHTTP answers GET and HEAD of /v2/, /v2/<repo>/manifests/<tag|digest> and
// /v2/<repo>/blobs/<digest>.
func (r *Registry) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, http.StatusMethodNotAllowed, "UNSUPPORTED", "the lab's registry is read-only")
		return
	}
	if req.URL.Path == "/v2/" || req.URL.Path == "/v2" {
		w.Header().Set("Docker-Distribution-API-Version", "registry/2.0")
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, "{}")
		return
	}
	p, ok := parsePath(req.URL.Path)
	if !ok {
		writeError(w, http.StatusNotFound, "NAME_INVALID", "not a path of the distribution API this registry serves")
		return
	}
	a := r.repos[strings.TrimPrefix(p.repo, "library/")]
	if a == nil {
		a = r.repos[p.repo]
	}
	if a == nil {
		a = r.fallback
	}
	if a == nil {
		writeError(w, http.StatusNotFound, "NAME_UNKNOWN", "the lab serves no image "+p.repo)
		return
	}
	digest := p.ref
	if p.kind == "manifests" && !digestRE.MatchString(p.ref) {
		if digest, ok = a.tags[p.ref]; !ok {
			if a != r.fallback {
				writeError(w, http.StatusNotFound, "MANIFEST_UNKNOWN", fmt.Sprintf("the lab serves %s with tags %v only", p.repo, keys(a.tags)))
				return
			}
			digest = a.tags[firstKey(a.tags)]
		}
	}
	s, ok := a.blobs[digest]
	if !ok {
		code := "BLOB_UNKNOWN"
		if p.kind == "manifests" {
			code = "MANIFEST_UNKNOWN"
		}
		writeError(w, http.StatusNotFound, code, digest+" is not in the image of "+p.repo)
		return
	}
	ct := "application/octet-stream"
	if p.kind == "manifests" {
		if ct, ok = a.media[digest]; !ok {
			writeError(w, http.StatusNotFound, "MANIFEST_UNKNOWN", digest+" is not a manifest")
			return
		}
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Docker-Content-Digest", digest)
	w.Header().Set("Docker-Distribution-API-Version", "registry/2.0")
	http.ServeContent(w, req, "", r.modTime, io.NewSectionReader(a.file, s.off, s.size))
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func firstKey(m map[string]string) string {
	first := ""
	for k := range m {
		if first == "" || k < first {
			first = k
		}
	}
	return first
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"errors": []map[string]string{{"code": code, "message": msg}}})
}
