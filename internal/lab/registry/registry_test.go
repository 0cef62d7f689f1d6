package registry

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func digestOf(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// writeLayout writes an OCI layout tarball: index.json tagging an index of one manifest with a
// config and a layer, as make images writes them. It returns the archive and the digests.
func writeLayout(t *testing.T, tag, layerText string) (path string, d map[string]string) {
	t.Helper()
	layer := []byte(layerText)
	config := []byte(`{"architecture":"amd64","os":"linux"}`)
	manifest, _ := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": MediaTypeOCIManifest,
		"config": map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": digestOf(config), "size": len(config)},
		"layers": []any{map[string]any{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": digestOf(layer), "size": len(layer)}},
	})
	index, _ := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": MediaTypeOCIIndex,
		"manifests": []any{map[string]any{"mediaType": MediaTypeOCIManifest, "digest": digestOf(manifest), "size": len(manifest)}},
	})
	top, _ := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"manifests": []any{map[string]any{"mediaType": MediaTypeOCIIndex, "digest": digestOf(index), "size": len(index),
			"annotations": map[string]string{"org.opencontainers.image.ref.name": tag}}},
	})
	path = filepath.Join(t.TempDir(), "image.tar")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(f)
	add := func(name string, b []byte) {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	add("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`))
	for _, b := range [][]byte{layer, config, manifest, index} {
		add("blobs/sha256/"+strings.TrimPrefix(digestOf(b), "sha256:"), b)
	}
	add("index.json", top)
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path, map[string]string{"layer": digestOf(layer), "config": digestOf(config), "manifest": digestOf(manifest), "index": digestOf(index)}
}

func get(t *testing.T, h http.Handler, method, path string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	return rec
}

func TestRegistryServesArchivesAndTheFallback(t *testing.T) {
	plugin, pd := writeLayout(t, "0.1.0", "device plugin layer")
	standIn, sd := writeLayout(t, "1", "stand-in layer")
	r, err := New([]Image{{Repository: "neuron-device-plugin", Archive: plugin}}, standIn)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()

	if rec := get(t, r, http.MethodGet, "/v2/"); rec.Code != http.StatusOK {
		t.Fatalf("GET /v2/ = %d", rec.Code)
	}
	for _, tc := range []struct {
		name, method, path string
		code               int
		digest, mediaType  string
		body               string
	}{
		{"a tag of a known image, docker.io's library/ path", http.MethodGet, "/v2/library/neuron-device-plugin/manifests/0.1.0", 200, pd["index"], MediaTypeOCIIndex, ""},
		{"the same without library/", http.MethodHead, "/v2/neuron-device-plugin/manifests/0.1.0", 200, pd["index"], MediaTypeOCIIndex, ""},
		{"a manifest by digest", http.MethodGet, "/v2/neuron-device-plugin/manifests/" + pd["manifest"], 200, pd["manifest"], MediaTypeOCIManifest, ""},
		{"a blob", http.MethodGet, "/v2/neuron-device-plugin/blobs/" + pd["layer"], 200, pd["layer"], "application/octet-stream", "device plugin layer"},
		{"an unknown tag of a known image", http.MethodGet, "/v2/neuron-device-plugin/manifests/9.9.9", 404, "", "", ""},
		{"a blob of another image", http.MethodGet, "/v2/neuron-device-plugin/blobs/" + sd["layer"], 404, "", "", ""},
		{"any other image is the stand-in", http.MethodGet, "/v2/library/busybox/manifests/latest", 200, sd["index"], MediaTypeOCIIndex, ""},
		{"with any tag", http.MethodGet, "/v2/neuron/vllm/manifests/0.8.1-neuronx", 200, sd["index"], MediaTypeOCIIndex, ""},
		{"its blobs", http.MethodGet, "/v2/public/ubuntu/blobs/" + sd["layer"], 200, sd["layer"], "application/octet-stream", "stand-in layer"},
		{"a layer is no manifest", http.MethodGet, "/v2/busybox/manifests/" + sd["layer"], 404, "", "", ""},
		{"not a repository", http.MethodGet, "/v2/Busy..box/manifests/latest", 404, "", "", ""},
		{"not an API path", http.MethodGet, "/v2/busybox/tags/list", 404, "", "", ""},
		{"read-only", http.MethodPut, "/v2/busybox/manifests/latest", 405, "", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := get(t, r, tc.method, tc.path)
			if rec.Code != tc.code {
				t.Fatalf("%s %s = %d %s, want %d", tc.method, tc.path, rec.Code, rec.Body, tc.code)
			}
			if tc.code != 200 {
				if tc.method == http.MethodGet && !strings.Contains(rec.Body.String(), `"errors"`) {
					t.Fatalf("error body %q is not a distribution API error", rec.Body)
				}
				return
			}
			if got := rec.Header().Get("Docker-Content-Digest"); got != tc.digest {
				t.Fatalf("digest %s, want %s", got, tc.digest)
			}
			if got := rec.Header().Get("Content-Type"); got != tc.mediaType {
				t.Fatalf("content type %s, want %s", got, tc.mediaType)
			}
			if tc.method == http.MethodGet && digestOf(rec.Body.Bytes()) != tc.digest {
				t.Fatalf("body does not match its digest %s", tc.digest)
			}
			if tc.body != "" && rec.Body.String() != tc.body {
				t.Fatalf("body %q, want %q", rec.Body, tc.body)
			}
		})
	}
}

func TestRegistryWithoutFallbackRefusesUnknownImages(t *testing.T) {
	plugin, _ := writeLayout(t, "0.1.0", "x")
	r, err := New([]Image{{Repository: "neuron-device-plugin", Archive: plugin}}, "")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rec := get(t, r, http.MethodGet, "/v2/library/busybox/manifests/latest")
	if rec.Code != http.StatusNotFound || !strings.Contains(rec.Body.String(), "NAME_UNKNOWN") {
		t.Fatalf("unknown image = %d %s, want 404 NAME_UNKNOWN", rec.Code, rec.Body)
	}
}

func TestNewRefusesBadInput(t *testing.T) {
	good, _ := writeLayout(t, "1", "x")
	notTar := filepath.Join(t.TempDir(), "x.tar")
	if err := os.WriteFile(notTar, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		images []Image
		fb     string
		want   string
	}{
		{"missing archive", []Image{{Repository: "a", Archive: "/nonexistent.tar"}}, "", "make images"},
		{"not a layout", nil, notTar, "OCI image layout"},
		{"bad repository", []Image{{Repository: "A/B", Archive: good}}, "", "not a repository path"},
		{"repository twice", []Image{{Repository: "a", Archive: good}, {Repository: "a", Archive: good}}, "", "given twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.images, tc.fb)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func FuzzParsePath(f *testing.F) {
	for _, s := range []string{"/v2/library/busybox/manifests/latest", "/v2/a/blobs/sha256:" + strings.Repeat("a", 64), "/v2/", "/v2/a/manifests/", "/v2//manifests/x", "/v2/a/b/c/manifests/x/manifests/y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, path string) {
		req, ok := parsePath(path)
		if !ok {
			return
		}
		if !validRepository(req.repo) {
			t.Fatalf("parsePath(%q) accepted repository %q", path, req.repo)
		}
		if path != "/v2/"+req.repo+"/"+req.kind+"/"+req.ref {
			t.Fatalf("parsePath(%q) = %+v does not rebuild the path", path, req)
		}
		if req.kind == "blobs" && !digestRE.MatchString(req.ref) {
			t.Fatalf("parsePath(%q) accepted blob reference %q", path, req.ref)
		}
	})
}
