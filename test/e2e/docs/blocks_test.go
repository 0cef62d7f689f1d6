package docs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// A console block opts in to the lab replay with an HTML comment (readers do not see it) on the
// line right before its fence:
//
//	<!-- replay: lab apply=examples/autoscaler/ -->
//	```console
//	$ .lab/bin/kubectl --kubeconfig .lab/kubeconfig get nodes
//	NAME ...
//	```
//
// apply=PATH (repeatable) is applied with `kubectl apply -f PATH` before the block's commands;
// applying again what an earlier block applied changes nothing. Each `$ ` line is a command (a
// line ending in ` \` continues on the next), the lines up to the next `$ ` or the fence its
// output, stdout and stderr as a terminal shows them.
const replayMarker = "<!-- replay:"

// block is a console block opted in to the lab replay.
type block struct {
	file  string // relative to the repository root
	line  int    // of the ```console fence
	apply []string
	steps []step
}

// step is one command of a block and the output the block shows for it.
type step struct {
	line    int // of the `$ ` line
	command string
	want    []string
}

func (b block) String() string { return fmt.Sprintf("%s:%d", b.file, b.line) }

// docFiles are the files whose blocks may opt in: README.md and docs/*.md, in this order (the
// order the blocks replay in).
func docFiles(root string) ([]string, error) {
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	files := []string{"README.md"}
	for _, d := range docs {
		files = append(files, filepath.Join("docs", filepath.Base(d)))
	}
	return files, nil
}

// readBlocks returns every opted-in block of the files, in order.
func readBlocks(root string) ([]block, error) {
	files, err := docFiles(root)
	if err != nil {
		return nil, err
	}
	var all []block
	var errs []error
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			return nil, err
		}
		blocks, err := parseBlocks(f, string(data))
		errs = append(errs, err)
		all = append(all, blocks...)
	}
	return all, errors.Join(errs...)
}

var replayComment = regexp.MustCompile(`^<!-- replay: lab((?: +[a-z]+=\S+)*) -->$`)

// parseBlocks returns the opted-in blocks of one file. A replay comment that is malformed, is
// not right before a ```console fence, or has an unknown option is an error, so that a block
// meant to be replayed is not skipped silently.
func parseBlocks(file, text string) ([]block, error) {
	lines := strings.Split(text, "\n")
	var blocks []block
	var errs []error
	for i := 0; i < len(lines); i++ {
		if !strings.HasPrefix(lines[i], replayMarker) {
			continue
		}
		at := fmt.Sprintf("%s:%d", file, i+1)
		m := replayComment.FindStringSubmatch(lines[i])
		if m == nil {
			errs = append(errs, fmt.Errorf("%s: %q is not <!-- replay: lab [apply=PATH]... -->", at, lines[i]))
			continue
		}
		b := block{file: file, line: i + 2}
		for _, opt := range strings.Fields(m[1]) {
			key, value, _ := strings.Cut(opt, "=")
			switch key {
			case "apply":
				b.apply = append(b.apply, value)
			default:
				errs = append(errs, fmt.Errorf("%s: unknown replay option %q (known: apply=PATH)", at, key))
			}
		}
		if i+1 >= len(lines) || lines[i+1] != "```console" {
			errs = append(errs, fmt.Errorf("%s: a replay comment must be the line right before a ```console fence", at))
			continue
		}
		closed := false
		for i += 2; i < len(lines); i++ {
			line := lines[i]
			if strings.HasPrefix(line, "```") {
				closed = true
				break
			}
			if cmd, ok := strings.CutPrefix(line, "$ "); ok {
				s := step{line: i + 1, command: cmd}
				for strings.HasSuffix(s.command, " \\") && i+1 < len(lines) {
					i++
					s.command = strings.TrimSuffix(s.command, "\\") + strings.TrimLeft(lines[i], " ")
				}
				b.steps = append(b.steps, s)
				continue
			}
			if len(b.steps) == 0 {
				errs = append(errs, fmt.Errorf("%s:%d: output before the block's first `$ ` command", file, i+1))
				break
			}
			last := &b.steps[len(b.steps)-1]
			last.want = append(last.want, line)
		}
		switch {
		case !closed:
			errs = append(errs, fmt.Errorf("%s: the console block is not closed", at))
		case len(b.steps) == 0:
			errs = append(errs, fmt.Errorf("%s: the console block has no `$ ` command", at))
		default:
			blocks = append(blocks, b)
		}
	}
	return blocks, errors.Join(errs...)
}

