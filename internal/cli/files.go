package cli

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"k8s.io/cli-runtime/pkg/resource"
)

// manifestFetchTimeout bounds the download of a manifest named by URL.
const manifestFetchTimeout = 30 * time.Second

// maxManifestBytes bounds what one manifest (file, URL or stdin) may hold.
const maxManifestBytes = 64 << 20

// stdinName is how -f names standard input.
const stdinName = "-"

// expandFilenames lists the manifests that -f names, as kubectl does: "-" is stdin, an http or
// https URL is downloaded, a directory gives its files ending in .json, .yaml or .yml (with
// recursive, those of its subdirectories too), a name that does not exist is expanded as a glob
// pattern, and a file named explicitly is read whatever its extension. The order is the order
// of the names, then lexical within a directory.
func expandFilenames(names []string, recursive bool) ([]string, error) {
	var out []string
	stdin := false
	for _, name := range names {
		switch {
		case name == "":
			return nil, errors.New(`-f "": name a file, a directory, a URL or - for stdin`)
		case name == stdinName:
			if stdin {
				return nil, errors.New("-f - is given twice: standard input can be read once")
			}
			stdin = true
			out = append(out, name)
		case isURL(name):
			out = append(out, name)
		default:
			paths, err := expandPattern(name)
			if err != nil {
				return nil, err
			}
			for _, p := range paths {
				files, err := filesUnder(p, recursive)
				if err != nil {
					return nil, err
				}
				out = append(out, files...)
			}
		}
	}
	return out, nil
}

func isURL(name string) bool {
	return strings.HasPrefix(name, "http://") || strings.HasPrefix(name, "https://")
}

// expandPattern returns name when it exists, else the files its glob pattern matches.
func expandPattern(name string) ([]string, error) {
	if _, err := os.Stat(name); !errors.Is(err, fs.ErrNotExist) {
		return []string{name}, nil
	}
	matches, err := filepath.Glob(name)
	if err != nil {
		return nil, fmt.Errorf("-f %s: the path does not exist, and as a pattern it is not valid: %w", name, err)
	}
	if len(matches) == 0 {
		return nil, fmt.Errorf("-f %s: the path does not exist", name)
	}
	return matches, nil
}

// filesUnder returns path if it is a file, or the manifest files of the directory.
func filesUnder(path string, recursive bool) ([]string, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("-f %s: %w", path, err)
	}
	if !info.IsDir() {
		return []string{path}, nil
	}
	var out []string
	err = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != path && !recursive {
				return filepath.SkipDir
			}
			return nil
		}
		if slices.Contains(resource.FileExtensions, filepath.Ext(p)) {
			out = append(out, p)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("-f %s: %w", path, err)
	}
	if len(out) == 0 {
		hint := " (-R reads its subdirectories too)"
		if recursive {
			hint = ""
		}
		return nil, fmt.Errorf("-f %s: the directory has no file ending in %s%s", path, strings.Join(resource.FileExtensions, ", "), hint)
	}
	return out, nil
}

// readManifest reads one name expandFilenames returned.
func readManifest(name string, stdin io.Reader) ([]byte, error) {
	switch {
	case name == stdinName:
		return readLimited(stdin, "standard input")
	case isURL(name):
		client := &http.Client{Timeout: manifestFetchTimeout}
		resp, err := client.Get(name)
		if err != nil {
			return nil, fmt.Errorf("-f %s: %w", name, err)
		}
		defer func() { _ = resp.Body.Close() }()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("-f %s: the server answered %s", name, resp.Status)
		}
		return readLimited(resp.Body, name)
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	return readLimited(f, name)
}

func readLimited(r io.Reader, name string) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxManifestBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(data) > maxManifestBytes {
		return nil, fmt.Errorf("%s: more than %d MiB: split the manifests", name, maxManifestBytes>>20)
	}
	return data, nil
}
