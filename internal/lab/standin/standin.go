// Package standin is what the lab's stand-in workload prints: its environment and the Neuron
// device nodes it sees.
package standin

import (
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

var deviceName = regexp.MustCompile(`^neuron([0-9]+)$`)

// DeviceNodes lists the Neuron device nodes in dir (/dev/neuron0, ...), sorted by number.
// A directory that cannot be read has none.
func DeviceNodes(dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	type dev struct {
		n    int
		path string
	}
	var devs []dev
	for _, e := range entries {
		m := deviceName.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		n, err := strconv.Atoi(m[1])
		if err != nil {
			continue
		}
		devs = append(devs, dev{n, strings.TrimSuffix(dir, "/") + "/" + e.Name()})
	}
	slices.SortFunc(devs, func(a, b dev) int { return a.n - b.n })
	out := make([]string, len(devs))
	for i, d := range devs {
		out[i] = d.path
	}
	return out
}

// Text is the stand-in's output: env as NAME=value lines sorted by name (an entry without '='
// is a name with an empty value), then `devices: ` and the device nodes, or `devices: none`.
func Text(env, devices []string) string {
	lines := slices.Clone(env)
	name := func(s string) string {
		n, _, _ := strings.Cut(s, "=")
		return n
	}
	slices.SortStableFunc(lines, func(a, b string) int { return strings.Compare(name(a), name(b)) })
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(l)
		if !strings.Contains(l, "=") {
			b.WriteByte('=')
		}
		b.WriteByte('\n')
	}
	if len(devices) == 0 {
		b.WriteString("devices: none\n")
	} else {
		b.WriteString("devices: " + strings.Join(devices, " ") + "\n")
	}
	return b.String()
}

// Parse reads Text's output back: the environment by name and the device nodes. ok is false
// when no devices line is there (the container has not written it yet).
func Parse(text string) (env map[string]string, devices []string, ok bool) {
	env = map[string]string{}
	for line := range strings.SplitSeq(text, "\n") {
		if rest, found := strings.CutPrefix(line, "devices: "); found {
			if rest != "none" {
				devices = strings.Fields(rest)
			}
			return env, devices, true
		}
		if k, v, found := strings.Cut(line, "="); found {
			env[k] = v
		}
	}
	return env, nil, false
}