// What legitimately varies from run to run, and nothing else: each rule replaces it with the
// same placeholder in the block and in the output, so that any other change (a column, a
// message, a count, a device id) fails the replay.
var normalisations = []struct {
	what string
	re   *regexp.Regexp
	repl string
}{
	{
		"klog header: date, time, thread id and source line (the file name stays)",
		regexp.MustCompile(`^([IWEF])\d{4} \d{2}:\d{2}:\d{2}\.\d{6} +\d+ ([\w.-]+\.go):\d+\] `),
		"${1}MMDD hh:mm:ss.uuuuuu TID ${2}:LINE] ",
	},
	{
		"make lab-status: the lab's pid and how long it took to start",
		regexp.MustCompile(`^(a lab runs in \S+) \(pid \d+, ready in [0-9][0-9.hmsµn]*\)$`),
		"${1} (pid PID, ready in DURATION)",
	},
	{
		"names of nodes the autoscaler launches: neuron-<type>-<hash of the planned pods>",
		regexp.MustCompile(`\bneuron-([a-z][a-z0-9]*-[0-9]*[a-z]+)-[0-9a-f]{10}\b`),
		"neuron-${1}-HASH",
	},
}

// kubectlAge is a kubectl AGE value (HumanDuration: 24s, 5m10s, 3h, 2d3h, 4y).
var kubectlAge = regexp.MustCompile(`^[0-9]+[smhdy](?:[0-9]+[smh])?`)

// normalise applies the normalisations to lines of output (or of a block), and replaces the
// value in the AGE column of a kubectl table (the column the header line's AGE starts) with AGE.
func normalise(lines []string) []string {
	out := make([]string, len(lines))
	age := -1 // start of the AGE column of the table being read
	for i, line := range lines {
		// The AGE column first: the other normalisations change the columns' positions.
		switch {
		case strings.TrimSpace(line) == "":
			age = -1
		case strings.HasPrefix(line, "NAME") || strings.HasPrefix(line, "NAMESPACE"):
			age = -1
			if j := strings.Index(line, "   AGE"); j >= 0 && (len(line) == j+6 || line[j+6] == ' ') {
				age = j + 3
			}
		case age >= 0 && age < len(line) && line[age-1] == ' ':
			if v := kubectlAge.FindString(line[age:]); v != "" {
				line = line[:age] + "AGE " + strings.TrimLeft(line[age+len(v):], " ")
			}
		}
		for _, n := range normalisations {
			line = n.re.ReplaceAllString(line, n.repl)
		}
		out[i] = line
	}
	return out
}

// elided is how a block shortens a line: its text up to ` ...` starts the line of output.
const elided = " ..."

// mismatch compares normalised output with a normalised block and says where they first differ,
// "" when they match.
func mismatch(got, want []string) string {
	for i := 0; i < max(len(got), len(want)); i++ {
		var g, w string
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if i >= len(want) {
			return fmt.Sprintf("line %d: the output has more lines than the block:\n  %s", i+1, g)
		}
		if i >= len(got) {
			return fmt.Sprintf("line %d: the block shows more lines than the output:\n  %s", i+1, w)
		}
		if g == w {
			continue
		}
		if prefix, ok := strings.CutSuffix(w, elided); ok && strings.HasPrefix(g, prefix) {
			continue
		}
		return fmt.Sprintf("line %d differs:\n  block:  %s\n  output: %s", i+1, w, g)
	}
	return ""
}

