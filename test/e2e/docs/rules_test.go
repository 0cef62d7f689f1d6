package docs

import (
	"slices"
	"strings"
	"testing"
)

// These tests run without a lab (also in `make unit`): the blocks parse, the commands are ones the
// replay runs, and the normalisations hide only what varies between runs.

func TestParseBlocks(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       []block
		err        string
	}{
		{
			name: "apply, a continued command and two steps",
			text: "intro\n<!-- replay: lab apply=examples/a.yaml apply=examples/b/ -->\n```console\n$ kubectl get \\\n    nodes\nNAME\nn1\n$ make lab-status\na lab runs\n```\n",
			want: []block{{file: "f.md", line: 3, apply: []string{"examples/a.yaml", "examples/b/"}, steps: []step{
				{line: 4, command: "kubectl get nodes", want: []string{"NAME", "n1"}},
				{line: 8, command: "make lab-status", want: []string{"a lab runs"}},
			}}},
		},
		{name: "blocks without the comment are not replayed", text: "```console\n$ kubectl get nodes\nx\n```\n"},
		{name: "not before a console fence", text: "<!-- replay: lab -->\n\n```console\n$ a\n```\n", err: "right before a ```console fence"},
		{name: "a text block", text: "<!-- replay: lab -->\n```text\nx\n```\n", err: "right before a ```console fence"},
		{name: "unknown option", text: "<!-- replay: lab wait=5s -->\n```console\n$ a\n```\n", err: `unknown replay option "wait"`},
		{name: "malformed", text: "<!-- replay: lab apply= -->\n```console\n$ a\n```\n", err: "is not <!-- replay: lab"},
		{name: "other kind", text: "<!-- replay: offline -->\n```console\n$ a\n```\n", err: "is not <!-- replay: lab"},
		{name: "output first", text: "<!-- replay: lab -->\n```console\nx\n$ a\n```\n", err: "output before the block's first"},
		{name: "not closed", text: "<!-- replay: lab -->\n```console\n$ a\n", err: "not closed"},
		{name: "no command", text: "<!-- replay: lab -->\n```console\n```\n", err: "no `$ ` command"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseBlocks("f.md", tc.text)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %d blocks %+v, want %+v", len(got), got, tc.want)
			}
			for i := range got {
				g, w := got[i], tc.want[i]
				if g.String() != w.String() || !slices.Equal(g.apply, w.apply) || len(g.steps) != len(w.steps) {
					t.Fatalf("got %+v, want %+v", g, w)
				}
				for j := range g.steps {
					if g.steps[j].line != w.steps[j].line || g.steps[j].command != w.steps[j].command || !slices.Equal(g.steps[j].want, w.steps[j].want) {
						t.Errorf("step %d: got %+v, want %+v", j, g.steps[j], w.steps[j])
					}
				}
			}
		})
	}
}

