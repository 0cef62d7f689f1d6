package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestArchitectureDocPathsExist: every repository path written in backquotes in
// docs/architecture.md exists, so that its "to change X, open Y" table never sends a reader to a
// file that was moved or removed. A path with a glob (`cmd/*/main.go`) must match something; a
// path ending in / must be a directory.
func TestArchitectureDocPathsExist(t *testing.T) {
	t.Chdir("../..")
	data, err := os.ReadFile("docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	prefixes := []string{"api/", "cmd/", "internal/", "deployments/", "test/", "hack/", "docs/", "examples/"}
	span := regexp.MustCompile("`([^`\n]+)`")
	checked := 0
	inFence := false
	for i, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		for _, m := range span.FindAllStringSubmatch(line, -1) {
			path := m[1]
			if !strings.Contains(path, "/") || !slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(path, p) }) {
				continue
			}
			checked++
			where := "docs/architecture.md:" + strconv.Itoa(i+1)
			if strings.ContainsAny(path, "*?[") {
				if matches, _ := filepath.Glob(path); len(matches) == 0 {
					t.Errorf("%s: `%s` matches no file", where, path)
				}
				continue
			}
			fi, err := os.Stat(path)
			switch {
			case err != nil:
				t.Errorf("%s: `%s` does not exist", where, path)
			case strings.HasSuffix(path, "/") && !fi.IsDir():
				t.Errorf("%s: `%s` is not a directory", where, path)
			}
		}
	}
	if checked < 30 {
		t.Errorf("docs/architecture.md names %d repository paths in backquotes; the test expects the file table to name at least 30", checked)
	}
}