// splitWords splits a command line into words as sh does for the quoting docs use: '...',
// "..." (with \" and \\) and \x outside quotes; an unquoted | is a word of its own.
func splitWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t':
			if inWord {
				words, inWord = append(words, cur.String()), false
				cur.Reset()
			}
		case c == '|':
			if inWord {
				words, inWord = append(words, cur.String()), false
				cur.Reset()
			}
			words = append(words, "|")
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("unterminated ' in %q", s)
			}
			cur.WriteString(s[i+1 : i+1+j])
			i, inWord = i+1+j, true
		case c == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '$' || s[i] == '`' {
					return nil, fmt.Errorf("%q: the replay runs commands and pipes to grep, without a shell: no %q", s, s[i])
				}
				if s[i] == '\\' && i+1 < len(s) && (s[i+1] == '"' || s[i+1] == '\\') {
					i++
				}
				cur.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, fmt.Errorf("unterminated \" in %q", s)
			}
			inWord = true
		case c == '\\' && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
			inWord = true
		case strings.IndexByte(";&<>`$(){}*?", c) >= 0:
			return nil, fmt.Errorf("%q: the replay runs commands and pipes to grep, without a shell: no unquoted %q", s, c)
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

// command is a `$ ` line as the replay runs it: one program, its output piped through grep
// commands.
type command struct {
	argv  []string
	pipes [][]string
}

// Programs the replay runs. kubectl is the lab's (.lab/bin/kubectl, or kubectl with the lab's
// kubeconfig), kubectl-neuron runs in the test's process (internal/cli.Main), `make lab-status`
// is its recipe: neuron-lab status --dir .lab.
const (
	progKubectl       = "kubectl"
	progKubectlNeuron = "kubectl-neuron"
	progLabStatus     = "make lab-status"
	progGrep          = "grep"
)

// parseCommand splits a `$ ` line and names the program it runs; a program the replay does not
// know is an error.
func parseCommand(line string) (command, string, error) {
	words, err := splitWords(line)
	if err != nil {
		return command{}, "", err
	}
	var c command
	seg := &c.argv
	for _, w := range words {
		if w == "|" {
			c.pipes = append(c.pipes, nil)
			seg = &c.pipes[len(c.pipes)-1]
			continue
		}
		*seg = append(*seg, w)
	}
	if len(c.argv) == 0 {
		return command{}, "", fmt.Errorf("%q: no command", line)
	}
	for _, p := range c.pipes {
		if len(p) == 0 || p[0] != progGrep {
			return command{}, "", fmt.Errorf("%q: the replay pipes only to grep", line)
		}
	}
	switch c.argv[0] {
	case "kubectl", ".lab/bin/kubectl":
		return c, progKubectl, nil
	case "kubectl-neuron", "bin/kubectl-neuron":
		return c, progKubectlNeuron, nil
	case "grep":
		return c, progGrep, nil
	case "make":
		if len(c.argv) == 2 && c.argv[1] == "lab-status" {
			return c, progLabStatus, nil
		}
	}
	return command{}, "", fmt.Errorf("%q: the replay runs kubectl, .lab/bin/kubectl, kubectl-neuron, make lab-status and grep, not %s", line, c.argv[0])
}

// kubectlReads are the kubectl commands that change nothing: the replay runs them again until
// their output is what the block shows (the lab gets there in its own time). Others run once.
var kubectlReads = map[string]bool{"get": true, "describe": true, "logs": true, "top": true, "events": true, "version": true, "api-resources": true, "explain": true}

// readOnly says whether the command changes nothing, so that it may run until its output matches.
func readOnly(c command, prog string) bool {
	switch prog {
	case progKubectl:
		args := c.argv[1:]
		for i := 0; i < len(args); i++ {
			a := args[i]
			if !strings.HasPrefix(a, "-") {
				return kubectlReads[a]
			}
			if !strings.Contains(a, "=") && (a == "--kubeconfig" || a == "--context" || a == "-n" || a == "--namespace") {
				i++
			}
		}
		return false
	case progKubectlNeuron:
		return len(c.argv) > 1 && c.argv[1] != "cleanup"
	}
	return true
}
