package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestReadmeExamples runs every `$ bin/kubectl-neuron ...` line of the console blocks in the
// README and the docs and compares the output with what they show, so that they stay true. They
// run in the repository's root, as a user runs them: file names are relative to it.
func TestReadmeExamples(t *testing.T) {
	t.Chdir("../..")
	files := []string{"README.md"}
	docs, _ := filepath.Glob("docs/*.md")
	files = append(files, docs...)
	examples := 0
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		inBlock := false
		var cmd []string
		var want []string
		flush := func() {
			if cmd == nil {
				return
			}
			examples++
			var out, errOut bytes.Buffer
			Main(cmd, &out, &errOut)
			got := strings.TrimRight(out.String()+errOut.String(), "\n")
			if w := strings.Join(want, "\n"); got != w {
				t.Errorf("%s: kubectl-neuron %s\ngot:\n%s\nthe file shows:\n%s", file, strings.Join(cmd, " "), got, w)
			}
			cmd, want = nil, nil
		}
		for _, line := range strings.Split(string(data), "\n") {
			switch {
			case strings.HasPrefix(line, "```console"):
				inBlock = true
			case inBlock && strings.HasPrefix(line, "```"):
				flush()
				inBlock = false
			case inBlock && strings.HasPrefix(line, "$ "):
				flush()
				if args, ok := strings.CutPrefix(line, "$ bin/kubectl-neuron "); ok {
					cmd = strings.Fields(args)
				}
			case inBlock && cmd != nil:
				want = append(want, line)
			}
		}
	}
	if examples == 0 {
		t.Fatal("no kubectl-neuron example found in the README")
	}
}

// TestDocumentedOutputFormats: docs/kubectl-neuron.md has, for every command with -o, one table
// whose rows are exactly the formats the command accepts, and every command's -o is in
// commandFormats.
func TestDocumentedOutputFormats(t *testing.T) {
	data, err := os.ReadFile("../../docs/kubectl-neuron.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	for _, c := range NewCommand(nil, nil).Commands() {
		if c.Flags().Lookup("output") == nil {
			continue
		}
		formats, ok := commandFormats[c.Name()]
		if !ok {
			t.Errorf("%s has -o but no entry in commandFormats", c.Name())
			continue
		}
		_, section, found := strings.Cut(doc, "\n### "+c.Name()+"\n")
		if !found {
			t.Errorf("docs/kubectl-neuron.md has no section ### %s", c.Name())
			continue
		}
		section, _, _ = strings.Cut(section, "\n#")
		var documented []string
		tables := 0
		inTable := false
		for _, line := range strings.Split(section, "\n") {
			if !strings.HasPrefix(line, "|") {
				inTable = false
				continue
			}
			if !inTable {
				tables++
				inTable = true
			}
			if strings.HasPrefix(line, "|-") {
				continue
			}
			first, _, _ := strings.Cut(strings.TrimPrefix(line, "| "), " |")
			for _, f := range strings.Split(first, ", ") {
				f = strings.TrimSuffix(strings.Trim(strings.TrimSuffix(f, " (default)"), "`"), "=TEMPLATE")
				if f != "-o" {
					documented = append(documented, f)
				}
			}
		}
		if tables != 1 {
			t.Errorf("### %s has %d tables, want one", c.Name(), tables)
		}
		if !slices.Equal(slices.Sorted(slices.Values(documented)), slices.Sorted(slices.Values(formats))) {
			t.Errorf("### %s documents -o %v, the command accepts %v", c.Name(), documented, formats)
		}
	}
}