func TestNormalise(t *testing.T) {
	for _, tc := range []struct {
		name      string
		a, b      []string
		different bool
	}{
		{
			name: "klog header",
			a:    []string{`I1126 13:09:14.036870   20015 extender.go:659] "Bound" devices="0,1,2"`},
			b:    []string{`I0101 00:00:01.000001       7 extender.go:12] "Bound" devices="0,1,2"`},
		},
		{
			name: "a device id is not normalised", different: true,
			a: []string{`I1126 13:09:14.036870   20015 extender.go:659] "Bound" devices="0,1,2"`},
			b: []string{`I1126 13:09:14.036870   20015 extender.go:659] "Bound" devices="0,1,3"`},
		},
		{
			name: "the logging file is not normalised", different: true,
			a: []string{`I1126 13:09:14.036870   20015 extender.go:659] "Bound"`},
			b: []string{`I1126 13:09:14.036870   20015 server.go:659] "Bound"`},
		},
		{
			name: "lab status pid and start time",
			a:    []string{"a lab runs in .lab (pid 19761, ready in 9.14s)"},
			b:    []string{"a lab runs in .lab (pid 4, ready in 1m2.5s)"},
		},
		{
			name: "lab status directory is not normalised", different: true,
			a: []string{"a lab runs in .lab (pid 19761, ready in 9.14s)"},
			b: []string{"a lab runs in /tmp/x (pid 19761, ready in 9.14s)"},
		},
		{
			name: "the autoscaler's node names",
			a:    []string{"node neuron-inf1-6xlarge-52fa8c9825 (inf1.6xlarge)", "neuron-trn2u-48xlarge-0123456789"},
			b:    []string{"node neuron-inf1-6xlarge-731ea8b377 (inf1.6xlarge)", "neuron-trn2u-48xlarge-abcdefabcd"},
		},
		{
			name: "the instance type in a node name is not normalised", different: true,
			a: []string{"node neuron-inf1-6xlarge-52fa8c9825"},
			b: []string{"node neuron-inf2-xlarge-52fa8c9825"},
		},
		{
			name: "the AGE column",
			a:    []string{"NAME   STATUS   AGE   VERSION", "n1     Ready    24s   v1.36.3", "", "NAME   AGE", "p      5m10s"},
			b:    []string{"NAME   STATUS   AGE   VERSION", "n1     Ready    3s    v1.36.3", "", "NAME   AGE", "p      2d"},
		},
		{
			name: "the AGE column after a node name the autoscaler made",
			a:    []string{"NAME                             STATUS   AGE", "neuron-inf1-6xlarge-52fa8c9825   Ready    24s"},
			b:    []string{"NAME                             STATUS   AGE", "neuron-inf1-6xlarge-731ea8b377   Ready    5s"},
		},
		{
			name: "the columns next to AGE are not normalised", different: true,
			a: []string{"NAME   STATUS   AGE   VERSION", "n1     Ready    24s   v1.36.3"},
			b: []string{"NAME   STATUS   AGE   VERSION", "n1     Ready    24s   v1.36.4"},
		},
		{
			name: "durations outside the AGE column are not normalised", different: true,
			a: []string{"NAME   STATUS   AGE", "n1     Ready    24s", "", "ready in 24s"},
			b: []string{"NAME   STATUS   AGE", "n1     Ready    24s", "", "ready in 25s"},
		},
		{
			name: "counts are not normalised", different: true,
			a: []string{"0/1 nodes are available: 1 node(s) had untolerated taint(s)."},
			b: []string{"0/2 nodes are available: 2 node(s) had untolerated taint(s)."},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := normalise(tc.a), normalise(tc.b)
			if diff := mismatch(a, b); (diff != "") != tc.different {
				t.Errorf("different after normalising: %v, want %v\n%q\n%q\n%s", diff != "", tc.different, a, b, diff)
			}
		})
	}
}

func TestMismatch(t *testing.T) {
	for _, tc := range []struct {
		name      string
		got, want []string
		diff      string
	}{
		{name: "equal", got: []string{"a", "b"}, want: []string{"a", "b"}},
		{name: "elided", got: []string{"Warning  the pod does not tolerate the taint. Add a toleration"}, want: []string{"Warning  the pod does not tolerate the taint. ..."}},
		{name: "elided, other text", got: []string{"Warning  the pod has no limits. Add them"}, want: []string{"Warning  the pod does not tolerate the taint. ..."}, diff: "line 1 differs"},
		{name: "a line more", got: []string{"a", "b"}, want: []string{"a"}, diff: "more lines than the block"},
		{name: "a line less", got: []string{"a"}, want: []string{"a", "b"}, diff: "the block shows more lines"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			diff := mismatch(tc.got, tc.want)
			if (tc.diff == "") != (diff == "") || !strings.Contains(diff, tc.diff) {
				t.Errorf("mismatch = %q, want %q", diff, tc.diff)
			}
		})
	}
}

