package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
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

// TestDocumentedFlagsExist: every --flag written after `kubectl-neuron COMMAND` in the README and
// the docs is a flag of that command.
func TestDocumentedFlagsExist(t *testing.T) {
	root := NewCommand(nil, nil)
	files := []string{"../../README.md"}
	docs, _ := filepath.Glob("../../docs/*.md")
	mention := regexp.MustCompile(`kubectl[- ]neuron ([a-z]+)((?: +[^ \n|` + "`" + `#;)]+)*)`)
	for _, file := range append(files, docs...) {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mention.FindAllStringSubmatch(string(data), -1) {
			cmd, _, err := root.Find([]string{m[1]})
			if err != nil || cmd == root {
				continue // prose: "kubectl-neuron shows ..."
			}
			for _, word := range strings.Fields(m[2]) {
				name, ok := strings.CutPrefix(word, "--")
				if !ok {
					continue
				}
				name, _, _ = strings.Cut(name, "=")
				name = strings.TrimRight(name, ".,:")
				if cmd.Flags().Lookup(name) == nil && root.PersistentFlags().Lookup(name) == nil && name != "help" {
					t.Errorf("%s: kubectl-neuron %s has no flag --%s (%q)", file, m[1], name, m[0])
				}
			}
		}
	}
}

// TestTroubleshootingNoValidFreeSet replays what docs/troubleshooting.md tells a user to do when
// devices are free but in no valid set: the ids in use, as `nodes -o wide` prints them, go to
// plan's --in-use-cores (plan has no flag that takes the free devices).
func TestTroubleshootingNoValidFreeSet(t *testing.T) {
	data, err := os.ReadFile("../../docs/troubleshooting.md")
	if err != nil {
		t.Fatal(err)
	}
	_, row, _ := strings.Cut(string(data), "| **No valid free set.**")
	row, _, _ = strings.Cut(row, "\n")
	if !strings.Contains(row, "--in-use-cores <USED CORES>") || strings.Contains(row, "free devices; `kubectl-neuron plan` with them") {
		t.Errorf("the row must pass the used ids, not the free ones:\n%s", row)
	}
	stdout, _, err := runNodesOn(t, cluster(), nodesOptions{names: []string{"trn1-a"}, output: "wide", noMap: true})
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(strings.Split(stdout, "\n")[1])
	usedCores := fields[len(fields)-2] // NAME ... USED DEVICES USED CORES HOLDERS
	out, errOut, code := run(t, "plan", "--instance-type", "trn1.32xlarge", "--request", "aws.amazon.com/neuron=8", "--in-use-cores", usedCores, "-o", "json")
	if code != ExitOK || !strings.Contains(out, `"devices":[8,9,10,11,12,13,14,15]`) {
		t.Errorf("plan --in-use-cores %s: exit %d %s%s", usedCores, code, out, errOut)
	}
}
