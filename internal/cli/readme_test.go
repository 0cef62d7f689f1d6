package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadmeExamples runs every `$ bin/kubectl-neuron ...` line of the console blocks in the
// README and the docs and compares the output with what they show, so that they stay true.
func TestReadmeExamples(t *testing.T) {
	files := []string{"../../README.md"}
	docs, _ := filepath.Glob("../../docs/*.md")
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