func TestParseCommand(t *testing.T) {
	for _, tc := range []struct {
		line     string
		argv     []string
		pipes    [][]string
		prog     string
		readOnly bool
		err      string
	}{
		{line: `grep '"Bound"' .lab/logs/neuron-scheduler-extender.log`, argv: []string{"grep", `"Bound"`, ".lab/logs/neuron-scheduler-extender.log"}, prog: progGrep, readOnly: true},
		{line: `kubectl logs trn1-four-devices | grep -E 'NEURON|devices'`, argv: []string{"kubectl", "logs", "trn1-four-devices"}, pipes: [][]string{{"grep", "-E", "NEURON|devices"}}, prog: progKubectl, readOnly: true},
		{line: `.lab/bin/kubectl --kubeconfig .lab/kubeconfig get events -o custom-columns=TYPE:.type`, argv: []string{".lab/bin/kubectl", "--kubeconfig", ".lab/kubeconfig", "get", "events", "-o", "custom-columns=TYPE:.type"}, prog: progKubectl, readOnly: true},
		{line: `.lab/bin/kubectl --kubeconfig .lab/kubeconfig run plain --image=busybox`, argv: []string{".lab/bin/kubectl", "--kubeconfig", ".lab/kubeconfig", "run", "plain", "--image=busybox"}, prog: progKubectl},
		{line: `kubectl get nodes "-o=custom-columns=NAME:.metadata.name,NeuronDevice:.status.allocatable.aws\.amazon\.com/neuron"`, argv: []string{"kubectl", "get", "nodes", `-o=custom-columns=NAME:.metadata.name,NeuronDevice:.status.allocatable.aws\.amazon\.com/neuron`}, prog: progKubectl, readOnly: true},
		{line: `kubectl-neuron nodes --kubeconfig .lab/kubeconfig --no-map`, argv: []string{"kubectl-neuron", "nodes", "--kubeconfig", ".lab/kubeconfig", "--no-map"}, prog: progKubectlNeuron, readOnly: true},
		{line: `bin/kubectl-neuron cleanup --yes`, argv: []string{"bin/kubectl-neuron", "cleanup", "--yes"}, prog: progKubectlNeuron},
		{line: `make lab-status`, argv: []string{"make", "lab-status"}, prog: progLabStatus, readOnly: true},
		{line: `make lab-down`, err: "not make"},
		{line: `rm -rf .lab`, err: "not rm"},
		{line: `kubectl get pods | sort`, err: "pipes only to grep"},
		{line: `kubectl logs "$(kubectl get lease x)"`, err: "without a shell"},
		{line: `grep 'x`, err: "unterminated"},
	} {
		t.Run(tc.line, func(t *testing.T) {
			c, prog, err := parseCommand(tc.line)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(c.argv, tc.argv) || len(c.pipes) != len(tc.pipes) || prog != tc.prog || readOnly(c, prog) != tc.readOnly {
				t.Fatalf("got %q %q %s read-only %v, want %q %q %s read-only %v", c.argv, c.pipes, prog, readOnly(c, prog), tc.argv, tc.pipes, tc.prog, tc.readOnly)
			}
			for i := range c.pipes {
				if !slices.Equal(c.pipes[i], tc.pipes[i]) {
					t.Errorf("pipe %d: %q, want %q", i, c.pipes[i], tc.pipes[i])
				}
			}
		})
	}
}

// TestDocsOptIn: the docs have blocks opted in to the lab replay, each well formed, with
// commands the replay runs (test/e2e/docs replays them in a lab with the e2e tag).
func TestDocsOptIn(t *testing.T) {
	blocks, err := readBlocks("../../..")
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) == 0 {
		t.Fatal("no console block of README.md or docs/*.md is opted in to the lab replay (<!-- replay: lab --> right before its fence)")
	}
	for _, b := range blocks {
		for _, s := range b.steps {
			if _, _, err := parseCommand(s.command); err != nil {
				t.Errorf("%s:%d: %v", b.file, s.line, err)
			}
		}
	}
}
